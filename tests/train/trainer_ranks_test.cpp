// The training loop with several ranks (threads of one LocalGroup, CPU backend): two ranks follow
// one with the same global batch, a checkpoint resumes on another number of ranks, the sharded
// optimizer updates as the unsharded one and its checkpoints resume on any split, each rank
// draws its own stochastic rounding.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/status_test.h"  // defines: mentions
#include "tests/temp_dir.h"
#include "tests/train/trainer_test_util.h"
#include "train/parallel/optimizer_shards.h"  // defines: reduction_buckets
#include "train/trainer.h"

namespace blockscale::train {
namespace {

using blockscale_test::mentions;

// Trains `c` as two ranks (threads of one LocalGroup), rank r into out_dirs[r], its progress into
// out[r] and its summary into s[r].
void train_two_ranks(TrainConfig c, const std::string (&out_dirs)[2], std::ostringstream (&out)[2],
                     TrainSummary (&s)[2]) {
  LocalGroup group(2);
  std::vector<Status> status(2, Status::ok());
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      TrainConfig rank_config = c;
      rank_config.out_dir = out_dirs[r];
      const std::unique_ptr<Communicator> comm = group.member(r);
      status[r] = train(rank_config, out[r], &s[r], comm.get());
    });
  }
  for (std::thread& t : ranks) t.join();
  ASSERT_TRUE(status[0].is_ok()) << status[0].message();
  ASSERT_TRUE(status[1].is_ok()) << status[1].message();
}

// Data parallelism (ranks as threads of one LocalGroup): two ranks with 2 sequences each follow
// the one-rank run with 4 (same global batch, same samples), to float summation order; only
// rank 0 writes the logs.
TEST(Trainer, TwoRanksFollowOneRankWithTheSameGlobalBatch) {
  blockscale_test::TempDir dir;
  TrainConfig one = tiny(dir.file("one"));
  one.batch = 4;
  std::ostringstream progress;
  TrainSummary s1;
  ASSERT_TRUE(train(one, progress, &s1).is_ok()) << progress.str();

  std::ostringstream out[2];
  TrainSummary s2[2];
  TrainConfig two = tiny("");
  two.batch = 2;
  train_two_ranks(two, {dir.file("two"), dir.file("two_rank1")}, out, s2);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(out[1].str().empty()) << "rank 1 printed: " << out[1].str();
  EXPECT_FALSE(std::filesystem::exists(dir.file("two_rank1") + "/train.csv"));
  EXPECT_NE(out[0].str().find("over 2 ranks"), std::string::npos) << out[0].str();

  // Step 1 starts from the same weights on the same samples: equal losses. Its gradients differ
  // by summation order and by the load-balancing loss, which each rank takes over its own tokens
  // (as Megatron does); AdamW then spreads that noise, to ~1e-4 of the loss after 30 steps.
  const std::vector<StepRecord> a = steps_of(one.out_dir), b = steps_of(dir.file("two"));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NEAR(a[0].train_loss, b[0].train_loss, 1e-6 * a[0].train_loss);
  EXPECT_NEAR(a[0].grad_norm, b[0].grad_norm, 1e-4 * a[0].grad_norm);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "step " << a[i].step;
    EXPECT_NEAR(a[i].train_loss, b[i].train_loss, 1e-3 * a[i].train_loss) << "step " << a[i].step;
  }
  EXPECT_NEAR(s1.final_eval_loss, s2[0].final_eval_loss, 1e-3 * s1.final_eval_loss);
  EXPECT_EQ(s2[0].final_eval_loss, s2[1].final_eval_loss);  // every rank learns the same eval
}

