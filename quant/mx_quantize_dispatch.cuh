// The MX kernel's host side, every mode's: the problem's parameters in MxParams, and plain switches
// that turn the input type, recipe and directions into the kernel's template
// arguments, then check for a device image or launch (quant/mx_quantize_kernel.cuh). Each mode's
// file includes this and instantiates only its own kernels.
#pragma once

#include <algorithm>
#include <string>

#include "quant/launchers.h"
#include "quant/mx_quantize_kernel.cuh"  // defines: MxParams, mx_quantize_kernel

namespace blockscale::quant::detail {

// The dense kernels (every recipe, input type and direction) on prepared parameters:
// quant/mx_quantize.cu, which instantiates them; the batched mode launches them too.
Status launch_mx_tiles(const QuantizeProblem& p, const MxParams& params, cudaStream_t stream);

namespace {

// ---- Dispatch: one plain switch per template argument; the leaf checks or launches.
enum class Action { kCheck, kLaunch };

bool aligned(const void* ptr, int64_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }

// E2M1 has one (software) encoder; the FP8 recipes run the hardware conversion (quant/device_common.cuh).
template <DType kIn, Format kRecipe, bool kRow, bool kCol, bool kGrouped, bool kGather>
Status leaf(Action action, const MxParams& params, cudaStream_t stream) {
  constexpr ElementEncoder kEnc = kRecipe == Format::kMxfp4 ? ElementEncoder::kSoftware : kDefaultEncoder;
  auto* kernel = mx_quantize_kernel<kIn, kRecipe, kRow, kCol, kEnc, kGrouped, kGather>;
  int dev = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  if (action == Action::kCheck) {
    cudaFuncAttributes attr;
    const cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
    if (err == cudaSuccess) return Status::ok();
    (void)cudaGetLastError();  // clear the (non-sticky) error
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return Status::error("device " + std::to_string(dev) + " (sm_" + std::to_string(major) +
                         std::to_string(minor) + "): no MX quantize kernel for it (" + cudaGetErrorString(err) +
                         "); blockscale_quant is built for BLOCKSCALE_CUDA_ARCHS");
  }
  // Grouped with a long scan: the expert offsets past the tiles.
  const bool long_scan = kGrouped && params.num_groups > kShortScanGroups;
  const int smem = TileShape<kIn>::kStages * TileShape<kIn>::kWords * 4 + (long_scan ? 8 * params.num_groups : 0);
  if (smem > 48 * 1024) {
    BS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                                   "cudaFuncSetAttribute"));
  }
  int sms = 0, per_sm = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                                 "cudaDeviceGetAttribute"));
  BS_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem),
                                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
  const int64_t tiles = int64_t{params.row_tiles} * params.col_tiles;
  const int64_t resident = int64_t{sms} * std::max(per_sm, 1);
  int64_t grid = tile_grid(tiles, resident);  // kAuto
  if (params.grid_policy == GridPolicy::kPersistent) {  // evened-out rounds of the resident CTAs
    const int64_t rounds = std::max<int64_t>(1, (tiles + resident - 1) / resident);
    grid = (tiles + rounds - 1) / rounds;
  }
  if (params.grid_policy == GridPolicy::kOneTilePerCta) grid = std::min<int64_t>(tiles, 0x7FFFFFFF);
  grid = std::max<int64_t>(grid, 1);  // grouped: CTA 0 writes the padded ends even with no tile
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(params);
  return cuda_status(cudaGetLastError(), "mx_quantize_kernel launch");
}

// kGather && !kGrouped: a gathered grouped run without a columnwise copy (the dense tiles, rowwise only).
template <DType kIn, Format kRecipe, bool kGrouped, bool kGather>
Status dispatch_directions(const QuantizeProblem& p, Action a, const MxParams& params,
                           cudaStream_t s) {
  if constexpr (kGather && !kGrouped) {
    if (p.directions != Direction::kRowwise) return Status::error("gathered dense tiles: rowwise only");
    return leaf<kIn, kRecipe, true, false, false, true>(a, params, s);
  } else {
    switch (p.directions) {  // rowwise only: the dense tiles (grouped: the rowwise copy is the dense one)
      case Direction::kRowwise:
        // A grouped file reaches the dense tiles through mx_quantize.cu, which instantiates them.
        if constexpr (kGrouped)
          return a == Action::kCheck ? mx_check_device(p) : launch_mx_tiles(p, params, s);
        else
          return leaf<kIn, kRecipe, true, false, false, false>(a, params, s);
      case Direction::kColumnwise: return leaf<kIn, kRecipe, false, true, kGrouped, kGather>(a, params, s);
      case Direction::kBoth: return leaf<kIn, kRecipe, true, true, kGrouped, kGather>(a, params, s);
    }
  }
  return Status::error("problem.directions: unknown value");
}

