// The grouped (MoE) tile schedules shared by the sm90 kernels.
//
// M-grouped (GroupMode::kM, fprop and dgrad): expert g owns rows
// [end[g-1], end[g]) of A, C and D (cumulative ends in device memory, read by the kernel: no host
// synchronisation). Each CTA builds, in shared memory, the cumulative tile count and clamped row
// end of every expert, then walks tile indices as the dense kernels do (tile = blockIdx.x,
// += gridDim.x) and maps each to (expert, first row, first column) by binary search. Tiles are
// expert-major (all of expert 0's, then expert 1's...), and TileOrder's grouped rasterisation
// applies inside an expert, so the CTAs resident at one time work on one or two experts' rows and
// weights (L2 reuse). A tile never crosses an expert's end: its rows past the end are not stored.
//
// Ends are clamped on the device to [the largest earlier end, m], so an out-of-order or too-large
// array gives empty experts, never an access outside A, C or D (the host cannot check device data
// without a synchronisation).
//
// K-grouped (GroupMode::kK, wgrad): every expert has the same m x n output (its dW), so the tile
// count is known on the host: G x tiles_m x tiles_n, expert-major, TileOrder inside an expert.
// Expert g reduces over K columns [end[g-1], end[g]) of A and B (the per-expert padded token
// ranges of quant/'s grouped columnwise copies), ends clamped the same way to [.., k]; its output
// is rows g * m .. g * m + m - 1 of C and D.
#pragma once

#include <cstdint>

#include "gemm/common/tile_scheduler.h"
#include "gemm/group_mode.h"  // defines: GroupMode

namespace blockscale::gemm {

constexpr int kMaxGroups = 1024;  // experts per grouped GEMM (two int32 tables in shared memory)

struct GroupedRows {
  const int32_t* group_ends = nullptr;  // null: a dense problem
  int32_t num_groups = 0;
};

struct GroupedTile {
  int32_t group = 0;
  int32_t m0 = 0, n0 = 0;  // first row (of A) and column
  int32_t row_end = 0;     // rows >= row_end belong to the next expert (or are past m)
  int64_t d_row0 = 0;      // C / D row of A's row 0 (K-grouped: g * m)
  int32_t k_begin = 0, k_end = 0;  // K columns reduced (dense, M-grouped: 0 .. k)
};

#if defined(__CUDACC__)
// x as lane 0 of the warp has it. Whole warps only. The grouped kernels' schedule tables live in
// shared memory; ptxas takes values loaded from there as per-thread, so a branch on them (a
// binary search's, or on threadIdx) makes the code after it divergent in its eyes, and the main
// loop's wgmma descriptors and stage counters then live in per-thread registers, each moved to a
// uniform register before every wgmma (M-grouped 256 x 128: 247 instructions per K block instead of
// 217, and spills). A shuffle's result is uniform to ptxas; the asm keeps the front end, which
// knows these values uniform, from dropping it.
__device__ __forceinline__ int32_t lane0_value(int32_t x) {
  int32_t r;
  asm volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;" : "=r"(r) : "r"(x));
  return r;
}

// Warp 0 of the CTA fills row_ends[g] (expert g's end, clamped to [earlier ends, m]) and, unless
// tile_ends is null, tile_ends[g] (M-grouped tiles of experts 0..g); the caller synchronises the
// CTA before reading them. K-grouped kernels pass their k as m and no tile table.
__device__ inline void build_grouped_schedule(const GroupedRows& groups, int32_t m, int32_t tile_m, int32_t tiles_n,
                                              int32_t* tile_ends, int32_t* row_ends) {
  if (lane0_value(static_cast<int32_t>(threadIdx.x / 32)) != 0) return;  // warp 0 (whole warps)
  const int lane = static_cast<int>(threadIdx.x);
  int32_t carry_end = 0, carry_tiles = 0;
  for (int32_t base = 0; base < groups.num_groups; base += 32) {
    const int32_t g = base + lane;
    int32_t end = g < groups.num_groups ? __ldg(groups.group_ends + g) : 0;
    end = max(end, carry_end);
    for (int off = 1; off < 32; off *= 2) {  // running maximum: ends never decrease
      const int32_t other = __shfl_up_sync(0xFFFFFFFFu, end, off);
      if (lane >= off) end = max(end, other);
    }
    end = min(max(end, 0), m);
    int32_t begin = __shfl_up_sync(0xFFFFFFFFu, end, 1);
    if (lane == 0) begin = carry_end;
    int32_t tiles = (end - begin + tile_m - 1) / tile_m * tiles_n;
    for (int off = 1; off < 32; off *= 2) {  // inclusive prefix sum
      const int32_t other = __shfl_up_sync(0xFFFFFFFFu, tiles, off);
      if (lane >= off) tiles += other;
    }
    tiles += carry_tiles;
    if (g < groups.num_groups) {
      row_ends[g] = end;
      if (tile_ends != nullptr) tile_ends[g] = tiles;
    }
    carry_end = __shfl_sync(0xFFFFFFFFu, end, 31);
    carry_tiles = __shfl_sync(0xFFFFFFFFu, tiles, 31);
  }
}

// Tile t (< tile_ends[num_groups - 1]) of the grouped schedule. kWholeWarp: called by whole warps
// (the search's loads go through lane0_value); else by any threads (the producer's one).
template <bool kWholeWarp>
__device__ inline GroupedTile grouped_tile(int32_t t, int32_t num_groups, int32_t tile_m, int32_t tile_n,
                                           int32_t tiles_n, const int32_t* tile_ends, const int32_t* row_ends) {
  int32_t lo = 0, hi = num_groups - 1;  // the first g with tile_ends[g] > t
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if ((kWholeWarp ? lane0_value(tile_ends[mid]) : tile_ends[mid]) > t) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  GroupedTile out;
  out.group = lo;
  const int32_t first_tile = lo > 0 ? tile_ends[lo - 1] : 0;
  const int32_t row_begin = lo > 0 ? row_ends[lo - 1] : 0;
  out.row_end = row_ends[lo];
  TileOrder order;
  order.tiles_m = (out.row_end - row_begin + tile_m - 1) / tile_m;
  order.tiles_n = tiles_n;
  order.group_m = 8;
  int32_t tm, tn;
  order.coords(t - first_tile, &tm, &tn);
  out.m0 = row_begin + tm * tile_m;
  out.n0 = tn * tile_n;
  return out;
}

// Tile t (< num_groups * order.num_tiles()) of the K-grouped schedule; k_ends from
// build_grouped_schedule (with k as its m).
__device__ inline GroupedTile k_grouped_tile(int32_t t, const TileOrder& order, int32_t m, int32_t tile_m,
                                             int32_t tile_n, const int32_t* k_ends) {
  const int32_t per_group = order.num_tiles();
  GroupedTile out;
  out.group = t / per_group;
  int32_t tm, tn;
  order.coords(t - out.group * per_group, &tm, &tn);
  out.m0 = tm * tile_m;
  out.n0 = tn * tile_n;
  out.row_end = m;
  out.d_row0 = int64_t{out.group} * m;
  out.k_begin = out.group > 0 ? k_ends[out.group - 1] : 0;
  out.k_end = k_ends[out.group];
  return out;
}
#endif

}  // namespace blockscale::gemm
