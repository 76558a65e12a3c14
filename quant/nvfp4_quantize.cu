// NVFP4 quantize: placeholder until the kernel lands (can_implement accepts the recipe; run()
// returns this error).
#include "quant/launchers.h"

namespace blockscale::quant::detail {

size_t nvfp4_workspace_size(const QuantizeProblem&) { return 0; }

Status launch_nvfp4_quantize(const QuantizeProblem&, const QuantizeInputs&, const QuantizeOutputs&, void*,
                             cudaStream_t) {
  return Status::error("problem.recipe: the nvfp4 GPU quantize kernel is not implemented yet");
}

}  // namespace blockscale::quant::detail
