#include "train/model/optimizer.h"

#include <cmath>

namespace blockscale::train {

float learning_rate(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps) return c.lr * float(step + 1) / float(c.warmup_steps);
  const int64_t decay_steps = c.total_steps - c.warmup_steps;
  if (decay_steps <= 0) return c.lr;
  const double progress = std::min(1.0, double(step - c.warmup_steps) / double(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  return float(c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine));
}

void adamw_update(const OptimizerConfig& c, float lr, int64_t step, const float* grads, float* params, float* m,
                  float* v, const uint8_t* decay, int64_t n) {
  // The order of train/gpu/gpu_ops.h adamw_step, so that the CPU and GPU updates give the same bits.
  const float bias1 = 1.0f - float(std::pow(double(c.beta1), double(step)));
  const float bias2 = 1.0f - float(std::pow(double(c.beta2), double(step)));
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    const float m_hat = m[i] / bias1;
    const float v_hat = v[i] / bias2;
    float update = m_hat / (std::sqrt(v_hat) + c.eps);
    if (decay[i]) update += c.weight_decay * params[i];
    params[i] -= lr * update;
  }
}

std::vector<uint8_t> decay_mask(const ParamLayout& layout) {
  std::vector<uint8_t> mask(layout.total, 0);
  for (const ParamTensor& t : layout.tensors) {
    if (t.weight_decay) std::fill(mask.begin() + t.offset, mask.begin() + t.offset + t.size, uint8_t{1});
  }
  return mask;
}

double gradient_norm(const float* grads, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(grads[i]) * grads[i];
  return std::sqrt(sum);
}

}  // namespace blockscale::train