template <DType kIn, bool kGrouped, bool kGather>
Status dispatch_recipe(const QuantizeProblem& p, Action a, const MxParams& params,
                       cudaStream_t s) {
  switch (p.recipe) {
    case Format::kMxfp8E4M3: return dispatch_directions<kIn, Format::kMxfp8E4M3, kGrouped, kGather>(p, a, params, s);
    case Format::kMxfp8E5M2: return dispatch_directions<kIn, Format::kMxfp8E5M2, kGrouped, kGather>(p, a, params, s);
    case Format::kMxfp4: return dispatch_directions<kIn, Format::kMxfp4, kGrouped, kGather>(p, a, params, s);
    default: return Status::error("problem.recipe: not an MX recipe with a GPU kernel (mxfp8, mxfp8_e5m2, mxfp4)");
  }
}

template <bool kGrouped, bool kGather = false>
Status dispatch(const QuantizeProblem& p, Action a, const MxParams& params, cudaStream_t s) {
  switch (p.input_type) {
    case DType::kBf16: return dispatch_recipe<DType::kBf16, kGrouped, kGather>(p, a, params, s);
    case DType::kF16: return dispatch_recipe<DType::kF16, kGrouped, kGather>(p, a, params, s);
    case DType::kF32: return dispatch_recipe<DType::kF32, kGrouped, kGather>(p, a, params, s);
    default: break;
  }
  return Status::error("problem.input_type: unknown value");
}

bool is_e2m1(Format r) { return r == Format::kMxfp4; }
int64_t code_row_bytes(Format r, int64_t n) { return is_e2m1(r) ? (n + 1) / 2 : n; }

// The parameters both modes share; tile_rows = rows (dense) or the capacity (grouped, columnwise).
MxParams make_params(const QuantizeProblem& p, const void* x, const QuantizeOutputs& out, int64_t tile_rows) {
  const bool row = p.directions != Direction::kColumnwise;
  const bool col = p.directions != Direction::kRowwise;
  const int vec = is_e2m1(p.recipe) ? 8 : 16;  // bytes of 16 codes
  MxParams params{};
  params.x = x;
  params.rows = p.rows;
  params.cols = p.cols;
  params.ld = p.ld;
  params.tile_rows = tile_rows;
  params.row_bytes = code_row_bytes(p.recipe, p.cols);
  params.col_row_bytes = code_row_bytes(p.recipe, tile_rows);
  params.row_data = row ? out.rowwise_data : nullptr;
  params.row_scales = row ? static_cast<uint8_t*>(out.rowwise_scales) : nullptr;
  params.col_data = col ? out.columnwise_data : nullptr;
  params.col_scales = col ? static_cast<uint8_t*>(out.columnwise_scales) : nullptr;
  params.amax = out.amax;
  params.nonfinite = out.nonfinite;
  const bool empty = tile_rows == 0 || p.cols == 0;
  params.row_tiles = empty ? 0 : static_cast<int>((tile_rows + kTile - 1) / kTile);
  params.col_tiles = empty ? 0 : static_cast<int>((p.cols + kTile - 1) / kTile);
  params.rule = mx_scale_rule(formats::element_max(p.recipe), p.rounding == formats::ScaleRounding::kCeil);
  params.vec_load = aligned(x, 16) && (p.ld * static_cast<int64_t>(formats::dtype_size(p.input_type))) % 16 == 0;
  params.row_store_align = 1;
  for (int a : {16, 8, 4})
    if (a <= vec && params.row_store_align == 1 && (!row || (aligned(out.rowwise_data, a) && params.row_bytes % a == 0)))
      params.row_store_align = a;
  params.vec_col_store = !col || (aligned(out.columnwise_data, vec) && params.col_row_bytes % vec == 0);
  params.vec_scale_store = (!row || aligned(out.rowwise_scales, 16)) && (!col || aligned(out.columnwise_scales, 16));
  params.word_scale_store = !row || aligned(out.rowwise_scales, 4);
  return params;
}

bool is_mx_gpu_recipe(Format r) {
  return r == Format::kMxfp8E4M3 || r == Format::kMxfp8E5M2 || r == Format::kMxfp4;
}

}  // namespace
}  // namespace blockscale::quant::detail
