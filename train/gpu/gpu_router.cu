// train/gpu/gpu_ops.h, the MoE parts: router softmax + top-k, the load-balancing loss, the router's
// backward, the combine's backward and the gather's backward (per token). Mirrors the functions of
// the same names in train/cpu/cpu_ops.cpp. A router row (<= 256 experts) lives in one warp's registers,
// 8 per lane, expert e = lane + 32 * i; the loops over i are unrolled so nothing spills to local
// memory. Expert counts use integer atomics (exact, so deterministic); float sums run in fixed order.
#include <cuda_runtime.h>

#include <climits>
#include <limits>

#include "train/gpu/gpu_ops.h"
#include "train/gpu/gpu_ops_common.cuh"

namespace blockscale::train::gpu {

using namespace detail;

namespace {

constexpr int kMaxExperts = 256;
constexpr int kPerLane = kMaxExperts / kWarp;


// ---- Router forward: one warp per token --------------------------------------------------------

__global__ void router_forward_kernel(const float* logits, int64_t tokens, int experts, int top_k, float* probs,
                                      int32_t* expert_ids, float* gates) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t t = warp_index(); t < tokens; t += warp_stride()) {
    const float* z = logits + t * experts;
    float p[kPerLane];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + kWarp * i;
      p[i] = e < experts ? z[e] : -INFINITY;
      mx = fmaxf(mx, p[i]);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + kWarp * i;
      p[i] = e < experts ? expf(p[i] - mx) : 0.0f;
      sum += p[i];
    }
    sum = warp_sum(sum);
    float avail[kPerLane];  // probabilities not yet chosen; -1 marks taken or absent experts
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + kWarp * i;
      p[i] = p[i] / sum;
      if (e < experts) probs[t * experts + e] = p[i];
      avail[i] = e < experts ? p[i] : -1.0f;
    }
    // Top-k: the largest available probability, the lower index on ties (the CPU's rule).
    float chosen_sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      float best = -1.0f;
      int best_e = INT_MAX;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {  // e grows with i: strict > keeps the lower index
        if (avail[i] > best) best = avail[i], best_e = lane + kWarp * i;
      }
#pragma unroll
      for (int o = kWarp / 2; o > 0; o /= 2) {
        const float ob = __shfl_xor_sync(0xFFFFFFFFu, best, o);
        const int oe = __shfl_xor_sync(0xFFFFFFFFu, best_e, o);
        if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
      }
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        if (lane + kWarp * i == best_e) avail[i] = -1.0f;
      }
      const bool found = best_e != INT_MAX;  // false only for NaN probabilities
      chosen_sum += found ? best : 0.0f;
      if (lane == 0) {
        expert_ids[t * top_k + j] = found ? best_e : -1;
        gates[t * top_k + j] = found ? best : 0.0f;
      }
    }
    if (top_k > 1 && lane == 0) {
      for (int j = 0; j < top_k; ++j) gates[t * top_k + j] = gates[t * top_k + j] / chosen_sum;
    }
  }
}

// ---- Expert counts, load-balancing loss --------------------------------------------------------

__global__ void count_experts_kernel(const int32_t* expert_ids, int64_t slots, int experts, int32_t* counts) {
  for (int64_t s = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; s < slots; s += int64_t{gridDim.x} * blockDim.x) {
    const int32_t e = expert_ids[s];
    if (e >= 0 && e < experts) atomicAdd(&counts[e], 1);  // integer: exact in any order
  }
}

struct ProbsTerm {
  const float* probs;
  int experts;
  __device__ float operator()(int64_t r, int e) const { return probs[r * experts + e]; }
};

// experts * sum_e (f_e / slots) * (P_e / tokens), in expert order, one thread.
__global__ void load_balance_finish_kernel(const int32_t* counts, const float* prob_sums, int64_t tokens,
                                           int experts, int top_k, float* loss) {
  float acc = 0.0f;
  for (int e = 0; e < experts; ++e)
    acc += (static_cast<float>(counts[e]) / static_cast<float>(tokens * top_k)) *
           (prob_sums[e] / static_cast<float>(tokens));
  *loss = static_cast<float>(experts) * acc;
}

