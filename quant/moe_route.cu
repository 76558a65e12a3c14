// MoE routing on the device: expert_ids [T x top_k] -> group_ends, row_source, slot_row (quant/moe.h),
// the int32s formats::moe_route writes. Deterministic by construction: atomics only count (shared
// memory), and each sorted row is placed by a fixed order (chunk, then step, then lane).
//
// The T * top_k slots are cut into chunks of `chunk_slots` consecutive slots, one warp each:
//   count : warp c counts its chunk's slots per expert (shared-memory counters) -> counts[g][c]
//   scan  : CTA g turns row g of counts into exclusive prefix sums over the chunks, and totals[g]
//   place : every CTA scans totals into the experts' first rows (CTA 0 writes group_ends; rows past
//           the routed total get row_source -1), then warp c walks its chunk 32 slots at a time:
//           __match_any_sync groups the lanes of one expert, a lane's row is its expert's running
//           counter + its rank among lower lanes; the lowest lane then advances the counter.
#include <string>

#include "quant/grouped_offsets.cuh"  // defines: cta_exclusive_scan
#include "quant/launchers.h"
#include "quant/moe_launchers.h"

namespace blockscale::quant::detail {
namespace {

constexpr int kWarps = 4;  // warps (chunks) per CTA of the count and place kernels
constexpr int kThreads = 32 * kWarps;
constexpr int kScanThreads = 256;
constexpr uint32_t kFull = 0xFFFFFFFFu;

__device__ __forceinline__ bool routed(int32_t e, int num_experts) { return e >= 0 && e < num_experts; }

// Dynamic shared memory: kWarps * num_experts counters.
__global__ void __launch_bounds__(kThreads) route_count_kernel(const int32_t* ids, int64_t slots, int num_experts,
                                                               int64_t chunk_slots, int64_t chunks,
                                                               uint32_t* counts) {
  extern __shared__ uint32_t counters[];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t c = int64_t{blockIdx.x} * kWarps + warp;
  uint32_t* mine = counters + warp * num_experts;
  for (int g = lane; g < num_experts; g += 32) mine[g] = 0;
  __syncwarp();
  if (c >= chunks) return;
  const int64_t end = min(slots, (c + 1) * chunk_slots);
  for (int64_t i = c * chunk_slots + lane; i < end; i += 32) {
    const int32_t e = ids[i];
    if (routed(e, num_experts)) atomicAdd(&mine[e], 1u);  // a count: order-free
  }
  __syncwarp();
  for (int g = lane; g < num_experts; g += 32) counts[int64_t{g} * chunks + c] = mine[g];
}

// CTA g: counts[g][*] -> exclusive prefix sums over the chunks, in place; totals[g] = the sum.
__global__ void __launch_bounds__(kScanThreads) route_scan_kernel(uint32_t* counts, int64_t chunks,
                                                                  uint32_t* totals) {
  __shared__ uint32_t warp_totals[32];
  __shared__ uint32_t piece_total;
  uint32_t* row = counts + int64_t{blockIdx.x} * chunks;
  const int tid = static_cast<int>(threadIdx.x);
  uint32_t carry = 0;
  for (int64_t base = 0; base < chunks; base += kScanThreads) {
    const int64_t i = base + tid;
    const uint32_t v = i < chunks ? row[i] : 0u;
    const uint32_t exc = cta_exclusive_scan<kScanThreads, false>(v, warp_totals);
    if (i < chunks) row[i] = carry + exc;
    if (tid == kScanThreads - 1) piece_total = exc + v;
    __syncthreads();
    carry += piece_total;
    __syncthreads();
  }
  if (tid == 0) totals[blockIdx.x] = carry;
}

// Dynamic shared memory: num_experts bases + kWarps * num_experts counters.
__global__ void __launch_bounds__(kThreads) route_place_kernel(const int32_t* ids, int64_t slots, int top_k,
                                                               int num_experts, int64_t chunk_slots, int64_t chunks,
                                                               const uint32_t* counts, const uint32_t* totals,
                                                               int32_t* group_ends, int32_t* row_source,
                                                               int32_t* slot_row) {
  extern __shared__ uint32_t shared[];
  __shared__ uint32_t warp_totals[32];
  uint32_t* const first = shared;  // first sorted row of each expert
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  // The experts' first rows: an exclusive scan of totals, each thread owning a run of experts.
  const int per = (num_experts + kThreads - 1) / kThreads;
  const int g0 = min(num_experts, tid * per), g1 = min(num_experts, g0 + per);
  uint32_t sum = 0;
  for (int g = g0; g < g1; ++g) sum += totals[g];
  uint32_t run = cta_exclusive_scan<kThreads, false>(sum, warp_totals);
  for (int g = g0; g < g1; ++g) {
    first[g] = run;
    run += totals[g];
    if (blockIdx.x == 0) group_ends[g] = static_cast<int32_t>(run);
  }
  __syncthreads();
  const int64_t routed_total = int64_t{first[num_experts - 1]} + totals[num_experts - 1];
  for (int64_t r = routed_total + int64_t{blockIdx.x} * kThreads + tid; r < slots; r += int64_t{gridDim.x} * kThreads)
    row_source[r] = -1;

  const int64_t c = int64_t{blockIdx.x} * kWarps + warp;
  if (c >= chunks) return;
  uint32_t* next = shared + num_experts + warp * num_experts;  // this chunk's next row per expert
  for (int g = lane; g < num_experts; g += 32) next[g] = first[g] + counts[int64_t{g} * chunks + c];
  __syncwarp();
  const uint32_t lower = (1u << lane) - 1u;
  const int64_t end = min(slots, (c + 1) * chunk_slots);
  for (int64_t i0 = c * chunk_slots; i0 < end; i0 += 32) {
    const int64_t i = i0 + lane;
    const int32_t e = i < end ? ids[i] : -1;
    const bool ok = routed(e, num_experts);
    const uint32_t peers = __match_any_sync(kFull, ok ? e : -1);
    const uint32_t rank = __popc(peers & lower);
    if (ok) {
      const uint32_t row = next[e] + rank;
      row_source[row] = static_cast<int32_t>(i / top_k);
      slot_row[i] = static_cast<int32_t>(row);
    } else if (i < end) {
      slot_row[i] = -1;
    }
    __syncwarp();  // every peer has read next[e]
    if (ok && rank == 0) next[e] += __popc(peers);
    __syncwarp();
  }
}

Status set_smem(const void* kernel, int smem, const char* what) {
  if (smem <= 48 * 1024) return Status::ok();
  return cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), what);
}

}  // namespace

