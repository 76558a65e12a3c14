// sm90_fp8_gemm: FP8 blockwise GEMM for Hopper (sm_90a) with TMA multicast across a 2-CTA cluster
// and a TMA-store epilogue; 128 x 128, 128 x 192 or 256 x 128 tiles; every FP8 blockwise GEMM gemm/ runs on
// sm_90 that does not go to cuBLASLt. Dense problems and the grouped modes
// of gemm/common/grouped_schedule.h (expert ends read on the device): M-grouped (MoE fprop /
// dgrad) and K-grouped (MoE wgrad: each expert's tile reduces its own K range; D of expert g is
// rows g * m .. g * m + m - 1, written through a 3-D view that TMA clips at each expert's m rows).
//
//   operation : D (M x N) = alpha * sum_kb (sa[m,kb] * sb[n,kb]) * (sum_{k in kb} a[m,k] b[n,k]),
//               or D += that (fp32 D accumulated in place: beta 1, C = D)
//   operands  : A M x K e4m3, K-major, 1x128 fp32 scales (VEC128_32F layout);
//               B N x K e4m3, K-major, 128x128 fp32 scales (BLK128x128_32F; fprop / dgrad) or
//               1x128 scales (VEC128_32F; wgrad), TMA-loaded with each stage like A's;
//               D row-major bf16 or fp32, 16-byte aligned rows
//   instruction: wgmma.mma_async m64n128k32 / m64n192k32 .f32.e4m3.e4m3 from shared memory
//               (QGMMA), cp.async.bulk.tensor loads (A or B multicast to both CTAs of a cluster),
//               cp.async.bulk.tensor / cp.reduce.async.bulk.tensor stores of D
//   must match: formats::reference_gemm (fp64) within the bound derived in tests/gemm/gemm_test.cpp;
//               (exactly, for inputs whose sums are exact in fp32); both tile widths do the same
//               operations per element, so they give the same bits
//
// Structure (one CTA = 3 warpgroups, persistent; kCluster CTAs per cluster):
//   The CTAs of a cluster share one operand: 128-row tiles take vertically adjacent tiles (tile
//   rows r * kCluster + rank, the same column) and share B; 256-row tiles take horizontally
//   adjacent ones (the same tile row) and share A, the larger operand. Each CTA's producer loads
//   1 / kCluster of the shared tile's rows and multicasts them into every CTA of the cluster,
//   halving that operand's traffic from L2 (at 128 x 192 tiles and ~1400 TFLOP/s the unshared
//   operand stream alone is ~9 TB/s, near L2's bandwidth).
//   A stage may be refilled only when the consumers of every CTA are done with it (a peer writes
//   into it), so each consumer warp arrives on the `empty` barrier of every CTA of the cluster.
//   warpgroup 2 (producer, one thread): per tile and K block, wait `empty`, announce the stage's
//     bytes on `full`, TMA-load its share of A and B, the A and B scales.
//   warpgroups 0, 1 (consumers, 64 rows each; 256-row tiles: two waves of 64 rows each, rows
//     128 w + 64 g, over the same B tile): per K block and wave, 4 wgmma k32 into a fresh partial
//     accumulator, wait for them, (last wave) release the stage, promote: main += partial * (sa * sb).
//     Software-pipelined: block k + 1's `full` wait and scale reads happen while block k's
//     wgmmas run. The two warpgroups issue independently (an issue order between them measured
//     4-11% slower once the loop was pipelined).
//   Epilogue: each consumer warpgroup writes its 64 x kTileN fragment, one box of 64 rows x 128
//     bytes at a time, into one of kStoreSlots 128-byte-swizzled shared-memory slots (bank-conflict
//     free: the 8 rows of a warp's store land in 8 different 16-byte chunks), and one elected
//     thread hands each box to a TMA store (or a TMA reduce-add for D += ...). The stores drain
//     while the warpgroup writes the next box and starts the next tile; a slot is rewritten only
//     after the store that read it has (cp.async.bulk.wait_group.read). TMA clips boxes at M and N.
//   Where TMA cannot write D (its rows or N not 16-byte multiples, D not 16-byte aligned) or C is
//     read (beta other than 0, or 1 with fp32 C = D in place), `direct` epilogue: each thread
//     writes alpha * acc + beta * C from registers, bounds-checked (sm90_epilogue.cuh); its own
//     instantiations (kDirect), on 128 x 128 tiles only.
//   M-grouped: tiles start at their expert's first row, so a tile's last rows may belong to the
//     next expert; a box holding such rows is copied out by the warpgroup's threads, row by row,
//     16 bytes a thread (only the expert's rows), instead of by TMA. Clusters only at 256 x 128,
//     side by side (one tile row: one expert's rows, so both CTAs run the same K loop); pairing
//     tile rows would often leave the second CTA idle, experts being small.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "gemm/common/grouped_schedule.h"
#include "gemm/common/scale_blocks.h"
#include "gemm/common/tile_scheduler.h"
#include "gemm/sm90/sm90_epilogue.cuh"
#include "gemm/sm90/sm90_ptx.cuh"

