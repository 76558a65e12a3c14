// The trainer tests' tiny runs (trainer_test.cpp, trainer_ranks_test.cpp): the configuration,
// a run to its end, a run stopped at a checkpoint, the logged steps.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/train/tiny_model.h"
#include "train/run/run_log.h"
#include "train/trainer.h"

namespace blockscale::train {

inline TrainConfig tiny(const std::string& out) {
  TrainConfig c = blockscale_test::tiny_model_config();
  c.data.synthetic_tokens = 20000;
  c.grad_accum = 2;
  c.steps = 30;
  c.eval_every = 10;
  c.eval_batches = 2;
  c.log_every = 100;
  c.checkpoint_every = 10;
  c.optimizer.total_steps = 30;
  c.optimizer.warmup_steps = 5;
  c.device = "cpu";
  c.out_dir = out;
  return c;
}

// A tiny run into `out` of `steps` steps, run to its end.
inline TrainConfig finished_run(const std::string& out, int64_t steps) {
  TrainConfig c = tiny(out);
  c.steps = c.optimizer.total_steps = steps;
  std::ostringstream progress;
  TrainSummary s;
  EXPECT_TRUE(train(c, progress, &s).is_ok()) << progress.str();
  return c;
}

// A tiny run into `out` of `steps` steps, checkpointed every `every`, stopped after `stop_after`;
// returns the configuration that resumes it.
inline TrainConfig stopped_run(const std::string& out, int64_t steps, int64_t every, int64_t stop_after) {
  TrainConfig c = tiny(out);
  c.steps = c.optimizer.total_steps = steps;
  c.checkpoint_every = every;
  c.stop_after = stop_after;
  std::ostringstream progress;
  TrainSummary s;
  EXPECT_TRUE(train(c, progress, &s).is_ok()) << progress.str();
  c.stop_after = -1;
  c.resume = c.out_dir;
  return c;
}

inline std::vector<StepRecord> steps_of(const std::string& dir) {
  std::vector<StepRecord> out;
  EXPECT_TRUE(read_train_csv(dir + "/train.csv", &out).is_ok());
  return out;
}

}  // namespace blockscale::train