int64_t route_chunk_slots(int num_experts) {
  // Long enough that a chunk's per-expert counters (zeroed, scanned, loaded) cost less than its slots.
  const int64_t want = 2 * int64_t{num_experts};
  return want <= 256 ? 256 : (want + 31) / 32 * 32;
}

int64_t route_chunks(int64_t slots, int num_experts) {
  const int64_t s = route_chunk_slots(num_experts);
  return (slots + s - 1) / s;
}

Status launch_moe_route(const RoutingProblem& p, const RoutingInputs& in, const RoutingOutputs& out, void* workspace,
                        cudaStream_t stream) {
  const int64_t slots = p.tokens * p.top_k;
  const int g = p.num_experts;
  const int64_t chunk_slots = route_chunk_slots(g), chunks = route_chunks(slots, g);
  auto* counts = static_cast<uint32_t*>(workspace);
  uint32_t* totals = counts + (chunks * g + 3) / 4 * 4;
  const unsigned grid = static_cast<unsigned>(chunks > 0 ? (chunks + kWarps - 1) / kWarps : 1);
  if (chunks > 0) {
    const int smem = kWarps * g * 4;
    BS_RETURN_IF_ERROR(set_smem(reinterpret_cast<const void*>(route_count_kernel), smem, "route_count_kernel"));
    route_count_kernel<<<grid, kThreads, smem, stream>>>(in.expert_ids, slots, g, chunk_slots, chunks, counts);
    BS_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "route_count_kernel launch"));
    route_scan_kernel<<<static_cast<unsigned>(g), kScanThreads, 0, stream>>>(counts, chunks, totals);
  } else {  // no slots: every expert empty
    BS_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(totals, 0, 4 * int64_t{g}, stream), "totals: cudaMemsetAsync"));
  }
  BS_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "route_scan_kernel launch"));
  const int smem = (1 + kWarps) * g * 4;
  BS_RETURN_IF_ERROR(set_smem(reinterpret_cast<const void*>(route_place_kernel), smem, "route_place_kernel"));
  route_place_kernel<<<grid, kThreads, smem, stream>>>(in.expert_ids, slots, p.top_k, g, chunk_slots, chunks, counts,
                                                       totals, out.group_ends, out.row_source, out.slot_row);
  return cuda_status(cudaGetLastError(), "route_place_kernel launch");
}

}  // namespace blockscale::quant::detail
