// The training loop on the CPU backend: loss falls, a resumed run continues bit-identically, a
// corrupt or mismatched checkpoint is refused, and the recipe comparison writes its plot; the run
// directory's rules (one run at a time, no run mixed into another, no output through a link or
// over a read-only file) and the refusal of a run too large for the machine.
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/status_test.h"  // defines: mentions
#include "tests/temp_dir.h"
#include "tests/train/trainer_test_util.h"
#include "train/run/run_dir.h"
#include "train/run/run_log.h"

namespace blockscale::train {
namespace {

using blockscale_test::mentions;

TEST(Trainer, LossFallsOnTheSyntheticCorpus) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("run"));
  c.steps = c.optimizer.total_steps = 60;
  std::ostringstream progress;
  TrainSummary s;
  ASSERT_TRUE(train(c, progress, &s).is_ok()) << progress.str();
  const std::vector<StepRecord> steps = steps_of(c.out_dir);
  ASSERT_EQ(steps.size(), 60u);
  EXPECT_LT(s.final_eval_loss, std::log(64.0) - 0.3) << progress.str();  // below uniform by a margin
  const nlohmann::json summary = nlohmann::json::parse(blockscale_test::read_file(c.out_dir + "/summary.json"));
  EXPECT_EQ(summary["config"]["parameters"], parameter_count(c.model));
  EXPECT_EQ(summary["config"]["optimizer_state_bytes_per_rank"], 8 * parameter_count(c.model));
  EXPECT_EQ(summary["config"]["batch"], c.batch);
  EXPECT_EQ(summary["config"]["grad_accum"], c.grad_accum);
  EXPECT_NE(progress.str().find("step 60/60"), std::string::npos);
}

// Killed after 17 steps (checkpoints at 10), resumed: every logged loss and norm equals the
// uninterrupted run's, bit for bit (the CSV prints them with fixed digits; the comparison below
// is of the doubles read back).
TEST(Trainer, ResumeIsBitIdentical) {
  blockscale_test::TempDir dir;
  TrainConfig whole = tiny(dir.file("whole"));
  std::ostringstream progress;
  TrainSummary s;
  ASSERT_TRUE(train(whole, progress, &s).is_ok()) << progress.str();

  TrainConfig part = tiny(dir.file("part"));
  part.stop_after = 17;
  ASSERT_TRUE(train(part, progress, &s).is_ok());
  EXPECT_EQ(steps_of(part.out_dir).size(), 17u);
  part.stop_after = -1;
  part.resume = part.out_dir;
  ASSERT_TRUE(train(part, progress, &s).is_ok()) << progress.str();
  EXPECT_NE(progress.str().find("resumed from"), std::string::npos);

  const std::vector<StepRecord> a = steps_of(whole.out_dir), b = steps_of(part.out_dir);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_EQ(a[i].train_loss, b[i].train_loss) << "step " << a[i].step;
    EXPECT_EQ(a[i].grad_norm, b[i].grad_norm) << "step " << a[i].step;
    EXPECT_EQ(a[i].lr, b[i].lr);
  }
  std::vector<EvalRecord> ea, eb;
  ASSERT_TRUE(read_eval_csv(whole.out_dir + "/eval.csv", &ea).is_ok());
  ASSERT_TRUE(read_eval_csv(part.out_dir + "/eval.csv", &eb).is_ok());
  ASSERT_EQ(ea.size(), eb.size());
  for (size_t i = 0; i < ea.size(); ++i) EXPECT_EQ(ea[i].eval_loss, eb[i].eval_loss);
}

