// The grouped (MoE) mode of the quantize kernels (quant/mx_grouped_quantize.cu,
// fp8_block_grouped_quantize.cu, nvfp4_grouped_quantize.cu): the padded expert offsets,
// computed on the device from group_ends, and the map from a block-row segment of the padded
// columnwise row space to the input rows it reads.
//
// The columnwise copy of grouped input is quantized in a padded row space: expert g owns padded
// rows [P(g-1), P(g)), P = the cumulative sums of round_up(n_g, B), n_g its token count and B the
// recipe's block length (32 MX, 16 NVFP4, 128 FP8 blockwise), and its first n_g padded rows are
// its tokens (input rows [E(g-1), E(g)), E = group_ends); the rest are zero rows. Every B-row
// block of the padded space therefore lies in one expert (or past the padded total P(G-1): zero
// rows up to the capacity the buffers hold). A 128-row tile of the padded space is 128 / B
// segments; a segment reads `valid` (0..B) consecutive input rows from input row `src` and zeros
// after them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace blockscale::quant::detail {

constexpr int kMaxGroups = 4096;  // quantize.cpp refuses more

// Inclusive scan over the warp (op: sum or max), exact on the first `lanes` lanes (the same on
// every lane; the steps stop there).
template <bool kMax>
__device__ __forceinline__ uint32_t warp_inclusive_scan(uint32_t v, int lanes = 32) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    if (d >= lanes) break;
    const uint32_t o = __shfl_up_sync(0xFFFFFFFFu, v, d);
    if (lane >= d) v = kMax ? max(v, o) : v + o;
  }
  return v;
}

// Exclusive scan over the CTA of one value per thread (op: sum or max, both with identity 0);
// `warp_totals` is 32 words of shared memory. Contains barriers: every thread calls it.
template <int kThreads, bool kMax>
__device__ __forceinline__ uint32_t cta_exclusive_scan(uint32_t v, uint32_t* warp_totals) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t inc = warp_inclusive_scan<kMax>(v);
  if (lane == 31) warp_totals[warp] = inc;
  __syncthreads();
  uint32_t before = 0;
  for (int w = 0; w < warp; ++w) before = kMax ? max(before, warp_totals[w]) : before + warp_totals[w];
  const uint32_t exc_in_warp = __shfl_up_sync(0xFFFFFFFFu, inc, 1);
  const uint32_t exc = lane == 0 ? 0u : exc_in_warp;
  __syncthreads();  // warp_totals may be reused by the caller
  return kMax ? max(before, exc) : before + exc;
}

// Short scans: with at most kShortScanGroups experts every warp scans group_ends in registers
// for each tile it looks up (lane_experts below: about one cached load, no shared memory, no
// barrier), and the grouped launches take the dense grid (tile_grid: one CTA per tile beyond two
// resident rounds). More experts: the CTA scans them into shared memory once (grouped_offsets),
// on a persistent grid. 32 (one expert per lane): 64 experts through the tables measured 73% of
// copy against 72% through lanes holding two each (grouped MXFP8, H200), and 8 experts 0.5-1 point
// faster than with room for 256 (fewer registers in the lookup).
constexpr int kShortScanGroups = 32;

