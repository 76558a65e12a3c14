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

// Exclusive scan over the CTA of one value per thread (op: sum or max, both with identity 0);
// `warp_totals` is 32 words of shared memory. Contains barriers: every thread calls it.
template <int kThreads, bool kMax>
__device__ __forceinline__ uint32_t cta_exclusive_scan(uint32_t v, uint32_t* warp_totals) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t inc = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t o = __shfl_up_sync(0xFFFFFFFFu, inc, d);
    if (lane >= d) inc = kMax ? max(inc, o) : inc + o;
  }
  if (lane == 31) warp_totals[warp] = inc;
  __syncthreads();
  uint32_t before = 0;
  for (int w = 0; w < warp; ++w) before = kMax ? max(before, warp_totals[w]) : before + warp_totals[w];
  const uint32_t exc_in_warp = __shfl_up_sync(0xFFFFFFFFu, inc, 1);
  const uint32_t exc = lane == 0 ? 0u : exc_in_warp;
  __syncthreads();  // warp_totals may be reused by the caller
  return kMax ? max(before, exc) : before + exc;
}

// Reads group_ends (G int32 values) and fills, in shared memory:
//   ends[g]  = E(g): the input's cumulative ends, made safe to use: clamped to [0, rows] and
//              non-decreasing (a running max). Valid input (what formats checks: non-decreasing,
//              last == rows) is unchanged; other input cannot make the kernel read or write out of
//              bounds, and its bytes are unspecified.
//   pends[g] = P(g): the padded cumulative ends (each expert rounded up to kBlock rows).
// Every thread of the CTA calls it (barriers inside); returns after a barrier.
template <int kThreads, uint32_t kBlock = 32>
__device__ __forceinline__ void grouped_offsets(const int32_t* group_ends, int num_groups, int64_t rows,
                                                uint32_t* ends, uint32_t* pends, uint32_t* warp_totals) {
  const int tid = static_cast<int>(threadIdx.x);
  for (int g = tid; g < num_groups; g += kThreads) {
    const int64_t e = group_ends[g];
    ends[g] = static_cast<uint32_t>(e < 0 ? 0 : (e > rows ? rows : e));
  }
  __syncthreads();
  // Each thread owns a contiguous chunk of the experts.
  const int per = (num_groups + kThreads - 1) / kThreads;
  const int g0 = min(num_groups, tid * per), g1 = min(num_groups, g0 + per);
  uint32_t m = 0;
  for (int g = g0; g < g1; ++g) m = max(m, ends[g]);
  uint32_t run = cta_exclusive_scan<kThreads, true>(m, warp_totals);
  for (int g = g0; g < g1; ++g) ends[g] = run = max(run, ends[g]);
  __syncthreads();
  uint32_t sum = 0;
  static_assert((kBlock & (kBlock - 1)) == 0, "block lengths are powers of two");
  auto padded = [&](int g) { return (ends[g] - (g > 0 ? ends[g - 1] : 0u) + (kBlock - 1)) & ~(kBlock - 1); };
  for (int g = g0; g < g1; ++g) sum += padded(g);
  run = cta_exclusive_scan<kThreads, false>(sum, warp_totals);
  for (int g = g0; g < g1; ++g) pends[g] = run += padded(g);
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

// MX (kBlock 32) for num_groups <= 32, by the warp: every lane reads one padded end and the experts
// ending at or before pr are counted with a ballot (no dependent loads). `pr` may differ between
// lanes by a multiple of 32 within 128 (the four segments of a tile, lane % 4); all lanes call it.
__device__ __forceinline__ Segment grouped_segment_warp(uint32_t pr, uint32_t lane, const uint32_t* ends,
                                                        const uint32_t* pends, int num_groups) {
  const uint32_t pe = lane < static_cast<uint32_t>(num_groups) ? pends[lane] : 0xFFFFFFFFu;
  const uint32_t pr0 = pr - 32u * (lane & 3u);
  int lo = 0;
#pragma unroll
  for (uint32_t k = 0; k < 4; ++k) {
    const int n = __popc(__ballot_sync(0xFFFFFFFFu, pe <= pr0 + 32u * k));
    if ((lane & 3u) == k) lo = n;
  }
  if (lo == num_groups) return {0u, 0u};
  const uint32_t pstart = lo > 0 ? pends[lo - 1] : 0u, gstart = lo > 0 ? ends[lo - 1] : 0u;
  const uint32_t src = gstart + (pr - pstart);
  return {src, min(32u, ends[lo] - src)};
}

}  // namespace blockscale::quant::detail
