"""The Python benches' timer: CUDA events around each call, median, in the timing modes of
bench/bench_common.cuh:
  sustained: calls queued back to back behind a ~5 ms GPU spin (the host runs ahead during the
             spin, so launch cost stays hidden unless a call's host time exceeds its kernels');
  isolated : each call after a synchronisation and a ~0.5 ms spin queued ahead (the way DeepGEMM's
             own harness times);
  queued   : calls back to back with no spin (host time between them shows).
Three calls of warm-up come first, queued in the same way."""
import statistics

import torch

TIMINGS = ('sustained', 'isolated', 'queued')


def median_ms(fn, iters, timing='sustained', warmup=3):
    if timing not in TIMINGS:
        raise ValueError(f"timing: one of {', '.join(TIMINGS)}, not {timing!r}")
    if iters < 1:
        raise ValueError(f"iters: at least 1, not {iters}")
    torch.cuda.synchronize()
    if timing == 'sustained':
        torch.cuda._sleep(10_000_000)
    for _ in range(warmup):
        fn()
    if timing == 'isolated':
        torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        if timing == 'isolated':
            torch.cuda._sleep(1_000_000)
        start.record()
        fn()
        end.record()
        if timing == 'isolated':
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)
