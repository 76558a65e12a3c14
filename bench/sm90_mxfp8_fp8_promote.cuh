// Option (a) of the MXFP8 GEMM on Hopper, kept in bench/ to measure it against the shipped
// option (b) (gemm/sm90/sm90_block_scaled_gemm.cuh: exact conversion to bf16, bf16 wgmma).
//
//   operation  : D = alpha * sum_kb (sa[m,kb] * sb[n,kb]) * (sum_{k in kb} a[m,k] b[n,k]), kb = the
//                32-element K blocks (MXFP8 E4M3 x E4M3, E8M0 scales in the swizzled 128x4 layout)
//   instruction: wgmma.mma_async m64n128k32 .f32.e4m3.e4m3 from shared memory (QGMMA), one per
//                32 of K into a fresh partial accumulator, then promoted in fp32 registers:
//                main += partial * (sa[row] * sb[col])
//   not exact  : Hopper's FP8 tensor core adds the 32 products of a k32 step in an accumulator
//                narrower than fp32 (the bench measures the error against fp64); option (b) is exact.
//   limits     : K a multiple of 128; scales assumed finite and normal (E8M0 codes 1..254, the
//                bench's 2^-4..2^4): code 0 reads as 0 and 255 as Inf. It is a speed experiment.
//
// Structure: as gemm/sm90/sm90_fp8_gemm.cuh's 128 x 128 kernel (a TMA producer warpgroup, a
// 6-stage ring of 128-of-K stages, two consumer warpgroups of 64 rows, persistent tiles). Each
// stage also brings one 512-byte scale tile per operand (128 rows x 4 K blocks); a consumer reads
// its 2 row words and 32 column words (4 E8M0 bytes each) once per stage, then per k32 step issues
// one wgmma, waits for it, and promotes its 64 accumulators (per element one FMUL for the scale
// product and one FFMA). The promotion is ~2 instructions per output element per 32 of K, against
// option (b)'s conversion of ~1.5 instructions per input element per tile: that ratio is the
// comparison docs/performance.md records.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "gemm/common/tensor_map.h"
#include "gemm/common/tile_scheduler.h"
#include "gemm/launchers.h"
#include "gemm/sm90/sm90_block_scaled_launch.cuh"
#include "gemm/sm90/sm90_epilogue.cuh"
#include "gemm/sm90/sm90_ptx.cuh"