// Reads group_ends (G int32 values) and fills, in shared memory:
//   ends[g]  = E(g): the input's cumulative ends, made safe to use: clamped to [0, rows] and
//              non-decreasing (a running max). Valid input (what formats checks: non-decreasing,
//              last == rows) is unchanged; other input cannot make the kernel read or write out of
//              bounds, and its bytes are unspecified.
//   pends[g] = P(g): the padded cumulative ends (each expert rounded up to kBlock rows).
// Thread t owns a contiguous chunk of the experts (one when G <= kThreads); the max scan and the
// sum scan each combine the warps through `warp_totals` (32 words) with one barrier.
// Every thread of the CTA calls it; returns after a barrier.
template <int kThreads, uint32_t kBlock = 32>
__device__ __forceinline__ void grouped_offsets(const int32_t* group_ends, int num_groups, int64_t rows,
                                                uint32_t* ends, uint32_t* pends, uint32_t* warp_totals) {
  constexpr int kWarps = kThreads / 32;
  static_assert(2 * kWarps <= 32, "warp_totals holds both scans' warp totals");
  static_assert((kBlock & (kBlock - 1)) == 0, "block lengths are powers of two");
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int per = (num_groups + kThreads - 1) / kThreads;
  const int g0 = min(num_groups, tid * per), g1 = min(num_groups, g0 + per);
  // The clamped ends of this thread's chunk (kept in its own slots of `ends`) and their maximum.
  uint32_t m = 0;
  for (int g = g0; g < g1; ++g) {
    const int64_t e = __ldg(group_ends + g);
    const uint32_t clamped = static_cast<uint32_t>(e < 0 ? 0 : (e > rows ? rows : e));
    ends[g] = clamped;
    m = max(m, clamped);
  }
  const uint32_t max_inc = warp_inclusive_scan<true>(m);
  if (lane == 31) warp_totals[warp] = max_inc;
  const uint32_t max_exc_in_warp = __shfl_up_sync(0xFFFFFFFFu, max_inc, 1);
  __syncthreads();
  uint32_t prev = lane == 0 ? 0u : max_exc_in_warp;  // E of the expert before the chunk
#pragma unroll
  for (int w = 0; w < kWarps - 1; ++w)  // independent loads, not a chain of warp-dependent length
    if (w < warp) prev = max(prev, warp_totals[w]);
  // The running maximum, and each expert's padded rows (in its pends slot until the sum scan).
  uint32_t sum = 0;
  for (int g = g0; g < g1; ++g) {
    const uint32_t e = max(prev, ends[g]);
    const uint32_t padded = (e - prev + (kBlock - 1)) & ~(kBlock - 1);
    ends[g] = e, pends[g] = padded;
    sum += padded;
    prev = e;
  }
  const uint32_t sum_inc = warp_inclusive_scan<false>(sum);
  if (lane == 31) warp_totals[kWarps + warp] = sum_inc;
  __syncthreads();
  uint32_t run = sum_inc - sum;
#pragma unroll
  for (int w = 0; w < kWarps - 1; ++w)
    if (w < warp) run += warp_totals[kWarps + w];
  for (int g = g0; g < g1; ++g) pends[g] = run += pends[g];
  __syncthreads();
}

// The input rows of the kBlock-row segment starting at padded row `pr` (a multiple of kBlock):
// `valid` rows from input row `src` (valid == 0: zero rows only, past the padded total).
struct Segment {
  uint32_t src;
  uint32_t valid;
};

template <uint32_t kBlock = 32>
__device__ __forceinline__ Segment grouped_segment(uint32_t pr, const uint32_t* ends, const uint32_t* pends,
                                                   int num_groups) {
  // g = the first expert with P(g) > pr (upper bound): empty experts (P(g) == P(g-1)) are skipped.
  int lo = 0, hi = num_groups;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (pends[mid] > pr) hi = mid;
    else lo = mid + 1;
  }
  if (lo == num_groups) return {0u, 0u};
  const uint32_t pstart = lo > 0 ? pends[lo - 1] : 0u, gstart = lo > 0 ? ends[lo - 1] : 0u;
  const uint32_t src = gstart + (pr - pstart);
  return {src, min(kBlock, ends[lo] - src)};  // >= 1: the padded range holds round_up(n_g, kBlock) rows
}

// ---- Short scans, per warp in registers (num_groups <= kShortScanGroups).
constexpr int kLaneGroups = kShortScanGroups / 32;  // experts per lane at most
constexpr uint32_t kNoEnd = 0xFFFFFFFFu;            // a padded end past the experts

// Lane l's experts are [l K, l K + K), K = ceil(G / 32). It keeps only the ends before them and
// the padded end of its last; the experts' own ends are read again where needed (group_ends'
// lines stay in L1), so no per-expert registers outlive a call.
struct LaneExperts {
  uint32_t e_before, p_before;  // E(l K - 1), P(l K - 1) (grouped_offsets' E and P); 0 for lane 0
  uint32_t p_last;              // P(l K + K - 1); kNoEnd when that slot is past the experts
  int per;                      // K
};

// E of slot g as read from group_ends and clamped to [0, rows]; slots past the experts read as
// `rows`, which keeps valid input non-decreasing.
__device__ __forceinline__ uint32_t clamped_end(const int32_t* group_ends, int g, int num_groups, int64_t rows) {
  const int64_t v = g < num_groups ? __ldg(group_ends + g) : rows;
  return static_cast<uint32_t>(v < 0 ? 0 : (v > rows ? rows : v));
}

// One step of the scan that defines E and P: the running maximum of the clamped ends and the
// sum of the padded counts.
template <uint32_t kBlock>
__device__ __forceinline__ void expert_step(uint32_t clamped, uint32_t& e, uint32_t& p) {
  const uint32_t e1 = max(e, clamped);
  p += (e1 - e + (kBlock - 1)) & ~(kBlock - 1);
  e = e1;
}