namespace blockscale::gemm::sm90 {

template <int kTileN_, bool kBScalePerRow_, int kCluster_, GroupMode kMode_ = GroupMode::kDense, int kTileM_ = 128>
struct Fp8GemmConfig {
  // 128 rows: two consumer warpgroups x 64 rows; 256: each warpgroup takes two waves of 64 rows
  // (rows 128 w + 64 g ..), which read the same B tile: 1.5x the flops per byte staged of 128 x 128.
  static constexpr int kTileM = kTileM_;
  static constexpr int kWaves = kTileM / 128;
  static constexpr int kTileN = kTileN_;
  static constexpr int kTileK = 128;  // one scale block of K per stage; 128 B rows = the swizzle span
  static constexpr int kWgmmaK = 32;
  static constexpr int kCluster = kCluster_;
  static constexpr int kAccumulators = kTileN / 2;  // fp32 per thread and wave: 64 x kTileN over 128 threads
  static constexpr int kColumnGroups = kTileN / 8;  // fragment column groups j (columns 8j .. 8j + 7)
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = 128 * (kConsumerWarpgroups + 1);
  static constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;
  static constexpr int kTileABytes = kTileM * kTileK;
  static constexpr int kTileBBytes = kTileN * kTileK;
  // The operand the CTAs of a cluster share: B (tiles vertically adjacent) or A (horizontally).
  static constexpr bool kShareA = kTileM == 256;  // the larger operand
  static constexpr int kAShareRows = kShareA ? kTileM / kCluster : kTileM;  // A rows each CTA loads
  static constexpr int kBShareRows = kShareA ? kTileN : kTileN / kCluster;  // B rows each CTA loads
  // A scales of one K block and wave: a box of 128 + 4 floats from the wave's first row rounded down to a
  // multiple of 4 (TMA's 16-byte rule for the start; grouped tiles will start at any row).
  static constexpr int kScaleABoxFloats = 128 + 4;
  static constexpr int kScaleAWaveBytes = (kScaleABoxFloats * 4 + 127) / 128 * 128;
  static constexpr int kScaleABytes = kWaves * kScaleAWaveBytes;
  // B scales of one K block: 1x128, the tile's columns; 128x128, a box of 4 K blocks x 2 column
  // blocks from (kb rounded down to 4, n0 / 128) (a box started at kb itself raised an illegal
  // instruction at kb = 1 on an H200: the innermost coordinate is kept 16-byte aligned, as for A's
  // scales): block kb is element kb % 4 of a row; the tile's columns lie in its first row, or
  // (192 wide) both.
  static constexpr int kScaleBBoxBytes = kBScalePerRow_ ? kTileN * 4 : 4 * 2 * 4;
  static constexpr int kScaleBBytes = (kScaleBBoxBytes + 127) / 128 * 128;
  static constexpr int kStageBytes = kTileABytes + kTileBBytes + kScaleABytes + kScaleBBytes;
  // Shared memory: staging, A ring, B ring, A-scale ring, B-scale ring, barriers, plus 1 KB so
  // everything starts on a 1024-byte boundary (the 128-byte swizzle repeats every 8 rows).
  static constexpr int kSmemLimit = 227 * 1024;
  // M-grouped: the schedule tables (tile and row end per expert) after the barriers.
  static constexpr int kScheduleBytes = kMode_ != GroupMode::kDense ? 2 * kMaxGroups * 4 : 0;
  static constexpr int kRoom = kSmemLimit - 1024 - 256 - kScheduleBytes;  // staging + ring
  // Epilogue staging: per consumer warpgroup kStoreSlots boxes of 64 rows x 128 bytes. As many
  // slots as a warpgroup's tile has bf16 boxes (its epilogue then never waits for a store to
  // drain) where that costs no stage of the ring, else 2 (1 measured the same or slower).
  static constexpr int kBoxBytes = 64 * 128;
  static constexpr int kSlotBytes = kConsumerWarpgroups * kBoxBytes;  // one slot per warpgroup
  static constexpr int kTileBoxes = kWaves * kTileN / 64;
  static constexpr int kStoreSlots =
      kTileBoxes > 2 && (kRoom - kTileBoxes * kSlotBytes) / kStageBytes >= (kRoom - 2 * kSlotBytes) / kStageBytes
          ? kTileBoxes
          : 2;
  static constexpr int kStagingBytes = kStoreSlots * kSlotBytes;
  static constexpr int kStages = (kRoom - kStagingBytes) / kStageBytes;
  // After the barriers: one all-ones word (kReleaseWordBytes, the consumers' release order).
  static constexpr int kReleaseWordBytes = 16;
  static constexpr int kSmemBytes =
      1024 + kStagingBytes + kStages * kStageBytes + 2 * kStages * 8 + kReleaseWordBytes + kScheduleBytes;
  static_assert(kTileN == 128 || kTileN == 192, "wgmma widths with a wrapper in sm90_ptx.cuh");
  // Two waves hold 2 x 64 + 64 accumulators at 128 wide; 192 columns would not fit (1x128 B scales
  // are read from shared memory in the promotion: kHoldStage).
  static_assert(kTileM == 128 || (kTileM == 256 && kTileN == 128),
                "256-row tiles: 128 wide");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs along M");
  static_assert(kMode_ == GroupMode::kDense || kCluster == 1 || (kMode_ == GroupMode::kM && kShareA),
                "grouped modes: no cluster, but M-grouped 256-row tiles side by side (one expert's rows)");
  static_assert(kMode_ != GroupMode::kM || !kBScalePerRow_, "M-grouped: 128x128 B per expert");
  static_assert(kMode_ != GroupMode::kK || kBScalePerRow_, "K-grouped: 1x128 B (wgrad)");
  static_assert((kBShareRows * kTileK) % 1024 == 0 && (kAShareRows * kTileK) % 1024 == 0,
                "each CTA's share starts on a swizzle-pattern boundary");
  static_assert(kStages >= 3 && kSmemBytes <= kSmemLimit, "sm_90 allows 227 KB of shared memory per CTA");
  static_assert(kTileN <= 256, "TMA boxes hold at most 256 elements per dimension");
  // setmaxnreg moves registers from the producer (40) to the consumers (232) inside the CTA's
  // pool: per SM sub-partition one warp of each warpgroup, 32 x (232 + 232 + 40) <= 16384.
  static constexpr int kEntryRegisters = (65536 / kThreads) / 8 * 8;
  static_assert(32 * (kConsumerWarpgroups * kConsumerRegisters + kProducerRegisters) <= 16384,
                "setmaxnreg budget per sub-partition");
  static_assert(kConsumerWarpgroups * kConsumerRegisters + kProducerRegisters <=
                    (kConsumerWarpgroups + 1) * kEntryRegisters,
                "setmaxnreg.inc can only hand out what the producer's setmaxnreg.dec released");
};

struct Fp8GemmParams {
  int32_t m = 0, n = 0, k_blocks = 0;
  // Over cluster tiles: tiles_m is the number of tile rows / kCluster, rounded up (a cluster's
  // CTAs take tile rows r * kCluster + rank; a row past M computes on zeros and stores nothing).
  TileOrder order;
  int32_t b_scale_blocks = 0;  // 128x128 B: ceil(n / 128), the rows of one expert's scale matrix
  float alpha = 1.0f;
  bool d_bf16 = true;
  bool accumulate = false;  // fp32 D += the product (TMA reduce-add)
  EpilogueParams epilogue;
  // M-grouped: expert g's B is rows g * n .. g * n + n - 1 of b_map, its 128x128 scales rows
  // g * b_scale_blocks .. of b_scale_map. D (row stride ldd elements) for the boxes that end
  // inside an expert, written by threads.
  // K-grouped: the groups' ends split K (k_limit columns).
  GroupedRows groups;
  int32_t k_limit = 0;
  void* d = nullptr;
  int64_t ldd = 0;
};

// The rows [row0, row_end) of a staged box (64 rows x 128 bytes from column col) to D by the
// warpgroup's 128 threads, one 16-byte chunk each per pass (D's rows and N are 16-byte multiples:
// tma_stores_d in sm90_fp8_gemm.cu); with p.accumulate, D += the box. Reads undo the slot's swizzle.
__device__ __forceinline__ void copy_box_rows(const Fp8GemmParams& p, const uint8_t* slot, int32_t row0,
                                              int32_t row_end, int32_t col) {
  const int elem = p.d_bf16 ? 2 : 4, chunk_cols = 16 / elem;
  const int t = static_cast<int>(threadIdx.x) % 128;
#pragma unroll
  for (int pass = 0; pass < 4; ++pass) {
    const int c = t + 128 * pass, r = c / 8, chunk = c % 8;
    const int32_t row = row0 + r, first = col + chunk * chunk_cols;
    if (row >= row_end || first >= p.n) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(slot + r * 128 + ((chunk ^ (r % 8)) << 4));
    uint8_t* at = static_cast<uint8_t*>(p.d) + (int64_t{row} * p.ldd + first) * elem;
    if (p.accumulate) {  // fp32 D += the box
      float4 d = *reinterpret_cast<float4*>(at);
      d.x += __uint_as_float(v.x), d.y += __uint_as_float(v.y), d.z += __uint_as_float(v.z), d.w += __uint_as_float(v.w);
      *reinterpret_cast<float4*>(at) = d;
    } else {
      *reinterpret_cast<uint4*>(at) = v;
    }
  }
}

// One warpgroup's 64 x kTileN fragment (alpha applied) to D at (row0, col0) through the staging
// slots and TMA, as the banner describes. `store_count` numbers the boxes this warpgroup has
// stored so far (the slot ring continues across tiles). After its `last` tile the elected thread
// waits until the stores have completed: shared memory must outlive them (a wait after the tile
// loop instead made ptxas spill the accumulators).
// Rows from row_end on are not written (M-grouped: the next expert's).
// kExpertD: d_map is 3-D (columns, rows of one expert, experts) and row0 counts within `expert`.
template <int kTileN, int kStoreSlots, bool kExpertD>
__device__ __forceinline__ void store_tile(const CUtensorMap* d_map, const Fp8GemmParams& p, const float* frag,
                                           uint8_t* slots, int32_t row0, int32_t row_end, int32_t col0,
                                           int32_t expert, uint32_t barrier, uint32_t& store_count, bool last) {
  constexpr int kBoxBytes = 64 * 128;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = ((static_cast<int>(threadIdx.x) / 32) % 4) * 16 + lane / 4;  // and row + 8
  const int swizzle = row % 8, q = lane % 4;                                     // row + 8: the same swizzle
  const bool elected = threadIdx.x % 128 == 0;
  const bool rows_in = row0 < row_end;
  const bool whole = row0 + 64 <= row_end || row_end == p.m;  // TMA clips at M itself
  const auto box = [&](int32_t col, auto&& write) {
    uint8_t* slot = slots + (store_count % kStoreSlots) * kBoxBytes;
    if (elected) bulk_wait_group_read<kStoreSlots - 1>();  // the slot's last store has read it
    named_barrier_sync(barrier, 128);
    write(slot);
    fence_proxy_async_shared();  // this thread's writes, visible to the TMA engine
    named_barrier_sync(barrier, 128);
    if (!whole && rows_in) copy_box_rows(p, slot, row0, row_end, col);
    if (elected && rows_in && whole && col < p.n) {
      if constexpr (kExpertD) {
        if (p.accumulate) {
          tma_reduce_add_3d(d_map, slot, col, row0, expert);
        } else {
          tma_store_3d(d_map, slot, col, row0, expert);
        }
      } else if (p.accumulate) {
        tma_reduce_add_2d(d_map, slot, col, row0);
      } else {
        tma_store_2d(d_map, slot, col, row0);
      }
    }
    if (elected) bulk_commit_group();  // an empty group when nothing was stored: the ring stays in step
    ++store_count;
  };
  const float alpha = p.alpha;
  if (p.d_bf16) {
    // alpha == 1 (the usual case) skips a multiply per element. Only here: the same test around
    // the fp32 stores moved the main loop's registers into bank conflicts (docs/design.md).
    const auto write = [&](auto scaled) {
#pragma unroll
      for (int b = 0; b < kTileN / 64; ++b)  // 64 bf16 columns a box: column group j = 8b + c, chunk c
        box(col0 + 64 * b, [&](uint8_t* slot) {
#pragma unroll
          for (int c = 0; c < 8; ++c)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int j = 8 * b + c;
              const float x0 = frag[4 * j + 2 * h], x1 = frag[4 * j + 2 * h + 1];
              const __nv_bfloat162 v = decltype(scaled)::value ? __floats2bfloat162_rn(alpha * x0, alpha * x1)
                                                               : __floats2bfloat162_rn(x0, x1);
              *reinterpret_cast<__nv_bfloat162*>(slot + (row + 8 * h) * 128 + ((c ^ swizzle) << 4) + q * 4) = v;
            }
        });
    };
    if (alpha == 1.0f) {
      write(std::false_type{});
    } else {
      write(std::true_type{});
    }
  } else {
#pragma unroll
    for (int b = 0; b < kTileN / 32; ++b)  // 32 fp32 columns a box: group j = 4b + c, chunks 2c, 2c + 1
      box(col0 + 32 * b, [&](uint8_t* slot) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int j = 4 * b + c, chunk = 2 * c + q / 2;
            *reinterpret_cast<float2*>(slot + (row + 8 * h) * 128 + ((chunk ^ swizzle) << 4) + (q % 2) * 8) =
                make_float2(alpha * frag[4 * j + 2 * h], alpha * frag[4 * j + 2 * h + 1]);
          }
      });
  }
  if (elected && last) bulk_wait_group_all();
}

