// sm90_fp8_block_gemm: FP8 blockwise GEMM for Hopper (sm_90a).
//
//   operation : D (M x N) = alpha * sum_kb (sa[m,kb] * sb[n,kb]) * (sum_{k in kb} a[m,k] b[n,k])
//               + beta * C, kb = the 128-element K blocks
//   operands  : A M x K e4m3, K-major, 1x128 fp32 scales (VEC128_32F layout);
//               B N x K e4m3, K-major, 128x128 fp32 scales (BLK128x128_32F; fprop / dgrad) or
//               1x128 scales (VEC128_32F; wgrad); C / D row-major bf16 or fp32
//   instruction: wgmma.mma_async m64n128k32 .f32.e4m3.e4m3 from shared memory (QGMMA in SASS),
//               operands brought in by TMA (cp.async.bulk.tensor) into a 128-byte-swizzled ring
//   must match: formats::reference_gemm (fp64) within the bound derived in
//               tests/gemm/gemm_test.cu (exactly, for inputs whose sums are exact in fp32)
//
// Structure (one CTA = 3 warpgroups, one 128 x 128 output tile at a time, persistent):
//   warpgroup 2 (producer, one thread): for each tile of the CTA's share (TileOrder) and each K
//     block, waits for a free ring stage, then TMA-loads the A tile (128 x 128 B), the B tile and
//     the scale vectors of that K block into it; the stage's `full` barrier counts the bytes.
//   warpgroups 0, 1 (consumers, 64 rows each): per K block, wait `full`, read the scales, issue
//     4 wgmma k32 into a fresh partial accumulator, wait for them, release the stage (`empty`),
//     then promote: main += partial * (sa[row] * sb[col]) in fp32 registers (the 128-of-K
//     promotion; Hopper's FP8 tensor-core accumulator keeps fewer bits than fp32). After the last
//     K block, the epilogue writes alpha * main + beta * C straight from registers, bounds-checked.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "gemm/common/tile_scheduler.h"
#include "gemm/sm90/sm90_ptx.cuh"

namespace blockscale::gemm::sm90 {

struct Fp8BlockGemmConfig {
  static constexpr int kTileM = 128;  // two consumer warpgroups x 64 rows
  static constexpr int kTileN = 128;  // one 128x128 B scale block per tile column
  static constexpr int kTileK = 128;  // one scale block of K per stage; 128 B rows = the swizzle span
  static constexpr int kWgmmaK = 32;
  static constexpr int kStages = 6;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = 128 * (kConsumerWarpgroups + 1);
  static constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;
  static constexpr int kTileABytes = kTileM * kTileK;
  static constexpr int kTileBBytes = kTileN * kTileK;
  static constexpr int kScaleVectorBytes = 128 * 4;  // 128 fp32 scales of one K block
  // Shared memory: A ring, B ring, A-scale ring, B-scale ring, barriers, plus 1 KB so the rings
  // can start on a 1024-byte boundary (the 128-byte swizzle repeats every 8 rows = 1024 B).
  static constexpr int kSmemBytes =
      1024 + kStages * (kTileABytes + kTileBBytes + 2 * kScaleVectorBytes) + 2 * kStages * 8;
  static_assert(kTileK == 128, "a K stage is one scale block and one 128-byte swizzle row");
  static_assert(kSmemBytes <= 227 * 1024, "sm_90 allows 227 KB of shared memory per CTA");
};

struct Fp8BlockGemmParams {
  int32_t m = 0, n = 0, k_blocks = 0;
  TileOrder order;
  const float* b_block_scales = nullptr;  // 128x128 B: scale (n / 128, kb) at [n/128 * ld + kb]
  int32_t b_block_scales_ld = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* c = nullptr;
  int64_t ldc = 0;
  bool c_bf16 = false;
  bool c_pairs = false;  // two adjacent C elements can be read as one aligned vector
  void* d = nullptr;
  int64_t ldd = 0;
  bool d_bf16 = false;
  bool d_pairs = false;
};

namespace detail {

__device__ __forceinline__ float load_c(const Fp8BlockGemmParams& p, int64_t offset) {
  return p.c_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p.c)[offset])
                  : static_cast<const float*>(p.c)[offset];
}

