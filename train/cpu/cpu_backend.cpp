// The CPU step: train/cpu/cpu_model.h plus the optimizer on host vectors; with several ranks
// (threads of a LocalGroup) the optimizer can be sharded as the GPU step shards it
// (train/parallel/optimizer_shards.h), which checks the sharding's arithmetic and checkpoints on
// any machine.
#include <algorithm>
#include <cmath>
#include <optional>

#include "train/parallel/communicator.h"
#include "train/parallel/optimizer_shards.h"
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
    if (shards_) return sharded_step(config, lr, step, grad_norm);
    *grad_norm = gradient_norm(grads_.data(), n);
    const float factor = clip_factor(*grad_norm, config.clip_norm);
    if (factor != 1.0f) {
      for (float& g : grads_) g *= factor;
    }
    adamw_update(config, lr, step, grads_.data(), params_.data(), m_.data(), v_.data(), decay_.data(), n);
    return Status::ok();
  }

  Status set_sharded_optimizer() override {
    if (comm_ == nullptr) return Status::error("--shard-optimizer: needs data-parallel ranks (from a launcher: torchrun, srun or tools/train_ranks.sh)");
    OptimizerShards s;
    BS_RETURN_IF_ERROR(OptimizerShards::make(reduction_buckets(model_.layout()), model_.layout().total,
                                             comm_->rank(), comm_->world_size(), &s));
    std::vector<float> m(s.state_size()), v(s.state_size());
    s.pack(m_.data(), m.data());
    s.pack(v_.data(), v.data());
    m_ = std::move(m), v_ = std::move(v);
    shards_ = std::move(s);
    return Status::ok();
  }
  int64_t optimizer_state_bytes() const override { return int64_t(2 * sizeof(float)) * int64_t(m_.size()); }
  bool state_needs_every_rank() const override { return shards_.has_value(); }

  Status read_state(std::vector<float>* params, std::vector<float>* m, std::vector<float>* v) override {
    *params = params_;
    if (!shards_) {
      *m = m_;
      *v = v_;
      return Status::ok();
    }
    // Every rank contributes its share (the tails once, from rank 0) to a sum: exact, since each
    // element has one contributor and the others add zeros.
    for (auto [state, full] : {std::pair{&m_, m}, std::pair{&v_, v}}) {
      full->assign(params_.size(), 0.0f);
      shards_->unpack(state->data(), full->data(), shards_->rank() == 0);
      BS_RETURN_IF_ERROR(comm_->all_reduce_host(full->data(), int64_t(full->size())));
    }
    return Status::ok();
  }

  Status write_state(const std::vector<float>& params, const std::vector<float>& m,
                     const std::vector<float>& v) override {
    if (params.size() != params_.size() || m.size() != params_.size() || v.size() != params_.size())
      return Status::error("write_state: sizes differ from the model's parameter count");
    params_ = params;
    if (shards_) {
      shards_->pack(m.data(), m_.data());
      shards_->pack(v.data(), v_.data());
    } else {
      m_ = m;
      v_ = v;
    }
    return Status::ok();
  }

 private:
  // The sharded update: the gradients were summed everywhere (the GPU reduce-scatters instead:
  // the same values on each rank's share); each rank takes the norm of its share (the tails from
  // rank 0), sums it across ranks, updates its share, and every rank gets all the parameters back.
  Status sharded_step(const OptimizerConfig& config, float lr, int64_t step, double* grad_norm) {
    double sum_sq = 0;
    for (const OptimizerPiece& p : shards_->pieces()) {
      if (p.tail && shards_->rank() != 0) continue;
      for (int64_t i = p.offset; i < p.offset + p.count; ++i) sum_sq += double(grads_[i]) * grads_[i];
    }
    BS_RETURN_IF_ERROR(comm_->all_reduce_host(&sum_sq, 1));
    *grad_norm = std::sqrt(sum_sq);
    const float factor = clip_factor(*grad_norm, config.clip_norm);
    for (const OptimizerPiece& p : shards_->pieces()) {
      float* g = grads_.data() + p.offset;
      if (factor != 1.0f) for (int64_t i = 0; i < p.count; ++i) g[i] *= factor;
      adamw_update(config, lr, step, g, params_.data() + p.offset, m_.data() + p.state_offset,
                   v_.data() + p.state_offset, decay_.data() + p.offset, p.count);
    }
    // The all-gather: each rank's share of the parameters (zeros elsewhere, the tails from rank 0)
    // summed across ranks.
    std::vector<float> mine(params_.size(), 0.0f);
    std::vector<float> share(shards_->state_size());
    shards_->pack(params_.data(), share.data());
    shards_->unpack(share.data(), mine.data(), shards_->rank() == 0);
    BS_RETURN_IF_ERROR(comm_->all_reduce_host(mine.data(), int64_t(mine.size())));
    params_ = std::move(mine);
    return Status::ok();
  }

  CpuModel model_;
  std::vector<uint8_t> decay_;
  std::vector<float> params_, grads_, m_, v_;  // m_, v_: this rank's share when sharded
  std::optional<OptimizerShards> shards_;
};

}  // namespace

std::unique_ptr<StepBackend> make_cpu_backend(const ModelConfig& config, Recipe recipe, uint64_t init_seed) {
  return std::make_unique<CpuBackend>(config, recipe, init_seed);
}

}  // namespace blockscale::train
