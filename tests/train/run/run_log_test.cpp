// train.csv / eval.csv writing, trimming on resume, reading back, summary.json, progress lines.
#include "train/run/run_log.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace blockscale::train {
namespace {

using blockscale_test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A step record with values that differ per step and survive the CSV's precision.
StepRecord step_record(int64_t step) {
  StepRecord r;
  r.step = step;
  r.tokens = step * 4096;
  r.lr = 3e-4 * static_cast<double>(step) / 8.0;
  r.train_loss = 5.0 - 0.25 * static_cast<double>(step);
  r.aux_loss = 0.0125;
  r.grad_norm = 0.875;
  r.step_ms = 100.5 + static_cast<double>(step);
  r.tokens_per_s = 40000.5;
  r.mfu = step % 2 == 0 ? 0.375 : std::nan("");
  return r;
}

EvalRecord eval_record(int64_t step) {
  return EvalRecord{step, step * 4096, 4.5 - 0.125 * static_cast<double>(step)};
}

// Runs steps [from, to] with an eval every second step into `log`.
void run_steps(RunLog* log, int64_t from, int64_t to) {
  for (int64_t s = from; s <= to; ++s) {
    ASSERT_TRUE(log->add_step(step_record(s)).is_ok());
    if (s % 2 == 0) ASSERT_TRUE(log->add_eval(eval_record(s)).is_ok());
  }
}

std::string expected_train_csv(int64_t last) {
  std::string text = std::string(kTrainCsvHeader) + "\n";
  for (int64_t s = 1; s <= last; ++s) text += format_train_row(step_record(s)) + "\n";
  return text;
}

std::string expected_eval_csv(int64_t last) {
  std::string text = std::string(kEvalCsvHeader) + "\n";
  for (int64_t s = 2; s <= last; s += 2) text += format_eval_row(eval_record(s)) + "\n";
  return text;
}

TEST(RunLog, FreshRunWritesHeaderOnceThenRows) {
  TempDir tmp;
  const std::string dir = tmp.file("run");  // not there yet: open creates it
  RunLog log;
  ASSERT_TRUE(RunLog::open(dir, -1, &log).is_ok());
  EXPECT_EQ(slurp(dir + "/train.csv"), std::string(kTrainCsvHeader) + "\n");
  run_steps(&log, 1, 3);
  EXPECT_EQ(slurp(dir + "/train.csv"), expected_train_csv(3));
  EXPECT_EQ(slurp(dir + "/eval.csv"), expected_eval_csv(3));
  EXPECT_EQ(format_train_row(step_record(2)),
            "2,8192,7.500000e-05,4.500000,0.012500,0.875,102.500,40000.5,0.375000");
  const std::string row1 = format_train_row(step_record(1));
  EXPECT_EQ(row1.substr(row1.rfind(',') + 1), "nan");  // mfu unknown
}

TEST(RunLog, ResumeDropsRowsAfterTheCheckpointAndMatchesAnUninterruptedRun) {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  {
    RunLog log;
    ASSERT_TRUE(RunLog::open(dir, -1, &log).is_ok());
    run_steps(&log, 1, 7);  // crashed after step 7; the checkpoint is at step 4
  }
  RunLog log;
  ASSERT_TRUE(RunLog::open(dir, 4, &log).is_ok());
  EXPECT_EQ(slurp(dir + "/train.csv"), expected_train_csv(4));
  EXPECT_EQ(slurp(dir + "/eval.csv"), expected_eval_csv(4));
  ASSERT_EQ(log.steps().size(), 4u);
  EXPECT_EQ(log.steps().back().step, 4);
  EXPECT_EQ(log.steps().back().train_loss, 4.0);
  ASSERT_EQ(log.evals().size(), 2u);
  EXPECT_EQ(log.evals().back().step, 4);
  run_steps(&log, 5, 8);
  EXPECT_EQ(slurp(dir + "/train.csv"), expected_train_csv(8));
  EXPECT_EQ(slurp(dir + "/eval.csv"), expected_eval_csv(8));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 2)
      << "a temporary file was left behind";
}