// ---- Router backward: one warp per token ---------------------------------------------------------

__global__ void router_backward_kernel(const float* probs, const int32_t* expert_ids, const float* gates,
                                       const float* d_gates, const int32_t* counts, int64_t tokens, int experts,
                                       int top_k, float aux_weight, float* dlogits) {
  const int lane = threadIdx.x % kWarp;
  const float slots = static_cast<float>(tokens * top_k), n = static_cast<float>(tokens);
  for (int64_t t = warp_index(); t < tokens; t += warp_stride()) {
    const float* p = probs + t * experts;
    const int32_t* ids = expert_ids + t * top_k;
    const float* g = gates + t * top_k;
    const float* dg = d_gates + t * top_k;
    float pr[kPerLane], dp[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {  // d aux / d P_e, the CPU's order of operations
      const int e = lane + kWarp * i;
      pr[i] = e < experts ? p[e] : 0.0f;
      dp[i] = e < experts ? aux_weight * static_cast<float>(experts) * static_cast<float>(counts[e]) / slots / n
                          : 0.0f;
    }
    if (top_k == 1) {
      const int32_t id = ids[0];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + kWarp * i == id) dp[i] += dg[0];
    } else {  // g_j = p_j / S: dp_j = (dg_j - sum_i dg_i g_i) / S
      float chosen_sum = 0.0f, gdot = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        const int32_t id = ids[j];
        chosen_sum += id >= 0 && id < experts ? p[id] : 0.0f;
        gdot += dg[j] * g[j];
      }
      for (int j = 0; j < top_k; ++j) {
        const int32_t id = ids[j];
#pragma unroll
        for (int i = 0; i < kPerLane; ++i)
          if (lane + kWarp * i == id) dp[i] += (dg[j] - gdot) / chosen_sum;
      }
    }
    float pdot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) pdot += dp[i] * pr[i];
    pdot = warp_sum(pdot);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + kWarp * i;
      if (e < experts) dlogits[t * experts + e] = pr[i] * (dp[i] - pdot);
    }
  }
}

// ---- MoE combine backward: one warp per slot ----------------------------------------------------

__global__ void moe_combine_backward_kernel(const float* dout, const float* y, const float* gates,
                                            const int32_t* slot_row, int64_t tokens, int top_k, int d,
                                            int64_t y_rows, float* dy, float* d_gates) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t s = warp_index(); s < tokens * top_k; s += warp_stride()) {
    const int64_t t = s / top_k;
    const int32_t r = slot_row[s];
    if (r < 0 || r >= y_rows) {
      if (lane == 0) d_gates[s] = 0.0f;
      continue;
    }
    const float gate = gates[s];
    float dot = 0.0f;
    for (int c = lane; c < d; c += kWarp) {
      const float g = dout[t * d + c];
      dy[int64_t{r} * d + c] = gate * g;
      dot += g * y[int64_t{r} * d + c];
    }
    dot = warp_sum(dot);
    if (lane == 0) d_gates[s] = dot;
  }
}

// dx[t, c] += dx_sorted[slot_row[t * top_k + j], c], j in order; one thread per element of dx.
__global__ void moe_scatter_add_kernel(const float* dx_sorted, const int32_t* slot_row, int64_t tokens, int top_k,
                                       int64_t rows, int d, float* dx) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < tokens * d;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / d;
    const int64_t c = i - t * d;
    float acc = dx[i];
    for (int j = 0; j < top_k; ++j) {
      const int32_t r = slot_row[t * top_k + j];
      if (r >= 0 && r < rows) acc += dx_sorted[int64_t{r} * d + c];
    }
    dx[i] = acc;
  }
}

// ---- Checks and workspace ------------------------------------------------------------------------

