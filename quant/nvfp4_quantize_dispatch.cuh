// The NVFP4 kernel's host side, every mode's: the problem's parameters in Nvfp4Params, the amax
// pass when the amax is measured, and plain switches that turn the input type, directions and
// options (2D, SR, RHT) into the kernel's template arguments and launch it
// (quant/nvfp4_quantize_kernel.cuh). Each mode's file includes this and instantiates only its own
// kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "quant/launchers.h"
#include "quant/nvfp4_amax.h"  // defines: launch_nvfp4_amax, Nvfp4AmaxGroups
#include "quant/nvfp4_quantize_kernel.cuh"  // defines: nvfp4_quantize_kernel

namespace blockscale::quant::detail {
namespace {

bool aligned(const void* ptr, int64_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }

// Dynamic shared memory of the grouped mode past the tiles: the expert ends and padded ends, and
// two tiles' segments.
int grouped_smem(int num_groups) { return 8 * num_groups + 2 * 8 * static_cast<int>(sizeof(Segment)); }

template <DType kIn, bool kRow, bool kCol, bool kRht, bool k2D, bool kSr, bool kGrouped = false>
Status launch_quantize(const Nvfp4Params& params, cudaStream_t stream) {
  auto* kernel = nvfp4_quantize_kernel<kIn, kRow, kCol, kRht, k2D, kSr, kGrouped>;
  const int tile_smem = TileShape<kIn>::kStages * TileShape<kIn>::kWords * 4;
  const int smem = tile_smem + (kGrouped ? grouped_smem(params.num_groups) : 0);
  int resident = 0;
  BS_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, "nvfp4_quantize_kernel",
                                   &resident, kGrouped ? tile_smem + grouped_smem(kMaxGroups) : 0));
  // Persistent: each CTA builds its encode tables (and, with a measured amax, reduces the amax
  // pass's partial maxima; grouped: scans the group ends) once. One CTA per tile
  // (detail::tile_grid) measured slower here on an H200: row+col RHT given 55.0% -> 50.6% of copy
  // (docs/performance.md).
  const int64_t grid = even_grid(int64_t{params.row_tiles} * params.col_tiles, resident);
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(params);
  return cuda_status(cudaGetLastError(), "nvfp4_quantize_kernel launch");
}

template <DType kIn, bool kRow, bool kCol>
Status dispatch_options(const QuantizeProblem& p, const Nvfp4Params& params, cudaStream_t s) {
  const bool rht = kCol && p.hadamard_columnwise;
  if (p.nvfp4_2d)
    return p.stochastic_rounding ? launch_quantize<kIn, kRow, kCol, false, true, true>(params, s)
                                 : launch_quantize<kIn, kRow, kCol, false, true, false>(params, s);
  if (rht) {
    if constexpr (kCol)
      return p.stochastic_rounding ? launch_quantize<kIn, kRow, kCol, true, false, true>(params, s)
                                   : launch_quantize<kIn, kRow, kCol, true, false, false>(params, s);
  }
  return p.stochastic_rounding ? launch_quantize<kIn, kRow, kCol, false, false, true>(params, s)
                               : launch_quantize<kIn, kRow, kCol, false, false, false>(params, s);
}

template <DType kIn>
Status dispatch_directions(const QuantizeProblem& p, const QuantizeOutputs& out, Nvfp4Params* params,
                           cudaStream_t s) {
  if (params->measure) {
    // The plain amax is needed by the rowwise copy, the un-transformed columnwise one and outputs.amax.
    const bool rht = p.hadamard_columnwise;
    const bool plain = p.directions != Direction::kColumnwise || !rht || out.amax != nullptr;
    BS_RETURN_IF_ERROR(launch_nvfp4_amax(p, params->x, params->vec_load, plain, rht,
                                         const_cast<uint32_t*>(params->partials), &params->n_partials, s));
  }
  switch (p.directions) {
    case Direction::kRowwise: return dispatch_options<kIn, true, false>(p, *params, s);
    case Direction::kColumnwise: return dispatch_options<kIn, false, true>(p, *params, s);
    case Direction::kBoth: return dispatch_options<kIn, true, true>(p, *params, s);
  }
  return Status::error("problem.directions: unknown value");
}

