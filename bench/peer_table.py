#!/usr/bin/env python3
"""One table of blockscale's FP8 blockwise GEMMs beside their peers, from the benches' outputs of
one GPU sitting: gemm_bench and gemm_grouped_bench (ours, cuBLASLt, cuBLAS), deepgemm_peer.py
(DeepGEMM) and torch_grouped_peers.py (torch). Rows are matched by case name; a peer missing for
a case leaves its cells empty. Ratios are ours over the peer (> 1: ours faster).

Usage: python3 bench/peer_table.py [--dense GEMM_BENCH_LOG] [--grouped GEMM_GROUPED_BENCH_LOG]
                                   [--deepgemm DEEPGEMM_PEER_LOG]... [--torch TORCH_GROUPED_PEERS_LOG]
(--deepgemm may be given more than once: a dense and a grouped run.)"""
import argparse
import sys


def table_rows(path):
    """The markdown rows of a bench log (header and separator rows left out), split into cells."""
    rows = []
    with open(path) as f:
        for line in f:
            if not line.startswith('| ') or line.startswith('|---'):
                continue
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            if cells[0] in ('case', 'configuration', 'M x N x K'):
                continue
            rows.append(cells)
    return rows


def number(cell):
    try:
        return float(cell.strip('*'))
    except ValueError:
        return None


def ratio(ours, peer):
    return f"{ours / peer:.2f}" if ours and peer else ""


def fmt(x):
    return f"{x:.0f}" if x else ""


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--dense', help="gemm_bench's output")
    ap.add_argument('--grouped', help="gemm_grouped_bench's output")
    ap.add_argument('--deepgemm', action='append', default=[], help="deepgemm_peer.py's output")
    ap.add_argument('--torch', help="torch_grouped_peers.py's output")
    args = ap.parse_args(argv)
    if not args.dense and not args.grouped:
        ap.error('give --dense or --grouped (or both)')
    deepgemm = {}
    for path in args.deepgemm:
        deepgemm.update({r[0]: number(r[1]) for r in table_rows(path) if len(r) >= 2})
    torch = {}
    if args.torch:
        for r in table_rows(args.torch):
            if len(r) >= 3:
                torch[(r[0], r[1])] = number(r[2])
    if args.dense:
        # gemm_bench: case | ours 128 | 192 | 256 | auto | cuBLASLt | cuBLAS BF16 | ...
        print("| dense | blockscale (auto) | cuBLASLt blockwise | / cuBLASLt | DeepGEMM | / DeepGEMM |")
        print("|---|---|---|---|---|---|")
        for r in table_rows(args.dense):
            if len(r) < 6 or number(r[4]) is None:
                continue
            ours, lt, dg = number(r[4]), number(r[5]), deepgemm.get(r[0])
            print(f"| {r[0]} | {fmt(ours)} | {fmt(lt)} | {ratio(ours, lt)} | {fmt(dg)} | {ratio(ours, dg)} |")
    if args.grouped:
        # gemm_grouped_bench: case | FP8 blockwise | MXFP8 | cuBLAS grouped | cuBLAS loop | ...
        if args.dense:
            print()
        print("| grouped | blockscale FP8 | DeepGEMM | / | torch `_scaled_grouped_mm` | / | torch `_grouped_mm` BF16 "
              "| / | cuBLAS BF16 (better of grouped, loop) | / |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in table_rows(args.grouped):
            if len(r) < 5 or number(r[1]) is None:
                continue
            ours = number(r[1])
            blas = max(x for x in (number(r[3]), number(r[4]), 0.0) if x is not None)
            dg = deepgemm.get(r[0])
            scaled = torch.get((r[0], '_scaled_grouped_mm fp8 rowwise'))
            bf16 = torch.get((r[0], '_grouped_mm bf16'))
            print(f"| {r[0]} | {fmt(ours)} | {fmt(dg)} | {ratio(ours, dg)} | {fmt(scaled)} | {ratio(ours, scaled)} "
                  f"| {fmt(bf16)} | {ratio(ours, bf16)} | {fmt(blas)} | {ratio(ours, blas)} |")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
