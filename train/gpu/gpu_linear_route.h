// How the GPU step's linear layers multiply, one object per GEMM route, chosen once per run
// (train/gpu/gpu_layers.h picks it from the recipe and the route):
//   cublas_route (gpu_route_cublas.cpp): fp32, bf16 (and the LM head of every recipe), and mxfp8
//     on its bf16-values route: cuBLASLt on the operands, their bf16 copies, or their MX values
//     as bf16; the experts one product each, sized on the host.
//   kernel_route (gpu_route_kernels.cpp): fp8_block, mxfp8 and nvfp4 on gemm/'s kernels: quant/
//     writes each operand's rowwise and columnwise copies in one pass, gemm/ multiplies them
//     (the experts through the grouped GEMMs, sized on the device).
//   nvfp4_values_route (gpu_route_nvfp4_values.cpp): nvfp4 on its bf16-values route: quant/'s
//     copies, their block values as bf16, cuBLASLt with the tensor scales as a device alpha.
// Products (train/model/recipe_policy.h gives each operand's role and format):
//   fprop X.row x W.row, dgrad dY.row x W.col, wgrad dY.col x X.col accumulated (beta 1) into the
//   fp32 gradient, or written (beta 0) in a step's first backward.
// A layer's operand copies are kept under its name from the forward to the backward; a weight's
// copies are made by the first forward after the weights change and reused until the next change.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "formats/status.h"
#include "train/gpu/gpu_layer_workspace.h"  // defines: LayerWorkspace, Gather
#include "train/model/model_config.h"

namespace blockscale::train {

class LinearRoute {
 public:
  virtual ~LinearRoute() = default;
  // Whether the experts' products are sized on the host (LayerWorkspace::host_ends set by the step
  // once per MoE layer before grouped_forward / grouped_backward).
  virtual bool needs_host_ends() const = 0;
  // y (m x n) = x · w^T; the forward keeps x's copies under `name`.
  virtual Status forward(const std::string& name, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
                         float* y) = 0;
  // dx (m x k) = dy · w (skipped when dx is null); dw += dy^T · x. x's copies come from the forward.
  virtual Status backward(const std::string& name, SrKey sr, const float* dy, const float* x, const float* w,
                          int64_t m, int64_t n, int64_t k, float* dx, float* dw) = 0;
  // The MoE experts: x holds `rows` routed rows sorted by expert, `e` experts with their group
  // ends on the device (`ends`); w the experts' stacked n x k weights. `gather`: x is the unrouted
  // input, permuted while quantized (routes that cannot fuse it refuse it).
  virtual Status grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends, int e,
                                 const float* w, int64_t n, int64_t k, float* y, const Gather* gather) = 0;
  virtual Status grouped_backward(const std::string& name, SrKey sr, const float* dy, const float* x, int64_t rows,
                                  const int32_t* ends, int e, const float* w, int64_t n, int64_t k, float* dx,
                                  float* dw) = 0;
};

// `recipe`: fp32, bf16 or mxfp8 (its values as bf16).
std::unique_ptr<LinearRoute> cublas_route(Recipe recipe, LayerWorkspace& ws);
// `host_sized_experts`: fp8_block on the cuBLASLt route, which runs the experts one matmul each
// and needs their sizes on the host.
std::unique_ptr<LinearRoute> kernel_route(LayerWorkspace& ws, bool host_sized_experts);
std::unique_ptr<LinearRoute> nvfp4_values_route(LayerWorkspace& ws);

}  // namespace blockscale::train
