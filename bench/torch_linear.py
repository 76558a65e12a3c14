#!/usr/bin/env python3
"""blockscale.torch.Linear (fp8_block) against torch's bf16 linear layer, forward + backward, on one GPU.

Per shape (tokens x in_features -> out_features): one training micro-batch's forward and backward
(fprop, dgrad, wgrad) of
  - bst.Linear("fp8_block"): x and dY quantized per call, the weight's FP8 copies kept until the
    weight changes (the usual case: several micro-batches or evaluations per optimizer step);
  - bst.linear(x, w): the same GEMMs with the weight quantized on every call (one micro-batch
    per step);
  - torch.nn.Linear in bf16 (cuBLAS), the peer;
and the first and last again through torch.cuda.make_graphed_callables (forward and backward each
one CUDA graph: no Python or launch cost per kernel; the weight quantized inside the graph).
CUDA events around --iters back-to-back calls, median of 5 repeats; prints ms and the ratio to bf16.

    PYTHONPATH=build/python python3 bench/torch_linear.py [--iters N]

Exit code: 0; 1 without a GPU or when blockscale raised.
"""
import argparse
import statistics
import sys

import torch

SHAPES = [(8192, 4096, 4096), (8192, 4096, 14336), (8192, 14336, 4096), (4096, 2048, 2048)]


def time_ms(step, iters: int) -> float:
    for _ in range(3):
        step()
    runs = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end) / iters)
    return statistics.median(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20, help="calls per timed repeat (default 20)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_linear: no CUDA device", file=sys.stderr)
        return 1
    import blockscale.torch as bst

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| tokens x in -> out | bst.Linear fp8 ms | bst.linear (weight quantized per call) ms | bf16 ms "
          "| Linear / bf16 | linear / bf16 | graphed: Linear fp8 ms | graphed: bf16 ms | graphed: Linear / bf16 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tokens, n_in, n_out in SHAPES:
        torch.manual_seed(0)
        fp8 = bst.Linear(n_in, n_out, bias=False, device="cuda")
        ref = torch.nn.Linear(n_in, n_out, bias=False, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(tokens, n_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(tokens, n_out, device="cuda", dtype=torch.bfloat16)

        def fwd_bwd(f):
            return lambda: torch.autograd.backward(f(x), dy)

        t_cached = time_ms(fwd_bwd(fp8), args.iters)
        t_fresh = time_ms(fwd_bwd(lambda v: bst.linear(v, fp8.weight)), args.iters)
        t_bf16 = time_ms(fwd_bwd(ref), args.iters)
        g_fp8 = time_ms(fwd_bwd(torch.cuda.make_graphed_callables(fp8, (x,))), args.iters)
        g_bf16 = time_ms(fwd_bwd(torch.cuda.make_graphed_callables(ref, (x,))), args.iters)
        print(f"| {tokens} x {n_in} -> {n_out} | {t_cached:.3f} | {t_fresh:.3f} | {t_bf16:.3f} "
              f"| {t_bf16 / t_cached:.2f}x | {t_bf16 / t_fresh:.2f}x | {g_fp8:.3f} | {g_bf16:.3f} | {g_bf16 / g_fp8:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
