// The GPU step: the model of train/cpu/cpu_model.h on one GPU (or one rank of several), its linear
// layers through train/gpu/gpu_layers.h (quant/ + gemm/, or cuBLASLt for bf16), attention through
// cuBLAS, the rest through train/gpu/gpu_ops.h; data and expert parallelism through a Communicator.
// Activations are fp32; what the backward needs is kept per layer in named device buffers that
// are allocated on first use and reused every step.
#include "train/gpu/gpu_backend.h"

#include "train/gpu/gpu_backend_impl.h"

namespace blockscale::train {

using gpu_step::GpuBackend;

Status make_gpu_backend(const ModelConfig& config, Recipe recipe, uint64_t init_seed,
                        std::unique_ptr<StepBackend>* out, gemm::GemmRoute route) {
  BS_RETURN_IF_ERROR(check_gemm_route(recipe, route));
  auto backend = std::make_unique<GpuBackend>(config, recipe, route);
  BS_RETURN_IF_ERROR(backend->init(init_seed));
  *out = std::move(backend);
  return Status::ok();
}

Status gpu_backend_gradients(StepBackend& backend, std::vector<float>* grads) {
  auto* gpu = dynamic_cast<GpuBackend*>(&backend);
  if (gpu == nullptr) return Status::error("gpu_backend_gradients: not a GPU backend");
  return gpu->read_grads(grads);
}

Status gpu_backend_use_reference_attention(StepBackend& backend) {
  auto* gpu = dynamic_cast<GpuBackend*>(&backend);
  if (gpu == nullptr) return Status::error("gpu_backend_use_reference_attention: not a GPU backend");
  gpu->use_reference_attention();
  return Status::ok();
}

}  // namespace blockscale::train
