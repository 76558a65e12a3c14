// The FP8 blockwise kernel's host side, every mode's: the problem's arguments in Fp8BlockArgs, and
// plain switches that turn the input type, recipe and directions into the kernel's template
// arguments and launch it (quant/fp8_block_quantize_kernel.cuh). Each mode's file includes this
// and instantiates only its own kernels.
#pragma once

#include <algorithm>
#include <string>

#include "quant/fp8_block_quantize_kernel.cuh"  // defines: Fp8BlockArgs, fp8_block_quantize_kernel
#include "quant/launchers.h"

namespace blockscale::quant::detail {

// The dense kernels (every recipe, input type and direction) on prepared arguments:
// quant/fp8_block_quantize.cu, which instantiates them; the batched mode launches them too.
Status launch_fp8_block_tiles(const QuantizeProblem& p, const Fp8BlockArgs& a, cudaStream_t stream);

namespace {

// ---- Host side: pick the instantiation, size the grid, launch.

// Dense: tile_grid (one CTA per tile beyond two resident rounds). Grouped: every CTA scans the
// group ends before its first tile; a short scan takes the dense grid, a long one a persistent
// grid (quant/grouped_offsets.cuh: kShortScanGroups).
template <DType kIn, Format kRecipe, bool kRow, bool kCol, bool kGrouped, bool kGather>
Status launch(const Fp8BlockArgs& args, cudaStream_t stream) {
  auto* kernel = fp8_block_quantize_kernel<kIn, kRecipe, kRow, kCol, kGrouped, kGather>;
  // Grouped with a long scan: 8 bytes of offsets per expert past the tiles (the limit raised for
  // kMaxGroups once).
  const bool long_scan = kGrouped && args.num_groups > kShortScanGroups;
  const int tile_smem = Smem<kIn>::kStages * Smem<kIn>::kWords * 4;
  const int smem = tile_smem + (long_scan ? 8 * args.num_groups : 0);
  int resident = 0;
  BS_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, "fp8_block_quantize_kernel",
                                   &resident, kGrouped ? tile_smem + 8 * kMaxGroups : 0));
  const int64_t tiles = int64_t{args.tiles_r} * args.tiles_c;
  const int64_t grid = long_scan ? even_grid(tiles, resident) : tile_grid(tiles, resident);
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(args);
  return cuda_status(cudaGetLastError(), "fp8_block_quantize_kernel launch");
}

// kGather && !kGrouped: a gathered grouped run without a columnwise copy (dense tiles, rowwise only).
template <DType kIn, Format kRecipe, bool kGrouped, bool kGather>
Status pick_directions(Direction d, const Fp8BlockArgs& args, cudaStream_t stream) {
  switch (d) {
    case Direction::kRowwise:
      if constexpr (!kGrouped) return launch<kIn, kRecipe, true, false, false, kGather>(args, stream);
      break;  // grouped rowwise-only runs are dense runs
    case Direction::kColumnwise:
      if constexpr (kGrouped || !kGather) return launch<kIn, kRecipe, false, true, kGrouped, kGather>(args, stream);
      break;
    case Direction::kBoth:
      if constexpr (kGrouped || !kGather) return launch<kIn, kRecipe, true, true, kGrouped, kGather>(args, stream);
      break;
  }
  return Status::error("problem.directions: unknown value");
}

template <DType kIn, bool kGrouped, bool kGather>
Status pick_recipe(const QuantizeProblem& p, const Fp8BlockArgs& args, cudaStream_t stream) {
  if (p.recipe == Format::kFp8Block1x128)
    return pick_directions<kIn, Format::kFp8Block1x128, kGrouped, kGather>(p.directions, args, stream);
  if constexpr (!kGrouped && !kGather) {
    if (p.recipe == Format::kFp8Block128x128)
      return pick_directions<kIn, Format::kFp8Block128x128, false, false>(p.directions, args, stream);
  }
  return Status::error("problem.recipe: not an FP8 blockwise recipe the kernel implements");
}

template <bool kGrouped, bool kGather = false>
Status pick_input(const QuantizeProblem& p, const Fp8BlockArgs& a, cudaStream_t stream) {
  switch (p.input_type) {
    case DType::kBf16: return pick_recipe<DType::kBf16, kGrouped, kGather>(p, a, stream);
    case DType::kF16: return pick_recipe<DType::kF16, kGrouped, kGather>(p, a, stream);
    case DType::kF32: return pick_recipe<DType::kF32, kGrouped, kGather>(p, a, stream);
    default: break;
  }
  return Status::error("problem.input_type: unknown value");
}

bool is_aligned(const void* ptr, int64_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }

// The widest store (16, 8 or 1 bytes) for rows of `row_len` codes starting at `ptr`.
int store_align(const void* ptr, int64_t row_len) {
  for (int n : {16, 8})
    if (is_aligned(ptr, n) && row_len % n == 0) return n;
  return 1;
}

// The kernel's arguments; col_ld: the columnwise copy's row length (rows, or the grouped capacity).
Status make_args(const QuantizeProblem& p, const void* x, const QuantizeOutputs& out, int64_t col_ld,
                 Fp8BlockArgs* args) {
  const bool row = p.directions != Direction::kColumnwise;
  const bool col = p.directions != Direction::kRowwise;
  const int64_t esize = static_cast<int64_t>(formats::dtype_size(p.input_type));
  Fp8BlockArgs& a = *args;
  a = Fp8BlockArgs{};
  a.x = x;
  a.rows = p.rows, a.cols = p.cols, a.ld = p.ld;
  a.row_codes = row ? out.rowwise_data : nullptr;
  a.row_scales = row ? static_cast<float*>(out.rowwise_scales) : nullptr;
  a.col_codes = col ? out.columnwise_data : nullptr;
  a.col_scales = col ? static_cast<float*>(out.columnwise_scales) : nullptr;
  a.col_ld = col_ld;
  a.amax = out.amax;
  a.nonfinite = out.nonfinite;
  const int64_t tiles_r = (col_ld + kDim - 1) / kDim, tiles_c = (p.cols + kDim - 1) / kDim;
  if (tiles_r * tiles_c > (int64_t{1} << 30))  // tile indices and their grid strides stay in int
    return Status::error("problem: " + std::to_string(p.rows) + " x " + std::to_string(p.cols) +
                         " has more 128x128 tiles than the FP8 blockwise kernel indexes (2^30)");
  a.tiles_r = static_cast<int>(tiles_r), a.tiles_c = static_cast<int>(tiles_c);
  a.batch_tiles_r = a.tiles_r;
  a.batch_rows = p.rows;
  a.pow2 = p.pow2_scales;
  a.async_load = is_aligned(x, 16) && (p.ld * esize) % 16 == 0;
  a.row_align = row ? store_align(out.rowwise_data, p.cols) : 16;
  a.col_align = col ? store_align(out.columnwise_data, col_ld) : 16;
  return Status::ok();
}

}  // namespace
}  // namespace blockscale::quant::detail