Status check_router(const char* fn, int64_t tokens, int experts, int top_k) {
  BS_RETURN_IF_ERROR(check_range(fn, "experts", experts, 1, kMaxExperts));
  BS_RETURN_IF_ERROR(check_range(fn, "top_k", top_k, 1, experts));
  return check_range(fn, "tokens", tokens, 0, (int64_t{1} << 31) / kMaxExperts);  // counts stay exact in fp32
}

struct RouterWorkspace {
  int32_t* counts;
  float* prob_sums;
  float* partials;
  size_t bytes;
};
RouterWorkspace carve_router(int64_t tokens, int experts, void* base) {
  WorkspaceCarver ws(base);
  RouterWorkspace w{};
  w.counts = ws.take<int32_t>(experts);
  w.prob_sums = ws.take<float>(experts);
  w.partials = ws.take<float>(static_cast<int64_t>(column_sum_workspace_bytes(tokens, experts) / sizeof(float)));
  w.bytes = ws.used();
  return w;
}

Status count_experts(const char* fn, const int32_t* expert_ids, int64_t slots, int experts, int32_t* counts,
                     cudaStream_t stream) {
  BS_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(counts, 0, sizeof(int32_t) * experts, stream), fn));
  count_experts_kernel<<<blocks_for(slots, kThreads), kThreads, 0, stream>>>(expert_ids, slots, experts, counts);
  return launch_status(fn);
}

}  // namespace

Status router_forward(const float* logits, int64_t tokens, int experts, int top_k, float* probs,
                      int32_t* expert_ids, float* gates, cudaStream_t stream) {
  constexpr const char* fn = "router_forward";
  BS_RETURN_IF_ERROR(check_router(fn, tokens, experts, top_k));
  if (tokens == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "logits", logits));
  BS_RETURN_IF_ERROR(check_ptr(fn, "probs", probs));
  BS_RETURN_IF_ERROR(check_ptr(fn, "expert_ids", expert_ids));
  BS_RETURN_IF_ERROR(check_ptr(fn, "gates", gates));
  router_forward_kernel<<<blocks_for(tokens * kWarp, kThreads), kThreads, 0, stream>>>(logits, tokens, experts,
                                                                                     top_k, probs, expert_ids, gates);
  return launch_status(fn);
}

size_t router_workspace_bytes(int64_t tokens, int experts) {
  if (tokens < 0 || experts < 1 || experts > kMaxExperts) return 0;
  return carve_router(tokens, experts, nullptr).bytes;
}

Status load_balance_loss(const float* probs, const int32_t* expert_ids, int64_t tokens, int experts, int top_k,
                         float* loss_device, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* fn = "load_balance_loss";
  BS_RETURN_IF_ERROR(check_router(fn, tokens, experts, top_k));
  BS_RETURN_IF_ERROR(check_ptr(fn, "loss_device", loss_device));
  if (tokens == 0) return cuda_status(cudaMemsetAsync(loss_device, 0, sizeof(float), stream), fn);  // the CPU's 0
  BS_RETURN_IF_ERROR(check_ptr(fn, "probs", probs));
  BS_RETURN_IF_ERROR(check_ptr(fn, "expert_ids", expert_ids));
  BS_RETURN_IF_ERROR(check_workspace(fn, router_workspace_bytes(tokens, experts), workspace, workspace_bytes));
  const RouterWorkspace w = carve_router(tokens, experts, workspace);
  BS_RETURN_IF_ERROR(count_experts(fn, expert_ids, tokens * top_k, experts, w.counts, stream));
  column_sum(ProbsTerm{probs, experts}, tokens, experts, /*accumulate=*/false, w.partials, w.prob_sums, stream);
  load_balance_finish_kernel<<<1, 1, 0, stream>>>(w.counts, w.prob_sums, tokens, experts, top_k, loss_device);
  return launch_status(fn);
}

