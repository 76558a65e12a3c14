// The training loop: data -> micro-batches -> StepBackend (CPU or GPU) -> AdamW, with periodic
// evaluation, progress lines, CSV logs, atomic checkpoints and bit-identical resume; and the
// recipe comparison that trains several recipes on the same data and plots their curves.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "train/model/model_config.h"
#include "train/model/optimizer.h"
#include "train/parallel/communicator.h"

namespace blockscale::train {

struct DataConfig {
  std::string source = "synthetic";  // synthetic | tokens | text
  std::string path;                  // tokens / text
  std::string dtype = "uint16";      // tokens: uint16 | uint32
  int64_t synthetic_tokens = 2'000'000;
  double eval_fraction = 0.05;
};

struct TrainConfig {
  ModelConfig model;
  Recipe recipe = Recipe::kBf16;
  OptimizerConfig optimizer;
  DataConfig data;
  int batch = 8;       // sequences per micro-batch, per rank
  int grad_accum = 1;  // micro-batches per optimizer step
  int64_t steps = 200;
  int eval_every = 50;  // 0: only at the end
  int eval_batches = 8;
  int log_every = 10;
  int checkpoint_every = 0;  // 0: only at the end; -1: never (timing runs of large models)
  int keep_checkpoints = 2;
  // The run directory (train/run/run_dir.h): one run at a time; a new run refuses one that holds a
  // run's files unless `overwrite` (which deletes those files first) or `resume`.
  std::string out_dir = "runs/train";
  std::string resume;  // a checkpoint or run directory ("" starts afresh)
  bool overwrite = false;
  uint64_t seed = 1;   // data order, initialisation, stochastic rounding
  std::string device = "auto";  // auto | cpu | gpu
  bool expert_parallel = false;  // split each MoE layer's experts across the ranks (GPU)
  // AdamW's state sharded across the data-parallel ranks (StepBackend::set_sharded_optimizer).
  bool shard_optimizer = false;
  GradReduce grad_reduce = GradReduce::kFp32;  // the gradient sums' type (train/parallel/communicator.h)
  gemm::GemmRoute gemm_route = gemm::GemmRoute::kAuto;  // the quantized recipes' GEMM engine (model_config.h)
  // The GPU step's attention: auto (cuDNN's fused SDPA where it runs the shape, else the reference
  // path) or reference (cuBLAS products at the CPU model's rounding points).
  std::string attention = "auto";
  int64_t stop_after = -1;      // stop (as if killed) after this many steps of this run; tests
};

struct TrainSummary {
  std::string out_dir;
  std::string device;
  int64_t steps = 0;
  double final_train_loss = 0;
  double final_eval_loss = 0;
  double mean_step_ms = 0;  // over the steps after the first (warm-up) of this run that do not time phases
  double tokens_per_s = 0;
  std::vector<std::pair<std::string, double>> phase_ms;  // GPU ms per step by phase (the steps that time them)
  double phase_step_ms = 0;  // the mean time of those steps, slowed by their events
  int64_t phase_steps = 0;
  // Each memory-bound phase's floor, ms per step: its bytes (train/model/phase_bytes.h) over the
  // device's copy bandwidth; empty where the bandwidth is unknown.
  std::vector<std::pair<std::string, double>> phase_floor_ms;
};

Status validate(const TrainConfig& c);
// Refuses before anything large is allocated when the run needs more memory than the machine
// has (train/run/memory_plan.h), and before anything is written when another run holds out_dir or
// out_dir holds a run that this one neither resumes nor overwrites (train/run/run_dir.h).
// With a communicator of several ranks, each rank runs this with the same config: --batch
// sequences per micro-batch per rank; gradients, losses and eval are summed across ranks; rank 0
// alone prints, logs and writes checkpoints (every rank resumes from them).
Status train(const TrainConfig& c, std::ostream& progress, TrainSummary* summary, Communicator* comm = nullptr);

// Trains each recipe (out_dir/<recipe>) on the same data and seed, then writes
// out_dir/compare.svg (eval loss against step) and out_dir/compare.csv, and prints each recipe's
// final eval loss and step time against the first recipe's (the baseline, usually bf16).
Status compare_recipes(const TrainConfig& base, const std::vector<Recipe>& recipes, std::ostream& progress,
                       std::vector<TrainSummary>* summaries, Communicator* comm = nullptr);

}  // namespace blockscale::train
