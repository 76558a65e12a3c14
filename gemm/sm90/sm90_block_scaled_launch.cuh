// Host side of the sm_90a block-scaled GEMM for one (A format, B format) pair: tensor maps for
// the codes and the swizzled scale tiles, the persistent grid, the launch. Instantiated per pair
// in sources generated from sm90_block_scaled_pair.cu.in (gemm/CMakeLists.txt); sm90_block_scaled_gemm.cu
// dispatches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "formats/recipe.h"
#include "gemm/common/tensor_map.h"
#include "gemm/launchers.h"
#include "gemm/sm90/sm90_block_scaled_gemm.cuh"

namespace blockscale::gemm::detail {

template <class FmtA, class FmtB, GroupMode kMode>
Status prepare_block_scaled(int* sm_count) {
  return prepare_kernel(reinterpret_cast<const void*>(&sm90::sm90_block_scaled_gemm_kernel<FmtA, FmtB, kMode>),
                        sm90::BlockScaledGemmConfig<FmtA, FmtB, kMode>::kSmemBytes,
                        "sm90_block_scaled_gemm_kernel", sm_count);
}

// An operand's codes: rows x (k or k / 2) bytes, boxes of box_rows x one stage's bytes, swizzled
// as the kernel reads them (128-byte rows: 128-byte swizzle; 64-byte rows: 64-byte swizzle).
template <class Fmt>
TensorMap2d code_map(const uint8_t* data, int64_t rows, int64_t k, uint32_t box_rows) {
  const uint64_t row_bytes = static_cast<uint64_t>(Fmt::kFp4 ? k / 2 : k);
  return {data, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(rows), row_bytes, row_bytes, box_rows,
          static_cast<uint32_t>(Fmt::kRowBytes), Fmt::kFp4 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B};
}

// An operand's swizzled scales viewed as [row tiles][2 x column tiles][256 bytes] (a 512-byte
// tile is two 256-byte rows: TMA boxes hold at most 256 elements per dimension); a box is one
// stage's column tiles of box_row_tiles row tiles. Tiles past the edges read as zero.
template <class Fmt>
TensorMap3d scale_map(const void* scales, int64_t rows, int64_t k, uint32_t box_row_tiles) {
  const uint64_t col_tiles = static_cast<uint64_t>((k / Fmt::kBlock + 3) / 4);
  TensorMap3d t;
  t.base = scales;
  t.dims[0] = 256, t.dims[1] = 2 * col_tiles, t.dims[2] = static_cast<uint64_t>((rows + 127) / 128);
  t.strides[0] = 256, t.strides[1] = col_tiles * 512;
  t.box[0] = 256, t.box[1] = 2 * Fmt::kScaleTilesPerStage, t.box[2] = box_row_tiles;
  return t;
}

// grouping: null for a dense problem. M-grouped: B holds num_groups experts of p.n rows, their
// swizzled scales back to back (each padded to 128-row tiles, so the scale map spans
// num_groups * ceil(n / 128) row tiles). K-grouped: one A and one B; the groups split K.
template <class FmtA, class FmtB, GroupMode kMode>
Status launch_block_scaled(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream,
                           const Grouping* grouping) {
  using Cfg = sm90::BlockScaledGemmConfig<FmtA, FmtB, kMode>;
  int sm_count = 0;
  BS_RETURN_IF_ERROR((prepare_block_scaled<FmtA, FmtB, kMode>(&sm_count)));
  constexpr bool kMGrouped = kMode == GroupMode::kM;
  const int64_t groups = kMGrouped ? grouping->num_groups : 1;  // experts in B
  const int64_t b_row_tiles = (p.n + 127) / 128;
  CUtensorMap a_map, b_map, a_scale_map, b_scale_map;
  BS_RETURN_IF_ERROR(encode_tensor_map(code_map<FmtA>(args.a_data, p.m, p.k, Cfg::kTileM), "a_data", &a_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(code_map<FmtB>(args.b_data, groups * p.n, p.k, Cfg::kTileN), "b_data", &b_map));
  BS_RETURN_IF_ERROR(
      encode_tensor_map(scale_map<FmtA>(args.a_scales, p.m, p.k, Cfg::kARowTiles), "a_scales", &a_scale_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(scale_map<FmtB>(args.b_scales, groups * b_row_tiles * 128, p.k, Cfg::kTileN / 128),
                                       "b_scales", &b_scale_map));

  sm90::BlockScaledGemmParams params;
  params.m = static_cast<int32_t>(p.m);
  params.n = static_cast<int32_t>(p.n);
  params.k_stages = static_cast<int32_t>((p.k + Cfg::kTileK - 1) / Cfg::kTileK);
  params.order.tiles_m = static_cast<int32_t>((p.m + Cfg::kTileM - 1) / Cfg::kTileM);
  params.order.tiles_n = static_cast<int32_t>((p.n + Cfg::kTileN - 1) / Cfg::kTileN);
  params.order.group_m = 8;
  params.a_scale_dec = p.a_recipe == formats::Format::kNvfp4 ? args.a_scale_dec : nullptr;
  params.b_scale_dec = p.b_recipe == formats::Format::kNvfp4 ? args.b_scale_dec : nullptr;
  params.epilogue = sm90::make_epilogue(p, args);
  params.k_limit = static_cast<int32_t>(p.k);
  if (kMode != GroupMode::kDense) params.groups = {grouping->group_ends, grouping->num_groups};
  if (kMGrouped) {
    params.b_row_tiles = static_cast<int32_t>(b_row_tiles);
    params.b_scale_dec = p.b_recipe == formats::Format::kNvfp4 ? grouping->b_scale_dec : nullptr;
  }

  // M-grouped: the tile count lives on the device, so one CTA per SM (the extra ones exit at once).
  const int64_t tile_groups = kMode == GroupMode::kK ? grouping->num_groups : 1;
  const int64_t tiles = kMGrouped ? sm_count : tile_groups * params.order.tiles_m * params.order.tiles_n;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tiles, sm_count)));
  sm90::sm90_block_scaled_gemm_kernel<FmtA, FmtB, kMode><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
      a_map, b_map, a_scale_map, b_scale_map, params);
  return cuda_status(cudaGetLastError(), "sm90_block_scaled_gemm_kernel launch");
}

