// sm90_block_scaled_gemm: MX / NVFP4 GEMM for Hopper (sm_90a) with exact semantics.
//
//   operation  : D (M x N) = alpha * S_dec_a * S_dec_b * sum_k (a[m,k] sa[m,k/blk]) (b[n,k] sb[n,k/blk])
//                + beta * C, every product exact, summed in fp32 over the whole K
//   operands   : A M x K, B N x K, K-major codes as quant/ writes them (E4M3 / E5M2 one per byte,
//                E2M1 two per byte, low nibble first), E8M0 (block 32) or UE4M3 (block 16) scales in
//                the swizzled 128x4 layout; C / D row-major bf16 or fp32
//   instruction: wgmma.mma_async m64n128k16 .f32.bf16.bf16 with A in registers (HGMMA in SASS)
//   must match : formats::reference_gemm (fp64) within the bound of tests/gemm/gemm_block_scaled_test.cpp
//
// Hopper's tensor cores have no block-scale operand, and FP8 wgmma would need a promotion every
// 32 of K (and keeps ~13 bits in its accumulator). Instead each element times its block scale is
// converted to bf16 in the kernel; that is exact (docs/numerics.md: E4M3 x 2^e for E8M0 scales
// 2^-124..2^119, E5M2 x 2^e for 2^-117..2^112, E2M1 x 2^e for 2^-132..2^125, E2M1 x UE4M3 always),
// and bf16 x bf16 products are exact in the fp32 accumulator.
//
// Structure (one CTA = 3 warpgroups, one 256 x 128 output tile at a time, persistent):
//   warpgroup 2 (producer, one thread): per 128-of-K stage, TMA-loads the A tile (256 rows), the
//     B tile (128 rows) and their scale tiles (one or two 512-byte swizzled tiles per 128 rows)
//     into a ring of kStages stages.
//   warpgroups 0, 1 (consumers, 128 rows of A each = two m64 halves): for stage g they
//     - read their A codes from the stage, convert them with their scales into bf16 wgmma A
//       fragments in registers, and issue eight k16 steps x 2 halves of wgmma against the bf16 B tile
//       of stage g, one step ahead of the conversion (double-buffered fragments, wait_group 1);
//     - meanwhile convert B of stage g + 1 (each consumer thread two (row, 32-of-K) pieces) into
//       the other of two bf16 B buffers (128-byte-swizzled K-major, what wgmma reads);
//     - named barriers between the two consumer warpgroups: "the other B buffer is free" (after
//       step 0, when both have finished stage g - 1's wgmmas) and "it is written" (end of stage).
//   The K order inside a stage is permuted, identically for A and B (a sum does not care):
//   logical k16 step s, k j <-> physical k = 32q + 4s + t, with j = 2q + t for t < 2 and
//   2q + 6 + t otherwise. Then thread q of the A fragment owns physical k 32q..32q+31 of its rows
//   (one 16-byte load per row and half stage, one MX block, so one scale), and a B piece (row n,
//   32 physical k) is one 32-block with one scale too.
//   Epilogue: after a tile's last stage, alpha * S_dec_a * S_dec_b * acc + beta * C from registers.
//   Modes (kMode): dense, M-grouped, K-grouped (wgrad: a tile's stages are those its expert's K
//   range touches on the global 128-column grid; 16-column chunks outside the range are converted
//   as zeros; the consumers walk (tile, stage) pairs with a cursor, as stage counts vary).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "gemm/common/grouped_schedule.h"
#include "gemm/common/tile_scheduler.h"
#include "gemm/gemm.h"
#include "gemm/sm90/sm90_epilogue.cuh"
#include "gemm/sm90/sm90_ptx.cuh"