TEST(Trainer, RefusesCorruptAndMismatchedCheckpoints) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("run"));
  c.steps = 10;
  std::ostringstream progress;
  TrainSummary s;
  ASSERT_TRUE(train(c, progress, &s).is_ok());

  TrainConfig other = c;
  other.resume = c.out_dir;
  other.model.d_ff = 64;  // a different model: its tensors differ
  Status st = train(other, progress, &s);
  ASSERT_FALSE(st.is_ok());

  other = c;
  other.resume = c.out_dir;
  other.seed = 2;  // same shapes, different run
  st = train(other, progress, &s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("saved with other options: --seed 1 (this run: 2)"), std::string::npos) << st.message();

  const std::string tensors = c.out_dir + "/step_00000010/tensors.safetensors";
  {
    std::fstream f(tensors, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  other = c;
  other.resume = c.out_dir;
  other.steps = 20;
  st = train(other, progress, &s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("tensors"), std::string::npos) << st.message();
}

TEST(Trainer, CompareWritesPlotAndTable) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("cmp"));
  c.model.d_model = 32;
  c.model.d_ff = 32;
  c.batch = 1;
  c.grad_accum = 1;
  c.steps = c.optimizer.total_steps = 6;
  c.eval_every = 3;
  std::ostringstream progress;
  std::vector<TrainSummary> summaries;
  ASSERT_TRUE(compare_recipes(c, {Recipe::kBf16, Recipe::kMxfp8}, progress, &summaries).is_ok())
      << progress.str();
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(c.out_dir + "/compare.svg"));
  EXPECT_TRUE(std::filesystem::exists(c.out_dir + "/mxfp8/eval.csv"));
  EXPECT_NE(progress.str().find("mxfp8"), std::string::npos);
}

TEST(Trainer, ValidationNamesTheFlag) {
  TrainConfig c = tiny("/tmp/unused");
  c.grad_accum = 0;
  Status s = validate(c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--grad-accum"), std::string::npos);
  c = tiny("/tmp/unused");
  c.recipe = Recipe::kFp8Block;  // d_model 32 is not a multiple of 128
  s = validate(c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--d-model"), std::string::npos);
  c = tiny("/tmp/unused");
  c.attention = "flash";
  s = validate(c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(mentions(s, "--attention: expected auto or reference (got 'flash')")) << s.message();
  c = tiny("/tmp/unused");
  c.data.source = "tokens";
  c.data.path = "/nonexistent/tokens.bin";
  std::ostringstream progress;
  s = train(c, progress, nullptr);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("/nonexistent/tokens.bin"), std::string::npos) << s.message();
}

// --checkpoint-every -1 (timing runs of large models) writes no checkpoint, not even the last;
// below -1 is refused naming the flag.
TEST(Trainer, CheckpointEveryMinusOneWritesNone) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("run"));
  c.steps = c.optimizer.total_steps = 4;
  c.checkpoint_every = -1;
  std::ostringstream progress;
  TrainSummary s;
  ASSERT_TRUE(train(c, progress, &s).is_ok()) << progress.str();
  EXPECT_EQ(steps_of(c.out_dir).size(), 4u);
  for (const auto& entry : std::filesystem::directory_iterator(c.out_dir))
    EXPECT_EQ(entry.path().filename().string().rfind("step_", 0), std::string::npos) << entry.path();
  EXPECT_FALSE(std::filesystem::exists(c.out_dir + "/latest"));
  c.checkpoint_every = -2;
  const Status bad = validate(c);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("--checkpoint-every must be >= -1"), std::string::npos) << bad.message();
}

// Resuming a run that has reached --steps is refused and leaves its files as they were (it used to
// succeed and rewrite summary.json with a NaN loss and no timings).
TEST(Trainer, ResumingAFinishedRunIsRefused) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("run"));
  c.steps = c.optimizer.total_steps = 4;
  std::ostringstream progress;
  TrainSummary s;
  ASSERT_TRUE(train(c, progress, &s).is_ok()) << progress.str();
  using blockscale_test::read_file;
  const std::string summary = read_file(c.out_dir + "/summary.json"), csv = read_file(c.out_dir + "/train.csv");
  ASSERT_FALSE(summary.empty());
  TrainConfig again = c;
  again.resume = c.out_dir;
  const Status st = train(again, progress, &s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("--steps"), std::string::npos) << st.message();
  EXPECT_EQ(read_file(c.out_dir + "/summary.json"), summary);
  EXPECT_EQ(read_file(c.out_dir + "/train.csv"), csv);
}

// A resume with an option that changes a tensor's shape names that option (it used to be refused
// by the checkpoint's tensor shapes, before the options were compared).
TEST(Trainer, AResumeOfAnotherShapeNamesTheOption) {
  blockscale_test::TempDir dir;
  TrainConfig again = stopped_run(dir.file("run"), 4, 2, 2);
  again.model.d_ff = 64;
  std::ostringstream progress;
  TrainSummary s;
  const Status st = train(again, progress, &s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("--d-ff 32 (this run: 64)"), std::string::npos) << st.message();
}

