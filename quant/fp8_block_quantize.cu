// FP8 blockwise quantize: placeholder until the kernel lands.
#include "quant/launchers.h"

namespace blockscale::quant::detail {

Status launch_fp8_block_quantize(const QuantizeProblem&, const QuantizeInputs&, const QuantizeOutputs&,
                                 cudaStream_t) {
  return Status::error("problem.recipe: the FP8 blockwise GPU quantize kernel is not implemented yet");
}

}  // namespace blockscale::quant::detail