// A checkpoint of two ranks resumes on one rank that takes the same sequences per step (a larger
// batch, or more accumulation): the run goes on over the same samples with the same schedule, to
// float summation order. Another number of sequences per step is refused, naming it.
TEST(Trainer, TwoRanksResumeOnOneWithTheSameSequencesPerStep) {
  blockscale_test::TempDir dir;
  TrainConfig one = tiny(dir.file("one"));
  one.batch = 4;  // x --grad-accum 2 = 8 sequences per step
  std::ostringstream progress;
  TrainSummary s1;
  ASSERT_TRUE(train(one, progress, &s1).is_ok()) << progress.str();
  const std::vector<StepRecord> ref = steps_of(one.out_dir);

  TrainConfig two = tiny("");
  two.batch = 2;       // x --grad-accum 2 x 2 ranks = 8
  two.stop_after = 10;  // the checkpoint of step 10, then stopped
  std::ostringstream out[2];
  TrainSummary s2[2];
  train_two_ranks(two, {dir.file("two"), dir.file("two_rank1")}, out, s2);
  if (HasFatalFailure()) return;

  struct Split {
    int batch, grad_accum;
  };
  for (const Split split : {Split{4, 2}, Split{8, 1}}) {
    const std::string run = dir.file("resumed_b" + std::to_string(split.batch));
    std::filesystem::copy(dir.file("two"), run, std::filesystem::copy_options::recursive);
    TrainConfig resumed = tiny(run);
    resumed.batch = split.batch, resumed.grad_accum = split.grad_accum;
    resumed.resume = run;
    std::ostringstream p;
    TrainSummary s;
    ASSERT_TRUE(train(resumed, p, &s).is_ok()) << p.str();
    const std::string note = "(saved as 2 ranks x --batch 2 x --grad-accum 2, now 1 rank x --batch " +
                             std::to_string(split.batch) + " x --grad-accum " + std::to_string(split.grad_accum);
    EXPECT_NE(p.str().find(note), std::string::npos) << p.str();
    const std::vector<StepRecord> got = steps_of(run);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[i].tokens, ref[i].tokens) << "step " << ref[i].step;
      EXPECT_EQ(got[i].lr, ref[i].lr) << "step " << ref[i].step;
      EXPECT_NEAR(got[i].train_loss, ref[i].train_loss, 1e-3 * ref[i].train_loss) << "step " << ref[i].step;
    }
  }

  TrainConfig fewer = tiny(dir.file("two"));
  fewer.batch = 2;  // 1 rank: 4 sequences per step
  fewer.resume = fewer.out_dir;
  TrainSummary s;
  const Status st = train(fewer, progress, &s);
  EXPECT_TRUE(mentions(st, "the sequences per step (--batch x --grad-accum x ranks) 8 (this run: 4)")) << st.message();
}

// The sharded optimizer (ranks as threads, the CPU step): without clipping every step is the
// unsharded run's to the bit (the same update of every element, the parameters gathered back) and
// so is every checkpoint (the moments gathered from the ranks' shares); each rank holds half the
// moments. With clipping the norm is summed in another order: the same to float rounding.
// Widths of 33 make buckets of odd sizes, whose last element (the tail) both ranks hold.
TrainConfig odd_buckets(TrainConfig c) {
  c.model.d_model = 33, c.model.n_heads = 3;
  const std::vector<std::pair<int64_t, int64_t>> buckets = reduction_buckets(make_param_layout(c.model));
  EXPECT_TRUE(std::any_of(buckets.begin(), buckets.end(), [](const auto& b) { return (b.second - b.first) % 2 == 1; }))
      << "no bucket has a tail";
  return c;
}

TEST(Trainer, TheShardedOptimizerUpdatesAsTheUnshardedOne) {
  blockscale_test::TempDir dir;
  for (const float clip : {0.0f, 0.05f}) {
    TrainConfig c = odd_buckets(tiny(""));
    c.optimizer.clip_norm = clip;
    c.steps = c.optimizer.total_steps = 12;
    c.checkpoint_every = 6;
    const std::string tag = clip == 0 ? "noclip" : "clip";
    std::ostringstream out[2], sharded_out[2];
    TrainSummary s[2], sharded_s[2];
    train_two_ranks(c, {dir.file(tag + "_plain"), dir.file(tag + "_plain1")}, out, s);
    c.shard_optimizer = true;
    train_two_ranks(c, {dir.file(tag + "_sharded"), dir.file(tag + "_sharded1")}, sharded_out, sharded_s);
    if (HasFatalFailure()) return;
    EXPECT_NE(sharded_out[0].str().find("MiB per rank (sharded)"), std::string::npos) << sharded_out[0].str();
    const std::vector<StepRecord> a = steps_of(dir.file(tag + "_plain")), b = steps_of(dir.file(tag + "_sharded"));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      if (clip == 0) {
        EXPECT_EQ(a[i].train_loss, b[i].train_loss) << "step " << a[i].step;
      } else {
        EXPECT_NEAR(a[i].train_loss, b[i].train_loss, 1e-5 * a[i].train_loss) << "step " << a[i].step;
      }
      EXPECT_NEAR(a[i].grad_norm, b[i].grad_norm, 1e-9 * a[i].grad_norm) << "step " << a[i].step;
    }
    if (clip == 0) {
      for (const char* step : {"/step_00000006", "/step_00000012"}) {
        EXPECT_EQ(blockscale_test::read_file(dir.file(tag + "_plain") + step + "/tensors.safetensors"),
                  blockscale_test::read_file(dir.file(tag + "_sharded") + step + "/tensors.safetensors"))
            << step << ": the checkpoints differ";
      }
    }
    const auto bytes = [&](const std::string& run) {
      return nlohmann::json::parse(blockscale_test::read_file(run + "/summary.json"))["config"]
                                  ["optimizer_state_bytes_per_rank"].get<int64_t>();
    };
    const int64_t full = bytes(dir.file(tag + "_plain")), half = bytes(dir.file(tag + "_sharded"));
    EXPECT_EQ(full, 8 * parameter_count(c.model));
    EXPECT_GT(half, full / 2 - 64);  // each bucket's tail (< 2 elements) is held by both ranks
    EXPECT_LT(half, full / 2 + 64);
  }
}

