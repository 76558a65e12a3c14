// Host side of the sm_90a FP8 blockwise GEMM: tensor maps for the operands and scale vectors,
// the persistent grid, the launch of the tile width set_sm90_fp8_tile chose (launchers.h).
// Compiled for sm_90a only (gemm/CMakeLists.txt).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "formats/scale_layout.h"
#include "gemm/common/tensor_map.h"
#include "gemm/launchers.h"
#include "gemm/sm90/sm90_fp8_block_gemm.cuh"

namespace blockscale::gemm::detail {
namespace {

using formats::Recipe;
using sm90::Fp8BlockGemmConfig;
using sm90::Fp8BlockGemmParams;

std::atomic<Sm90Fp8Tile> g_tile{Sm90Fp8Tile::kAuto};
std::atomic<bool> g_cluster_kernel{true};

template <int kTileN, GroupMode kMode, bool kStagedD = false>
constexpr int smem_bytes() {
  using Cfg = Fp8BlockGemmConfig<kTileN, kStagedD>;
  return kMode != GroupMode::kDense ? Cfg::kGroupedSmemBytes : Cfg::kSmemBytes;
}

template <int kTileN, bool kBScalePerRow, GroupMode kMode = GroupMode::kDense, bool kStagedD = false>
Status prepare(int* sm_count) {
  return prepare_kernel(
      reinterpret_cast<const void*>(&sm90::sm90_fp8_block_gemm_kernel<kTileN, kBScalePerRow, kMode, kStagedD>),
      smem_bytes<kTileN, kMode, kStagedD>(), "sm90_fp8_block_gemm_kernel", sm_count);
}

// The K-grouped wgrad stores D through TMA (the staged kernel) when D is fp32, C is not read and
// D meets TMA's rules: a 16-byte aligned base and row stride.
bool staged_d(const GemmProblem& p, const GemmArguments& args) {
  return p.beta == 0.0f && p.d_type == MatrixType::kFp32 && p.ldd % 4 == 0 &&
         reinterpret_cast<uintptr_t>(args.d) % 16 == 0;
}

template <int kTileN, bool kBScalePerRow, GroupMode kMode, bool kStagedD = false>
Status launch(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream, const Grouping* grouping) {
  using Cfg = Fp8BlockGemmConfig<kTileN, kStagedD>;
  constexpr bool kMGrouped = kMode == GroupMode::kM;
  int sm_count = 0;
  BS_RETURN_IF_ERROR((prepare<kTileN, kBScalePerRow, kMode, kStagedD>(&sm_count)));
  const int64_t b_rows = kMGrouped ? p.n * grouping->num_groups : p.n;  // every expert's B, back to back

  const int64_t k_blocks = p.k / 128;
  // Operand tiles: 128 (A) or kTileN (B) rows x 128 bytes of K, 128-byte swizzle (the wgmma
  // K-major layout). Rows past M or N arrive as zeros.
  TensorMap2d a{args.a_data, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(p.m), static_cast<uint64_t>(p.k),
                static_cast<uint64_t>(p.k), Cfg::kTileM, Cfg::kTileK, CU_TENSOR_MAP_SWIZZLE_128B};
  TensorMap2d b{args.b_data, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(b_rows), static_cast<uint64_t>(p.k),
                static_cast<uint64_t>(p.k), Cfg::kTileN, Cfg::kTileK, CU_TENSOR_MAP_SWIZZLE_128B};
  // VEC128 scales: k_blocks rows of round_up(rows, 4) floats; a box is one K block's scales of
  // the tile's 128 rows (A) or kTileN columns (B).
  const int64_t a_scale_ld = formats::vec128_scale_ld(p.m);
  TensorMap2d a_scale{args.a_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(k_blocks),
                      static_cast<uint64_t>(a_scale_ld), static_cast<uint64_t>(a_scale_ld * 4), 1, Cfg::kScaleABoxFloats,
                      CU_TENSOR_MAP_SWIZZLE_NONE};
  TensorMap2d b_scale = a_scale;  // unused by the 128x128 kernel
  if (kBScalePerRow) {
    const int64_t b_scale_ld = formats::vec128_scale_ld(p.n);
    b_scale = {args.b_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(k_blocks),
               static_cast<uint64_t>(b_scale_ld), static_cast<uint64_t>(b_scale_ld * 4), 1, Cfg::kTileN,
               CU_TENSOR_MAP_SWIZZLE_NONE};
  }
  CUtensorMap a_map, b_map, a_scale_map, b_scale_map;
  BS_RETURN_IF_ERROR(encode_tensor_map(a, "a_data", &a_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(b, "b_data", &b_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(a_scale, "a_scales", &a_scale_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(b_scale, "b_scales", &b_scale_map));
  CUtensorMap d_map = a_map;  // unused unless staged
  if (kStagedD) {
    // D of expert g is rows g * m .. g * m + m - 1: a 3-D view (columns, rows, experts), so TMA
    // clips a tile's box at the expert's last row as well as at N. Boxes of 64 rows x 32 floats.
    TensorMap3d d{args.d, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                  {static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.m), static_cast<uint64_t>(grouping->num_groups)},
                  {static_cast<uint64_t>(p.ldd * 4), static_cast<uint64_t>(p.m * p.ldd * 4)},
                  {32, 64, 1},
                  CU_TENSOR_MAP_SWIZZLE_128B};
    BS_RETURN_IF_ERROR(encode_tensor_map(d, "d", &d_map));
  }

  Fp8BlockGemmParams params;
  params.m = static_cast<int32_t>(p.m);
  params.n = static_cast<int32_t>(p.n);
  params.k_blocks = static_cast<int32_t>(k_blocks);
  params.order.tiles_m = static_cast<int32_t>((p.m + Cfg::kTileM - 1) / Cfg::kTileM);
  params.order.tiles_n = static_cast<int32_t>((p.n + Cfg::kTileN - 1) / Cfg::kTileN);
  params.order.group_m = 8;
  params.b_block_scales = kBScalePerRow ? nullptr : static_cast<const float*>(args.b_scales);
  params.b_block_scales_ld = static_cast<int32_t>(formats::blk128_scale_ld(k_blocks));
  params.b_scale_blocks = static_cast<int32_t>((p.n + 127) / 128);
  params.epilogue = sm90::make_epilogue(p, args);
  params.k_limit = static_cast<int32_t>(p.k);
  if (kMode != GroupMode::kDense) params.groups = {grouping->group_ends, grouping->num_groups};
  if (kMGrouped) params.b_block_scales_group_stride = grouping->b_scale_stride_bytes / 4;

  // M-grouped: the tile count lives on the device, so one CTA per SM (the extra ones exit at once).
  const int64_t groups = kMode == GroupMode::kK ? grouping->num_groups : 1;
  const int64_t tiles = kMGrouped ? sm_count : groups * params.order.tiles_m * params.order.tiles_n;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tiles, sm_count)));
  sm90::sm90_fp8_block_gemm_kernel<kTileN, kBScalePerRow, kMode, kStagedD>
      <<<grid, Cfg::kThreads, smem_bytes<kTileN, kMode, kStagedD>(), stream>>>(a_map, b_map, a_scale_map, b_scale_map,
                                                                              params, d_map);
  return cuda_status(cudaGetLastError(), "sm90_fp8_block_gemm_kernel launch");
}

}  // namespace