namespace blockscale::gemm::sm90 {

enum class ElementCode { kE4M3, kE5M2, kE2M1 };
enum class ScaleCode { kE8M0, kUE4M3 };

template <ElementCode kElement_, ScaleCode kScale_>
struct OperandFormat {
  static constexpr ElementCode kElement = kElement_;
  static constexpr ScaleCode kScale = kScale_;
  static constexpr bool kFp4 = kElement == ElementCode::kE2M1;
  static constexpr int kBlock = kScale == ScaleCode::kUE4M3 ? 16 : 32;
  static constexpr int kRowBytes = kFp4 ? 64 : 128;            // one row of a 128-of-K stage
  static constexpr int kScaleTilesPerStage = 128 / kBlock / 4;  // 512-byte tiles of 4 scale columns
};
using Mxfp8E4M3 = OperandFormat<ElementCode::kE4M3, ScaleCode::kE8M0>;
using Mxfp8E5M2 = OperandFormat<ElementCode::kE5M2, ScaleCode::kE8M0>;
using Mxfp4 = OperandFormat<ElementCode::kE2M1, ScaleCode::kE8M0>;
using Nvfp4 = OperandFormat<ElementCode::kE2M1, ScaleCode::kUE4M3>;

// kMode: dense, M-grouped or K-grouped (gemm/common/grouped_schedule.h). M-grouped: an expert's
// first row need not be a multiple of 128, so a 256-row tile spans up to 3 of A's 128-row scale
// tiles.
template <class FmtA, class FmtB, GroupMode kMode>
struct BlockScaledGemmConfig {
  static constexpr int kTileM = 256;  // two consumer warpgroups x two m64 halves
  static constexpr int kTileN = 128;
  static constexpr int kTileK = 128;  // one stage
  static constexpr int kSteps = kTileK / 16;
  static constexpr int kThreads = 384;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;
  static constexpr int kTileABytes = kTileM * FmtA::kRowBytes;
  static constexpr int kTileBBytes = kTileN * FmtB::kRowBytes;
  static constexpr int kARowTiles = kTileM / 128 + (kMode == GroupMode::kM ? 1 : 0);  // A scale row tiles per stage
  static constexpr int kScaleABytes = kARowTiles * FmtA::kScaleTilesPerStage * 512;
  static constexpr int kScaleBBytes = (kTileN / 128) * FmtB::kScaleTilesPerStage * 512;
  static constexpr int kStageBytes = kTileABytes + kTileBBytes + kScaleABytes + kScaleBBytes;
  static constexpr int kBf16AtomBytes = kTileN * 128;  // 64 of K x 128 rows of bf16
  static constexpr int kBf16BBytes = 2 * kBf16AtomBytes;  // one stage of B in bf16
  static constexpr int kFixedBytes =
      1024 + 2 * kBf16BBytes + 2 * 8 * 8 + (kMode != GroupMode::kDense ? 2 * kMaxGroups * 4 : 0);
  static constexpr int kStagesFit = (227 * 1024 - kFixedBytes) / kStageBytes;
  static constexpr int kStages = kStagesFit < 6 ? kStagesFit : 6;
  static constexpr int kSmemBytes = kFixedBytes + kStages * kStageBytes;
  static_assert(kStages >= 3, "a ring of at least 3 stages: B is converted one stage ahead of A");
  static_assert(kTileABytes % 1024 == 0 && kTileBBytes % 1024 == 0, "swizzled tiles start on 1024-byte boundaries");
  static_assert(kSmemBytes <= 227 * 1024, "sm_90 allows 227 KB of shared memory per CTA");
  static_assert(2 * kConsumerRegisters + kProducerRegisters <= 3 * ((65536 / kThreads) / 8 * 8),
                "setmaxnreg can only hand out what the producer released");
};

struct BlockScaledGemmParams {
  int32_t m = 0, n = 0;
  int32_t k_stages = 0;  // ceil(K / 128); the last stage's missing K arrives as zero codes
  int32_t k_limit = 0;   // K (K-grouped: the groups' ends are clamped to it)
  TileOrder order;
  const float* a_scale_dec = nullptr;  // NVFP4 tensor decode scales (null: 1)
  const float* b_scale_dec = nullptr;  // M-grouped: one per expert
  EpilogueParams epilogue;
  // M-grouped: expert g's B is rows g * n.. of b_map, scale row tiles g * b_row_tiles... K-grouped:
  // the groups' ends split K.
  GroupedRows groups;
  int32_t b_row_tiles = 0;
};

namespace block_scaled {

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// A block scale as bf16, both halves of a bf16x2 (exact: 2^e, or UE4M3's 4 significant bits).
template <ScaleCode kScale>
__device__ __forceinline__ uint32_t scale_bf16x2(uint32_t code) {
  float v;
  if (kScale == ScaleCode::kE8M0) {
    v = code == 0xFF ? __uint_as_float(0x7FC00000u) : __uint_as_float(code == 0 ? 0x00400000u : code << 23);
  } else {  // UE4M3: its bits in fp32's exponent and mantissa are the value times 2^-120
    v = (code & 0x7F) == 0x7F ? __uint_as_float(0x7FC00000u) : __uint_as_float((code & 0x7F) << 20) * 0x1p120f;
  }
  const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  return h | (h << 16);
}

// Four codes in k order t0..t3 -> bf16x2 (t0, t1) and (t2, t3), times the block scale.
// FP8: `codes` is 4 bytes. Each code's bits land in a bf16 so that its value is the code's times
// 2^-120 (E4M3) or 2^-112 (E5M2), subnormals included; one multiply restores the exponent, one
// applies the scale (both exact in the ranges of the file comment).
// E2M1: `codes` holds 4 nibbles in its low 16 bits; a byte-permute table lookup gives the bf16 of
// each magnitude, the sign is copied in, one multiply applies the scale.
template <ElementCode kElement>
__device__ __forceinline__ void convert4(uint32_t codes, uint32_t scale, uint32_t* p01, uint32_t* p23) {
  if constexpr (kElement == ElementCode::kE2M1) {
    const uint32_t sel = codes & 0x7777u;
    const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, sel);  // low bytes of bf16(0, .5, 1, 1.5 | 2, 3, 4, 6)
    const uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, sel);  // high bytes
    uint32_t a = __byte_perm(lo, hi, 0x5140), b = __byte_perm(lo, hi, 0x7362);
    a |= ((codes << 12) & 0x8000u) | ((codes << 24) & 0x80000000u);
    b |= ((codes << 4) & 0x8000u) | ((codes << 16) & 0x80000000u);
    *p01 = bf16x2_mul(a, scale);
    *p23 = bf16x2_mul(b, scale);
  } else {
    constexpr int kShift = kElement == ElementCode::kE4M3 ? 4 : 3;
    constexpr uint32_t kMask = kElement == ElementCode::kE4M3 ? 0x07F007F0u : 0x0FE00FE0u;
    constexpr uint32_t kRestore = kElement == ElementCode::kE4M3 ? 0x7B807B80u : 0x77807780u;  // 2^120, 2^112
    const uint32_t y0 = __byte_perm(codes, 0, 0x1404), y1 = __byte_perm(codes, 0, 0x3424);  // codes in bytes 1, 3
    const uint32_t b0 = (y0 & 0x80008000u) | ((y0 >> kShift) & kMask);
    const uint32_t b1 = (y1 & 0x80008000u) | ((y1 >> kShift) & kMask);
    *p01 = bf16x2_mul(bf16x2_mul(b0, kRestore), scale);
    *p23 = bf16x2_mul(bf16x2_mul(b1, kRestore), scale);
  }
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a TMA-swizzled tile (128-byte rows with
// the 128-byte swizzle, 64-byte rows with the 64-byte swizzle; tiles 1024-byte aligned).
template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  if constexpr (kRowBytes == 128) return row * 128 + ((chunk ^ (row & 7)) << 4);
  return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
}

// Offset of scale (row r, column col) inside a stage's scale tiles (row tiles of 128 rows, each
// kTiles 512-byte tiles of 4 columns): formats::swizzled_scale_offset within the stage.
template <int kTiles>
__device__ __forceinline__ uint32_t scale_offset(int r, int col) {
  return ((r >> 7) * kTiles + (col >> 2)) * 512 + (r & 31) * 16 + ((r & 127) >> 5) * 4 + (col & 3);
}

}  // namespace block_scaled

