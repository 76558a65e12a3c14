#!/usr/bin/env python3
"""DeepGEMM (the peer) timed the way gemm_bench and gemm_grouped_bench time blockscale, so that the
ratios compare like with like: the same shapes, the same input data (--data) and the same timing
(--timing: bench/cuda_events.py, the modes of bench/bench_common.cuh).
Data: `normal`: standard-normal bf16 quantized by DeepGEMM's own casts (1x128 activations, 128x128
weights); `uniform`: every E4M3 code but NaN equally likely, scales log-uniform in [2^-4, 2^4)
(gemm_bench's default data).

Needs an importable deep_gemm (a build of DeepGEMM for this GPU) and torch.
Usage: python3 bench/deepgemm_peer.py [--iters N] [--only I,J,...] [--data normal|uniform]
                                     [--timing sustained|isolated]
Prints one markdown row per case: shape, DeepGEMM TFLOP/s.
"""
import argparse

import torch

import deep_gemm as dg
from cuda_events import median_ms
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

# gemm_bench's 128x128-B cases from M 2048 up (its cases 0-3, 8, 9, 12-14, 16-20, in that order),
# gemm_grouped_bench's first two M-grouped cases and its first two K-grouped (wgrad) ones.
DENSE = [(8192, 8192, 8192), (16384, 4096, 4096), (16384, 14336, 4096), (16384, 4096, 14336), (2048, 4096, 4096),
         (2048, 14336, 4096), (4096, 6144, 2048), (4096, 2048, 2048), (4096, 2048, 6144), (4096, 2112, 7168),
         (4096, 24576, 1536), (4096, 7168, 16384), (4096, 4096, 7168), (4096, 7168, 2048)]
M_GROUPED = [(8, 4096, 4096, 7168), (32, 512, 2048, 7168)]  # experts, tokens each, N, K
K_GROUPED = [(8, 4096, 4096, 7168), (32, 512, 2048, 7168)]  # experts, tokens each, dW N x K


def uniform_codes(rows, cols):
    c = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, device='cuda')
    c = torch.where((c & 0x7F) == 0x7F, c ^ 1, c)  # never NaN
    return c.view(torch.float8_e4m3fn)


def uniform_scales(*shape):
    return torch.exp2(torch.randint(0, 8192, shape, device='cuda').float() / 1024 - 4)


def token_operand(m, k, data):
    """A: codes [m, k], 1x128 scales [m, k/128]."""
    if data == 'normal':
        return per_token_cast_to_fp8(torch.randn((m, k), device='cuda', dtype=torch.bfloat16), use_ue8m0=False)
    return uniform_codes(m, k), uniform_scales(m, k // 128)


def block_operand(n, k, data):
    """B: codes [n, k], 128x128 scales [n/128, k/128]."""
    if data == 'normal':
        return per_block_cast_to_fp8(torch.randn((n, k), device='cuda', dtype=torch.bfloat16), use_ue8m0=False)
    return uniform_codes(n, k), uniform_scales((n + 127) // 128, k // 128)


def channel_operand(tokens, cols, data):
    """A tokens x cols matrix quantized along the tokens (1x128 blocks down each column): codes
    [tokens, cols], scales [tokens / 128, cols]."""
    if data == 'normal':
        from deep_gemm.utils import per_channel_cast_to_fp8
        return per_channel_cast_to_fp8(torch.randn((tokens, cols), device='cuda', dtype=torch.bfloat16),
                                       use_ue8m0=False)
    return uniform_codes(tokens, cols), uniform_scales(tokens // 128, cols)


def k_major_groups(codes, sizes):
    """Each group's rows transposed (cols x its tokens, K-major) and laid one after another."""
    out, p = [], 0
    for t in sizes:
        out.append(codes[p:p + t].t().contiguous().flatten())
        p += t
    return torch.cat(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--iters', type=int, default=20)
    ap.add_argument('--data', choices=['normal', 'uniform'], default='uniform')
    ap.add_argument('--timing', choices=['sustained', 'isolated'], default='sustained')
    ap.add_argument('--only', type=lambda v: [int(i) for i in v.split(',')], default=None,
                    help='case indices: the dense cases, then the M-grouped, then the K-grouped ones')
    args = ap.parse_args()
    wanted = lambda i: args.only is None or i in args.only
    print(f'device: {torch.cuda.get_device_name()}, deep_gemm {getattr(dg, "__version__", "?")}, '
          f'iters {args.iters}, data {args.data}, timing {args.timing}')
    print('| case | DeepGEMM TFLOP/s |\n|---|---|')
    for m, n, k in (c for i, c in enumerate(DENSE) if wanted(i)):
        (a8, sfa), (b8, sfb) = token_operand(m, k, args.data), block_operand(n, k, args.data)
        sfa = dg.get_mn_major_tma_aligned_tensor(sfa)
        d = torch.empty((m, n), device='cuda', dtype=torch.bfloat16)
        ms = median_ms(lambda: dg.fp8_gemm_nt((a8, sfa), (b8, sfb), d, disable_ue8m0_cast=True), args.iters, args.timing)
        print(f'| {m}x{n}x{k} 1x128.128x128 | {2 * m * n * k / ms / 1e9:.1f} |', flush=True)
        del a8, b8, d
    for g, t, n, k in (c for i, c in enumerate(M_GROUPED) if wanted(len(DENSE) + i)):  # expert sizes already multiples of DeepGEMM's alignment: no padding
        m = g * t
        a8, sfa = token_operand(m, k, args.data)
        bs = [block_operand(n, k, args.data) for _ in range(g)]
        b8 = torch.stack([b for b, _ in bs])
        sfb = torch.stack([s for _, s in bs])
        layout = torch.arange(g, device='cuda', dtype=torch.int32).repeat_interleave(t)
        sfa = dg.get_mn_major_tma_aligned_tensor(sfa)
        d = torch.empty((m, n), device='cuda', dtype=torch.bfloat16)
        fn = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, layout, disable_ue8m0_cast=True)
        ms = median_ms(fn, args.iters, args.timing)
        print(f'| fprop {g}x{t} N{n} K{k} | {2 * m * n * k / ms / 1e9:.1f} |', flush=True)
    first_k = len(DENSE) + len(M_GROUPED)
    for g, t, n, k in (c for i, c in enumerate(K_GROUPED) if wanted(first_k + i)):
        # dW_g (n x k, fp32, accumulated in place) = dY_g^T X_g over expert g's t tokens; DeepGEMM's
        # SM90 K-grouped GEMM takes K-major operands and the expert sizes on the host.
        sizes = [t] * g
        dy8, sfa = channel_operand(g * t, n, args.data)
        x8, sfb = channel_operand(g * t, k, args.data)
        a = k_major_groups(dy8, sizes)
        b = k_major_groups(x8, sizes)
        sfa = dg.get_mn_major_tma_aligned_tensor(sfa.t())
        sfb = dg.get_mn_major_tma_aligned_tensor(sfb.t())
        layout = torch.tensor(sizes, device='cuda', dtype=torch.int32)
        d = torch.zeros((g, n, k), device='cuda', dtype=torch.float)
        fn = lambda: dg.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, sizes, layout, d)
        ms = median_ms(fn, args.iters, args.timing)
        print(f'| wgrad {g}x{t} N{n} K{k} | {2 * g * t * n * k / ms / 1e9:.1f} |', flush=True)


if __name__ == '__main__':
    main()
