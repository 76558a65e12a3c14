// train.csv / eval.csv writing, reading and trimming on resume; summary.json; progress lines.
#include "train/run/run_log.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "formats/io/tensor_view.h"  // defines: io::detail::write_file_atomically (temp + fsync + rename)
#include "train/run/printf_string.h"  // defines: printf_string

namespace blockscale::train {
namespace {

namespace fs = std::filesystem;

// Whole-field parses: "12x", "" and " 12" are errors, as a hand-edited file should get one.
bool parse_int(const std::string& s, int64_t* v) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *v = x;
  return true;
}

bool parse_double(const std::string& s, double* v) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return *end == '\0';
}

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

// One CSV column: its name and where its value goes (an integer or a double).
struct Column {
  const char* name;
  int64_t* i;
  double* d;
};
// Parses one data row into the columns' targets; returns "" or what is wrong with it.
std::string parse_columns(const std::string& line, const std::vector<Column>& columns) {
  const std::vector<std::string> fields = split_fields(line);
  if (fields.size() != columns.size()) {
    return "expected " + std::to_string(columns.size()) + " comma-separated fields, got " +
           std::to_string(fields.size());
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    const bool ok = columns[c].i ? parse_int(fields[c], columns[c].i) : parse_double(fields[c], columns[c].d);
    if (!ok) {
      return std::string("column '") + columns[c].name + "': '" + fields[c] + "' is not " +
             (columns[c].i ? "an integer" : "a number");
    }
  }
  return "";
}
std::string parse_row(const std::string& line, StepRecord* r) {
  return parse_columns(line, {{"step", &r->step, nullptr},
                              {"tokens", &r->tokens, nullptr},
                              {"lr", nullptr, &r->lr},
                              {"train_loss", nullptr, &r->train_loss},
                              {"aux_loss", nullptr, &r->aux_loss},
                              {"grad_norm", nullptr, &r->grad_norm},
                              {"step_ms", nullptr, &r->step_ms},
                              {"tokens_per_s", nullptr, &r->tokens_per_s},
                              {"mfu", nullptr, &r->mfu}});
}
std::string parse_row(const std::string& line, EvalRecord* r) {
  return parse_columns(
      line,
      {{"step", &r->step, nullptr}, {"tokens", &r->tokens, nullptr}, {"eval_loss", nullptr, &r->eval_loss}});
}

// A parsed CSV: its records and, for each, the line it came from (kept verbatim on resume).
template <typename Record>
struct ParsedCsv {
  std::vector<Record> records;
  std::vector<std::string> lines;
};

// Parses a whole CSV held in `text`. With `drop_torn_tail`, an unparsable last line without
// its newline is taken for a write cut off by a crash and dropped.
template <typename Record>
Status parse_csv(const std::string& path, const std::string& text, const char* header, bool drop_torn_tail,
                 ParsedCsv<Record>* out) {
  if (text.empty()) return Status::error("'" + path + "': empty file (expected the header '" + header + "')");
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
    start = end + 1;
  }
  const bool unterminated = text.back() != '\n';
  if (lines[0] != header) {
    return Status::error(path + ":1: header is '" + lines[0] + "', expected '" + header + "'");
  }
  for (size_t n = 1; n < lines.size(); ++n) {
    const std::string where = path + ":" + std::to_string(n + 1) + ": ";
    Record r;
    const std::string problem = lines[n].empty() ? "empty line" : parse_row(lines[n], &r);
    if (!problem.empty()) {
      if (drop_torn_tail && unterminated && n + 1 == lines.size()) break;
      return Status::error(where + problem);
    }
    if (r.step < 0 || r.tokens < 0) return Status::error(where + "step and tokens must be >= 0");
    if (!out->records.empty() && r.step <= out->records.back().step) {
      return Status::error(where + "step " + std::to_string(r.step) + " does not follow step " +
                           std::to_string(out->records.back().step) + " (steps must increase)");
    }
    out->records.push_back(r);
    out->lines.push_back(lines[n]);
  }
  return Status::ok();
}