template <class FmtA, class FmtB, GroupMode kMode>
__global__ void __launch_bounds__(BlockScaledGemmConfig<FmtA, FmtB, kMode>::kThreads, 1)
    sm90_block_scaled_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                                  const __grid_constant__ CUtensorMap a_scale_map,
                                  const __grid_constant__ CUtensorMap b_scale_map, const BlockScaledGemmParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace block_scaled;
  using Cfg = BlockScaledGemmConfig<FmtA, FmtB, kMode>;
  constexpr bool kMGrouped = kMode == GroupMode::kM, kKGrouped = kMode == GroupMode::kK;
  constexpr int kStages = Cfg::kStages;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint8_t* b_bf16 = smem;  // two buffers of kBf16BBytes
  uint8_t* a_ring = b_bf16 + 2 * Cfg::kBf16BBytes;
  uint8_t* b_ring = a_ring + kStages * Cfg::kTileABytes;
  uint8_t* a_scale_ring = b_ring + kStages * Cfg::kTileBBytes;
  uint8_t* b_scale_ring = a_scale_ring + kStages * Cfg::kScaleABytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(b_scale_ring + kStages * Cfg::kScaleBBytes);
  uint64_t* empty = full + kStages;
  int32_t* tile_ends = reinterpret_cast<int32_t*>(empty + kStages);  // grouped mode only
  int32_t* row_ends = tile_ends + kMaxGroups;

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], 8);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  if constexpr (kMGrouped) build_grouped_schedule(p.groups, p.m, Cfg::kTileM, p.order.tiles_n, tile_ends, row_ends);
  if constexpr (kKGrouped) build_grouped_schedule(p.groups, p.k_limit, 1, 0, nullptr, row_ends);
  __syncthreads();

  const int32_t num_tiles = kMode == GroupMode::kDense ? p.order.num_tiles()
                            : kKGrouped                ? p.groups.num_groups * p.order.num_tiles()
                            : p.groups.num_groups > 0  ? tile_ends[p.groups.num_groups - 1]
                                                       : 0;
  // Tile index -> its expert, first row and column, where its rows end and the K it reduces.
  const auto tile_at = [&](int32_t tile) {
    if constexpr (kMGrouped) {
      GroupedTile t =
          grouped_tile<false>(tile, p.groups.num_groups, Cfg::kTileM, Cfg::kTileN, p.order.tiles_n, tile_ends, row_ends);
      t.k_end = p.k_stages * Cfg::kTileK;
      return t;
    } else if constexpr (kKGrouped) {
      return k_grouped_tile(tile, p.order, p.m, Cfg::kTileM, Cfg::kTileN, row_ends);
    } else {
      GroupedTile t;
      int32_t tile_m, tile_n;
      p.order.coords(tile, &tile_m, &tile_n);
      t.m0 = tile_m * Cfg::kTileM, t.n0 = tile_n * Cfg::kTileN, t.row_end = p.m;
      t.k_end = p.k_stages * Cfg::kTileK;
      return t;
    }
  };
  // A tile's stages: the 128-column K stages its range touches. K-grouped ranges start and end on
  // block boundaries, not stage boundaries: the blocks of a stage outside the range are masked.
  const auto first_stage = [](const GroupedTile& t) { return t.k_begin / Cfg::kTileK; };
  const auto stage_count = [&](const GroupedTile& t) {
    return t.k_end > t.k_begin ? (t.k_end + Cfg::kTileK - 1) / Cfg::kTileK - first_stage(t) : 0;
  };
  if (warpgroup == 2) {
    // ---- producer ----
    warpgroup_registers_shrink<Cfg::kProducerRegisters>();
    if (threadIdx.x == 256) {
      prefetch_tensor_map(&a_map);
      prefetch_tensor_map(&b_map);
      prefetch_tensor_map(&a_scale_map);
      prefetch_tensor_map(&b_scale_map);
      int slot = 0;
      uint32_t phase = 0;
      for (int32_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const GroupedTile t = tile_at(tile);
        const int32_t m0 = t.m0, b_row = (kMGrouped ? t.group * p.n : 0) + t.n0;
        const int32_t b_row_tile = (kMGrouped ? t.group * p.b_row_tiles : 0) + t.n0 / 128;
        for (int32_t kb = first_stage(t), kb_end = kb + stage_count(t); kb < kb_end; ++kb) {
          mbarrier_wait(&empty[slot], phase ^ 1);
          mbarrier_arrive_expect_tx(&full[slot], Cfg::kStageBytes);  // boxes past the edges count in full
          tma_load_2d(a_ring + slot * Cfg::kTileABytes, &a_map, &full[slot], kb * FmtA::kRowBytes, m0);
          tma_load_2d(b_ring + slot * Cfg::kTileBBytes, &b_map, &full[slot], kb * FmtB::kRowBytes, b_row);
          tma_load_3d(a_scale_ring + slot * Cfg::kScaleABytes, &a_scale_map, &full[slot], 0,
                      kb * 2 * FmtA::kScaleTilesPerStage, m0 / 128);
          tma_load_3d(b_scale_ring + slot * Cfg::kScaleBBytes, &b_scale_map, &full[slot], 0,
                      kb * 2 * FmtB::kScaleTilesPerStage, b_row_tile);
          if (++slot == kStages) slot = 0, phase ^= 1;
        }
      }
    }
    return;
  }

  // ---- consumers ----
  warpgroup_registers_grow<Cfg::kConsumerRegisters>();
  const int thread = static_cast<int>(threadIdx.x);  // 0..255
  const int lane = thread % 32, warp_in_group = (thread / 32) % 4;
  const int g = lane / 4, q = lane % 4;
  // This thread's A rows in the tile: (half h, i) -> 128 wg + 64 h + 16 w + g + 8 i.
  const int row0 = warpgroup * 128 + warp_in_group * 16 + g;
  const float alpha_a = p.epilogue.alpha * (p.a_scale_dec ? __ldg(p.a_scale_dec) : 1.0f);

  // Bit c of a stage's mask: its physical k 16c .. 16c + 15 lie in the tile's K range (ranges
  // start and end on block boundaries, so a 32-block's two halves agree). The k outside it (a
  // neighbouring expert's tokens, K-grouped only) are converted as zero codes with a zero scale,
  // so even a NaN there cannot reach the sum. A's half stage hs of thread q and B's piece half
  // `half` of block q' are bits 2q + hs and 2q' + half.
  const auto block_mask = [&](const GroupedTile& t, int32_t kb) {
    uint32_t mask = 0xFFu;
    if constexpr (kKGrouped) {
      const int32_t base = (first_stage(t) + kb) * Cfg::kTileK;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int32_t start = base + 16 * c;
        if (start < t.k_begin || start >= t.k_end) mask &= ~(1u << c);
      }
    }
    return mask;
  };

  // Converts the B pieces of ring slot `slot` owned by this thread into bf16 buffer `buf`:
  // piece (row n, q') = the 32 physical k of block q' (item = thread + 256 it, n = item / 4).
  const auto convert_b_piece = [&](int slot, int buf, int it, uint32_t mask) {
    const int item = thread + 256 * it;
    const int n = item >> 2, qb = item & 3;
    const uint8_t* tile = b_ring + slot * Cfg::kTileBBytes;
    const uint8_t* scales = b_scale_ring + slot * Cfg::kScaleBBytes;
    uint8_t* dst_row = b_bf16 + buf * Cfg::kBf16BBytes + n * 128;
    uint32_t words[8];  // FP8: word s = step s; E2M1: the low / high 16 bits of word w = steps 2w, 2w + 1
    if constexpr (FmtB::kFp4) {
      const uint4 v = *reinterpret_cast<const uint4*>(tile + swizzled<64>(n, qb));
      words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
    } else {
      const uint4 v0 = *reinterpret_cast<const uint4*>(tile + swizzled<128>(n, 2 * qb));
      const uint4 v1 = *reinterpret_cast<const uint4*>(tile + swizzled<128>(n, 2 * qb + 1));
      words[0] = v0.x, words[1] = v0.y, words[2] = v0.z, words[3] = v0.w;
      words[4] = v1.x, words[5] = v1.y, words[6] = v1.z, words[7] = v1.w;
    }
    uint32_t scale[2];
    if constexpr (FmtB::kBlock == 16) {
      scale[0] = scale_bf16x2<FmtB::kScale>(scales[scale_offset<FmtB::kScaleTilesPerStage>(n, 2 * qb)]);
      scale[1] = scale_bf16x2<FmtB::kScale>(scales[scale_offset<FmtB::kScaleTilesPerStage>(n, 2 * qb + 1)]);
    } else {
      scale[0] = scale[1] = scale_bf16x2<FmtB::kScale>(scales[scale_offset<FmtB::kScaleTilesPerStage>(n, qb)]);
    }
    if constexpr (kKGrouped) {
      constexpr int kHalfWords = FmtB::kFp4 ? 2 : 4;  // the words of 16 physical k
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (!((mask >> (2 * qb + half)) & 1u)) {
          scale[half] = 0;
#pragma unroll
          for (int w = 0; w < kHalfWords; ++w) words[half * kHalfWords + w] = 0;
        }
      }
    }
