// MX quantize (MXFP8 E4M3 / E5M2, MXFP4), dense mode (quant/quantize.h run(), and run_mx with a
// chosen grid for tests and the benchmark). The kernel: quant/mx_quantize_kernel.cuh.
#include "quant/mx_quantize_dispatch.cuh"  // defines: make_params, dispatch

namespace blockscale::quant::detail {

Status launch_mx_tiles(const QuantizeProblem& p, const MxParams& params, cudaStream_t stream) {
  return dispatch<false>(p, Action::kLaunch, params, stream);
}

Status mx_check_device(const QuantizeProblem& p) {
  return dispatch<false>(p, Action::kCheck, MxParams{}, nullptr);
}

Status launch_mx_dense(const QuantizeProblem& p, const void* x, const QuantizeOutputs& out, cudaStream_t stream,
                       GridPolicy grid) {
  MxParams params = make_params(p, x, out, p.rows);
  params.grid_policy = grid;
  return launch_mx_tiles(p, params, stream);
}

Status run_mx(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out, cudaStream_t stream,
              GridPolicy grid) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  if (!is_mx_gpu_recipe(p.recipe)) return Status::error("problem.recipe: not an MX recipe (mxfp8, mxfp8_e5m2, mxfp4)");
  if (!(p.rows == 0 || p.cols == 0)) BS_RETURN_IF_ERROR(mx_check_device(p));
  if (out.amax != nullptr)
    BS_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(out.amax, 0, sizeof(float), stream), "outputs.amax"));
  if (p.rows == 0 || p.cols == 0) return Status::ok();
  return launch_mx_dense(p, in.x, out, stream, grid);
}

Status launch_mx_quantize(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                          cudaStream_t stream) {
  return launch_mx_dense(p, in.x, out, stream);
}

}  // namespace blockscale::quant::detail