namespace bench::option_a {

namespace bg = blockscale::gemm;

struct Config {
  static constexpr int kTileM = 128, kTileN = 128, kTileK = 128, kStages = 6, kThreads = 384;
  static constexpr int kTileBytes = 128 * 128;  // A or B: 128 rows x 128 bytes of K
  static constexpr int kScaleBytes = 512;       // one swizzled scale tile: 128 rows x 4 blocks
  static constexpr int kStageBytes = 2 * kTileBytes + 2 * kScaleBytes;
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + 2 * kStages * 8;
  static_assert(kSmemBytes <= 227 * 1024, "sm_90 allows 227 KB of shared memory per CTA");
};

struct Params {
  int32_t m = 0, n = 0, k_stages = 0;
  bg::TileOrder order;
  bg::sm90::EpilogueParams epilogue;
};

// An E8M0 code in byte `j` of `word` as an fp32 power of two (codes 1..254; see the file comment).
__device__ __forceinline__ float e8m0_byte(uint32_t word, int j) {
  return __uint_as_float(__byte_perm(word, 0, 0x4440 | j) << 23);
}

// Offset of row r's word (its 4 K blocks) in a 512-byte swizzled scale tile.
__device__ __forceinline__ int scale_word_offset(int r) { return (r % 32) * 16 + (r / 32) * 4; }

__global__ void __launch_bounds__(Config::kThreads, 1)
    mxfp8_fp8_promote_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                             const __grid_constant__ CUtensorMap a_scale_map,
                             const __grid_constant__ CUtensorMap b_scale_map, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace bg::sm90;
  using Cfg = Config;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint8_t* a_ring = smem;
  uint8_t* b_ring = a_ring + Cfg::kStages * Cfg::kTileBytes;
  uint8_t* a_scale_ring = b_ring + Cfg::kStages * Cfg::kTileBytes;
  uint8_t* b_scale_ring = a_scale_ring + Cfg::kStages * Cfg::kScaleBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(b_scale_ring + Cfg::kStages * Cfg::kScaleBytes);
  uint64_t* empty = full + Cfg::kStages;

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], 8);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int32_t num_tiles = p.order.num_tiles();
  if (warpgroup == 2) {
    warpgroup_registers_shrink<40>();
    if (threadIdx.x == 256) {
      int stage = 0;
      uint32_t phase = 0;
      for (int32_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int32_t tile_m, tile_n;
        p.order.coords(tile, &tile_m, &tile_n);
        const int32_t m0 = tile_m * Cfg::kTileM, n0 = tile_n * Cfg::kTileN;
        for (int32_t kb = 0; kb < p.k_stages; ++kb) {
          mbarrier_wait(&empty[stage], phase ^ 1);
          mbarrier_arrive_expect_tx(&full[stage], Cfg::kStageBytes);
          tma_load_2d(a_ring + stage * Cfg::kTileBytes, &a_map, &full[stage], kb * Cfg::kTileK, m0);
          tma_load_2d(b_ring + stage * Cfg::kTileBytes, &b_map, &full[stage], kb * Cfg::kTileK, n0);
          tma_load_3d(a_scale_ring + stage * Cfg::kScaleBytes, &a_scale_map, &full[stage], 0, 2 * kb, m0 / 128);
          tma_load_3d(b_scale_ring + stage * Cfg::kScaleBytes, &b_scale_map, &full[stage], 0, 2 * kb, n0 / 128);
          if (++stage == Cfg::kStages) stage = 0, phase ^= 1;
        }
      }
    }
    return;
  }

  warpgroup_registers_grow<232>();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_in_group = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int row_in_tile = warpgroup * 64 + warp_in_group * 16 + lane / 4;  // and row_in_tile + 8
  const int col_in_group = (lane % 4) * 2;                                 // + 8j, + 1
  int stage = 0;
  uint32_t phase = 0;
  for (int32_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    int32_t tile_m, tile_n;
    p.order.coords(tile, &tile_m, &tile_n);
    const int32_t m0 = tile_m * Cfg::kTileM, n0 = tile_n * Cfg::kTileN;
    float main_acc[64], partial[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) main_acc[i] = 0.0f;

    for (int32_t kb = 0; kb < p.k_stages; ++kb) {
      mbarrier_wait_uniform(&full[stage], phase);
      const uint8_t* sa = a_scale_ring + stage * Cfg::kScaleBytes;
      const uint8_t* sb = b_scale_ring + stage * Cfg::kScaleBytes;
      const uint32_t a_word0 = *reinterpret_cast<const uint32_t*>(sa + scale_word_offset(row_in_tile));
      const uint32_t a_word1 = *reinterpret_cast<const uint32_t*>(sa + scale_word_offset(row_in_tile + 8));
      // Column 8j + col_in_group + c at [2j + c]; its word offset, (col_in_group + c) * 16 + 128 (j % 4)
      // + 4 (j / 4), is a register base plus a constant (no per-column address registers).
      const uint8_t* sb_thread = sb + col_in_group * 16;
      uint32_t b_words[32];
#pragma unroll
      for (int i = 0; i < 32; ++i)
        b_words[i] = *reinterpret_cast<const uint32_t*>(sb_thread + (i % 2) * 16 + 128 * ((i / 2) % 4) + 4 * (i / 8));
      const uint64_t desc_a = smem_descriptor_kmajor_sw128(a_ring + stage * Cfg::kTileBytes + warpgroup * 64 * 128);
      const uint64_t desc_b = smem_descriptor_kmajor_sw128(b_ring + stage * Cfg::kTileBytes);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int i = 0; i < 64; ++i) fence_accumulator(partial[i]);
        wgmma_fence();
        wgmma_e4m3<128>(partial, desc_a + 2 * k, desc_b + 2 * k, false);
        wgmma_commit_group();
#pragma unroll
        for (int i = 0; i < 64; ++i) fence_accumulator(partial[i]);
        wgmma_wait_group<0>();
        if (k == 3 && lane == 0) mbarrier_arrive(&empty[stage]);  // the stage's last read is done
        const float sa0 = e8m0_byte(a_word0, k), sa1 = e8m0_byte(a_word1, k);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float sbx = e8m0_byte(b_words[2 * j], k), sby = e8m0_byte(b_words[2 * j + 1], k);
          main_acc[4 * j + 0] = fmaf(partial[4 * j + 0], sa0 * sbx, main_acc[4 * j + 0]);
          main_acc[4 * j + 1] = fmaf(partial[4 * j + 1], sa0 * sby, main_acc[4 * j + 1]);
          main_acc[4 * j + 2] = fmaf(partial[4 * j + 2], sa1 * sbx, main_acc[4 * j + 2]);
          main_acc[4 * j + 3] = fmaf(partial[4 * j + 3], sa1 * sby, main_acc[4 * j + 3]);
        }
      }
      if (++stage == Cfg::kStages) stage = 0, phase ^= 1;
    }

    const int64_t row = int64_t{m0} + row_in_tile;
    const int rows = row >= p.m ? 0 : row + 8 >= p.m ? 1 : 2;
    store_fragment<16>(p.epilogue, p.epilogue.alpha, main_acc, row, rows, n0 + col_in_group, p.n);
  }