// Writes alpha * acc + beta * C for columns col and col + 1 (when second_valid) of one row.
__device__ __forceinline__ void store_pair(const Fp8BlockGemmParams& p, int64_t row, int32_t col, float acc0,
                                           float acc1, bool second_valid) {
  float v0 = p.alpha * acc0, v1 = p.alpha * acc1;
  const int64_t c_at = row * p.ldc + col;
  if (p.beta != 0.0f) {  // BLAS: C is not read when beta == 0
    if (second_valid && p.c_pairs) {
      if (p.c_bf16) {
        const __nv_bfloat162 c2 = *reinterpret_cast<const __nv_bfloat162*>(static_cast<const __nv_bfloat16*>(p.c) + c_at);
        v0 = fmaf(p.beta, __low2float(c2), v0), v1 = fmaf(p.beta, __high2float(c2), v1);
      } else {
        const float2 c2 = *reinterpret_cast<const float2*>(static_cast<const float*>(p.c) + c_at);
        v0 = fmaf(p.beta, c2.x, v0), v1 = fmaf(p.beta, c2.y, v1);
      }
    } else {
      v0 = fmaf(p.beta, load_c(p, c_at), v0);
      if (second_valid) v1 = fmaf(p.beta, load_c(p, c_at + 1), v1);
    }
  }
  const int64_t d_at = row * p.ldd + col;
  if (p.d_bf16) {
    __nv_bfloat16* d = static_cast<__nv_bfloat16*>(p.d) + d_at;
    if (second_valid && p.d_pairs) {
      *reinterpret_cast<__nv_bfloat162*>(d) = __floats2bfloat162_rn(v0, v1);
    } else {
      d[0] = __float2bfloat16_rn(v0);
      if (second_valid) d[1] = __float2bfloat16_rn(v1);
    }
  } else {
    float* d = static_cast<float*>(p.d) + d_at;
    if (second_valid && p.d_pairs) {
      *reinterpret_cast<float2*>(d) = make_float2(v0, v1);
    } else {
      d[0] = v0;
      if (second_valid) d[1] = v1;
    }
  }
}

}  // namespace detail