TEST(RunLog, ResumeWithNothingToDropLeavesTheFilesAndAppends) {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  {
    RunLog log;
    ASSERT_TRUE(RunLog::open(dir, -1, &log).is_ok());
    run_steps(&log, 1, 3);
  }
  RunLog log;
  ASSERT_TRUE(RunLog::open(dir, 100, &log).is_ok());
  EXPECT_EQ(slurp(dir + "/train.csv"), expected_train_csv(3));  // header not repeated
  run_steps(&log, 4, 4);
  EXPECT_EQ(slurp(dir + "/train.csv"), expected_train_csv(4));
  EXPECT_EQ(slurp(dir + "/eval.csv"), expected_eval_csv(4));
}

TEST(RunLog, FreshRunInAnOldDirectoryDropsEveryOldRow) {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  {
    RunLog log;
    ASSERT_TRUE(RunLog::open(dir, -1, &log).is_ok());
    run_steps(&log, 1, 3);
  }
  RunLog log;
  ASSERT_TRUE(RunLog::open(dir, -1, &log).is_ok());
  EXPECT_EQ(slurp(dir + "/train.csv"), std::string(kTrainCsvHeader) + "\n");
  EXPECT_EQ(slurp(dir + "/eval.csv"), std::string(kEvalCsvHeader) + "\n");
  EXPECT_TRUE(log.steps().empty());
}

TEST(RunLog, EmptyExistingFileGetsTheHeader) {
  TempDir tmp;
  spit(tmp.file("train.csv"), "");
  RunLog log;
  ASSERT_TRUE(RunLog::open(tmp.path().string(), 5, &log).is_ok());
  EXPECT_EQ(slurp(tmp.file("train.csv")), std::string(kTrainCsvHeader) + "\n");
}

TEST(RunLog, ResumeDropsALastLineCutOffMidWrite) {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  {
    RunLog log;
    ASSERT_TRUE(RunLog::open(dir, -1, &log).is_ok());
    run_steps(&log, 1, 3);
  }
  spit(dir + "/train.csv", expected_train_csv(3) + "4,16384,1.5e-04,4.0");  // torn: no newline
  RunLog log;
  ASSERT_TRUE(RunLog::open(dir, 10, &log).is_ok());
  EXPECT_EQ(slurp(dir + "/train.csv"), expected_train_csv(3));
  EXPECT_EQ(log.steps().size(), 3u);
}

TEST(RunLog, ResumeRejectsAMalformedRowNamingFileAndLine) {
  TempDir tmp;
  std::string text = expected_train_csv(3);
  text.replace(text.find("\n2,") + 1, 1, "x");  // line 3's step
  spit(tmp.file("train.csv"), text);
  RunLog log;
  const Status s = RunLog::open(tmp.path().string(), 2, &log);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("train.csv:3: column 'step'"), std::string::npos) << s.message();
  EXPECT_EQ(slurp(tmp.file("train.csv")), text);  // untouched
}

TEST(RunLog, HugeValuesPrintInFull) {
  EvalRecord r{1, 2, 1e300};  // a diverged loss: 301 digits before the point, no truncation
  const std::string row = format_eval_row(r);
  EXPECT_EQ(row.size(), 4 + 301 + 7u);
  EXPECT_EQ(row.substr(row.size() - 7), ".000000");
}

