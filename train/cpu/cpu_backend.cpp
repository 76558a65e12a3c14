// The CPU step: train/cpu/cpu_model.h plus the optimizer on host vectors.
#include <algorithm>

#include "train/step_backend.h"

namespace blockscale::train {
namespace {

class CpuBackend final : public StepBackend {
 public:
  CpuBackend(const ModelConfig& config, Recipe recipe, uint64_t init_seed)
      : model_(config, recipe), decay_(decay_mask(model_.layout())) {
    const int64_t n = model_.layout().total;
    params_.resize(n);
    init_params(model_.layout(), config, init_seed, params_.data());
    grads_.assign(n, 0.0f);
    m_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
  }

  std::string device_name() const override { return "cpu"; }

  Status zero_grads() override {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    return Status::ok();
  }

  Status forward_backward(const int32_t* tokens, const int32_t* targets, int batch, float grad_scale,
                          uint64_t run_seed, int64_t micro_step, StepLosses* losses) override {
    return model_.forward_backward(params_.data(), tokens, targets, batch, grad_scale, run_seed, micro_step,
                                   grads_.data(), losses);
  }

  Status evaluate(const int32_t* tokens, const int32_t* targets, int batch, StepLosses* losses) override {
    return model_.forward(params_.data(), tokens, targets, batch, losses);
  }

  Status optimizer_step(const OptimizerConfig& config, float lr, int64_t step, double* grad_norm) override {
    const int64_t n = static_cast<int64_t>(grads_.size());
    if (comm_ != nullptr) BS_RETURN_IF_ERROR(comm_->all_reduce_host(grads_.data(), n));
    *grad_norm = gradient_norm(grads_.data(), n);
    const float factor = clip_factor(*grad_norm, config.clip_norm);
    if (factor != 1.0f) {
      for (float& g : grads_) g *= factor;
    }
    adamw_update(config, lr, step, grads_.data(), params_.data(), m_.data(), v_.data(), decay_, n);
    return Status::ok();
  }

  Status read_state(std::vector<float>* params, std::vector<float>* m, std::vector<float>* v) override {
    *params = params_;
    *m = m_;
    *v = v_;
    return Status::ok();
  }

  Status write_state(const std::vector<float>& params, const std::vector<float>& m,
                     const std::vector<float>& v) override {
    if (params.size() != params_.size() || m.size() != m_.size() || v.size() != v_.size())
      return Status::error("write_state: sizes differ from the model's parameter count");
    params_ = params;
    m_ = m;
    v_ = v;
    return Status::ok();
  }

 private:
  CpuModel model_;
  std::vector<uint8_t> decay_;
  std::vector<float> params_, grads_, m_, v_;
};

}  // namespace

std::unique_ptr<StepBackend> make_cpu_backend(const ModelConfig& config, Recipe recipe, uint64_t init_seed) {
  return std::make_unique<CpuBackend>(config, recipe, init_seed);
}

}  // namespace blockscale::train
