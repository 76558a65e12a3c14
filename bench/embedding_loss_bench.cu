// Bandwidth of the training step's embedding + loss phase (train/gpu/gpu_ops.h: embedding_forward,
// cross_entropy with gpu::sum of its row losses, embedding_backward; as train/gpu/gpu_backend_step.cpp
// calls them) against the device's own copy: for each case, the median time of the calls and of a
// device-to-device cudaMemcpyAsync moving the bytes the embedding_loss phase's floor counts
// (train/model/phase_bytes.h; read + written), both timed from DRAM (bench_common.cuh's
// median_us_flushed), in the same process:
//
//   floor bytes  forward 12 M D (token and position rows in, x out), loss 8 M V (the logits read,
//                their gradient written in place), backward 12 M D (dx in, the two gradients out,
//                counted per token), phase: all three back to back (24 M D + 8 M V)
//   GB/s         floor bytes / time; % of copy = copy time / call time; x floor = its inverse
//
// Shapes: the width-2048 step's micro-batch (4 x 1024 tokens, d 2048, vocab 256) and 16 x 1024
// tokens at d 4096, vocab 32000; uniformly random tokens and targets, fp32. Usage:
// embedding_loss_bench [--iters N] [--only I,J,...] (case indices: forward, loss, backward, phase
// per shape). Prints one line per case, then a markdown table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"  // defines: CHECK_CUDA, check, device_array, fill_f32, time_against_copy
#include "train/gpu/gpu_ops.h"

namespace {

namespace gpu = blockscale::train::gpu;
using bench::DeviceBuffer;

__global__ void fill_ids_kernel(int32_t* ids, int64_t n, uint64_t seed, int vocab) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    ids[i] = static_cast<int32_t>(bench::hash32((seed << 40) + static_cast<uint64_t>(i)) % vocab);
}

enum class Part { kForward, kLoss, kBackward, kPhase };
const char* part_name(Part p) {
  return p == Part::kForward ? "forward" : p == Part::kLoss ? "loss" : p == Part::kBackward ? "backward" : "phase";
}

struct Case {
  int64_t tokens;
  int seq_len, d, vocab;
  Part part;
};

struct Result {
  Case c;
  double floor_bytes, us, copy_us;
};

std::string describe(const Case& c) {
  return std::string(part_name(c.part)) + " " + std::to_string(c.tokens) + "x" + std::to_string(c.d) + " v" +
         std::to_string(c.vocab);
}

double floor_bytes(const Case& c) {
  const double md = static_cast<double>(c.tokens) * c.d, mv = static_cast<double>(c.tokens) * c.vocab;
  switch (c.part) {
    case Part::kForward:
    case Part::kBackward: return 12.0 * md;
    case Part::kLoss: return 8.0 * mv;
    default: return 24.0 * md + 8.0 * mv;
  }
}