Status read_text(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("'" + path + "': cannot open: " + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::error("'" + path + "': read failed");
  *text = buf.str();
  return Status::ok();
}

template <typename Record>
Status read_csv(const char* fn, const std::string& path, const char* header, std::vector<Record>* out) {
  if (out == nullptr) return Status::error(std::string(fn) + ": out is null");
  std::string text;
  BS_RETURN_IF_ERROR(read_text(path, &text));
  ParsedCsv<Record> parsed;
  BS_RETURN_IF_ERROR(parse_csv(path, text, header, /*drop_torn_tail=*/false, &parsed));
  *out = std::move(parsed.records);
  return Status::ok();
}

// Keeps the rows of `path` with step <= resume_step (rewriting the file only when that changes
// it), then opens it for append.
template <typename Record>
Status trim_and_open(const std::string& path, const char* header, int64_t resume_step,
                     std::vector<Record>* kept, std::FILE** file) {
  std::string old_text;
  std::error_code ec;
  if (fs::exists(path, ec)) BS_RETURN_IF_ERROR(read_text(path, &old_text));
  std::string new_text = std::string(header) + "\n";
  if (!old_text.empty()) {
    ParsedCsv<Record> parsed;
    BS_RETURN_IF_ERROR(parse_csv(path, old_text, header, /*drop_torn_tail=*/true, &parsed));
    for (size_t i = 0; i < parsed.records.size() && parsed.records[i].step <= resume_step; ++i) {
      kept->push_back(parsed.records[i]);
      new_text += parsed.lines[i] + "\n";
    }
  }
  if (new_text != old_text) {
    const Status s = io::detail::write_file_atomically(path, new_text);
    if (!s) return Status::error("rewriting '" + path + "' failed: " + s.message());
  }
  *file = std::fopen(path.c_str(), "a");
  if (*file == nullptr) {
    return Status::error("cannot open '" + path + "' for append: " + std::strerror(errno));
  }
  return Status::ok();
}

// add_step and add_eval: the checks, then one flushed row; `records` grows only when it is written.
template <typename Record>
Status append_record(const std::string& fn, std::FILE* f, const std::string& path, const std::string& row,
                     const Record& r, std::vector<Record>* records) {
  if (f == nullptr) return Status::error(fn + ": the log is not open (call RunLog::open)");
  if (r.step < 0 || r.tokens < 0) {
    return Status::error(fn + ": step and tokens must be >= 0, got step " + std::to_string(r.step) +
                         ", tokens " + std::to_string(r.tokens));
  }
  if (!records->empty() && r.step <= records->back().step) {
    return Status::error(fn + ": step " + std::to_string(r.step) + " does not follow the last logged step " +
                         std::to_string(records->back().step) + " (steps must increase)");
  }
  const std::string line = row + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f) != line.size() || std::fflush(f) != 0) {
    return Status::error("writing '" + path + "' failed: " + std::strerror(errno));
  }
  records->push_back(r);
  return Status::ok();
}

nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

}  // namespace

void RunLog::FileCloser::operator()(std::FILE* f) const {
  if (f != nullptr) std::fclose(f);
}

RunLog::RunLog() = default;
RunLog::~RunLog() = default;
RunLog::RunLog(RunLog&&) noexcept = default;
RunLog& RunLog::operator=(RunLog&&) noexcept = default;

Status RunLog::open(const std::string& dir, int64_t resume_step, RunLog* out) {
  if (out == nullptr) return Status::error("RunLog::open: out is null");
  if (dir.empty()) return Status::error("RunLog::open: dir is empty");
  if (resume_step < -1) {
    return Status::error("RunLog::open: resume_step must be >= -1 (-1: a fresh run), got " +
                         std::to_string(resume_step));
  }
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir)) {
      return Status::error("'" + dir + "' is not a directory and cannot be created" +
                           (ec ? ": " + ec.message() : std::string()));
    }
    RunLog log;
    log.dir_ = dir;
    std::FILE* f = nullptr;
    BS_RETURN_IF_ERROR(
        trim_and_open((fs::path(dir) / "train.csv").string(), kTrainCsvHeader, resume_step, &log.steps_, &f));
    log.train_file_.reset(f);
    BS_RETURN_IF_ERROR(
        trim_and_open((fs::path(dir) / "eval.csv").string(), kEvalCsvHeader, resume_step, &log.evals_, &f));
    log.eval_file_.reset(f);
    *out = std::move(log);
    return Status::ok();
  } catch (const std::exception& e) {
    return Status::error("'" + dir + "': " + e.what());
  }
}

Status RunLog::add_step(const StepRecord& r) {
  return append_record("RunLog::add_step", train_file_.get(), dir_ + "/train.csv", format_train_row(r), r,
                       &steps_);
}