// A damaged checkpoint is an error of --resume, not an abort or a hang: a step counter that is
// not a number in state.json, and a tensors.safetensors that never ends (a link to /dev/zero).
TEST(Trainer, ADamagedCheckpointIsRefusedNotAborted) {
  blockscale_test::TempDir dir;
  const TrainConfig again = stopped_run(dir.file("run"), 4, 2, 2);
  std::ostringstream progress;
  TrainSummary s;
  const std::string ckpt = again.out_dir + "/step_00000002";
  const std::string state = blockscale_test::read_file(ckpt + "/state.json");
  const size_t at = state.find("\"step\": 2");
  ASSERT_NE(at, std::string::npos) << state;
  {
    std::string damaged = state;
    std::ofstream(ckpt + "/state.json") << damaged.replace(at, 9, "\"step\": \"2\"");
    const Status st = train(again, progress, &s);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("state.json has no step"), std::string::npos) << st.message();
  }
  std::ofstream(ckpt + "/state.json") << state;
  std::filesystem::remove(ckpt + "/tensors.safetensors");
  std::filesystem::create_symlink("/dev/zero", ckpt + "/tensors.safetensors");
  const Status st = train(again, progress, &s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();
}

// A checkpoint of an earlier version (the batch, the accumulation and the ranks recorded apart,
// no split) resumes as before, and is refused for another number of sequences per step.
TEST(Trainer, ACheckpointOfAnEarlierVersionResumes) {
  blockscale_test::TempDir dir;
  const TrainConfig again = stopped_run(dir.file("run"), 4, 2, 2);
  const std::string path = again.out_dir + "/step_00000002/state.json";
  nlohmann::json j = nlohmann::json::parse(blockscale_test::read_file(path));
  nlohmann::json& state = j["state"];
  ASSERT_TRUE(state["config"].contains("sequences_per_step")) << j.dump();
  state["config"].erase("sequences_per_step");
  state["config"]["batch"] = again.batch;
  state["config"]["grad_accum"] = again.grad_accum;
  state["config"]["ranks"] = 1;
  state.erase("split");
  std::ofstream(path) << j.dump(2);
  std::ostringstream progress;
  TrainSummary s;
  TrainConfig other = again;
  other.grad_accum = again.grad_accum + 1;
  EXPECT_TRUE(mentions(train(other, progress, &s), "the sequences per step"));
  ASSERT_TRUE(train(again, progress, &s).is_ok()) << progress.str();
  EXPECT_NE(progress.str().find("resumed from"), std::string::npos) << progress.str();
}

// A learning rate that blows the weights up: the run stops with an error at the first step whose
// loss or gradient norm is not finite (before: it went on to "loss -nan" and reported success),
// keeps that step in train.csv, and saves no checkpoint from it or after it.
TEST(Trainer, DivergenceStopsTheRunWithAnError) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("run"));
  c.steps = c.optimizer.total_steps = 20;
  c.optimizer.warmup_steps = 0;
  c.optimizer.lr = 1e30f;
  c.checkpoint_every = 1;
  std::ostringstream progress;
  TrainSummary s;
  const Status st = train(c, progress, &s);
  ASSERT_FALSE(st.is_ok()) << progress.str();
  EXPECT_NE(st.message().find("diverged at step "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--lr"), std::string::npos) << st.message();
  const std::vector<StepRecord> steps = steps_of(c.out_dir);
  ASSERT_FALSE(steps.empty());
  const int64_t diverged = steps.back().step;
  EXPECT_LT(diverged, 20);
  EXPECT_FALSE(std::isfinite(steps.back().train_loss) && std::isfinite(steps.back().grad_norm));
  for (size_t i = 0; i + 1 < steps.size(); ++i)
    EXPECT_TRUE(std::isfinite(steps[i].train_loss) && std::isfinite(steps[i].grad_norm)) << "step " << steps[i].step;
  for (const auto& entry : std::filesystem::directory_iterator(c.out_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0) EXPECT_LT(std::stoll(name.substr(5)), diverged) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(c.out_dir + "/summary.json"));
}

// ---- the run directory ---------------------------------------------------------------------------

// Every file under `dir` with its bytes (a directory as "<name>/"): a refused run must change none.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = std::filesystem::relative(e.path(), dir).string();
    files[e.is_directory() ? name + "/" : name] = e.is_directory() ? "" : blockscale_test::read_file(e.path().string());
  }
  return files;
}