// The pairs, each instantiated in its generated .cu file (explicit instantiation declarations:
// other translation units do not compile the kernels again).
#define BLOCKSCALE_SM90_BLOCK_SCALED_PAIRS(X)                                                     \
  X(sm90::Mxfp8E4M3, sm90::Mxfp8E4M3) X(sm90::Mxfp8E4M3, sm90::Mxfp8E5M2) X(sm90::Mxfp8E5M2, sm90::Mxfp8E4M3) \
  X(sm90::Mxfp8E5M2, sm90::Mxfp8E5M2) X(sm90::Mxfp8E4M3, sm90::Mxfp4) X(sm90::Mxfp8E5M2, sm90::Mxfp4)        \
  X(sm90::Mxfp8E4M3, sm90::Nvfp4) X(sm90::Mxfp8E5M2, sm90::Nvfp4) X(sm90::Mxfp4, sm90::Mxfp4)                \
  X(sm90::Nvfp4, sm90::Nvfp4)

#define BLOCKSCALE_DECLARE_PAIR_MODE(A, B, MODE)                                                          \
  extern template Status launch_block_scaled<A, B, MODE>(const GemmProblem&, const GemmArguments&, cudaStream_t, \
                                                         const Grouping*);                                 \
  extern template Status prepare_block_scaled<A, B, MODE>(int*);
#define BLOCKSCALE_DECLARE_PAIR(A, B)                     \
  BLOCKSCALE_DECLARE_PAIR_MODE(A, B, GroupMode::kDense) \
  BLOCKSCALE_DECLARE_PAIR_MODE(A, B, GroupMode::kM)     \
  BLOCKSCALE_DECLARE_PAIR_MODE(A, B, GroupMode::kK)
BLOCKSCALE_SM90_BLOCK_SCALED_PAIRS(BLOCKSCALE_DECLARE_PAIR)
#undef BLOCKSCALE_DECLARE_PAIR
#undef BLOCKSCALE_DECLARE_PAIR_MODE

}  // namespace blockscale::gemm::detail
