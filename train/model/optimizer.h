// AdamW on the fp32 master weights, the learning-rate schedule and gradient clipping. The GPU
// step's kernel (train/gpu/gpu_ops.h adamw_step) evaluates the same formula in the same order.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/host_device.h"
#include "train/model/params.h"

namespace blockscale::train {

struct OptimizerConfig {
  float lr = 3e-3f;  // peak learning rate
  float min_lr_ratio = 0.1f;  // the cosine decays to lr * min_lr_ratio
  int64_t warmup_steps = 20;
  int64_t total_steps = 200;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float clip_norm = 1.0f;  // 0: no clipping
};

// Linear warmup over warmup_steps to lr, then cosine to lr * min_lr_ratio at total_steps.
// step counts from 0.
float learning_rate(const OptimizerConfig& c, int64_t step);

// One AdamW update of n parameters. step is 1-based (bias correction). decay[i]: whether
// parameter i takes weight decay (matrices do, norms do not).
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)   (wd only where decayed)
void adamw_update(const OptimizerConfig& c, float lr, int64_t step, const float* grads, float* params, float* m,
                  float* v, const uint8_t* decay, int64_t n);

// One byte per parameter: 1 where weight decay applies.
std::vector<uint8_t> decay_mask(const ParamLayout& layout);

// The global L2 norm of the gradients (double sum), and the factor that clips it to clip_norm
// (1 when no clipping is needed or clip_norm == 0). The GPU's AdamW evaluates clip_factor itself.
double gradient_norm(const float* grads, int64_t n);
BS_HOST_DEVICE float clip_factor(double norm, float clip_norm) {
  if (clip_norm <= 0.0f || !(norm > clip_norm)) return 1.0f;
  return float(clip_norm / norm);
}

}  // namespace blockscale::train