// A sharded two-rank run stopped at step 6 resumes, sharded on two ranks, to the bit of the run
// that was not stopped, and on one rank (unsharded, the same sequences per step) to rounding.
TEST(Trainer, AShardedCheckpointResumesOnAnyNumberOfRanks) {
  blockscale_test::TempDir dir;
  TrainConfig c = odd_buckets(tiny(""));
  c.steps = c.optimizer.total_steps = 12;
  c.checkpoint_every = 6;
  c.shard_optimizer = true;
  std::ostringstream out[2];
  TrainSummary s[2];
  train_two_ranks(c, {dir.file("whole"), dir.file("whole1")}, out, s);
  c.stop_after = 6;
  train_two_ranks(c, {dir.file("part"), dir.file("part1")}, out, s);
  if (HasFatalFailure()) return;
  std::filesystem::copy(dir.file("part"), dir.file("single"), std::filesystem::copy_options::recursive);
  c.stop_after = -1;
  c.resume = dir.file("part");
  std::ostringstream again[2];
  train_two_ranks(c, {dir.file("part"), dir.file("part1")}, again, s);
  if (HasFatalFailure()) return;
  const std::vector<StepRecord> whole = steps_of(dir.file("whole")), part = steps_of(dir.file("part"));
  ASSERT_EQ(whole.size(), part.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(whole[i].train_loss, part[i].train_loss) << "step " << i + 1;

  TrainConfig one = odd_buckets(tiny(dir.file("single")));
  one.steps = one.optimizer.total_steps = 12;
  one.checkpoint_every = 6;
  one.batch = 2 * c.batch;
  one.resume = one.out_dir;
  std::ostringstream p;
  TrainSummary s1;
  ASSERT_TRUE(train(one, p, &s1).is_ok()) << p.str();
  const std::vector<StepRecord> single = steps_of(one.out_dir);
  ASSERT_EQ(single.size(), whole.size());
  for (size_t i = 6; i < whole.size(); ++i)
    EXPECT_NEAR(single[i].train_loss, whole[i].train_loss, 1e-3 * whole[i].train_loss) << "step " << i + 1;
}

// nvfp4 rounds its gradients stochastically, keyed by the micro-batch's index over all ranks:
// two ranks with one micro-batch each draw the streams that one rank accumulating the same two
// micro-batches draws, so the first steps agree to summation order. (Keyed by the step alone,
// both ranks would draw rank 0's stream: rank 1's gradients rounded otherwise, the gradient norm
// a rounding noise apart.)
TEST(Trainer, RanksDrawTheirOwnStochasticRounding) {
  blockscale_test::TempDir dir;
  TrainConfig accum = tiny(dir.file("accum"));
  accum.recipe = Recipe::kNvfp4;
  accum.steps = accum.optimizer.total_steps = 2;
  accum.eval_every = 0, accum.checkpoint_every = 0;
  std::ostringstream progress;
  TrainSummary s1;
  ASSERT_TRUE(train(accum, progress, &s1).is_ok()) << progress.str();

  std::ostringstream out[2];
  TrainSummary s2[2];
  TrainConfig two = accum;
  two.grad_accum = 1;
  train_two_ranks(two, {dir.file("two"), dir.file("two_rank1")}, out, s2);
  if (HasFatalFailure()) return;
  const std::vector<StepRecord> a = steps_of(accum.out_dir), b = steps_of(dir.file("two"));
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  std::printf("nvfp4 step 1 gradient norm: 1 rank accumulating %.9g, 2 ranks %.9g\n", a[0].grad_norm, b[0].grad_norm);
  EXPECT_NEAR(a[0].grad_norm, b[0].grad_norm, 1e-5 * a[0].grad_norm);
  EXPECT_NEAR(a[0].train_loss, b[0].train_loss, 1e-6 * a[0].train_loss);
}

}  // namespace
}  // namespace blockscale::train