Result run_case(const Case& c, int iters, void* flush, size_t flush_bytes) {
  const int64_t m = c.tokens, md = m * c.d, mv = m * c.vocab;
  DeviceBuffer tokens = bench::device_array<int32_t>(m, "tokens"), targets = bench::device_array<int32_t>(m, "targets"),
               embed = bench::device_array<float>(int64_t{c.vocab} * c.d, "embed"),
               pos = bench::device_array<float>(int64_t{c.seq_len} * c.d, "pos_embed"),
               d_embed = bench::device_array<float>(int64_t{c.vocab} * c.d, "d_embed"),
               d_pos = bench::device_array<float>(int64_t{c.seq_len} * c.d, "d_pos_embed"),
               x = bench::device_array<float>(md, "x"), dx = bench::device_array<float>(md, "dx"),
               logits = bench::device_array<float>(mv, "logits"), row_loss = bench::device_array<float>(m, "row_loss"),
               loss_sum = bench::device_array<float>(1, "loss_sum");
  size_t emb_ws_bytes = 0;
  bench::check(gpu::embedding_backward_workspace_bytes(m, c.vocab, &emb_ws_bytes), "embedding_backward_workspace_bytes");
  const size_t sum_ws_bytes = gpu::reduction_workspace_bytes(m);
  DeviceBuffer emb_ws = bench::device_array<uint8_t>(static_cast<int64_t>(emb_ws_bytes), "embedding workspace"),
               sum_ws = bench::device_array<uint8_t>(static_cast<int64_t>(sum_ws_bytes), "sum workspace");
  fill_ids_kernel<<<1024, 256>>>(tokens.as<int32_t>(), m, 1, c.vocab);
  fill_ids_kernel<<<1024, 256>>>(targets.as<int32_t>(), m, 2, c.vocab);
  bench::fill_f32<<<1024, 256>>>(embed.as<float>(), int64_t{c.vocab} * c.d, 3, 0.0f, 1.0f);
  bench::fill_f32<<<1024, 256>>>(pos.as<float>(), int64_t{c.seq_len} * c.d, 4, 0.0f, 1.0f);
  bench::fill_f32<<<1024, 256>>>(dx.as<float>(), md, 5, 0.0f, 1.0f);
  bench::fill_f32<<<1024, 256>>>(logits.as<float>(), mv, 6, 0.0f, 4.0f);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemset(d_embed.data(), 0, d_embed.size()));  // accumulate over the launches: stay finite
  CHECK_CUDA(cudaMemset(d_pos.data(), 0, d_pos.size()));
  auto forward = [&] {
    bench::check(gpu::embedding_forward(tokens.as<int32_t>(), m, c.seq_len, c.d, c.vocab, embed.as<float>(),
                                        pos.as<float>(), x.as<float>(), nullptr),
                 "embedding_forward");
  };
  auto loss = [&] {  // dlogits in place, as the step runs it (later launches see gradients: same work)
    bench::check(gpu::cross_entropy(logits.as<float>(), targets.as<int32_t>(), m, c.vocab, 1.0f / float(m),
                                    row_loss.as<float>(), logits.as<float>(), nullptr),
                 "cross_entropy");
    bench::check(gpu::sum(row_loss.as<float>(), m, loss_sum.as<float>(), sum_ws.data(), sum_ws_bytes, nullptr), "sum");
  };
  auto backward = [&] {
    bench::check(gpu::embedding_backward(tokens.as<int32_t>(), m, c.seq_len, c.d, c.vocab, dx.as<float>(),
                                         d_embed.as<float>(), d_pos.as<float>(), emb_ws.data(), emb_ws_bytes, nullptr),
                 "embedding_backward");
  };
  auto phase = [&] {
    forward();
    loss();
    backward();
  };
  const double bytes = floor_bytes(c);
  const auto timed = [&](const auto& launch) {
    return bench::time_against_copy(describe(c), launch, bytes, iters, flush, flush_bytes);
  };
  bench::AgainstCopy t{};
  switch (c.part) {
    case Part::kForward: t = timed(forward); break;
    case Part::kLoss: t = timed(loss); break;
    case Part::kBackward: t = timed(backward); break;
    case Part::kPhase: t = timed(phase); break;
  }
  return Result{c, bytes, t.us, t.copy_us};
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 0;
  std::vector<int> only;
  if (!bench::parse_iters_and_cases(argc, argv, "embedding_loss_bench", &iters, &only)) return 2;
  struct Shape {
    int64_t tokens;
    int seq_len, d, vocab;
  };
  std::vector<Case> cases;
  for (const Shape& s : {Shape{4096, 1024, 2048, 256}, Shape{16384, 1024, 4096, 32000}})
    for (const Part p : {Part::kForward, Part::kLoss, Part::kBackward, Part::kPhase})
      cases.push_back(Case{s.tokens, s.seq_len, s.d, s.vocab, p});

  const bench::L2Flush flush = bench::l2_flush("embedding_loss_bench", iters);

  std::vector<Result> results;
  for (size_t i = 0; i < cases.size(); ++i)
    if (bench::selected(only, i)) results.push_back(run_case(cases[i], iters, flush.buffer.data(), flush.bytes));

  std::printf("\n| case | tokens x d | vocab | floor MB | us | GB/s | copy GB/s | %% of copy | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results)
    std::printf("| %s | %lld x %d | %d | %.1f | %.1f | %.0f | %.0f | %.1f | %.2f |\n", part_name(r.c.part),
                static_cast<long long>(r.c.tokens), r.c.d, r.c.vocab, r.floor_bytes / 1e6, r.us,
                r.floor_bytes / (r.us * 1e3), r.floor_bytes / (r.copy_us * 1e3), 100.0 * r.copy_us / r.us,
                r.us / r.copy_us);
  return 0;
}