// Another run holds the directory (the test holds its lock, as a second `blockscale train` on the
// same --out would): a run there, resumed or overwriting, is refused at once and every file stays
// as it was (before: the second run's start-up trimmed the first's logs and its first save deleted
// the first's checkpoint in progress). Once the lock is free the resume runs.
TEST(Trainer, ASecondRunOnADirectoryInUseIsRefused) {
  blockscale_test::TempDir dir;
  const TrainConfig c = finished_run(dir.file("run"), 10);
  std::ostringstream progress;
  TrainSummary s;
  const auto before = snapshot(c.out_dir);

  RunDirLock other_run;
  ASSERT_TRUE(RunDirLock::acquire(c.out_dir, &other_run));
  TrainConfig resumed = c;
  resumed.resume = c.out_dir;
  resumed.steps = 20;
  TrainConfig overwriting = c;
  overwriting.overwrite = true;
  for (const TrainConfig& second : {resumed, overwriting}) {
    std::ostringstream out;
    const Status st = train(second, out, &s);
    EXPECT_TRUE(mentions(st, "--out '" + c.out_dir + "': another run is using this directory")) << st.message();
    EXPECT_EQ(out.str(), "") << "the refused run printed";
  }
  other_run.release();
  EXPECT_EQ(snapshot(c.out_dir), before);
  ASSERT_TRUE(train(resumed, progress, &s).is_ok()) << progress.str();
  EXPECT_EQ(steps_of(c.out_dir).size(), 20u);
}

// A new run into a directory that holds a run is refused, naming it and both ways on, and the old
// run's files stay as they were (before: its logs were replaced and `latest` moved while its
// checkpoints stayed, two runs mixed in one directory).
TEST(Trainer, ANewRunIntoARunDirectoryIsRefused) {
  blockscale_test::TempDir dir;
  const TrainConfig c = finished_run(dir.file("run"), 10);
  std::ostringstream progress;
  TrainSummary s;
  const auto before = snapshot(c.out_dir);
  TrainConfig again = c;
  again.seed = 2;
  const Status st = train(again, progress, &s);
  EXPECT_TRUE(mentions(st, "--out '" + c.out_dir + "' already holds a run")) << st.message();
  EXPECT_TRUE(mentions(st, "--resume " + c.out_dir)) << st.message();
  EXPECT_TRUE(mentions(st, "--overwrite")) << st.message();
  EXPECT_EQ(snapshot(c.out_dir), before);
}

// --overwrite deletes the old run's logs and checkpoints, and nothing else of the directory,
// before the new run writes its own.
TEST(Trainer, OverwriteReplacesTheRun) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("run"));
  c.steps = c.optimizer.total_steps = 4;
  c.checkpoint_every = 1;
  c.keep_checkpoints = 10;
  std::ostringstream progress;
  TrainSummary s;
  ASSERT_TRUE(train(c, progress, &s).is_ok()) << progress.str();
  std::ofstream(c.out_dir + "/notes.txt") << "mine";
  TrainConfig again = c;
  again.overwrite = true;
  again.seed = 2;
  again.steps = again.optimizer.total_steps = 2;
  again.checkpoint_every = 0;
  ASSERT_TRUE(train(again, progress, &s).is_ok()) << progress.str();
  EXPECT_EQ(steps_of(c.out_dir).size(), 2u);
  EXPECT_EQ(run_files(c.out_dir),
            (std::vector<std::string>{"eval.csv", "latest", "step_00000002", "summary.json", "train.csv"}));
  EXPECT_EQ(blockscale_test::read_file(c.out_dir + "/latest"), "step_00000002\n");
  EXPECT_EQ(blockscale_test::read_file(c.out_dir + "/notes.txt"), "mine");
  EXPECT_FALSE(std::filesystem::exists(c.out_dir + "/.lock"));
}