void set_sm90_fp8_tile(Sm90Fp8Tile tile) { g_tile.store(tile); }
void set_sm90_fp8_cluster_kernel(bool enabled) { g_cluster_kernel.store(enabled); }
bool sm90_fp8_cluster_kernel() { return g_cluster_kernel.load(); }
Sm90Fp8Tile sm90_fp8_tile() { return g_tile.load(); }

// Every image, so a device it cannot load on is refused before any launch.
Status sm90_fp8_block_gemm_loadable() {
  int sms = 0;
  BS_RETURN_IF_ERROR((prepare<128, false>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, false>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, true>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, GroupMode::kM>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, false, GroupMode::kM>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, GroupMode::kK>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, GroupMode::kK, true>(&sms)));
  return sm90_fp8_gemm_loadable();
}

Status launch_sm90_fp8_block_gemm(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream,
                                  const Grouping* grouping) {
  const bool b_scale_per_row = p.b_recipe == Recipe::kFp8Block1x128;
  Sm90Fp8Tile tile = sm90_fp8_tile();
  if (sm90_fp8_cluster_kernel() && sm90_fp8_gemm_applies(p, args, grouping))
    return launch_sm90_fp8_gemm(p, args, stream, tile, grouping);  // its own width rule
  if (tile == Sm90Fp8Tile::kAuto) {
    int sms = 0;
    BS_RETURN_IF_ERROR((prepare<192, false>(&sms)));
    // Grouped: per-expert tile rows are not known here; the total rows bound them from below.
    const int64_t wide_tiles = (p.m + 127) / 128 * ((p.n + 191) / 192);
    tile = !b_scale_per_row && wide_tiles >= 3 * int64_t{sms} ? Sm90Fp8Tile::kN192 : Sm90Fp8Tile::kN128;
  }
  // gemm/grouped.cpp checks the recipes: 128x128 B when M-grouped, 1x128 B when K-grouped.
  if (grouping != nullptr && grouping->mode == GroupMode::kK) {  // 128-wide, as dense wgrad
    return staged_d(p, args) ? launch<128, true, GroupMode::kK, true>(p, args, stream, grouping)
                             : launch<128, true, GroupMode::kK>(p, args, stream, grouping);
  }
  if (grouping != nullptr) {
    return tile == Sm90Fp8Tile::kN192 ? launch<192, false, GroupMode::kM>(p, args, stream, grouping)
                                      : launch<128, false, GroupMode::kM>(p, args, stream, grouping);
  }
  constexpr GroupMode kDense = GroupMode::kDense;
  if (tile == Sm90Fp8Tile::kN192)
    return b_scale_per_row ? launch<192, true, kDense>(p, args, stream, nullptr)
                           : launch<192, false, kDense>(p, args, stream, nullptr);
  return b_scale_per_row ? launch<128, true, kDense>(p, args, stream, nullptr)
                         : launch<128, false, kDense>(p, args, stream, nullptr);
}

}  // namespace blockscale::gemm::detail
