// NVFP4 quantize, dense mode (quant/quantize.h run()): 1D / 2D blocks, SR, RHT on the columnwise
// copy, the tensor amax measured (two passes, the workspace) or given. The kernel:
// quant/nvfp4_quantize_kernel.cuh.
#include "quant/nvfp4_quantize_dispatch.cuh"  // defines: make_params, dispatch_directions

namespace blockscale::quant::detail {

size_t nvfp4_workspace_size(const QuantizeProblem& p) {
  if (p.tensor_amax != TensorAmax::kMeasure || p.rows <= 0 || p.cols <= 0) return 0;
  return 2 * kMaxPartials * sizeof(uint32_t);
}

Status launch_nvfp4_quantize(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                             void* workspace, cudaStream_t stream) {
  Nvfp4Params params = make_params(p, in.x, in.rowwise_tensor_amax, in.columnwise_tensor_amax, out, workspace, p.rows);
  switch (p.input_type) {
    case DType::kBf16: return dispatch_directions<DType::kBf16>(p, out, &params, stream);
    case DType::kF16: return dispatch_directions<DType::kF16>(p, out, &params, stream);
    case DType::kF32: return dispatch_directions<DType::kF32>(p, out, &params, stream);
    default: break;
  }
  return Status::error("problem.input_type: unknown value");
}

}  // namespace blockscale::quant::detail