// --resume continues a run in its own directory as before; with --overwrite it is refused.
TEST(Trainer, ResumeContinuesTheRunInItsDirectory) {
  blockscale_test::TempDir dir;
  TrainConfig resumed = stopped_run(dir.file("run"), 10, 5, 7);
  std::ostringstream progress;
  TrainSummary s;
  resumed.overwrite = true;
  EXPECT_TRUE(mentions(train(resumed, progress, &s), "--overwrite and --resume exclude each other"));
  resumed.overwrite = false;
  ASSERT_TRUE(train(resumed, progress, &s).is_ok()) << progress.str();
  const std::vector<StepRecord> steps = steps_of(resumed.out_dir);
  ASSERT_EQ(steps.size(), 10u);
  EXPECT_EQ(steps[5].step, 6);  // the rows after the checkpoint at 5 were written again, once
}

// The run's outputs are not written through a symbolic link or over a read-only file: the run is
// refused naming the file, and the link's target and the read-only file keep their bytes (before:
// the link was replaced or appended through, the read-only file replaced).
TEST(Trainer, LinkedOrReadOnlyOutputsAreRefused) {
  blockscale_test::TempDir dir;
  using blockscale_test::read_file;
  const std::string target = dir.file("elsewhere.csv");
  std::ofstream(target) << "precious\n";
  TrainConfig c = tiny(dir.file("linked"));
  std::filesystem::create_directories(c.out_dir);
  std::filesystem::create_symlink(target, c.out_dir + "/train.csv");
  std::ostringstream progress;
  TrainSummary s;
  for (bool overwrite : {false, true}) {
    c.overwrite = overwrite;
    const Status st = train(c, progress, &s);
    EXPECT_TRUE(mentions(st, "'" + c.out_dir + "/train.csv' is a symbolic link")) << st.message();
    EXPECT_EQ(read_file(target), "precious\n");
  }
  EXPECT_TRUE(std::filesystem::is_symlink(c.out_dir + "/train.csv"));

  TrainConfig ro = tiny(dir.file("read_only"));
  ro.steps = ro.optimizer.total_steps = 4;
  ASSERT_TRUE(train(ro, progress, &s).is_ok()) << progress.str();
  const std::string summary = ro.out_dir + "/summary.json";
  std::filesystem::permissions(summary, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                            std::filesystem::perms::others_read);
  const auto before = snapshot(ro.out_dir);
  TrainConfig resumed = ro;
  resumed.resume = ro.out_dir;
  resumed.steps = 8;
  const Status st = train(resumed, progress, &s);
  EXPECT_TRUE(mentions(st, "'" + summary + "' is read-only")) << st.message();
  EXPECT_EQ(snapshot(ro.out_dir), before);
}

// A model too large for the machine (every value inside its documented range) is refused before
// anything is allocated or written, naming what it needs and what the machine has (before:
// std::bad_alloc, an abort).
TEST(Trainer, ARunTooLargeForTheMachineIsRefused) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("run"));
  c.model.d_model = 4096;
  c.model.d_ff = 262144;
  c.model.n_layers = 64;
  c.model.n_experts = 64;
  std::ostringstream progress;
  const Status st = train(c, progress, nullptr);
  EXPECT_TRUE(mentions(st, "the run needs about ")) << st.message();
  EXPECT_TRUE(mentions(st, " of host memory (parameters, gradients and AdamW state ")) << st.message();
  EXPECT_TRUE(mentions(st, "; this machine has ")) << st.message();
  EXPECT_FALSE(std::filesystem::exists(c.out_dir));
}

// A comparison refuses a directory holding an earlier comparison before it trains anything;
// --overwrite replaces it.
TEST(Trainer, CompareRefusesAnEarlierComparisonUnlessOverwritten) {
  blockscale_test::TempDir dir;
  TrainConfig c = tiny(dir.file("cmp"));
  c.batch = 1;
  c.grad_accum = 1;
  c.steps = c.optimizer.total_steps = 2;
  c.eval_every = 0;
  std::ostringstream progress;
  std::vector<TrainSummary> summaries;
  ASSERT_TRUE(compare_recipes(c, {Recipe::kBf16}, progress, &summaries).is_ok()) << progress.str();
  std::ostringstream second;
  const Status st = compare_recipes(c, {Recipe::kBf16}, second, &summaries);
  EXPECT_TRUE(mentions(st, "--out '" + c.out_dir + "' already holds a run (compare.svg)")) << st.message();
  EXPECT_EQ(second.str(), "") << "trained before refusing";
  c.overwrite = true;
  ASSERT_TRUE(compare_recipes(c, {Recipe::kBf16}, progress, &summaries).is_ok()) << progress.str();
}

}  // namespace
}  // namespace blockscale::train
