// sm90_fp8_block_gemm: FP8 blockwise GEMM for Hopper (sm_90a), 128 x 128 or 128 x 192 tiles.
//
//   operation : D (M x N) = alpha * sum_kb (sa[m,kb] * sb[n,kb]) * (sum_{k in kb} a[m,k] b[n,k])
//               + beta * C, kb = the 128-element K blocks
//   operands  : A M x K e4m3, K-major, 1x128 fp32 scales (VEC128_32F layout);
//               B N x K e4m3, K-major, 128x128 fp32 scales (BLK128x128_32F; fprop / dgrad) or
//               1x128 scales (VEC128_32F; wgrad); C / D row-major bf16 or fp32
//   instruction: wgmma.mma_async m64n128k32 or m64n192k32 .f32.e4m3.e4m3 from shared memory
//               (QGMMA in SASS), operands brought in by TMA (cp.async.bulk.tensor) into a
//               128-byte-swizzled ring
//   must match: formats::reference_gemm (fp64) within the bound derived in
//               tests/gemm/gemm_test.cu (exactly, for inputs whose sums are exact in fp32); the
//               two tile widths do the same operations per element, so they give the same bits
//
// Scheduling modes (kMode, gemm/common/grouped_schedule.h): dense; M-grouped (MoE fprop / dgrad:
// experts own row ranges of A, each its own B); K-grouped (MoE wgrad, 1x128 B: each expert's
// tile reduces over its own 128-aligned K block range, output rows offset by expert).
//
// Structure (one CTA = 3 warpgroups, one 128 x kTileN output tile at a time, persistent):
//   warpgroup 2 (producer, one thread): for each tile of the CTA's share (TileOrder) and each K
//     block, waits for a free ring stage, then TMA-loads the A tile (128 x 128 B), the B tile
//     (kTileN x 128 B) and the scale vectors of that K block into it; the stage's `full` barrier
//     counts the bytes. Ring: 6 stages at kTileN 128, 5 at 192 (227 KB of shared memory).
//   warpgroups 0, 1 (consumers, 64 rows each): per K block, wait `full`, read the scales, issue
//     4 wgmma k32 into a fresh partial accumulator, wait for them, release the stage (`empty`),
//     then promote: main += partial * (sa[row] * sb[col]) in fp32 registers (the 128-of-K
//     promotion; Hopper's FP8 tensor-core accumulator keeps fewer bits than fp32). After the last
//     K block, the epilogue writes alpha * main + beta * C straight from registers, bounds-checked.
//   Issue order: per K block, warpgroup 0 issues its wgmmas, then warpgroup 1 (a named barrier
//     between the two issues). The tensor cores then run warpgroup 0's group before warpgroup
//     1's, and warpgroup 0 promotes while warpgroup 1's group runs (and the other way round);
//     issued together, the two groups share the tensor cores, finish together, and both
//     warpgroups promote while the tensor cores idle. Measured on an H100 (docs/performance.md):
//     +3-13% for 128x128 B at both widths (one shape slower: M 128, N 14336, -4 to -7%); -2 to -5%
//     for the 128-wide 1x128-B (wgrad) kernels, which therefore issue unordered.
//   Staged D (kStagedD, the K-grouped wgrad with fp32 D and beta 0): the epilogue writes each
//     warpgroup's 64 x kTileN fragment into a 128-byte-swizzled shared-memory buffer and one
//     thread hands it to TMA stores, which drain while the warpgroup starts its next tile. Each
//     expert reduces only its own tokens (~8 K blocks a tile in the training step), so a tile's
//     fp32 store is a large share of its time when the warpgroups wait for it. The buffer
//     (kTileM x kTileN x 4 bytes) takes the place of two ring stages.
//   Registers: partial + main are kTileN fp32 per consumer thread (192 at kTileN 192, of the 232
//     setmaxnreg gives; ptxas: no spills). A 192-wide tile spans two 128x128 B-scale blocks
//     (scale_blocks.h picks one per 8-column group); its 1x128 B scales (48 per thread) do not
//     fit beside the accumulators, so that kernel reads them from the stage during the promotion
//     and releases the stage after it.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "gemm/common/grouped_schedule.h"
#include "gemm/common/scale_blocks.h"
#include "gemm/common/tile_scheduler.h"
#include "gemm/sm90/sm90_epilogue.cuh"
#include "gemm/sm90/sm90_ptx.cuh"

