// The GPU step's linear layers in one recipe, dense and grouped (the MoE experts), forward and
// backward: the recipe's GEMM route (train/gpu/gpu_linear_route.h), chosen once per run, for the
// layers of the recipe, and the cuBLASLt route of head_recipe() for the LM head; the router's
// fp32 product through cublas_gemm.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/status.h"
#include "train/gpu/gpu_layer_workspace.h"  // defines: DeviceBuffers, LayerWorkspace, Gather
#include "train/gpu/gpu_linear_route.h"
#include "train/model/model_config.h"

namespace blockscale::train {

class GpuLayers {
 public:
  GpuLayers(Recipe recipe, DeviceBuffers& buffers, PhaseTimer& timer);
  Status init(cudaStream_t stream) { return ws_.init(stream); }
  // The route of the recipe's layers: mxfp8's and nvfp4's `bf16_values` (their block values as
  // bf16 through cuBLASLt) or gemm/'s block-scaled kernels; fp8_block's `host_sized_experts`
  // (gemm/'s cuBLASLt route, one matmul per expert sized on the host). Other recipes ignore both.
  void choose_route(bool bf16_values, bool host_sized_experts);
  // Whether the recipe's layers run on gemm/'s block-scaled kernels (the run's header line).
  bool on_kernels() const { return on_kernels_; }
  // Whether the step must copy the experts' group ends to host_ends() before the grouped layers.
  bool experts_need_host_ends() const { return route_->needs_host_ends(); }
  std::vector<int32_t>& host_ends() { return ws_.host_ends(); }

  // y (m x n) = x · w^T, in `recipe`: the layers' recipe or head_recipe() of it.
  Status linear_forward(const std::string& name, Recipe recipe, const float* x, const float* w, int64_t m,
                        int64_t n, int64_t k, float* y);
  // dx (m x k) = dy · w (skipped when dx is null); dw += dy^T · x. x's copies come from the forward.
  Status linear_backward(const std::string& name, Recipe recipe, SrKey sr, const float* dy, const float* x,
                         const float* w, int64_t m, int64_t n, int64_t k, float* dx, float* dw);
  // The MoE experts (LinearRoute::grouped_forward / grouped_backward).
  Status grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends, int e,
                         const float* w, int64_t n, int64_t k, float* y, const Gather* gather = nullptr) {
    return route_->grouped_forward(name, x, rows, ends, e, w, n, k, y, gather);
  }
  Status grouped_backward(const std::string& name, SrKey sr, const float* dy, const float* x, int64_t rows,
                          const int32_t* ends, int e, const float* w, int64_t n, int64_t k, float* dx, float* dw) {
    return route_->grouped_backward(name, sr, dy, x, rows, ends, e, w, n, k, dx, dw);
  }
  // cuBLAS product of fp32 operands or their bf16 copies (fp32 accumulation and output).
  Status cublas_gemm(Product prod, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                     float* c, float beta) {
    return ws_.cublas_gemm(prod, type, a, b, m, n, k, c, beta);
  }
  // A step's first backward (LayerWorkspace::set_fresh_gradients).
  void set_fresh_gradients(bool fresh) { ws_.set_fresh_gradients(fresh); }
  float wgrad_beta() const { return ws_.wgrad_beta(); }
  // The master weights changed (an optimizer step, a loaded state): the next forward copies them
  // again.
  void weights_changed() { ws_.weights_changed(); }
  // The bf16 recipe's copy of every parameter, kept current by the backend (LayerWorkspace::bf16_mirror_of).
  void set_bf16_mirror(const float* params, const uint16_t* mirror, int64_t count) {
    ws_.set_bf16_mirror(params, mirror, count);
  }

 private:
  Status route_for(const std::string& name, Recipe recipe, LinearRoute** out);

  Recipe recipe_;
  LayerWorkspace ws_;
  std::unique_ptr<LinearRoute> route_;  // the recipe's layers
  std::unique_ptr<LinearRoute> head_;   // head_recipe(recipe_): the LM head
  bool on_kernels_ = false;
};

}  // namespace blockscale::train