Status router_backward(const float* probs, const int32_t* expert_ids, const float* gates, const float* d_gates,
                       int64_t tokens, int experts, int top_k, float aux_weight, float* dlogits, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* fn = "router_backward";
  BS_RETURN_IF_ERROR(check_router(fn, tokens, experts, top_k));
  if (tokens == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "probs", probs));
  BS_RETURN_IF_ERROR(check_ptr(fn, "expert_ids", expert_ids));
  BS_RETURN_IF_ERROR(check_ptr(fn, "gates", gates));
  BS_RETURN_IF_ERROR(check_ptr(fn, "d_gates", d_gates));
  BS_RETURN_IF_ERROR(check_ptr(fn, "dlogits", dlogits));
  BS_RETURN_IF_ERROR(check_workspace(fn, router_workspace_bytes(tokens, experts), workspace, workspace_bytes));
  const RouterWorkspace w = carve_router(tokens, experts, workspace);
  BS_RETURN_IF_ERROR(count_experts(fn, expert_ids, tokens * top_k, experts, w.counts, stream));
  router_backward_kernel<<<blocks_for(tokens * kWarp, kThreads), kThreads, 0, stream>>>(
      probs, expert_ids, gates, d_gates, w.counts, tokens, experts, top_k, aux_weight, dlogits);
  return launch_status(fn);
}

Status moe_combine_backward(const float* dout, const float* y, const float* gates, const int32_t* slot_row,
                            int64_t tokens, int top_k, int d, int64_t y_rows, float* dy, float* d_gates,
                            cudaStream_t stream) {
  constexpr const char* fn = "moe_combine_backward";
  BS_RETURN_IF_ERROR(check_range(fn, "tokens", tokens, 0, std::numeric_limits<int32_t>::max()));
  BS_RETURN_IF_ERROR(check_range(fn, "top_k", top_k, 1, 1024));
  BS_RETURN_IF_ERROR(check_range(fn, "d", d, 1, std::numeric_limits<int32_t>::max() / 2));
  BS_RETURN_IF_ERROR(check_range(fn, "y_rows", y_rows, 0, std::numeric_limits<int32_t>::max()));
  if (y_rows > 0) {
    BS_RETURN_IF_ERROR(check_ptr(fn, "dy", dy));
    BS_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(dy, 0, sizeof(float) * y_rows * d, stream), fn));
  }
  if (tokens == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "dout", dout));
  BS_RETURN_IF_ERROR(check_ptr(fn, "gates", gates));
  BS_RETURN_IF_ERROR(check_ptr(fn, "slot_row", slot_row));
  BS_RETURN_IF_ERROR(check_ptr(fn, "d_gates", d_gates));
  if (y_rows > 0) BS_RETURN_IF_ERROR(check_ptr(fn, "y", y));
  moe_combine_backward_kernel<<<blocks_for(tokens * top_k * kWarp, kThreads), kThreads, 0, stream>>>(
      dout, y, gates, slot_row, tokens, top_k, d, y_rows, dy, d_gates);
  return launch_status(fn);
}

Status moe_scatter_add(const float* dx_sorted, const int32_t* slot_row, int64_t tokens, int top_k, int64_t rows,
                       int d, float* dx, cudaStream_t stream) {
  constexpr const char* fn = "moe_scatter_add";
  BS_RETURN_IF_ERROR(check_range(fn, "tokens", tokens, 0, std::numeric_limits<int32_t>::max()));
  BS_RETURN_IF_ERROR(check_range(fn, "top_k", top_k, 1, 1024));
  BS_RETURN_IF_ERROR(check_range(fn, "rows", rows, 0, std::numeric_limits<int32_t>::max()));
  BS_RETURN_IF_ERROR(check_range(fn, "d", d, 1, std::numeric_limits<int32_t>::max() / 2));
  if (tokens == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "slot_row", slot_row));
  BS_RETURN_IF_ERROR(check_ptr(fn, "dx", dx));
  if (rows > 0) BS_RETURN_IF_ERROR(check_ptr(fn, "dx_sorted", dx_sorted));
  moe_scatter_add_kernel<<<blocks_for(tokens * d, kThreads), kThreads, 0, stream>>>(dx_sorted, slot_row, tokens,
                                                                                   top_k, rows, d, dx);
  return launch_status(fn);
}

}  // namespace blockscale::train::gpu