Status RunLog::add_eval(const EvalRecord& r) {
  return append_record("RunLog::add_eval", eval_file_.get(), dir_ + "/eval.csv", format_eval_row(r), r,
                       &evals_);
}

Status RunLog::write_summary(const nlohmann::json& config) const {
  if (dir_.empty()) return Status::error("RunLog::write_summary: the log is not open (call RunLog::open)");
  const std::string path = (fs::path(dir_) / "summary.json").string();
  try {
    nlohmann::json final_values = nlohmann::json::object();
    if (!steps_.empty()) {
      const StepRecord& r = steps_.back();
      final_values["step"] = r.step;
      final_values["tokens"] = r.tokens;
      final_values["lr"] = number_or_null(r.lr);
      final_values["train_loss"] = number_or_null(r.train_loss);
      final_values["aux_loss"] = number_or_null(r.aux_loss);
      final_values["grad_norm"] = number_or_null(r.grad_norm);
      final_values["step_ms"] = number_or_null(r.step_ms);
      final_values["tokens_per_s"] = number_or_null(r.tokens_per_s);
      final_values["mfu"] = number_or_null(r.mfu);
    }
    if (!evals_.empty()) {
      final_values["eval_step"] = evals_.back().step;
      final_values["eval_loss"] = number_or_null(evals_.back().eval_loss);
    }
    const nlohmann::json summary = {
        {"config", config}, {"final", final_values}, {"steps", static_cast<int64_t>(steps_.size())}};
    const Status s = io::detail::write_file_atomically(path, summary.dump(2) + "\n");
    if (!s) return Status::error("writing '" + path + "' failed: " + s.message());
    return Status::ok();
  } catch (const std::exception& e) {  // dump() throws on a config holding invalid UTF-8
    return Status::error("'" + path + "': the configuration cannot be written as JSON: " + std::string(e.what()));
  }
}

Status read_train_csv(const std::string& path, std::vector<StepRecord>* out) {
  return read_csv("read_train_csv", path, kTrainCsvHeader, out);
}

Status read_eval_csv(const std::string& path, std::vector<EvalRecord>* out) {
  return read_csv("read_eval_csv", path, kEvalCsvHeader, out);
}

std::string format_train_row(const StepRecord& r) {
  return printf_string("%" PRId64 ",%" PRId64 ",%.6e,%.6f,%.6f,%.6g,%.3f,%.1f,%.6f", r.step, r.tokens, r.lr,
                       r.train_loss, r.aux_loss, r.grad_norm, r.step_ms, r.tokens_per_s, r.mfu);
}

std::string format_eval_row(const EvalRecord& r) {
  return printf_string("%" PRId64 ",%" PRId64 ",%.6f", r.step, r.tokens, r.eval_loss);
}

double estimate_seconds_remaining(const std::vector<StepRecord>& steps, int64_t total_steps, int window) {
  if (steps.empty() || window < 1) return std::nan("");
  const size_t n = std::min(steps.size(), static_cast<size_t>(window));
  double sum_ms = 0;
  for (size_t i = steps.size() - n; i < steps.size(); ++i) sum_ms += steps[i].step_ms;
  const int64_t left = std::max<int64_t>(0, total_steps - steps.back().step);
  return sum_ms / static_cast<double>(n) / 1000.0 * static_cast<double>(left);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  if (s < 60) return printf_string("%llds", s);
  if (s < 3600) return printf_string("%lldm%02llds", s / 60, s % 60);
  return printf_string("%lldh%02lldm", s / 3600, (s % 3600) / 60);
}

std::string format_progress(const StepRecord& r, int64_t total_steps, double seconds_remaining) {
  std::string line = printf_string("step %" PRId64 "/%" PRId64, r.step, total_steps);
  line += printf_string(" | loss %.4f | aux %.4f | lr %.2e | gnorm %.2f", r.train_loss, r.aux_loss, r.lr,
                        r.grad_norm);
  const double rate = r.tokens_per_s;
  if (rate >= 1e6) {
    line += printf_string(" | %.2fM tok/s", rate / 1e6);
  } else if (rate >= 1e3) {
    line += printf_string(" | %.1fk tok/s", rate / 1e3);
  } else {
    line += printf_string(" | %.0f tok/s", rate);
  }
  if (std::isfinite(r.mfu)) line += printf_string(" | MFU %.1f%%", r.mfu * 100.0);
  return line + " | ETA " + format_duration(seconds_remaining);
}

}  // namespace blockscale::train
