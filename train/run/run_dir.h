// A run directory (`blockscale train --out`) and who may write into it:
//   - one run at a time: a run holds an exclusive lock on <dir>/.lock (flock(2), which the kernel
//     drops when the process ends, however it ends: a killed run leaves no stale lock);
//   - a new run does not mix into an old one: a directory that holds a run's files is refused
//     unless the new run resumes it or was told to overwrite it (which deletes those files only);
//   - no output is written through a symbolic link or over a read-only file.
// The files a run owns: train.csv, eval.csv, summary.json (train/run/run_log.h), latest and the
// step_XXXXXXXX/ checkpoints (train/run/checkpoint.h), compare.svg (a recipe comparison), and the
// temporaries their atomic writes leave when killed (step_*.tmp-*, .<file>.tmp.*).
//
//   defines: RunDirLock, run_files, check_run_dir, clear_run_dir
#pragma once

#include <string>
#include <vector>

#include "formats/status.h"

namespace blockscale::train {

class RunDirLock {
 public:
  RunDirLock() = default;
  ~RunDirLock() { release(); }
  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // Creates `dir` (and missing parents) and takes the lock, or refuses at once, naming `dir`,
  // while another run holds it (another process, or another RunDirLock of this one). A refused
  // call changes nothing in an existing directory.
  static Status acquire(const std::string& dir, RunDirLock* out);

  // Deletes <dir>/.lock and drops the lock; then removes the directories acquire created if they
  // are still empty (a run that failed before writing anything leaves no trace).
  void release();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  std::string dir_;
  std::vector<std::string> created_;  // parents first
};

// The entries of `dir` that belong to a run (see above; temporaries excluded), sorted; empty when
// `dir` holds no run or does not exist.
std::vector<std::string> run_files(const std::string& dir);

// Checks `dir` (--out) before a run writes into it: none of the run's files is a symbolic link or
// read-only, and, unless the run resumes or overwrites, no run's files are there. Reads only.
Status check_run_dir(const std::string& dir, bool resuming, bool overwrite);

// With `overwrite`, deletes the run's files (`latest` first); then, in any case, the temporaries
// of killed writes. The caller holds the directory's lock: no other run is writing them.
Status clear_run_dir(const std::string& dir, bool overwrite);

}  // namespace blockscale::train
