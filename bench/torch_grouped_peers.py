#!/usr/bin/env python3
"""torch's grouped GEMMs on gemm_grouped_bench's first three cases, timed the way that bench times
blockscale (bench/cuda_events.py, `sustained`: launches queued back to back behind a ~5 ms GPU
spin, an event pair around each, median), so the TFLOP/s compare one to one:
  fprop: torch._scaled_grouped_mm (FP8 E4M3, rowwise scales, bf16 out) and torch._grouped_mm (bf16);
  wgrad: torch._grouped_mm (bf16 dW = dY_g^T X_g per expert, written once: no fp32 accumulation).
Experts as gemm_grouped_bench sizes them: even, or one expert with half the tokens and the rest
spread evenly ("skew 50%"). Operands: standard-normal values (cast to E4M3 for the FP8 call).

Usage: python3 bench/torch_grouped_peers.py [--iters N]
Prints one markdown row per case and product; a product torch lacks or refuses prints its error.
"""
import argparse

import torch

from cuda_events import median_ms

# name, experts, tokens per expert, N, K, skewed (gemm_grouped_bench's cases 0-2)
CASES = [("8x4096 N4096 K7168", 8, 4096, 4096, 7168, False),
         ("32x512 N2048 K7168", 32, 512, 2048, 7168, False),
         ("8x4096 N4096 K7168 skew 50%", 8, 4096, 4096, 7168, True)]


def expert_counts(experts, per_expert, skewed):
    total = experts * per_expert
    if not skewed:
        return [per_expert] * experts
    first = total // 2
    rest = total - first
    return [first] + [rest // (experts - 1) + (1 if g <= rest % (experts - 1) else 0) for g in range(1, experts)]


def row(case, product, flops, fn, iters):
    try:
        ms = median_ms(fn, iters)
        print(f"| {case} | {product} | {flops / ms / 1e9:.1f} |", flush=True)
    except Exception as ex:  # a product this torch build lacks: say so, time the rest
        print(f"| {case} | {product} | error: {str(ex).splitlines()[0][:120]} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--iters', type=int, default=20)
    args = ap.parse_args()
    if args.iters < 1:
        ap.error('--iters: at least 1')
    if not torch.cuda.is_available():
        raise SystemExit('torch_grouped_peers.py: no CUDA device')
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}")
    print("| case | torch product | TFLOP/s |\n|---|---|---|")
    dev = 'cuda'
    for name, g, per, n, k, skewed in CASES:
        counts = expert_counts(g, per, skewed)
        tokens = sum(counts)
        offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        flops = 2.0 * tokens * n * k
        x = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(g, n, k, device=dev, dtype=torch.bfloat16)
        row(f"fprop {name}", "_grouped_mm bf16", flops,
            lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs), args.iters)
        xq, wq = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sx = torch.rand(tokens, device=dev) + 0.5
        sw = torch.rand(g, n, device=dev) + 0.5
        row(f"fprop {name}", "_scaled_grouped_mm fp8 rowwise", flops,
            lambda: torch._scaled_grouped_mm(xq, wq.transpose(-2, -1), sx, sw, offs=offs, out_dtype=torch.bfloat16),
            args.iters)
        del xq, wq, w
        dy = torch.randn(tokens, n, device=dev, dtype=torch.bfloat16)
        row(f"wgrad {name}", "_grouped_mm bf16", flops,
            lambda: torch._grouped_mm(dy.t(), x, offs=offs), args.iters)
        del x, dy


if __name__ == '__main__':
    main()