// Every lane of the warp calls it. Input that is already non-decreasing (valid input) needs no
// running maximum across the lanes: one comparison with the neighbour and a vote.
template <uint32_t kBlock>
__device__ __forceinline__ LaneExperts lane_experts(const int32_t* group_ends, int num_groups, int64_t rows) {
  static_assert((kBlock & (kBlock - 1)) == 0, "block lengths are powers of two");
  const int lane = threadIdx.x & 31;
  LaneExperts x;
  x.per = (num_groups + 31) >> 5;
  const int g0 = lane * x.per;
  uint32_t first = 0, last = 0, lane_max = 0;
  bool sorted = true;
#pragma unroll
  for (int j = 0; j < kLaneGroups; ++j) {
    if (j >= x.per) break;
    const uint32_t c = clamped_end(group_ends, g0 + j, num_groups, rows);
    if (j == 0) first = c;
    sorted &= last <= c;
    last = c, lane_max = max(lane_max, c);
  }
  uint32_t before = __shfl_up_sync(0xFFFFFFFFu, last, 1);
  if (lane == 0) before = 0;
  sorted &= before <= first;
  if (!__all_sync(0xFFFFFFFFu, sorted)) {
    before = __shfl_up_sync(0xFFFFFFFFu, warp_inclusive_scan<true>(lane_max), 1);
    if (lane == 0) before = 0;
  }
  uint32_t e = before, sum = 0;
#pragma unroll
  for (int j = 0; j < kLaneGroups; ++j) {
    if (j >= x.per) break;
    expert_step<kBlock>(clamped_end(group_ends, g0 + j, num_groups, rows), e, sum);
  }
  // The sums of the lanes holding experts: G lanes, or more than 16 when a lane holds several.
  const uint32_t base = warp_inclusive_scan<false>(sum, x.per == 1 ? num_groups : 32) - sum;
  x.e_before = before;
  x.p_before = base;
  x.p_last = g0 + x.per <= num_groups ? base + sum : kNoEnd;
  return x;
}

// The kBlock-row segment starting at padded row pr (a multiple of kBlock). pr may differ between
// lanes: lane l asks for pr0 + kBlock * (l % kValues), pr0 the same on every lane (one ballot per
// value). Every lane of the warp calls it.
template <uint32_t kBlock, int kValues>
__device__ __forceinline__ Segment lane_experts_segment(const LaneExperts& x, const int32_t* group_ends,
                                                        int num_groups, int64_t rows, uint32_t pr) {
  const int lane = threadIdx.x & 31;
  const uint32_t pr0 = pr - kBlock * static_cast<uint32_t>(lane % kValues);
  int holder = 0;  // the first lane whose last padded end exceeds pr (32: none, past the total)
#pragma unroll
  for (int k = 0; k < kValues; ++k) {
    const int n = __popc(__ballot_sync(0xFFFFFFFFu, x.p_last <= pr0 + kBlock * k));
    if (lane % kValues == k) holder = n;
  }
  const int from = holder & 31;
  uint32_t e = __shfl_sync(0xFFFFFFFFu, x.e_before, from);
  uint32_t p = __shfl_sync(0xFFFFFFFFu, x.p_before, from);
  if (holder == 32) return {0u, 0u};
  // The holder's first expert g with P(g) > pr (empty experts skipped): its rows from E(g-1).
#pragma unroll
  for (int j = 0; j < kLaneGroups; ++j) {
    if (j >= x.per) break;
    const int g = from * x.per + j;
    if (g >= num_groups) break;
    const uint32_t e_prev = e, p_prev = p;
    expert_step<kBlock>(clamped_end(group_ends, g, num_groups, rows), e, p);
    if (p > pr) {
      const uint32_t src = e_prev + (pr - p_prev);
      return {src, min(kBlock, e - src)};  // >= 1: the padded range holds round_up(n_g, kBlock) rows
    }
  }
  return {0u, 0u};  // past the padded total
}

// Writes P(g) of every expert to padded_group_ends; the lanes of one warp call it.
template <uint32_t kBlock>
__device__ __forceinline__ void store_padded_ends(const LaneExperts& x, const int32_t* group_ends, int num_groups,
                                                  int64_t rows, int32_t* padded_group_ends) {
  const int g0 = static_cast<int>(threadIdx.x & 31) * x.per;
  uint32_t e = x.e_before, p = x.p_before;
#pragma unroll
  for (int j = 0; j < kLaneGroups; ++j) {
    if (j >= x.per || g0 + j >= num_groups) break;
    expert_step<kBlock>(clamped_end(group_ends, g0 + j, num_groups, rows), e, p);
    padded_group_ends[g0 + j] = static_cast<int32_t>(p);
  }
}

}  // namespace blockscale::quant::detail