#else
  __trap();
#endif
}

// Runs option (a) for an MXFP8 E4M3 x E4M3 problem (gemm/gemm.h's arguments; K % 128 == 0).
inline blockscale::Status launch(const bg::GemmProblem& p, const bg::GemmArguments& args, cudaStream_t stream) {
  using namespace bg::detail;
  if (p.k % 128 != 0) return blockscale::Status::error("option (a): k must be a multiple of 128");
  const void* kernel = reinterpret_cast<const void*>(&mxfp8_fp8_promote_kernel);
  int sm_count = 0;
  BS_RETURN_IF_ERROR(prepare_kernel(kernel, Config::kSmemBytes, "mxfp8_fp8_promote_kernel", &sm_count));
  const auto codes = [](const uint8_t* data, int64_t rows, int64_t k) {
    return TensorMap2d{data, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(rows), static_cast<uint64_t>(k),
                       static_cast<uint64_t>(k), 128, 128, CU_TENSOR_MAP_SWIZZLE_128B};
  };
  using Fmt = bg::sm90::Mxfp8E4M3;
  CUtensorMap a_map, b_map, a_scale_map, b_scale_map;
  BS_RETURN_IF_ERROR(encode_tensor_map(codes(args.a_data, p.m, p.k), "a_data", &a_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(codes(args.b_data, p.n, p.k), "b_data", &b_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(scale_map<Fmt>(args.a_scales, p.m, p.k, 1), "a_scales", &a_scale_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(scale_map<Fmt>(args.b_scales, p.n, p.k, 1), "b_scales", &b_scale_map));
  Params params;
  params.m = static_cast<int32_t>(p.m);
  params.n = static_cast<int32_t>(p.n);
  params.k_stages = static_cast<int32_t>(p.k / 128);
  params.order.tiles_m = static_cast<int32_t>((p.m + 127) / 128);
  params.order.tiles_n = static_cast<int32_t>((p.n + 127) / 128);
  params.order.group_m = 8;
  params.epilogue = bg::sm90::make_epilogue(p, args);
  const int64_t tiles = int64_t{params.order.tiles_m} * params.order.tiles_n;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tiles, sm_count)));
  mxfp8_fp8_promote_kernel<<<grid, Config::kThreads, Config::kSmemBytes, stream>>>(a_map, b_map, a_scale_map,
                                                                                   b_scale_map, params);
  return cuda_status(cudaGetLastError(), "mxfp8_fp8_promote_kernel launch");
}

}  // namespace bench::option_a