// kBScalePerRow: B has 1x128 scales (one per row of B = column of D; wgrad), read from a TMA-loaded
// vector per stage; otherwise 128x128 scales (one per tile and K block), read from global memory.
template <bool kBScalePerRow>
__global__ void __launch_bounds__(Fp8BlockGemmConfig::kThreads, 1)
    sm90_fp8_block_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                               const __grid_constant__ CUtensorMap a_scale_map,
                               const __grid_constant__ CUtensorMap b_scale_map, const Fp8BlockGemmParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Fp8BlockGemmConfig;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint8_t* a_ring = smem;
  uint8_t* b_ring = a_ring + Cfg::kStages * Cfg::kTileABytes;
  float* a_scale_ring = reinterpret_cast<float*>(b_ring + Cfg::kStages * Cfg::kTileBBytes);
  float* b_scale_ring = a_scale_ring + Cfg::kStages * 128;
  uint64_t* full = reinterpret_cast<uint64_t*>(b_scale_ring + Cfg::kStages * 128);
  uint64_t* empty = full + Cfg::kStages;

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&full[s], 1);                     // the producer's arrive.expect_tx
      mbarrier_init(&empty[s], Cfg::kConsumerWarps);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int32_t num_tiles = p.order.num_tiles();
  if (warpgroup == Cfg::kConsumerWarpgroups) {
    // ---- producer ----
    warpgroup_registers_shrink<Cfg::kProducerRegisters>();
    if (threadIdx.x == Cfg::kConsumerWarpgroups * 128) {
      prefetch_tensor_map(&a_map);
      prefetch_tensor_map(&b_map);
      prefetch_tensor_map(&a_scale_map);
      if (kBScalePerRow) prefetch_tensor_map(&b_scale_map);
      constexpr uint32_t kStageBytes =
          Cfg::kTileABytes + Cfg::kTileBBytes + Cfg::kScaleVectorBytes * (kBScalePerRow ? 2 : 1);
      int stage = 0;
      uint32_t phase = 0;
      for (int32_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int32_t tile_m, tile_n;
        p.order.coords(tile, &tile_m, &tile_n);
        const int32_t m0 = tile_m * Cfg::kTileM, n0 = tile_n * Cfg::kTileN;
        for (int32_t kb = 0; kb < p.k_blocks; ++kb) {
          mbarrier_wait(&empty[stage], phase ^ 1);  // round 0 passes at once (fresh barrier)
          mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
          tma_load_2d(a_ring + stage * Cfg::kTileABytes, &a_map, &full[stage], kb * Cfg::kTileK, m0);
          tma_load_2d(b_ring + stage * Cfg::kTileBBytes, &b_map, &full[stage], kb * Cfg::kTileK, n0);
          tma_load_2d(a_scale_ring + stage * 128, &a_scale_map, &full[stage], m0, kb);
          if (kBScalePerRow) tma_load_2d(b_scale_ring + stage * 128, &b_scale_map, &full[stage], n0, kb);
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
  const int col_in_group = (lane % 4) * 2;                                 // + 8j, j = 0..15
  int stage = 0;
  uint32_t phase = 0;
  for (int32_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    int32_t tile_m, tile_n;
    p.order.coords(tile, &tile_m, &tile_n);
    const int32_t m0 = tile_m * Cfg::kTileM, n0 = tile_n * Cfg::kTileN;
    const float* b_block_scales = kBScalePerRow ? nullptr : p.b_block_scales + int64_t{tile_n} * p.b_block_scales_ld;

    float main_acc[64];
    float partial[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) main_acc[i] = 0.0f;

    for (int32_t kb = 0; kb < p.k_blocks; ++kb) {
      // Issued before the wait so its latency hides behind it.
      const float b_block_scale = kBScalePerRow ? 1.0f : __ldg(b_block_scales + kb);
      mbarrier_wait(&full[stage], phase);

      // Every shared-memory read of the stage happens before its release below.
      const float a_scale0 = a_scale_ring[stage * 128 + row_in_tile];
      const float a_scale1 = a_scale_ring[stage * 128 + row_in_tile + 8];
      float b_scale[32];
      if (kBScalePerRow) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float2 v = *reinterpret_cast<const float2*>(b_scale_ring + stage * 128 + 8 * j + col_in_group);
          b_scale[2 * j] = v.x, b_scale[2 * j + 1] = v.y;
        }
      }

      const uint64_t desc_a = smem_descriptor_kmajor_sw128(a_ring + stage * Cfg::kTileABytes + warpgroup * 64 * 128);
      const uint64_t desc_b = smem_descriptor_kmajor_sw128(b_ring + stage * Cfg::kTileBBytes);
#pragma unroll
      for (int i = 0; i < 64; ++i) fence_accumulator(partial[i]);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < Cfg::kTileK / Cfg::kWgmmaK; ++k) {
        // +32 bytes of K per slice = +2 in the descriptor's (address >> 4) field.
        wgmma_m64n128k32_e4m3(partial, desc_a + 2 * k, desc_b + 2 * k, k > 0);
      }
      wgmma_commit_group();
#pragma unroll
      for (int i = 0; i < 64; ++i) fence_accumulator(partial[i]);
      wgmma_wait_group<0>();
      if (lane == 0) mbarrier_arrive(&empty[stage]);  // the stage's reads are done: refill it
      if (++stage == Cfg::kStages) stage = 0, phase ^= 1;

      // Promotion: main += partial * (sa[row] * sb[col]), fp32.
      if (kBScalePerRow) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            main_acc[4 * j + c] = fmaf(partial[4 * j + c], a_scale0 * b_scale[2 * j + c], main_acc[4 * j + c]);
            main_acc[4 * j + 2 + c] = fmaf(partial[4 * j + 2 + c], a_scale1 * b_scale[2 * j + c], main_acc[4 * j + 2 + c]);
          }
        }
      } else {
        const float s0 = a_scale0 * b_block_scale, s1 = a_scale1 * b_block_scale;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          main_acc[4 * j + 0] = fmaf(partial[4 * j + 0], s0, main_acc[4 * j + 0]);
          main_acc[4 * j + 1] = fmaf(partial[4 * j + 1], s0, main_acc[4 * j + 1]);
          main_acc[4 * j + 2] = fmaf(partial[4 * j + 2], s1, main_acc[4 * j + 2]);
          main_acc[4 * j + 3] = fmaf(partial[4 * j + 3], s1, main_acc[4 * j + 3]);
        }
      }
    }

    // ---- epilogue: registers -> global, bounds-checked (rows >= M and columns >= N skipped) ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = int64_t{m0} + row_in_tile + 8 * h;
      if (row >= p.m) continue;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int32_t col = n0 + 8 * j + col_in_group;
        if (col < p.n)
          detail::store_pair(p, row, col, main_acc[4 * j + 2 * h], main_acc[4 * j + 2 * h + 1], col + 1 < p.n);
      }
    }
  }
#else
  // Built for an architecture without wgmma: the launcher never selects this image.
  __trap();
#endif
}

}  // namespace blockscale::gemm::sm90