TEST(RunLog, ReadBackRoundTrips) {
  TempDir tmp;
  RunLog log;
  ASSERT_TRUE(RunLog::open(tmp.path().string(), -1, &log).is_ok());
  run_steps(&log, 1, 4);
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  ASSERT_TRUE(read_train_csv(tmp.file("train.csv"), &steps).is_ok());
  ASSERT_TRUE(read_eval_csv(tmp.file("eval.csv"), &evals).is_ok());
  ASSERT_EQ(steps.size(), 4u);
  for (int64_t s = 1; s <= 4; ++s) {
    const StepRecord want = step_record(s), got = steps[s - 1];
    EXPECT_EQ(got.step, want.step);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_DOUBLE_EQ(got.lr, want.lr);
    EXPECT_EQ(got.train_loss, want.train_loss);
    EXPECT_EQ(got.aux_loss, want.aux_loss);
    EXPECT_EQ(got.grad_norm, want.grad_norm);
    EXPECT_EQ(got.step_ms, want.step_ms);
    EXPECT_EQ(got.tokens_per_s, want.tokens_per_s);
    if (std::isnan(want.mfu)) {
      EXPECT_TRUE(std::isnan(got.mfu));
    } else {
      EXPECT_EQ(got.mfu, want.mfu);
    }
  }
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[1].step, 4);
  EXPECT_EQ(evals[1].tokens, 4 * 4096);
  EXPECT_EQ(evals[1].eval_loss, 4.0);
}

TEST(RunLog, ReadRejectsMalformedFilesNamingFileAndLine) {
  TempDir tmp;
  const std::string path = tmp.file("eval.csv");
  const std::string header = std::string(kEvalCsvHeader) + "\n";
  struct Case {
    std::string text, want;
  } cases[] = {
      {"", "empty file"},
      {"step,loss\n", "eval.csv:1: header is 'step,loss'"},
      {header + "1,10,3.5\n2,20\n", "eval.csv:3: expected 3 comma-separated fields, got 2"},
      {header + "1,10,3.5\n2,20,3.5,\n", "eval.csv:3: expected 3 comma-separated fields, got 4"},
      {header + "1,10,abc\n", "eval.csv:2: column 'eval_loss': 'abc' is not a number"},
      {header + "1,1.5,3.0\n", "eval.csv:2: column 'tokens': '1.5' is not an integer"},
      {header + "1,10,3.5\n\n2,20,3.0\n", "eval.csv:3: empty line"},
      {header + "2,10,3.5\n1,20,3.0\n", "eval.csv:3: step 1 does not follow step 2"},
      {header + "-1,10,3.5\n", "eval.csv:2: step and tokens must be >= 0"},
  };
  for (const Case& c : cases) {
    spit(path, c.text);
    std::vector<EvalRecord> out;
    const Status s = read_eval_csv(path, &out);
    ASSERT_FALSE(s.is_ok()) << c.text;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s.message();
  }
  spit(path, header + "1,10,3.5\n2,20,3");  // a last line without its newline is still a row
  std::vector<EvalRecord> evals;
  ASSERT_TRUE(read_eval_csv(path, &evals).is_ok());
  EXPECT_EQ(evals.size(), 2u);
  std::vector<StepRecord> steps;
  const Status missing = read_train_csv(tmp.file("nope.csv"), &steps);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("nope.csv"), std::string::npos);
  EXPECT_NE(read_train_csv(path, nullptr).message().find("read_train_csv: out is null"), std::string::npos);
}

TEST(RunLog, RejectsBadArgumentsAndOutOfOrderSteps) {
  TempDir tmp;
  RunLog log;
  EXPECT_NE(RunLog::open(tmp.path().string(), -2, &log).message().find("resume_step"), std::string::npos);
  EXPECT_NE(RunLog::open("", -1, &log).message().find("dir"), std::string::npos);
  EXPECT_NE(RunLog::open(tmp.path().string(), -1, nullptr).message().find("out"), std::string::npos);
  spit(tmp.file("a_file"), "x");
  EXPECT_NE(RunLog::open(tmp.file("a_file"), -1, &log).message().find("not a directory"), std::string::npos);
  EXPECT_NE(log.add_step(step_record(1)).message().find("not open"), std::string::npos);
  EXPECT_FALSE(log.write_summary(nlohmann::json::object()).is_ok());

  ASSERT_TRUE(RunLog::open(tmp.path().string(), -1, &log).is_ok());
  ASSERT_TRUE(log.add_step(step_record(5)).is_ok());
  const Status s = log.add_step(step_record(5));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("step 5 does not follow the last logged step 5"), std::string::npos);
  StepRecord negative = step_record(6);
  negative.tokens = -1;
  EXPECT_FALSE(log.add_step(negative).is_ok());
  ASSERT_TRUE(log.add_eval(eval_record(5)).is_ok());
  EXPECT_FALSE(log.add_eval(eval_record(4)).is_ok());
  EXPECT_EQ(slurp(tmp.file("train.csv")),
            std::string(kTrainCsvHeader) + "\n" + format_train_row(step_record(5)) + "\n");
}

