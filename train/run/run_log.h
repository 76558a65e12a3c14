// The metrics a training run records: one CSV row per optimizer step (train.csv) and per
// evaluation (eval.csv), a summary.json at the end, and the one-line progress report.
//
//   train.csv columns: step,tokens,lr,train_loss,aux_loss,grad_norm,step_ms,tokens_per_s,mfu
//   eval.csv  columns: step,tokens,eval_loss
//
// Numbers: step and tokens as integers; lr as %.6e; losses as %.6f; grad_norm as %.6g; step_ms as
// %.3f; tokens_per_s as %.1f; mfu (a fraction of peak, 0..1) as %.6f or "nan" when unknown (CPU).
// The same record always prints the same bytes, so a resumed run's files match an uninterrupted
// one's. A non-finite value prints as nan/inf and reads back as such (a diverged loss is data).
//
//   defines: StepRecord, EvalRecord, RunLog, read_train_csv, read_eval_csv,
//            estimate_seconds_remaining, format_progress, format_duration
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "formats/status.h"

namespace blockscale::train {

inline constexpr const char* kTrainCsvHeader =
    "step,tokens,lr,train_loss,aux_loss,grad_norm,step_ms,tokens_per_s,mfu";
inline constexpr const char* kEvalCsvHeader = "step,tokens,eval_loss";

struct StepRecord {
  int64_t step = 0;
  int64_t tokens = 0;  // tokens seen so far, this step included
  double lr = 0;
  double train_loss = 0;
  double aux_loss = 0;  // MoE load-balancing loss (0 for a dense model)
  double grad_norm = 0;
  double step_ms = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // fraction of the device's peak; NaN when unknown
};

struct EvalRecord {
  int64_t step = 0;
  int64_t tokens = 0;
  double eval_loss = 0;
};

// Appends to <dir>/train.csv and <dir>/eval.csv. Steps (and eval steps) must strictly increase.
class RunLog {
 public:
  RunLog();
  ~RunLog();
  RunLog(RunLog&&) noexcept;
  RunLog& operator=(RunLog&&) noexcept;
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // Opens the two CSVs for append, creating `dir` if needed; the header is written only to a new
  // or empty file. Rows with step > `resume_step` already in the files (written after the
  // checkpoint we resume from) are dropped first (temp + rename), so resuming reproduces an
  // uninterrupted run's files. resume_step = -1 starts afresh: every earlier row is dropped.
  // A last line cut off mid-write (no newline, does not parse) is dropped; any other malformed
  // row, or a header other than the one above, is an error naming file:line.
  static Status open(const std::string& dir, int64_t resume_step, RunLog* out);

  Status add_step(const StepRecord& r);  // one CSV row, flushed
  Status add_eval(const EvalRecord& r);

  // <dir>/summary.json, atomically: {"config": config, "final": {last step's fields,
  // "eval_step", "eval_loss" of the last eval}, "steps": number of step records}. NaN -> null.
  Status write_summary(const nlohmann::json& config) const;

  // Everything this log has seen, the rows kept on open included.
  const std::vector<StepRecord>& steps() const { return steps_; }
  const std::vector<EvalRecord>& evals() const { return evals_; }
  const std::string& dir() const { return dir_; }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const;
  };
  std::string dir_;
  std::unique_ptr<std::FILE, FileCloser> train_file_;
  std::unique_ptr<std::FILE, FileCloser> eval_file_;
  std::vector<StepRecord> steps_;
  std::vector<EvalRecord> evals_;
};

// Read a run's CSVs back (to plot runs made earlier). Errors name path:line and the rule.
Status read_train_csv(const std::string& path, std::vector<StepRecord>* out);
Status read_eval_csv(const std::string& path, std::vector<EvalRecord>* out);

// The CSV row (no newline) for a record, exactly as RunLog writes it.
std::string format_train_row(const StepRecord& r);
std::string format_eval_row(const EvalRecord& r);

// Seconds left: the mean step_ms of the last `window` records times the steps still to run
// (total_steps - last step). NaN when `steps` is empty or window < 1.
double estimate_seconds_remaining(const std::vector<StepRecord>& steps, int64_t total_steps, int window = 20);

// "step 120/2000 | loss 3.4521 | aux 0.0123 | lr 2.95e-04 | gnorm 0.87 | 152.3k tok/s |
//  MFU 41.2% | ETA 5m12s" (one line). MFU is left out when NaN; ETA is format_duration's.
std::string format_progress(const StepRecord& r, int64_t total_steps, double seconds_remaining);

// Rounded to whole seconds: "42s", "5m12s", "1h02m" (seconds dropped past an hour); "?" for a
// negative or non-finite input.
std::string format_duration(double seconds);

}  // namespace blockscale::train
