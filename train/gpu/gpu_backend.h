// The training step on one GPU: the model of train/cpu/cpu_model.h with every quantized matmul through
// quant/ (quantize, both copies in one pass) and gemm/ (dense and grouped block-scaled GEMMs),
// attention and the bf16 baseline through cuBLAS, the rest through train/gpu/gpu_ops.h.
#pragma once

#include <memory>

#include "runtime/device.h"
#include "train/step_backend.h"

namespace blockscale::train {

// Ok when a CUDA device can run the step (runtime/device.h); usable as a bool.
using runtime::gpu_available;
Status make_gpu_backend(const ModelConfig& config, Recipe recipe, uint64_t init_seed,
                        std::unique_ptr<StepBackend>* out, gemm::GemmRoute route = gemm::GemmRoute::kAuto);
// The gradients of the last forward_backward (tests compare them with the CPU model's).
Status gpu_backend_gradients(StepBackend& backend, std::vector<float>* grads);
// From now on the reference attention (gpu_ops.h, the CPU model's rounding points) instead of
// cuDNN's fused path: for tests that hold the quantized recipes to the CPU model, where a one-ulp
// difference in attention can flip a block scale or a route and move a gradient by more than the
// recipes' bounds.
Status gpu_backend_use_reference_attention(StepBackend& backend);

}  // namespace blockscale::train
