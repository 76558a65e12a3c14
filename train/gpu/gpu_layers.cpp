#include "train/gpu/gpu_layers.h"

namespace blockscale::train {

GpuLayers::GpuLayers(Recipe recipe, DeviceBuffers& buffers, PhaseTimer& timer)
    : recipe_(recipe), ws_(recipe, buffers, timer), head_(cublas_route(head_recipe(recipe), ws_)) {
  choose_route(false, false);
}

void GpuLayers::choose_route(bool bf16_values, bool host_sized_experts) {
  on_kernels_ = false;
  if (!is_quantized(recipe_) || (bf16_values && recipe_ == Recipe::kMxfp8)) {
    route_ = cublas_route(recipe_, ws_);
  } else if (bf16_values && recipe_ == Recipe::kNvfp4) {
    route_ = nvfp4_values_route(ws_);
  } else {
    route_ = kernel_route(ws_, host_sized_experts && recipe_ == Recipe::kFp8Block);
    on_kernels_ = true;
  }
}

Status GpuLayers::route_for(const std::string& name, Recipe recipe, LinearRoute** out) {
  if (recipe == recipe_) *out = route_.get();
  else if (recipe == head_recipe(recipe_)) *out = head_.get();
  else return Status::error(name + ": recipe " + recipe_name(recipe) + " is neither the layers' (" +
                            recipe_name(recipe_) + ") nor the LM head's");
  return Status::ok();
}

Status GpuLayers::linear_forward(const std::string& name, Recipe recipe, const float* x, const float* w, int64_t m,
                                 int64_t n, int64_t k, float* y) {
  LinearRoute* route;
  BS_RETURN_IF_ERROR(route_for(name, recipe, &route));
  return route->forward(name, x, w, m, n, k, y);
}

Status GpuLayers::linear_backward(const std::string& name, Recipe recipe, SrKey sr, const float* dy, const float* x,
                                  const float* w, int64_t m, int64_t n, int64_t k, float* dx, float* dw) {
  LinearRoute* route;
  BS_RETURN_IF_ERROR(route_for(name, recipe, &route));
  return route->backward(name, sr, dy, x, w, m, n, k, dx, dw);
}

}  // namespace blockscale::train