// Grouped with a columnwise copy (1D blocks): the amax pass walks the padded segments when the RHT
// copy needs its amax.
template <DType kIn>
Status dispatch_grouped(const GroupedQuantizeProblem& gp, const QuantizeOutputs& out, Nvfp4Params* params,
                        cudaStream_t s) {
  const QuantizeProblem& p = gp.dense;
  const bool rht = p.hadamard_columnwise;
  if (params->measure) {
    const bool plain = p.directions != Direction::kColumnwise || !rht || out.amax != nullptr;
    const Nvfp4AmaxGroups groups{params->group_ends, params->num_groups, params->tile_rows};
    BS_RETURN_IF_ERROR(launch_nvfp4_amax(p, params->x, params->vec_load, plain, rht,
                                         const_cast<uint32_t*>(params->partials), &params->n_partials, s, &groups));
  }
  const bool sr = p.stochastic_rounding;
  if (p.directions == Direction::kBoth) {
    if (rht) return sr ? launch_quantize<kIn, true, true, true, false, true, true>(*params, s)
                       : launch_quantize<kIn, true, true, true, false, false, true>(*params, s);
    return sr ? launch_quantize<kIn, true, true, false, false, true, true>(*params, s)
              : launch_quantize<kIn, true, true, false, false, false, true>(*params, s);
  }
  if (rht) return sr ? launch_quantize<kIn, false, true, true, false, true, true>(*params, s)
                     : launch_quantize<kIn, false, true, true, false, false, true>(*params, s);
  return sr ? launch_quantize<kIn, false, true, false, false, true, true>(*params, s)
            : launch_quantize<kIn, false, true, false, false, false, true>(*params, s);
}

// The parameters both modes share. tile_rows: the rows the tiles walk, = p.rows (dense) or the
// capacity (grouped with a columnwise copy: the columnwise copy's row count).
Nvfp4Params make_params(const QuantizeProblem& p, const void* x, const float* given_row, const float* given_col,
                        const QuantizeOutputs& out, void* workspace, int64_t tile_rows) {
  const bool row = p.directions != Direction::kColumnwise;
  const bool col = p.directions != Direction::kRowwise;
  const int64_t esize = static_cast<int64_t>(formats::dtype_size(p.input_type));
  Nvfp4Params params{};
  params.x = x;
  params.rows = p.rows, params.cols = p.cols, params.ld = p.ld;
  params.row_data = row ? out.rowwise_data : nullptr;
  params.row_scales = row ? static_cast<uint8_t*>(out.rowwise_scales) : nullptr;
  params.row_scale_dec = row ? out.rowwise_scale_dec : nullptr;
  params.col_data = col ? out.columnwise_data : nullptr;
  params.col_scales = col ? static_cast<uint8_t*>(out.columnwise_scales) : nullptr;
  params.col_scale_dec = col ? out.columnwise_scale_dec : nullptr;
  params.amax = out.amax;
  params.col_amax = out.columnwise_amax;
  params.nonfinite = out.nonfinite;
  params.measure = p.tensor_amax == TensorAmax::kMeasure;
  params.given_row_amax = given_row;
  params.given_col_amax = given_col;
  params.partials = static_cast<const uint32_t*>(workspace);
  params.track_amax = !params.measure && (out.amax != nullptr || out.columnwise_amax != nullptr);
  params.sr_seed = p.sr_seed, params.sr_offset = p.sr_offset;
  params.row_tiles = static_cast<int>((tile_rows + kTile - 1) / kTile);
  params.col_tiles = static_cast<int>((p.cols + kTile - 1) / kTile);
  params.last_tile_rows = static_cast<int>(tile_rows - int64_t{params.row_tiles - 1} * kTile);
  params.last_tile_cols = static_cast<int>(p.cols - int64_t{params.col_tiles - 1} * kTile);
  params.whole_row_tiles = params.row_tiles - (params.last_tile_rows < kTile ? 1 : 0);
  params.whole_col_tiles = params.col_tiles - (params.last_tile_cols < kTile ? 1 : 0);
  params.row_pitch = (p.cols + 1) / 2;
  params.col_pitch = (tile_rows + 1) / 2;
  params.row_chunk_cols = (p.cols + 63) / 64;
  params.col_chunk_cols = (tile_rows + 63) / 64;
  params.vec_load = aligned(x, 16) && (p.ld * esize) % 16 == 0;
  params.row_vec_store = !row || (aligned(out.rowwise_data, 8) && p.cols % 16 == 0);
  params.col_vec_store = !col || (aligned(out.columnwise_data, 8) && tile_rows % 16 == 0);
  params.scale_vec_store = (!row || aligned(out.rowwise_scales, 16)) && (!col || aligned(out.columnwise_scales, 16));
  params.tile_rows = tile_rows;
  params.row_scale_word_store = !row || aligned(out.rowwise_scales, 4);
  return params;
}

}  // namespace
}  // namespace blockscale::quant::detail
