// NVFP4 quantize, batched mode (BatchedQuantizeProblem): a MoE layer's expert weights, stacked,
// each a whole number of 128-row tiles, quantized rowwise as if one run() each: the amax pass
// leaves each matrix's partial maxima (one launch, a grid row per matrix), and one launch of the
// dense kernel walks all tiles, setting up a matrix's tensor scale when its tile's matrix changes
// (the batch fields of Nvfp4Params, quant/nvfp4_quantize_tile.cuh). The stacked rowwise data and
// swizzled scales are the matrices' back to back (whole 128-row scale chunks).
#include "quant/nvfp4_quantize_dispatch.cuh"  // defines: make_params, launch_quantize

namespace blockscale::quant::detail {
namespace {

template <DType kIn>
Status launch_batched(const QuantizeProblem& stack, const Nvfp4Params& params, cudaStream_t stream) {
  // quantize.cpp's can_implement: rowwise, measured amax, no SR (and no RHT: that is columnwise).
  if (stack.nvfp4_2d) return launch_quantize<kIn, true, false, false, true, false>(params, stream);
  return launch_quantize<kIn, true, false, false, false, false>(params, stream);
}

}  // namespace

Status launch_nvfp4_batched_quantize(const BatchedQuantizeProblem& bp, const QuantizeInputs& in,
                                     const QuantizeOutputs& out, void* workspace, cudaStream_t stream) {
  if (bp.batches == 1) return launch_nvfp4_quantize(bp.matrix, in, out, workspace, stream);
  QuantizeProblem stack = bp.matrix;
  stack.rows = bp.matrix.rows * bp.batches;
  Nvfp4Params params = make_params(stack, in.x, nullptr, nullptr, out, workspace, stack.rows);
  params.batch_rows = bp.matrix.rows;
  params.batches = bp.batches;
  BS_RETURN_IF_ERROR(launch_nvfp4_amax(bp.matrix, in.x, params.vec_load, /*plain=*/true, /*rht=*/false,
                                       static_cast<uint32_t*>(workspace), &params.n_partials, stream, nullptr,
                                       bp.batches));
  switch (stack.input_type) {
    case DType::kBf16: return launch_batched<DType::kBf16>(stack, params, stream);
    case DType::kF16: return launch_batched<DType::kF16>(stack, params, stream);
    case DType::kF32: return launch_batched<DType::kF32>(stack, params, stream);
    default: break;
  }
  return Status::error("problem.input_type: unknown value");
}

}  // namespace blockscale::quant::detail