// kTileN: the tile width. kBScalePerRow: B has 1x128 scales (wgrad); otherwise 128x128 scales
// (both TMA-loaded with each stage). kCluster: CTAs per cluster sharing an operand. kMode: dense,
// M- or K-grouped. kDirect: the `direct` epilogue (D from registers) instead of TMA stores; its
// own instantiation, because with that path in the same kernel ptxas allocated the main
// accumulators in the register banks of the wgmma fragment they are promoted from (about half
// the promotion FFMAs then read two operands from one bank; a fifth without it).
template <int kTileN, bool kBScalePerRow, int kCluster, GroupMode kMode = GroupMode::kDense, int kTileM = 128,
          bool kDirect = false>
__global__ void __launch_bounds__(Fp8GemmConfig<kTileN, kBScalePerRow, kCluster, kMode, kTileM>::kThreads, 1)
    sm90_fp8_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                         const __grid_constant__ CUtensorMap a_scale_map,
                         const __grid_constant__ CUtensorMap b_scale_map, const __grid_constant__ CUtensorMap d_map,
                         const Fp8GemmParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Fp8GemmConfig<kTileN, kBScalePerRow, kCluster, kMode, kTileM>;
  constexpr int kWaves = Cfg::kWaves;
  constexpr bool kMGrouped = kMode == GroupMode::kM;
  constexpr bool kKGrouped = kMode == GroupMode::kK;
  constexpr bool kShareA = Cfg::kShareA;
  constexpr int kAcc = Cfg::kAccumulators;
  constexpr int kGroups = Cfg::kColumnGroups;
  // 1x128 B scales of a 192-wide tile would be 48 more live registers across the wgmma, and of a
  // 256-row tile 32 more beside two waves' accumulators: those variants read them from shared
  // memory in the promotion and release the stage after the last wave's.
  constexpr bool kHoldStage = kBScalePerRow && (kTileN > 128 || kWaves > 1);
  constexpr uint32_t kStoreBarrier = 1;  // + warpgroup (named barrier 0 is __syncthreads)
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint8_t* staging = smem;
  uint8_t* a_ring = staging + Cfg::kStagingBytes;
  uint8_t* b_ring = a_ring + Cfg::kStages * Cfg::kTileABytes;
  float* a_scale_ring = reinterpret_cast<float*>(b_ring + Cfg::kStages * Cfg::kTileBBytes);
  float* b_scale_ring = a_scale_ring + Cfg::kStages * (Cfg::kScaleABytes / 4);
  uint64_t* full = reinterpret_cast<uint64_t*>(b_scale_ring + Cfg::kStages * (Cfg::kScaleBBytes / 4));
  uint64_t* empty = full + Cfg::kStages;
  uint32_t* release_word = reinterpret_cast<uint32_t*>(empty + Cfg::kStages);
  int32_t* tile_ends = reinterpret_cast<int32_t*>(release_word + Cfg::kReleaseWordBytes / 4);  // grouped only
  int32_t* row_ends = tile_ends + kMaxGroups;

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const uint32_t rank = kCluster > 1 ? cluster_cta_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&full[s], 1);                                // the producer's arrive.expect_tx
      mbarrier_init(&empty[s], Cfg::kConsumerWarps * kCluster);  // every consumer warp of the cluster
    }
    fence_barrier_init();
    *release_word = 0xFFFFFFFFu;
  }
  if constexpr (kMGrouped) build_grouped_schedule(p.groups, p.m, Cfg::kTileM, p.order.tiles_n, tile_ends, row_ends);
  if constexpr (kKGrouped) build_grouped_schedule(p.groups, p.k_limit, 1, 0, nullptr, row_ends);  // K ends
  // The peer's producer multicasts into this CTA's ring and signals its barriers: both CTAs'
  // barriers must be initialised first.
  if constexpr (kCluster > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }

  const int32_t num_units = kKGrouped                ? p.groups.num_groups * p.order.num_tiles()
                            : !kMGrouped              ? p.order.num_tiles()
                            : p.groups.num_groups > 0 ? tile_ends[p.groups.num_groups - 1]
                                                      : 0;
  const int32_t first_unit = static_cast<int32_t>(blockIdx.x) / kCluster;
  const int32_t unit_stride = static_cast<int32_t>(gridDim.x) / kCluster;
  // Unit -> this CTA's tile: its expert, first row and column, and where its rows end. whole_warp:
  // std::true_type where whole warps call it (grouped_tile).
  const auto tile_at = [&](int32_t unit, auto whole_warp) {
    if constexpr (kMGrouped) {
      // A cluster's CTAs take adjacent column tiles of one tile row (p.order.tiles_n counts pairs).
      GroupedTile t = grouped_tile<decltype(whole_warp)::value>(unit, p.groups.num_groups, Cfg::kTileM,
                                                                kTileN * kCluster, p.order.tiles_n, tile_ends, row_ends);
      t.n0 += static_cast<int32_t>(rank) * kTileN;
      t.k_end = p.k_blocks * Cfg::kTileK;
      return t;
    } else if constexpr (kKGrouped) {
      return k_grouped_tile(unit, p.order, p.m, Cfg::kTileM, kTileN, row_ends);
    } else {
      GroupedTile t;
      int32_t tile_m, tile_n;
      p.order.coords(unit, &tile_m, &tile_n);
      const int32_t r = static_cast<int32_t>(rank);
      t.m0 = (kShareA ? tile_m : tile_m * kCluster + r) * Cfg::kTileM;
      t.n0 = (kShareA ? tile_n * kCluster + r : tile_n) * kTileN;
      t.row_end = p.m;
      t.k_end = p.k_blocks * Cfg::kTileK;
      return t;
    }
  };
  // The K blocks a tile reduces (K-grouped ends are multiples of 128: grouped.h).
  const auto first_block = [](const GroupedTile& t) { return t.k_begin / Cfg::kTileK; };
  const auto end_block = [](const GroupedTile& t) { return (t.k_end + Cfg::kTileK - 1) / Cfg::kTileK; };

  if (warpgroup == Cfg::kConsumerWarpgroups) {
    // ---- producer ----
    warpgroup_registers_shrink<Cfg::kProducerRegisters>();
    if (threadIdx.x == Cfg::kConsumerWarpgroups * 128) {
      prefetch_tensor_map(&a_map);
      prefetch_tensor_map(&b_map);
      prefetch_tensor_map(&a_scale_map);
      prefetch_tensor_map(&b_scale_map);
      // Bytes landing in this CTA per stage: its A, all of B (its share and the peers'), scales.
      // Boxes past the tensor's edge are zero-filled and still count their full bytes.
      constexpr uint32_t kStageTx = Cfg::kTileABytes + Cfg::kTileBBytes + kWaves * 4 * Cfg::kScaleABoxFloats +
                                    Cfg::kScaleBBoxBytes;
      int stage = 0;
      uint32_t phase = 0;
      for (int32_t unit = first_unit; unit < num_units; unit += unit_stride) {
        const GroupedTile t = tile_at(unit, std::false_type{});
        const int32_t m0 = t.m0, n0 = t.n0, b_first = (kMGrouped ? t.group * p.n : 0) + n0;
        for (int32_t kb = first_block(t), kb_end = end_block(t); kb < kb_end; ++kb) {
          mbarrier_wait(&empty[stage], phase ^ 1);  // round 0 passes at once (fresh barrier)
          mbarrier_arrive_expect_tx(&full[stage], kStageTx);
          // This CTA's share of the shared operand goes to every CTA of the cluster.
          constexpr uint16_t kAll = (1u << kCluster) - 1;
          uint8_t* a_stage = a_ring + stage * Cfg::kTileABytes;
          uint8_t* b_stage = b_ring + stage * Cfg::kTileBBytes;
          const int32_t r = static_cast<int32_t>(rank);
          if constexpr (kCluster > 1 && kShareA) {
            tma_load_2d_multicast(a_stage + r * (Cfg::kAShareRows * Cfg::kTileK), &a_map, &full[stage],
                                  kb * Cfg::kTileK, m0 + r * Cfg::kAShareRows, kAll);
          } else {
            tma_load_2d(a_stage, &a_map, &full[stage], kb * Cfg::kTileK, m0);
          }
          if constexpr (kCluster > 1 && !kShareA) {
            tma_load_2d_multicast(b_stage + r * (Cfg::kBShareRows * Cfg::kTileK), &b_map, &full[stage],
                                  kb * Cfg::kTileK, b_first + r * Cfg::kBShareRows, kAll);
          } else {
            tma_load_2d(b_stage, &b_map, &full[stage], kb * Cfg::kTileK, b_first);
          }
#pragma unroll
          for (int w = 0; w < kWaves; ++w)
            tma_load_2d(a_scale_ring + stage * (Cfg::kScaleABytes / 4) + w * (Cfg::kScaleAWaveBytes / 4), &a_scale_map,
                        &full[stage], (m0 + 128 * w) & ~3, kb);
          if (kBScalePerRow) {
            tma_load_2d(b_scale_ring + stage * (Cfg::kScaleBBytes / 4), &b_scale_map, &full[stage], n0, kb);
          } else {  // a cluster's tile past N reads zero-filled rows: never stored
            tma_load_2d(b_scale_ring + stage * (Cfg::kScaleBBytes / 4), &b_scale_map, &full[stage], kb & ~3,
                        t.group * p.b_scale_blocks + n0 / 128);
          }
          if (++stage == Cfg::kStages) stage = 0, phase ^= 1;
        }
      }
    }
    __syncwarp();
  } else {
    // ---- consumers ----
    warpgroup_registers_grow<Cfg::kConsumerRegisters>();
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int warp_in_group = (static_cast<int>(threadIdx.x) / 32) % 4;
    const int row_in_tile = warpgroup * 64 + warp_in_group * 16 + lane / 4;  // and + 8; wave w: + 128 w
    const int col_in_group = (lane % 4) * 2;                                 // + 8j, j < kGroups
    const auto b_scale_pair = [&](int s, int j) {  // this thread's two 1x128 B scales of group j
      return *reinterpret_cast<const float2*>(b_scale_ring + s * (Cfg::kScaleBBytes / 4) + 8 * j + col_in_group);
    };
    // The stage's reads are done: every CTA's producer may refill it (lane r signals rank r).
    const auto release = [&](int s) {
      if constexpr (kCluster > 1) {
        if (lane < kCluster) mbarrier_arrive_cluster(&empty[s], static_cast<uint32_t>(lane));
      } else {
        if (lane == 0) mbarrier_arrive(&empty[s]);
      }
    };
    // The low 32 bits of stage 0's wgmma descriptors (kmajor_sw128_descriptor); a stage adds its
    // offset / 16, a k32 slice 2.
    // The warpgroup index through a shuffle: the compiler then knows it warp-uniform and keeps the
    // descriptors in uniform registers (a per-thread value costs a register-to-uniform move per wgmma).
    const int uniform_warpgroup = __shfl_sync(0xffffffffu, warpgroup, 0);
    const uint32_t a_desc0 = kmajor_sw128_descriptor_lo(a_ring + uniform_warpgroup * 64 * 128);
    const uint32_t b_desc0 = kmajor_sw128_descriptor_lo(b_ring);
    int stage = 0;
    uint32_t phase = 0;
    uint32_t store_count = 0;
    for (int32_t unit = first_unit; unit < num_units; unit += unit_stride) {
      const GroupedTile t = tile_at(unit, std::true_type{});
      const int32_t m0 = t.m0, n0 = t.n0;

      float main_acc[kWaves * kAcc];  // wave w: main_acc[w * kAcc ..]
      float partial[kAcc];
#pragma unroll
      for (int i = 0; i < kWaves * kAcc; ++i) {
        main_acc[i] = 0.0f;
        // Zeroed once, here: ptxas otherwise zeroes them again on the unrolled loop's entry path.
        fence_accumulator(main_acc[i]);
      }

      // Software-pipelined: block kb + 1's scales are read (its `full` wait included) while block
      // kb's (last wave's) wgmmas run, so after their wait only the release and the promotion stand
      // between this warpgroup and its next issue (the other warpgroup's wgmmas run meanwhile).
      int32_t kb = first_block(t);
      const int32_t kb_end = end_block(t);
      // This thread's A scales (rows row_in_tile + 128 w and + 8) and 128x128 B scales of a block,
      // read from its stage once the `full` wait has passed.
      struct BlockScales {
        float a0[kWaves], a1[kWaves], b_lo, b_hi;
      };
      const auto read_scales = [&](int s, int32_t block, BlockScales& out) {
#pragma unroll
        for (int w = 0; w < kWaves; ++w) {
          const float* a_scales =
              a_scale_ring + s * (Cfg::kScaleABytes / 4) + w * (Cfg::kScaleAWaveBytes / 4) + ((m0 + 128 * w) & 3);
          out.a0[w] = a_scales[row_in_tile];
          out.a1[w] = a_scales[row_in_tile + 8];
        }
        if constexpr (!kBScalePerRow) {  // column blocks n0 / 128 and the next (Fp8GemmConfig)
          const float* b_scales = b_scale_ring + s * (Cfg::kScaleBBytes / 4) + (block & 3);
          out.b_lo = b_scales[0];
          out.b_hi = kTileN == 128 ? out.b_lo : b_scales[4];
        }
      };
      // With 128x128 B: several K blocks per loop iteration (fewer instructions of loop bookkeeping
      // between the wgmmas: docs/design.md): dense 8 at 256 x 128, 2 at 128 wide (8 measured slower
      // at 128 x 192); M-grouped 2 (8 puts the promotion's FFMAs into register-bank conflicts). Not
      // with 1x128 B (ptxas then spills at 128 wide), so not in the K-grouped mode.
      constexpr int kKUnroll =
          kMode == GroupMode::kK || kBScalePerRow ? 1 : kTileM == 256 && kMode == GroupMode::kDense ? 8 : 2;
      BlockScales cur{};
      if (kb < kb_end) {
        mbarrier_wait(&full[stage], phase);
        read_scales(stage, kb, cur);
      }
      // A K block's wgmmas, wait, release and promotion. known_next: the caller knows a next block
      // exists (inside a full group of kKUnroll blocks), so the check drops out.
      const auto step = [&](int32_t kb, auto known_next) {
        // Every shared-memory read of the stage happens before its release below.
        [[maybe_unused]] float2 b_pairs[kBScalePerRow && !kHoldStage ? kGroups : 1];
        if constexpr (kBScalePerRow && !kHoldStage) {
#pragma unroll
          for (int j = 0; j < kGroups; ++j) b_pairs[j] = b_scale_pair(stage, j);
        }
        const uint32_t a_desc = a_desc0 + stage * (Cfg::kTileABytes >> 4);
        const uint32_t b_desc = b_desc0 + stage * (Cfg::kTileBBytes >> 4);
        const int used = stage;
        BlockScales next;  // read only when a next block exists (no zeroing per block)
#pragma unroll
        for (int w = 0; w < kWaves; ++w) {
#pragma unroll
          for (int i = 0; i < kAcc; ++i) fence_accumulator(partial[i]);
          wgmma_fence();
#pragma unroll
          for (int k = 0; k < Cfg::kTileK / Cfg::kWgmmaK; ++k) {
            // +32 bytes of K per slice = +2 in the descriptor's (address >> 4) field; a wave's A
            // rows start 128 rows (16 KB) further.
            wgmma_e4m3<kTileN>(partial, kmajor_sw128_descriptor(a_desc + w * (128 * 128 >> 4) + 2 * k),
                               kmajor_sw128_descriptor(b_desc + 2 * k), k > 0);
          }
          wgmma_commit_group();
#pragma unroll
          for (int i = 0; i < kAcc; ++i) fence_accumulator(partial[i]);
          const bool last_wave = w == kWaves - 1;
          if (last_wave) {
            if (++stage == Cfg::kStages) stage = 0, phase ^= 1;
            if (decltype(known_next)::value || kb + 1 < kb_end) {  // (a uniform PTX loop: a C++ spin here would serialise the wgmmas)
              mbarrier_wait_uniform(&full[stage], phase);
              read_scales(stage, kb + 1, next);
            }
          }
          wgmma_wait_group<0>();
          // Row + 8's scale passes through an all-ones word read after the release: the
          // promotion's second half then depends on the release, which ptxas otherwise sinks
          // below all of it (the stage would come back to the producer ~64 FFMAs late).
          uint32_t ones = 0xFFFFFFFFu;
          if (last_wave && !kHoldStage) {
            release(used);
            asm volatile("ld.shared.b32 %0, [%1];" : "=r"(ones) : "r"(smem_addr(release_word)) : "memory");
          }

          // Promotion: main += partial * (sa[row] * sb[col]), fp32; the same operations per
          // element at every tile shape (same bits).
          float* main_wave = main_acc + w * kAcc;
          const float a_scale0 = cur.a0[w], a_scale1 = __uint_as_float(__float_as_uint(cur.a1[w]) & ones);
          if constexpr (kBScalePerRow) {
#pragma unroll
            for (int j = 0; j < kGroups; ++j) {
              const float2 b = kHoldStage ? b_scale_pair(used, j) : b_pairs[kHoldStage ? 0 : j];
              main_wave[4 * j + 0] = fmaf(partial[4 * j + 0], a_scale0 * b.x, main_wave[4 * j + 0]);
              main_wave[4 * j + 1] = fmaf(partial[4 * j + 1], a_scale0 * b.y, main_wave[4 * j + 1]);
              main_wave[4 * j + 2] = fmaf(partial[4 * j + 2], a_scale1 * b.x, main_wave[4 * j + 2]);
              main_wave[4 * j + 3] = fmaf(partial[4 * j + 3], a_scale1 * b.y, main_wave[4 * j + 3]);
            }
            if (kHoldStage && last_wave) {
              __syncwarp();  // every lane's scale reads happen before lane 0's release
              release(used);
            }
          } else {
            const float lo0 = a_scale0 * cur.b_lo, lo1 = a_scale1 * cur.b_lo;
            const float hi0 = a_scale0 * cur.b_hi, hi1 = a_scale1 * cur.b_hi;
#pragma unroll
            for (int j = 0; j < kGroups; ++j) {
              const bool hi = b_scale_block_offset<kTileN>(n0, j) != 0;
              const float s0 = hi ? hi0 : lo0, s1 = hi ? hi1 : lo1;
              main_wave[4 * j + 0] = fmaf(partial[4 * j + 0], s0, main_wave[4 * j + 0]);
              main_wave[4 * j + 1] = fmaf(partial[4 * j + 1], s0, main_wave[4 * j + 1]);
              main_wave[4 * j + 2] = fmaf(partial[4 * j + 2], s1, main_wave[4 * j + 2]);
              main_wave[4 * j + 3] = fmaf(partial[4 * j + 3], s1, main_wave[4 * j + 3]);
            }
          }
        }
        cur = next;
      };
      for (; kb + kKUnroll <= kb_end; kb += kKUnroll) {
#pragma unroll
        for (int u = 0; u < kKUnroll - 1; ++u) step(kb + u, std::true_type{});
        step(kb + kKUnroll - 1, std::false_type{});
      }
      for (; kb < kb_end; ++kb) step(kb, std::false_type{});
      // The tile's row end and expert looked up again rather than kept across the mainloop (live
      // registers there spilled).
      const GroupedTile done = tile_at(unit, std::true_type{});
#pragma unroll
      for (int w = 0; w < kWaves; ++w) {
        if constexpr (kDirect) {  // rows >= the expert's end and columns >= N skipped
          const int32_t row = m0 + 128 * w + row_in_tile;
          const int rows = row >= done.row_end ? 0 : row + 8 >= done.row_end ? 1 : 2;
          store_fragment<kGroups>(p.epilogue, p.alpha, main_acc + w * kAcc, done.d_row0 + row, rows,
                                  n0 + col_in_group, p.n);
        } else {
          store_tile<kTileN, Cfg::kStoreSlots, kKGrouped>(
              &d_map, p, main_acc + w * kAcc, staging + warpgroup * Cfg::kStoreSlots * Cfg::kBoxBytes,
              m0 + 128 * w + warpgroup * 64, done.row_end, n0, done.group, kStoreBarrier + warpgroup, store_count,
              w == kWaves - 1 && unit + unit_stride >= num_units);
        }
      }
    }
  }
  // No CTA leaves while a peer may still arrive on its barriers or multicast into its ring.
  if constexpr (kCluster > 1) cluster_sync();
#else
  // Built for an architecture without wgmma: the launcher never selects this image.
  __trap();
#endif
}

}  // namespace blockscale::gemm::sm90