namespace blockscale::gemm::sm90 {

// kTileN_: 128 (one wgmma m64n128 per k32 step) or 192 (m64n192: the same A tile feeds 1.5x the
// columns, so ~20% fewer operand bytes per FLOP; 5 stages instead of 6 fit in shared memory).
template <int kTileN_, bool kStagedD_ = false>
struct Fp8BlockGemmConfig {
  static constexpr int kTileM = 128;    // two consumer warpgroups x 64 rows
  static constexpr int kTileN = kTileN_;
  static constexpr int kTileK = 128;    // one scale block of K per stage; 128 B rows = the swizzle span
  static constexpr int kWgmmaK = 32;
  static constexpr int kAccumulators = kTileN / 2;  // fp32 per thread: 64 x kTileN over 128 threads
  static constexpr int kColumnGroups = kTileN / 8;  // fragment column groups j (columns 8j .. 8j + 7)
  static constexpr int kStages = kStagedD_ ? 4 : kTileN == 128 ? 6 : 5;
  static constexpr int kStagingBytes = kStagedD_ ? kTileM * kTileN * 4 : 0;  // fp32 D, ahead of the rings
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = 128 * (kConsumerWarpgroups + 1);
  static constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;
  static constexpr int kTileABytes = kTileM * kTileK;
  static constexpr int kTileBBytes = kTileN * kTileK;
  // A scales of one K block: a box of kTileM + 4 floats from the tile's first row rounded down to a
  // multiple of 4 (TMA's innermost start coordinate must be 16-byte aligned; grouped tiles start
  // at any row), in a slot of kScaleABytes (TMA destinations are 128-byte aligned).
  static constexpr int kScaleABoxFloats = kTileM + 4;
  static constexpr int kScaleABytes = (kScaleABoxFloats * 4 + 127) / 128 * 128;
  static constexpr int kScaleBBytes = kTileN * 4;  // kTileN fp32 1x128 B scales of one K block
  // Shared memory: A ring, B ring, A-scale ring, B-scale ring, barriers, plus 1 KB so the rings
  // can start on a 1024-byte boundary (the 128-byte swizzle repeats every 8 rows = 1024 B).
  static constexpr int kSmemBytes =
      1024 + kStagingBytes + kStages * (kTileABytes + kTileBBytes + kScaleABytes + kScaleBBytes) + 2 * kStages * 8;
  // The grouped mode's schedule tables (gemm/common/grouped_schedule.h) after the barriers.
  static constexpr int kGroupedSmemBytes = kSmemBytes + 2 * kMaxGroups * 4;
  static_assert(kTileN == 128 || kTileN == 192, "wgmma widths with a wrapper in sm90_ptx.cuh");
  static_assert(kTileK == 128, "a K stage is one scale block and one 128-byte swizzle row");
  static_assert(kTileBBytes % 1024 == 0, "each B stage starts on a swizzle-pattern (1024 B) boundary");
  static_assert((kStages * kScaleABytes) % 128 == 0 && kScaleBBytes % 128 == 0, "TMA destinations: 128 B aligned");
  static_assert(kGroupedSmemBytes <= 227 * 1024, "sm_90 allows 227 KB of shared memory per CTA");
  static_assert(kTileN <= 256, "TMA boxes (B rows, B scales) hold at most 256 elements per dimension");
  // Registers come per SM sub-partition (4 x 16 K 32-bit registers); warp w of a CTA sits on
  // sub-partition w % 4, so each holds one warp of each warpgroup. At entry every warp has the
  // __launch_bounds__(kThreads, 1) cap (65536 / kThreads, rounded down to 8: 168); setmaxnreg
  // then moves registers from the producer (40) to the consumers (232) inside the CTA's pool.
  // Per sub-partition: 32 x (232 + 232 + 40) = 16128 <= 16384, and 3 x 168 = 504 = 232 + 232 + 40.
  static constexpr int kEntryRegisters = (65536 / kThreads) / 8 * 8;
  static_assert(32 * (kConsumerWarpgroups + 1) * kEntryRegisters <= 16384, "entry registers per sub-partition");
  static_assert(32 * (kConsumerWarpgroups * kConsumerRegisters + kProducerRegisters) <= 16384,
                "setmaxnreg budget per sub-partition (one warp of each warpgroup)");
  static_assert(kConsumerWarpgroups * kConsumerRegisters + kProducerRegisters <=
                    (kConsumerWarpgroups + 1) * kEntryRegisters,
                "setmaxnreg.inc can only hand out what the producer's setmaxnreg.dec released");
  static_assert(2 * kAccumulators + 32 <= kConsumerRegisters, "two accumulators + ~30 working registers per consumer");
};

struct Fp8BlockGemmParams {
  int32_t m = 0, n = 0, k_blocks = 0;
  TileOrder order;
  const float* b_block_scales = nullptr;  // 128x128 B: scale (n / 128, kb) at [n/128 * ld + kb]
  int32_t b_block_scales_ld = 0;
  int32_t b_scale_blocks = 0;  // 128x128 B: ceil(n / 128) rows of scales
  EpilogueParams epilogue;
  // M-grouped: expert g's B is rows g * n .. g * n + n - 1 of b_map, its 128x128 scales start at
  // b_block_scales + g * b_block_scales_group_stride. K-grouped: groups' ends split K (k_limit
  // columns); the 1x128 scales of A and B are K-block rows of the whole matrices.
  GroupedRows groups;
  int32_t k_limit = 0;
  int64_t b_block_scales_group_stride = 0;
};


// A warpgroup's fp32 D fragment (beta 0) through shared memory and TMA stores: `staging` holds
// kTileN / 32 boxes of 64 rows x 128 bytes (32 columns), each 128-byte swizzled as the tensor
// map's SWIZZLE_128B expects (16-byte chunk c of row r at c ^ (r % 8)), so a warp's stores of 8
// rows land in different banks. d_map is 3-D (columns, rows of one expert, experts): TMA clips
// the box at N and at the expert's last row. One thread (`elected`) issues the stores and, before
// the buffer is rewritten, waits until they have read it (named barrier `barrier`, 128 threads),
// and after its `last` tile's stores until they are complete (shared memory must outlive them;
// a wait after the tile loop instead made ptxas spill the accumulators). The values are those of
// store_fragment: alpha * acc, rounded once.
template <int kTileN>
__device__ __forceinline__ void store_fragment_staged(const CUtensorMap* d_map, float alpha, const float* frag,
                                                      uint8_t* staging, int32_t row, int32_t col, int32_t expert,
                                                      uint32_t barrier, bool last) {
  constexpr int kBoxBytes = 64 * 128;
  // The thread's place from an opaque read of its index, so the 2 x kTileN / 8 store addresses are
  // computed here, per tile, and not hoisted out of the tile loop into registers the mainloop
  // needs (they spilled).
  uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  const int lane = tid % 32, row_in_wg = ((tid / 32) % 4) * 16 + lane / 4;
  const bool elected = tid % 128 == 0;
  if (elected) bulk_wait_group_read_all();  // the previous tile's stores are done with the buffer
  named_barrier_sync(barrier, 128);
  const int q = lane % 4, swizzle = row_in_wg % 8;  // rows row_in_wg and row_in_wg + 8: one swizzle
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int chunk = 2 * (j % 4) + q / 2;
      uint8_t* at = staging + (j / 4) * kBoxBytes + (row_in_wg + 8 * h) * 128 + ((chunk ^ swizzle) << 4) + (q % 2) * 8;
      *reinterpret_cast<float2*>(at) = make_float2(alpha * frag[4 * j + 2 * h], alpha * frag[4 * j + 2 * h + 1]);
    }
  fence_proxy_async_shared();  // this thread's writes, visible to the TMA engine
  named_barrier_sync(barrier, 128);
  if (elected) {
#pragma unroll
    for (int b = 0; b < kTileN / 32; ++b) tma_store_3d(d_map, staging + b * kBoxBytes, col + 32 * b, row, expert);
    bulk_commit_group();
    if (last) bulk_wait_group_all();
  }
}

