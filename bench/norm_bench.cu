// Bandwidth of the training step's RMSNorm (train/gpu/gpu_ops.h: rmsnorm_forward, rmsnorm_backward
// with its d_gain sum) against the device's own copy: for each case, the median time of the call
// and of a device-to-device cudaMemcpyAsync moving the bytes the norms phase's floor counts
// (train/model/phase_bytes.h; read + written), both timed from DRAM (bench_common.cuh's
// median_us_flushed), in the same process:
//
//   floor bytes  forward 8 rows d (x in, y out), backward 16 rows d (dy, x and the dx it
//                accumulates into in, dx out)
//   GB/s         floor bytes / time; % of copy = copy time / call time; x floor = its inverse
//
// Shapes: the width-2048 step's micro-batch (4096 tokens x 2048), 8192 x 4096 and 32768 x 4096,
// fp32. Usage: norm_bench [--iters N] [--only I,J,...] (case indices: forward, backward per shape).
// Prints one line per case, then a markdown table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_common.cuh"  // defines: CHECK_CUDA, check, device_array, fill_f32, time_against_copy
#include "train/gpu/gpu_ops.h"

namespace {

namespace gpu = blockscale::train::gpu;
using bench::DeviceBuffer;

struct Case {
  int64_t rows;
  int d;
  bool backward;
};

struct Result {
  Case c;
  double floor_bytes, us, copy_us;
};

std::string describe(const Case& c) {
  return std::string(c.backward ? "backward" : "forward") + " " + std::to_string(c.rows) + "x" + std::to_string(c.d);
}

Result run_case(const Case& c, int iters, void* flush, size_t flush_bytes) {
  const int64_t n = c.rows * c.d;
  DeviceBuffer x = bench::device_array<float>(n, "x"), y = bench::device_array<float>(n, "y"),
               dy = bench::device_array<float>(n, "dy"), dx = bench::device_array<float>(n, "dx"),
               gain = bench::device_array<float>(c.d, "gain"), d_gain = bench::device_array<float>(c.d, "d_gain"),
               rstd = bench::device_array<float>(c.rows, "rstd");
  const size_t ws_bytes = gpu::rmsnorm_backward_workspace_bytes(c.rows, c.d);
  DeviceBuffer ws = bench::device_array<uint8_t>(static_cast<int64_t>(ws_bytes), "workspace");
  bench::fill_f32<<<1024, 256>>>(x.as<float>(), n, 1, 0.0f, 1.5f);
  bench::fill_f32<<<1024, 256>>>(dy.as<float>(), n, 2, 0.0f, 1.0f);
  bench::fill_f32<<<1024, 256>>>(gain.as<float>(), c.d, 3, 1.0f, 0.1f);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemset(dx.data(), 0, dx.size()));  // accumulates over the launches: stays finite
  CHECK_CUDA(cudaMemset(d_gain.data(), 0, d_gain.size()));
  auto forward = [&] {
    bench::check(gpu::rmsnorm_forward(x.as<float>(), gain.as<float>(), c.rows, c.d, y.as<float>(), rstd.as<float>(),
                                      nullptr),
                 "rmsnorm_forward");
  };
  auto backward = [&] {
    bench::check(gpu::rmsnorm_backward(dy.as<float>(), x.as<float>(), gain.as<float>(), rstd.as<float>(), c.rows, c.d,
                                       dx.as<float>(), d_gain.as<float>(), ws.data(), ws_bytes, nullptr),
                 "rmsnorm_backward");
  };
  forward();  // rstd for the backward
  const double floor_bytes = (c.backward ? 16.0 : 8.0) * static_cast<double>(n);
  const bench::AgainstCopy t =
      c.backward ? bench::time_against_copy(describe(c), backward, floor_bytes, iters, flush, flush_bytes)
                 : bench::time_against_copy(describe(c), forward, floor_bytes, iters, flush, flush_bytes);
  return Result{c, floor_bytes, t.us, t.copy_us};
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 0;
  std::vector<int> only;
  if (!bench::parse_iters_and_cases(argc, argv, "norm_bench", &iters, &only)) return 2;
  std::vector<Case> cases;
  for (const auto& [rows, d] : {std::pair<int64_t, int>{4096, 2048}, {8192, 4096}, {32768, 4096}})
    for (const bool backward : {false, true}) cases.push_back(Case{rows, d, backward});

  const bench::L2Flush flush = bench::l2_flush("norm_bench", iters);

  std::vector<Result> results;
  for (size_t i = 0; i < cases.size(); ++i)
    if (bench::selected(only, i)) results.push_back(run_case(cases[i], iters, flush.buffer.data(), flush.bytes));

  std::printf("\n| case | rows x d | floor MB | us | GB/s | copy GB/s | %% of copy | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results)
    std::printf("| %s | %lld x %d | %.1f | %.1f | %.0f | %.0f | %.1f | %.2f |\n", r.c.backward ? "backward" : "forward",
                static_cast<long long>(r.c.rows), r.c.d, r.floor_bytes / 1e6, r.us, r.floor_bytes / (r.us * 1e3),
                r.floor_bytes / (r.copy_us * 1e3), 100.0 * r.copy_us / r.us, r.us / r.copy_us);
  return 0;
}