#pragma unroll
    for (int s = 0; s < Cfg::kSteps; ++s) {
      const uint32_t codes = FmtB::kFp4 ? words[s / 2] >> (16 * (s % 2)) : words[s];
      uint32_t p01, p23;
      convert4<FmtB::kElement>(codes, scale[s / 4], &p01, &p23);
      uint8_t* atom_row = dst_row + (s / 4) * Cfg::kBf16AtomBytes;
      const int chunk = 2 * (s % 4);
      *reinterpret_cast<uint32_t*>(atom_row + ((chunk ^ (n & 7)) << 4) + 4 * qb) = p01;
      *reinterpret_cast<uint32_t*>(atom_row + (((chunk + 1) ^ (n & 7)) << 4) + 4 * qb) = p23;
    }
  };

  // This CTA's (tile, stage) pairs in order, tiles without stages (K-grouped empty experts)
  // skipped: `cur` is the stage being multiplied, `nxt` the one whose B is converted meanwhile.
  struct Cursor {
    int32_t tile;
    GroupedTile t;
    int32_t kb, stages;  // stage index inside the tile, and the tile's stage count
  };
  const auto advance = [&](Cursor& c) {
    if (++c.kb < c.stages) return;
    c.kb = 0;
    for (c.tile += gridDim.x; c.tile < num_tiles; c.tile += gridDim.x) {
      c.t = tile_at(c.tile);
      c.stages = stage_count(c.t);
      if (c.stages > 0) return;
    }
  };

  float acc[2][64];
  // alpha * acc + beta * C for the tile's rows and columns (rows past its expert skipped).
  const auto store_tile = [&](const GroupedTile& t) {
    const float alpha = alpha_a * (p.b_scale_dec ? __ldg(p.b_scale_dec + (kMGrouped ? t.group : 0)) : 1.0f);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int32_t row = t.m0 + row0 + 64 * h;
      const int rows = row >= t.row_end ? 0 : row + 8 >= t.row_end ? 1 : 2;
      store_fragment<16>(p.epilogue, alpha, acc[h], t.d_row0 + row, rows, t.n0 + 2 * q, p.n);
    }
  };

  int32_t total = 0;
  for (int32_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    const GroupedTile t = tile_at(tile);
    const int32_t stages = stage_count(t);
    total += stages;
    if (kKGrouped && stages == 0) {  // an empty expert's dW: beta * C
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 64; ++j) acc[h][j] = 0.0f;
      store_tile(t);
    }
  }
  if (total == 0) return;

  Cursor nxt{static_cast<int32_t>(blockIdx.x) - static_cast<int32_t>(gridDim.x), GroupedTile{}, 0, 0};
  advance(nxt);
  // Prologue: B of the first stage.
  mbarrier_wait(&full[0], 0);
  convert_b_piece(0, 0, 0, block_mask(nxt.t, nxt.kb));
  convert_b_piece(0, 0, 1, block_mask(nxt.t, nxt.kb));
  fence_proxy_async_shared();
  named_barrier_sync(1, 256);

  uint32_t frag[2][2][4];  // [step parity][half h][register]
  for (int32_t gs = 0; gs < total; ++gs) {
    const Cursor cur = nxt;
    advance(nxt);
    const GroupedTile& t = cur.t;
    const int32_t kb = cur.kb;
    const uint32_t mask = block_mask(t, kb);
    const uint32_t next_mask = block_mask(nxt.t, nxt.kb);
    // This tile's rows in its A scale box: the box starts at row tile m0 / 128 (M-grouped: an
    // expert's first row need not be a multiple of 128).
    const int a_row_shift = t.m0 & 127;
    const int slot = gs % kStages, buf = gs & 1;
    const bool has_next = gs + 1 < total;
    const int next_slot = (gs + 1) % kStages;
    const uint8_t* a_tile = a_ring + slot * Cfg::kTileABytes;
    const uint8_t* a_scales = a_scale_ring + slot * Cfg::kScaleABytes;
    const uint64_t desc_b0 = smem_descriptor_kmajor_sw128(b_bf16 + buf * Cfg::kBf16BBytes);
    const uint64_t desc_b1 = smem_descriptor_kmajor_sw128(b_bf16 + buf * Cfg::kBf16BBytes + Cfg::kBf16AtomBytes);

#pragma unroll
    for (int hs = 0; hs < 2; ++hs) {
      // This half stage's A codes (physical k 32q + 16hs .. + 15 of each row) and scales.
      uint32_t a_words[2][2][4];
      uint32_t a_scale[2][2];
      const int col = FmtA::kBlock == 16 ? 2 * q + hs : q;
      const bool in_range = (mask >> (2 * q + hs)) & 1u;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = row0 + 64 * h + 8 * i;
          const int r_scale = r + a_row_shift;
          if constexpr (FmtA::kFp4) {
            const uint2 v = *reinterpret_cast<const uint2*>(a_tile + swizzled<64>(r, q) + 8 * hs);
            a_words[h][i][0] = v.x, a_words[h][i][1] = v.y;
          } else {
            const uint4 v = *reinterpret_cast<const uint4*>(a_tile + swizzled<128>(r, 2 * q + hs));
            a_words[h][i][0] = v.x, a_words[h][i][1] = v.y, a_words[h][i][2] = v.z, a_words[h][i][3] = v.w;
          }
          a_scale[h][i] = scale_bf16x2<FmtA::kScale>(a_scales[scale_offset<FmtA::kScaleTilesPerStage>(r_scale, col)]);
          if (kKGrouped && !in_range) {
            a_scale[h][i] = 0;
#pragma unroll
            for (int w = 0; w < 4; ++w) a_words[h][i][w] = 0;
          }
        }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int s = 4 * hs + w;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const uint32_t codes = FmtA::kFp4 ? a_words[h][i][w / 2] >> (16 * (w % 2)) : a_words[h][i][w];
            convert4<FmtA::kElement>(codes, a_scale[h][i], &frag[s & 1][h][i], &frag[s & 1][h][2 + i]);
          }
        const uint64_t desc_b = (s < 4 ? desc_b0 : desc_b1) + 2 * (s % 4);  // +32 bytes per k16 step
        wgmma_fence();
        wgmma_m64n128k16_bf16_rs(acc[0], frag[s & 1][0], desc_b, kb > 0 || s > 0);
        wgmma_m64n128k16_bf16_rs(acc[1], frag[s & 1][1], desc_b, kb > 0 || s > 0);
        wgmma_commit_group();
        if (s == 0) {
          // Only this step may still run: stage gs - 1's wgmmas are done here, and after the
          // barrier in the other warpgroup too, so the other bf16 buffer can be overwritten.
          wgmma_wait_group<1>();
          named_barrier_sync(2, 256);
          if (has_next) mbarrier_wait_uniform(&full[next_slot], ((gs + 1) / kStages) & 1);
        } else {
          if (has_next && (s == 2 || s == 5)) convert_b_piece(next_slot, buf ^ 1, s == 2 ? 0 : 1, next_mask);
          wgmma_wait_group<1>();  // frees the fragment registers of step s - 1
        }
      }
    }
    // Every read of this slot (A now, B one stage earlier) is done: hand it back to the producer.
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&empty[slot]);
    if (has_next) {
      fence_proxy_async_shared();
      named_barrier_sync(1, 256);  // the next stage's bf16 B is complete
    }

    if (kb == cur.stages - 1) {
      wgmma_wait_group<0>();
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 64; ++j) fence_accumulator(acc[h][j]);
      store_tile(t);
    }
  }
#else
  __trap();  // built for an architecture without wgmma: the launcher never selects this image
#endif
}

}  // namespace blockscale::gemm::sm90