// kTileN: the tile width (Fp8BlockGemmConfig). kBScalePerRow: B has 1x128 scales (one per row of
// B = column of D; wgrad), read from a TMA-loaded vector per stage; otherwise 128x128 scales (one
// per 128 columns and K block), read from global memory. kMode: dense, M-grouped (128x128 B per
// expert) or K-grouped (1x128 B; wgrad) scheduling (gemm/common/grouped_schedule.h). kStagedD:
// D through d_map's TMA stores (K-grouped, fp32 D, beta 0; the launcher checks); d_map is unused
// otherwise.
template <int kTileN, bool kBScalePerRow, GroupMode kMode, bool kStagedD = false>
__global__ void __launch_bounds__(Fp8BlockGemmConfig<kTileN>::kThreads, 1)
    sm90_fp8_block_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                               const __grid_constant__ CUtensorMap a_scale_map,
                               const __grid_constant__ CUtensorMap b_scale_map, const Fp8BlockGemmParams p,
                               const __grid_constant__ CUtensorMap d_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!kStagedD || (kMode == GroupMode::kK && kTileN == 128), "staged D: the K-grouped wgrad kernel");
  using Cfg = Fp8BlockGemmConfig<kTileN, kStagedD>;
  constexpr int kAcc = Cfg::kAccumulators;
  constexpr int kGroups = Cfg::kColumnGroups;
  // 1x128 B scales of a 192-wide tile would be 48 more live registers across the wgmma (192
  // accumulators + 48 > 232): that variant reads them from shared memory in the promotion and
  // releases the stage after it instead of before.
  constexpr bool kHoldStage = kBScalePerRow && kTileN > 128;
  constexpr bool kOrderIssue = !(kBScalePerRow && kTileN == 128);
  constexpr uint32_t kIssueOrderBarrier = 1;  // named barrier 0 is __syncthreads
  constexpr uint32_t kStagingBarrier = 2;     // + warpgroup: staged D
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint8_t* staging = smem;  // kStagedD only
  uint8_t* a_ring = smem + Cfg::kStagingBytes;
  uint8_t* b_ring = a_ring + Cfg::kStages * Cfg::kTileABytes;
  float* a_scale_ring = reinterpret_cast<float*>(b_ring + Cfg::kStages * Cfg::kTileBBytes);
  float* b_scale_ring = a_scale_ring + Cfg::kStages * (Cfg::kScaleABytes / 4);
  uint64_t* full = reinterpret_cast<uint64_t*>(b_scale_ring + Cfg::kStages * kTileN);
  uint64_t* empty = full + Cfg::kStages;
  int32_t* tile_ends = reinterpret_cast<int32_t*>(empty + Cfg::kStages);  // grouped mode only
  int32_t* row_ends = tile_ends + kMaxGroups;

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&full[s], 1);                     // the producer's arrive.expect_tx
      mbarrier_init(&empty[s], Cfg::kConsumerWarps);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  static_assert(kMode != GroupMode::kM || !kBScalePerRow, "M-grouped: 128x128 B per expert");
  static_assert(kMode != GroupMode::kK || kBScalePerRow, "K-grouped: 1x128 B (wgrad)");
  if constexpr (kMode == GroupMode::kM)
    build_grouped_schedule(p.groups, p.m, Cfg::kTileM, p.order.tiles_n, tile_ends, row_ends);
  if constexpr (kMode == GroupMode::kK) build_grouped_schedule(p.groups, p.k_limit, 1, 0, nullptr, row_ends);
  __syncthreads();

  const int32_t num_tiles = kMode == GroupMode::kDense ? p.order.num_tiles()
                            : kMode == GroupMode::kK   ? p.groups.num_groups * p.order.num_tiles()
                            : p.groups.num_groups > 0  ? tile_ends[p.groups.num_groups - 1]
                                                       : 0;
  // Tile index -> its expert, first row and column, where its rows end and the K it reduces.
  const auto tile_at = [&](int32_t tile) {
    if constexpr (kMode == GroupMode::kM) {
      GroupedTile t = grouped_tile(tile, p.groups.num_groups, Cfg::kTileM, kTileN, p.order.tiles_n, tile_ends, row_ends);
      t.k_end = p.k_blocks * Cfg::kTileK;
      return t;
    } else if constexpr (kMode == GroupMode::kK) {
      return k_grouped_tile(tile, p.order, p.m, Cfg::kTileM, kTileN, row_ends);
    } else {
      GroupedTile t;
      int32_t tile_m, tile_n;
      p.order.coords(tile, &tile_m, &tile_n);
      t.m0 = tile_m * Cfg::kTileM, t.n0 = tile_n * kTileN, t.row_end = p.m;
      t.k_end = p.k_blocks * Cfg::kTileK;
      return t;
    }
  };
  // The K blocks a tile reduces: whole 128-column blocks (K-grouped ends are multiples of 128).
  const auto first_block = [](const GroupedTile& t) { return t.k_begin / Cfg::kTileK; };
  const auto end_block = [](const GroupedTile& t) { return (t.k_end + Cfg::kTileK - 1) / Cfg::kTileK; };
  if (warpgroup == Cfg::kConsumerWarpgroups) {
    // ---- producer ----
    warpgroup_registers_shrink<Cfg::kProducerRegisters>();
    if (threadIdx.x == Cfg::kConsumerWarpgroups * 128) {
      prefetch_tensor_map(&a_map);
      prefetch_tensor_map(&b_map);
      prefetch_tensor_map(&a_scale_map);
      if (kBScalePerRow) prefetch_tensor_map(&b_scale_map);
      // Boxes past the tensor's edge are zero-filled and still count their full bytes.
      constexpr uint32_t kStageBytes =
          Cfg::kTileABytes + Cfg::kTileBBytes + 4 * Cfg::kScaleABoxFloats + (kBScalePerRow ? Cfg::kScaleBBytes : 0);
      int stage = 0;
      uint32_t phase = 0;
      for (int32_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const GroupedTile t = tile_at(tile);
        const int32_t m0 = t.m0, n0 = t.n0, b_row = (kMode == GroupMode::kM ? t.group * p.n : 0) + t.n0;
        for (int32_t kb = first_block(t), kb_end = end_block(t); kb < kb_end; ++kb) {
          mbarrier_wait(&empty[stage], phase ^ 1);  // round 0 passes at once (fresh barrier)
          mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
          tma_load_2d(a_ring + stage * Cfg::kTileABytes, &a_map, &full[stage], kb * Cfg::kTileK, m0);
          tma_load_2d(b_ring + stage * Cfg::kTileBBytes, &b_map, &full[stage], kb * Cfg::kTileK, b_row);
          tma_load_2d(a_scale_ring + stage * (Cfg::kScaleABytes / 4), &a_scale_map, &full[stage], m0 & ~3, kb);
          if (kBScalePerRow) tma_load_2d(b_scale_ring + stage * kTileN, &b_scale_map, &full[stage], n0, kb);
          if (++stage == Cfg::kStages) stage = 0, phase ^= 1;
        }
      }
    }
    return;
  }

  // ---- consumers ----
  warpgroup_registers_grow<Cfg::kConsumerRegisters>();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_in_group = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int row_in_tile = warpgroup * 64 + warp_in_group * 16 + lane / 4;  // and row_in_tile + 8
  const int col_in_group = (lane % 4) * 2;                                 // + 8j, j < kGroups
  // This thread's two 1x128 B scales of column group j in a stage.
  const auto b_scale_pair = [&](int s, int j) {
    return *reinterpret_cast<const float2*>(b_scale_ring + s * kTileN + 8 * j + col_in_group);
  };
  int stage = 0;
  uint32_t phase = 0;
  for (int32_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    const GroupedTile t = tile_at(tile);
    const int32_t m0 = t.m0, n0 = t.n0;
    // 128x128 B: the tile's columns fall in block n0 / 128 and, when wider than the rest of that
    // block, the next one (clamped at the last block: its columns are >= N then, never stored).
    const float* b_scales_lo = nullptr;
    const float* b_scales_hi = nullptr;
    if (!kBScalePerRow) {
      const int32_t block = n0 / 128;
      const float* expert_scales = p.b_block_scales + t.group * p.b_block_scales_group_stride;
      b_scales_lo = expert_scales + int64_t{block} * p.b_block_scales_ld;
      b_scales_hi = expert_scales + int64_t{min(block + 1, p.b_scale_blocks - 1)} * p.b_block_scales_ld;
    }

    float main_acc[kAcc];
    float partial[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) main_acc[i] = 0.0f;

    for (int32_t kb = first_block(t), kb_end = end_block(t); kb < kb_end; ++kb) {
      // Issued before the wait so their latency hides behind it.
      const float b_lo = kBScalePerRow ? 1.0f : __ldg(b_scales_lo + kb);
      const float b_hi = kBScalePerRow || kTileN == 128 ? b_lo : __ldg(b_scales_hi + kb);
      mbarrier_wait(&full[stage], phase);

      // Every shared-memory read of the stage happens before its release below.
      const float* a_scales = a_scale_ring + stage * (Cfg::kScaleABytes / 4) + (m0 & 3);
      const float a_scale0 = a_scales[row_in_tile];
      const float a_scale1 = a_scales[row_in_tile + 8];
      float2 b_pairs[kBScalePerRow && !kHoldStage ? kGroups : 1];
      if constexpr (kBScalePerRow && !kHoldStage) {
#pragma unroll
        for (int j = 0; j < kGroups; ++j) b_pairs[j] = b_scale_pair(stage, j);
      }

      const uint64_t desc_a = smem_descriptor_kmajor_sw128(a_ring + stage * Cfg::kTileABytes + warpgroup * 64 * 128);
      const uint64_t desc_b = smem_descriptor_kmajor_sw128(b_ring + stage * Cfg::kTileBBytes);
#pragma unroll
      for (int i = 0; i < kAcc; ++i) fence_accumulator(partial[i]);
      if (kOrderIssue && warpgroup == 1) named_barrier_sync_unaligned(kIssueOrderBarrier, 256);  // after warpgroup 0's issue
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < Cfg::kTileK / Cfg::kWgmmaK; ++k) {
        // +32 bytes of K per slice = +2 in the descriptor's (address >> 4) field.
        wgmma_e4m3<kTileN>(partial, desc_a + 2 * k, desc_b + 2 * k, k > 0);
      }
      wgmma_commit_group();
      if (kOrderIssue && warpgroup == 0) named_barrier_sync_unaligned(kIssueOrderBarrier, 256);
#pragma unroll
      for (int i = 0; i < kAcc; ++i) fence_accumulator(partial[i]);
      wgmma_wait_group<0>();
      const int used = stage;
      if (!kHoldStage && lane == 0) mbarrier_arrive(&empty[stage]);  // the stage's reads are done: refill it
      if (++stage == Cfg::kStages) stage = 0, phase ^= 1;

      // Promotion: main += partial * (sa[row] * sb[col]), fp32; the same operations per element
      // for every tile width, so both widths give the same bits.
      if constexpr (kBScalePerRow) {
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
          const float2 b = kHoldStage ? b_scale_pair(used, j) : b_pairs[kHoldStage ? 0 : j];
          main_acc[4 * j + 0] = fmaf(partial[4 * j + 0], a_scale0 * b.x, main_acc[4 * j + 0]);
          main_acc[4 * j + 1] = fmaf(partial[4 * j + 1], a_scale0 * b.y, main_acc[4 * j + 1]);
          main_acc[4 * j + 2] = fmaf(partial[4 * j + 2], a_scale1 * b.x, main_acc[4 * j + 2]);
          main_acc[4 * j + 3] = fmaf(partial[4 * j + 3], a_scale1 * b.y, main_acc[4 * j + 3]);
        }
        if (kHoldStage) {
          __syncwarp();  // every lane's scale reads happen before lane 0's release
          if (lane == 0) mbarrier_arrive(&empty[used]);
        }
      } else {
        const float lo0 = a_scale0 * b_lo, lo1 = a_scale1 * b_lo, hi0 = a_scale0 * b_hi, hi1 = a_scale1 * b_hi;
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
          const bool hi = b_scale_block_offset<kTileN>(n0, j) != 0;
          const float s0 = hi ? hi0 : lo0, s1 = hi ? hi1 : lo1;
          main_acc[4 * j + 0] = fmaf(partial[4 * j + 0], s0, main_acc[4 * j + 0]);
          main_acc[4 * j + 1] = fmaf(partial[4 * j + 1], s0, main_acc[4 * j + 1]);
          main_acc[4 * j + 2] = fmaf(partial[4 * j + 2], s1, main_acc[4 * j + 2]);
          main_acc[4 * j + 3] = fmaf(partial[4 * j + 3], s1, main_acc[4 * j + 3]);
        }
      }
    }

    if constexpr (kStagedD) {
      store_fragment_staged<kTileN>(&d_map, p.epilogue.alpha, main_acc, staging + warpgroup * 64 * kTileN * 4,
                                    m0 + warpgroup * 64, n0, t.group, kStagingBarrier + warpgroup,
                                    tile + static_cast<int32_t>(gridDim.x) >= num_tiles);
      continue;
    }
    // ---- epilogue: registers -> global, bounds-checked (rows >= M and columns >= N skipped) ----
    const int32_t row = m0 + row_in_tile;
    const int rows = row >= t.row_end ? 0 : row + 8 >= t.row_end ? 1 : 2;
    store_fragment<kGroups>(p.epilogue, p.epilogue.alpha, main_acc, t.d_row0 + row, rows, n0 + col_in_group, p.n);
  }
#else
  // Built for an architecture without wgmma: the launcher never selects this image.
  __trap();
#endif
}

}  // namespace blockscale::gemm::sm90