TEST(RunLog, SummaryHoldsConfigAndFinalValues) {
  TempDir tmp;
  RunLog log;
  ASSERT_TRUE(RunLog::open(tmp.path().string(), -1, &log).is_ok());
  run_steps(&log, 1, 5);  // step 5's mfu is NaN
  const nlohmann::json config = {{"recipe", "mxfp8"}, {"layers", 4}, {"lr", 3e-4}};
  ASSERT_TRUE(log.write_summary(config).is_ok());
  const nlohmann::json j = nlohmann::json::parse(slurp(tmp.file("summary.json")));
  EXPECT_EQ(j["config"], config);
  EXPECT_EQ(j["steps"], 5);
  EXPECT_EQ(j["final"]["step"], 5);
  EXPECT_EQ(j["final"]["tokens"], 5 * 4096);
  EXPECT_EQ(j["final"]["train_loss"].get<double>(), 3.75);
  EXPECT_TRUE(j["final"]["mfu"].is_null());
  EXPECT_EQ(j["final"]["eval_step"], 4);
  EXPECT_EQ(j["final"]["eval_loss"].get<double>(), 4.0);
  EXPECT_EQ(tmp.num_entries(), 3u);  // train.csv, eval.csv, summary.json: no temporary left
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(312), "5m12s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(100 * 3600 + 59), "100h00m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::nan("")), "?");
  EXPECT_EQ(format_duration(INFINITY), "?");
}

TEST(Progress, FormatsTheOneLineReport) {
  StepRecord r;
  r.step = 120;
  r.train_loss = 3.4521;
  r.aux_loss = 0.0123;
  r.lr = 2.95e-4;
  r.grad_norm = 0.87;
  r.tokens_per_s = 152300;
  r.mfu = 0.412;
  EXPECT_EQ(
      format_progress(r, 2000, 312),
      "step 120/2000 | loss 3.4521 | aux 0.0123 | lr 2.95e-04 | gnorm 0.87 | 152.3k tok/s | MFU 41.2% | "
      "ETA 5m12s");
  r.mfu = std::nan("");
  r.tokens_per_s = 2.5e6;
  EXPECT_EQ(format_progress(r, 2000, 3725),
            "step 120/2000 | loss 3.4521 | aux 0.0123 | lr 2.95e-04 | gnorm 0.87 | 2.50M tok/s | ETA 1h02m");
  r.tokens_per_s = 812.4;
  EXPECT_NE(format_progress(r, 2000, 1).find("| 812 tok/s | ETA 1s"), std::string::npos);
}

TEST(Progress, EstimatesTimeLeftFromRecentSteps) {
  std::vector<StepRecord> steps(3);
  for (int i = 0; i < 3; ++i) {
    steps[i].step = i + 1;
    steps[i].step_ms = 100.0 * (i + 1);  // 100, 200, 300 ms
  }
  EXPECT_DOUBLE_EQ(estimate_seconds_remaining(steps, 10, 2), 0.25 * 7);  // mean of the last two
  EXPECT_DOUBLE_EQ(estimate_seconds_remaining(steps, 10, 20), 0.2 * 7);  // all three
  EXPECT_EQ(estimate_seconds_remaining(steps, 3, 2), 0.0);
  EXPECT_TRUE(std::isnan(estimate_seconds_remaining({}, 10, 2)));
  EXPECT_TRUE(std::isnan(estimate_seconds_remaining(steps, 10, 0)));
}

}  // namespace
}  // namespace blockscale::train
