// The run directory's lock and rules (run_dir.h).
#include "train/run/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace blockscale::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLockFile = ".lock";
// The files a run writes under fixed names; checkpoints are the step_XXXXXXXX/ directories.
constexpr const char* kRunFiles[] = {"train.csv", "eval.csv", "summary.json", "latest", "compare.svg"};

std::string quoted(const std::string& s) { return "'" + s + "'"; }

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// "step_" and 8 to 18 digits: a committed checkpoint (train/run/checkpoint.h).
bool is_checkpoint_name(const std::string& name) {
  if (name.size() < 13 || name.size() > 23 || !starts_with(name, "step_")) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_run_file_name(const std::string& name) {
  return is_checkpoint_name(name) ||
         std::any_of(std::begin(kRunFiles), std::end(kRunFiles), [&](const char* f) { return name == f; });
}

// What a killed write leaves: a checkpoint being saved or pruned (step_*.tmp-<pid>[-...]) and
// the temporary of an atomic file write (.<name>.tmp.<pid>.<stamp>, formats/io/tensor_view.h).
bool is_temporary_name(const std::string& name) {
  if (starts_with(name, "step_") && name.find(".tmp-") != std::string::npos) return true;
  return std::any_of(std::begin(kRunFiles), std::end(kRunFiles),
                     [&](const char* f) { return starts_with(name, "." + std::string(f) + ".tmp."); });
}

std::vector<std::string> entries_where(const std::string& dir, bool (*keep)(const std::string&)) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (keep(name)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "train.csv, latest and 2 checkpoints": what a refusal shows of the run it found.
std::string describe(const std::vector<std::string>& files) {
  std::vector<std::string> parts;
  int checkpoints = 0;
  for (const std::string& f : files) {
    if (is_checkpoint_name(f)) {
      ++checkpoints;
    } else {
      parts.push_back(f);
    }
  }
  if (checkpoints > 0) parts.push_back(std::to_string(checkpoints) + (checkpoints == 1 ? " checkpoint" : " checkpoints"));
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
}

}  // namespace

RunDirLock::RunDirLock(RunDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), dir_(std::move(other.dir_)), created_(std::move(other.created_)) {
  other.created_.clear();
}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    dir_ = std::move(other.dir_);
    created_ = std::move(other.created_);
    other.created_.clear();
  }
  return *this;
}

Status RunDirLock::acquire(const std::string& dir, RunDirLock* out) {
  if (out == nullptr) return Status::error("the lock's destination is null");
  if (dir.empty()) return Status::error("--out must not be empty");
  out->release();
  RunDirLock lock;  // releases (and removes the directories it made) on every error below
  lock.dir_ = dir;
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = fs::path(dir).lexically_normal(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (fs::create_directory(*it, ec)) {
      lock.created_.push_back(it->string());
    } else if (ec) {
      return Status::error("--out " + quoted(dir) + ": cannot create " + quoted(it->string()) + ": " + ec.message());
    }
  }
  if (!fs::is_directory(dir, ec)) return Status::error("--out " + quoted(dir) + " is not a directory");
  const std::string path = (fs::path(dir) / kLockFile).string();
  // The run before may delete the lock file as it releases it, after this call opened it: a
  // lock on that deleted file would exclude nobody, so the file locked must be the one the path
  // still names (the same device and inode), else the path is opened again.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return Status::error("--out " + quoted(dir) + ": cannot open " + quoted(path) + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return Status::error("--out " + quoted(dir) + ": another run is using this directory (it holds " +
                             quoted(path) + "); wait for it to end or choose another --out");
      }
      return Status::error("--out " + quoted(dir) + ": cannot lock " + quoted(path) + ": " + std::strerror(err));
    }
    struct stat held {}, named {};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      lock.fd_ = fd;
      *out = std::move(lock);
      return Status::ok();
    }
    ::close(fd);
  }
  return Status::error("--out " + quoted(dir) + ": its lock file " + quoted(path) + " keeps changing");
}

void RunDirLock::release() {
  if (fd_ >= 0) {
    // Deleted while still locked, so that no run can lock this file after it is gone.
    ::unlink((fs::path(dir_) / kLockFile).c_str());
    ::close(fd_);
    fd_ = -1;
  }
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) ::rmdir(it->c_str());  // only if empty
  created_.clear();
}

std::vector<std::string> run_files(const std::string& dir) { return entries_where(dir, is_run_file_name); }

Status check_run_dir(const std::string& dir, bool resuming, bool overwrite) {
  for (const char* name : kRunFiles) {
    const std::string path = (fs::path(dir) / name).string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      return Status::error("--out " + quoted(dir) + ": " + quoted(path) +
                           " is a symbolic link, and a run does not write through links: remove it or choose "
                           "another --out");
    }
    // By the mode bits as well: a process that may write anything (root) still leaves such a file be.
    if (S_ISREG(st.st_mode) && ((st.st_mode & 0222) == 0 || ::access(path.c_str(), W_OK) != 0)) {
      return Status::error("--out " + quoted(dir) + ": " + quoted(path) +
                           " is read-only, and a run does not replace a read-only file: make it writable or "
                           "choose another --out");
    }
  }
  if (resuming || overwrite) return Status::ok();
  const std::vector<std::string> found = run_files(dir);
  if (found.empty()) return Status::ok();
  return Status::error("--out " + quoted(dir) + " already holds a run (" + describe(found) +
                       "): continue it with --resume " + dir +
                       ", or give --overwrite to delete its logs and checkpoints and start afresh");
}

Status clear_run_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  if (overwrite) {
    std::vector<std::string> doomed = run_files(dir);
    // `latest` first: a deletion cut short never leaves it naming a deleted checkpoint.
    std::stable_partition(doomed.begin(), doomed.end(), [](const std::string& n) { return n == "latest"; });
    for (const std::string& name : doomed) {
      const fs::path p = fs::path(dir) / name;
      fs::remove_all(p, ec);  // a link is removed, not followed
      if (ec) return Status::error("--overwrite: cannot delete " + quoted(p.string()) + ": " + ec.message());
    }
  }
  for (const std::string& name : entries_where(dir, is_temporary_name)) fs::remove_all(fs::path(dir) / name, ec);
  return Status::ok();
}

}  // namespace blockscale::train
