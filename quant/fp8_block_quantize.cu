// FP8 blockwise quantize, dense mode (quant/quantize.h run()): 1x128 and 128x128 blocks, pow2,
// rowwise / columnwise / both from one read. The kernel: quant/fp8_block_quantize_kernel.cuh.
#include "quant/fp8_block_quantize_dispatch.cuh"  // defines: make_args, pick_input

namespace blockscale::quant::detail {

Status launch_fp8_block_tiles(const QuantizeProblem& p, const Fp8BlockArgs& a, cudaStream_t stream) {
  return pick_input<false>(p, a, stream);
}

Status launch_fp8_block_quantize(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                                 cudaStream_t stream) {
  Fp8BlockArgs a;
  BS_RETURN_IF_ERROR(make_args(p, in.x, out, p.rows, &a));
  return launch_fp8_block_tiles(p, a, stream);
}

}  // namespace blockscale::quant::detail
