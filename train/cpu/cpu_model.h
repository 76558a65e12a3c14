// The model of train/model/model_config.h on the CPU: forward and backward of one micro-batch, with
// every quantized matmul through formats/ (train/cpu/cpu_linear.h) and the other operations from
// train/cpu/cpu_ops.h. It is the test oracle of the GPU step and lets the driver train tiny models on
// a machine without a GPU.
#pragma once

#include <cstdint>

#include "formats/status.h"
#include "train/cpu/cpu_linear.h"
#include "train/model/model_config.h"
#include "train/model/params.h"

namespace blockscale::train {

struct StepLosses {
  double loss = 0;      // mean cross-entropy over the micro-batch's tokens (nats)
  double aux_loss = 0;  // load-balancing loss summed over the MoE layers (before its coefficient)
};

class CpuModel {
 public:
  CpuModel(const ModelConfig& config, Recipe recipe);

  // tokens, targets: batch x seq_len. grads (layout().total floats) += the gradient of
  // grad_scale * (mean cross-entropy + aux_loss_coef * aux_loss).
  Status forward_backward(const float* params, const int32_t* tokens, const int32_t* targets, int batch,
                          float grad_scale, uint64_t run_seed, int64_t micro_step, float* grads,
                          StepLosses* losses);
  // Forward only (evaluation).
  Status forward(const float* params, const int32_t* tokens, const int32_t* targets, int batch,
                 StepLosses* losses);

  const ParamLayout& layout() const { return layout_; }

 private:
  Status run(const float* params, const int32_t* tokens, const int32_t* targets, int batch, float grad_scale,
             uint64_t run_seed, int64_t micro_step, float* grads, StepLosses* losses);

  ModelConfig config_;
  Recipe recipe_;
  ParamLayout layout_;
};

}  // namespace blockscale::train
