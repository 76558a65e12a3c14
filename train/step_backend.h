// Where a training step runs: the CPU model (train/cpu/cpu_backend.cpp) or the GPU step
// (train/gpu/gpu_backend.h). The loop in train/trainer.cpp sees only this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "train/cpu/cpu_model.h"
#include "train/model/optimizer.h"
#include "train/parallel/communicator.h"

namespace blockscale::train {

class StepBackend {
 public:
  virtual ~StepBackend() = default;
  virtual std::string device_name() const = 0;
  // How the recipe's GEMMs run, where there is a choice (mxfp8 on the GPU); "" otherwise.
  virtual std::string gemm_route() const { return ""; }
  // How attention runs on the GPU ("cuDNN fused SDPA", or the reference path and why); "" on the CPU.
  virtual std::string attention() const { return ""; }
  // Peak dense bf16 tensor FLOP/s of the device, for MFU; 0 when unknown (CPU).
  virtual double peak_flops() const { return 0.0; }
  // Bytes per second of a device-to-device copy (read plus written), measured when the step was
  // made: the phases' floors divide their bytes by it (train/model/phase_bytes.h); 0 when unknown.
  virtual double copy_bandwidth() const { return 0.0; }

  virtual Status zero_grads() = 0;
  // grads += d(grad_scale * loss)/d params for one micro-batch (batch x seq_len tokens).
  virtual Status forward_backward(const int32_t* tokens, const int32_t* targets, int batch, float grad_scale,
                                  uint64_t run_seed, int64_t micro_step, StepLosses* losses) = 0;
  // Data parallelism: gradients are summed over comm's ranks before optimizer_step uses them.
  // Called before the first step; nullptr (the default) is a single rank.
  virtual void set_communicator(Communicator* comm) { comm_ = comm; }
  // The next forward_backward is the step's last micro-batch: the GPU step starts summing each
  // layer's gradients across ranks as soon as its backward has them, overlapping the rest.
  virtual void reduce_in_next_backward() {}
  // Expert parallelism (after set_communicator): each rank runs E / ranks experts of every MoE
  // layer, the routed tokens exchanged all-to-all; read_state gathers the experts (every rank
  // calls it). The GPU step only.
  virtual Status set_expert_parallel() {
    return Status::error("--expert-parallel: needs the GPU step (--device gpu)");
  }
  // AdamW's state sharded across the ranks (after set_communicator; train/parallel/optimizer_shards.h):
  // each rank updates its share of the parameters and keeps their moments only; read_state gathers
  // them (every rank calls it) and write_state takes each rank's share.
  virtual Status set_sharded_optimizer() {
    return Status::error("--shard-optimizer: this step has no sharded optimizer yet");
  }
  // The type the data-parallel gradient sums travel in (after set_communicator): fp32 everywhere,
  // bf16 on the GPU step only.
  virtual Status set_grad_reduce(GradReduce r) {
    return r == GradReduce::kFp32 ? Status::ok() : Status::error("--grad-reduce bf16: needs the GPU step (--device gpu)");
  }
  // Bytes of AdamW's moments this rank holds (-1: not known, the trainer counts 8 per parameter).
  virtual int64_t optimizer_state_bytes() const { return -1; }
  // Whether read_state is a collective that every rank must call (expert parallelism, sharding).
  virtual bool state_needs_every_rank() const { return false; }
  virtual Status evaluate(const int32_t* tokens, const int32_t* targets, int batch, StepLosses* losses) = 0;
  // Reduces gradients across ranks (data parallel), clips them to the global norm and applies
  // AdamW; *grad_norm receives the norm before clipping.
  virtual Status optimizer_step(const OptimizerConfig& config, float lr, int64_t step, double* grad_norm) = 0;

  // GPU time per phase of the step (quantize, gemm, attention, ...), summed over the steps since
  // reset_phase_ms(), in milliseconds; empty where the backend does not time phases (CPU).
  virtual std::vector<std::pair<std::string, double>> phase_ms() const { return {}; }
  virtual void reset_phase_ms() {}
  // Whether the steps from the next zero_grads on record their phases (the default). The events
  // cost the GPU time, so the loop times phases on a sample of steps and the step on the others.
  virtual void time_phases(bool /*on*/) {}

  // The master weights and AdamW moments, for checkpoints (host copies, layout().total floats).
  virtual Status read_state(std::vector<float>* params, std::vector<float>* m, std::vector<float>* v) = 0;
  virtual Status write_state(const std::vector<float>& params, const std::vector<float>& m,
                             const std::vector<float>& v) = 0;

 protected:
  Communicator* comm_ = nullptr;
};

std::unique_ptr<StepBackend> make_cpu_backend(const ModelConfig& config, Recipe recipe, uint64_t init_seed);

}  // namespace blockscale::train
