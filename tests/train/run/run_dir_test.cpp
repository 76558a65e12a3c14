// The run directory: one run at a time (across processes too, and a killed holder leaves no
// stale lock), a directory holding a run refused unless resumed or overwritten, only the run's
// own files deleted, no output written through a link or over a read-only file.
#include "train/run/run_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "tests/status_test.h"  // defines: mentions
#include "tests/temp_dir.h"

namespace blockscale::train {
namespace {

using blockscale_test::mentions;

namespace fs = std::filesystem;
using blockscale_test::TempDir;

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

TEST(RunDirLock, ASecondLockIsRefusedUntilTheFirstIsReleased) {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  RunDirLock first;
  ASSERT_TRUE(RunDirLock::acquire(dir, &first)) << "the directory is created";
  EXPECT_TRUE(first.held());
  EXPECT_TRUE(fs::is_directory(dir));
  RunDirLock second;
  const Status refused = RunDirLock::acquire(dir, &second);
  EXPECT_TRUE(mentions(refused, "--out '" + dir + "': another run is using this directory")) << refused.message();
  EXPECT_FALSE(second.held());
  first.release();
  EXPECT_FALSE(fs::exists(dir + "/.lock"));
  EXPECT_TRUE(RunDirLock::acquire(dir, &second));
}

// The lock belongs to the process: one killed with SIGKILL (no clean-up of any kind) leaves its
// .lock file behind, and that file is locked again at once.
TEST(RunDirLock, AKilledHolderLeavesNoStaleLock) {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  fs::create_directories(dir);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the other run: lock, say so, wait to be killed
    const int fd = ::open((dir + "/.lock").c_str(), O_RDONLY | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    if (::write(ready[1], "x", 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  RunDirLock lock;
  EXPECT_TRUE(mentions(RunDirLock::acquire(dir, &lock), "another run is using this directory"));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_TRUE(fs::exists(dir + "/.lock"));  // stale file, no stale lock
  EXPECT_TRUE(RunDirLock::acquire(dir, &lock));
}

// A run that fails before it writes anything leaves no directory it made; one it did not make,
// or one with files in it, stays.
TEST(RunDirLock, AFailedStartLeavesNoDirectoryBehind) {
  TempDir tmp;
  {
    RunDirLock lock;
    ASSERT_TRUE(RunDirLock::acquire(tmp.file("a/b/run"), &lock));
  }
  EXPECT_FALSE(fs::exists(tmp.file("a")));
  fs::create_directories(tmp.file("existing"));
  {
    RunDirLock lock;
    ASSERT_TRUE(RunDirLock::acquire(tmp.file("existing"), &lock));
  }
  EXPECT_TRUE(fs::is_directory(tmp.file("existing")));
  {
    RunDirLock lock;
    ASSERT_TRUE(RunDirLock::acquire(tmp.file("c/run"), &lock));
    write_text(tmp.file("c/run/train.csv"), "step\n");
  }
  EXPECT_EQ(names_in(tmp.file("c/run")), std::set<std::string>{"train.csv"});
}

TEST(RunDirLock, AFileIsNotARunDirectory) {
  TempDir tmp;
  write_text(tmp.file("a_file"), "x");
  RunDirLock lock;
  const Status s = RunDirLock::acquire(tmp.file("a_file"), &lock);
  EXPECT_TRUE(mentions(s, "is not a directory")) << s.message();
  EXPECT_TRUE(mentions(RunDirLock::acquire("", &lock), "--out"));
}

TEST(RunDir, ANewRunRefusesADirectoryHoldingARun) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  write_text(dir / "train.csv", "step\n");
  write_text(dir / "latest", "step_00000020\n");
  write_text(dir / "step_00000010" / "state.json", "{}");
  write_text(dir / "step_00000020" / "state.json", "{}");
  write_text(dir / "notes.txt", "mine");
  const Status s = check_run_dir(dir.string(), /*resuming=*/false, /*overwrite=*/false);
  EXPECT_TRUE(mentions(s, "--out '" + dir.string() + "' already holds a run (latest, train.csv and 2 checkpoints)"))
      << s.message();
  EXPECT_TRUE(mentions(s, "--resume " + dir.string())) << s.message();
  EXPECT_TRUE(mentions(s, "--overwrite")) << s.message();
  EXPECT_TRUE(check_run_dir(dir.string(), true, false));
  EXPECT_TRUE(check_run_dir(dir.string(), false, true));
  EXPECT_EQ(run_files(dir.string()),
            (std::vector<std::string>{"latest", "step_00000010", "step_00000020", "train.csv"}));

  // Temporaries, another tool's logs and the user's files are no run.
  const fs::path other = tmp.path() / "other";
  write_text(other / "step_00000030.tmp-99" / "state.json", "{}");
  write_text(other / ".latest.tmp.99.1", "x");
  write_text(other / "rank1.log", "x");
  EXPECT_TRUE(run_files(other.string()).empty());
  EXPECT_TRUE(check_run_dir(other.string(), false, false));
  EXPECT_TRUE(check_run_dir((tmp.path() / "nowhere").string(), false, false));
}

TEST(RunDir, OverwriteDeletesOnlyTheRunsFiles) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  for (const char* f : {"train.csv", "eval.csv", "summary.json", "latest", "compare.svg", ".latest.tmp.5.1",
                        ".train.csv.tmp.5.2", "notes.txt", "rank1.log"})
    write_text(dir / f, "x");
  write_text(dir / "step_00000010" / "tensors.safetensors", "x");
  write_text(dir / "step_00000020.tmp-5" / "state.json", "x");
  write_text(dir / "step_notes" / "a.txt", "x");  // not a checkpoint's name
  ASSERT_TRUE(clear_run_dir(dir.string(), /*overwrite=*/true));
  EXPECT_EQ(names_in(dir.string()), (std::set<std::string>{"notes.txt", "rank1.log", "step_notes"}));
}

TEST(RunDir, WithoutOverwriteOnlyTemporariesGo) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  write_text(dir / "train.csv", "x");
  write_text(dir / "step_00000010" / "state.json", "x");
  write_text(dir / "step_00000020.tmp-5" / "state.json", "x");
  write_text(dir / "step_00000010.tmp-5-pruned" / "state.json", "x");
  write_text(dir / ".summary.json.tmp.5.3", "x");
  ASSERT_TRUE(clear_run_dir(dir.string(), /*overwrite=*/false));
  EXPECT_EQ(names_in(dir.string()), (std::set<std::string>{"step_00000010", "train.csv"}));
}

// An output that is a symbolic link or read-only is refused in every mode, resuming and
// overwriting included; the link's target and the file keep their bytes.
TEST(RunDir, LinkedOrReadOnlyOutputsAreRefused) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "run", target = tmp.path() / "elsewhere.csv";
  write_text(target, "precious");
  fs::create_directories(dir);
  fs::create_symlink(target, dir / "eval.csv");
  for (bool resuming : {false, true}) {
    const Status s = check_run_dir(dir.string(), resuming, !resuming);
    EXPECT_TRUE(mentions(s, "'" + (dir / "eval.csv").string() + "' is a symbolic link")) << s.message();
  }
  EXPECT_EQ(blockscale_test::read_file(target.string()), "precious");
  fs::remove(dir / "eval.csv");

  write_text(dir / "summary.json", "{}");
  fs::permissions(dir / "summary.json", fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const Status s = check_run_dir(dir.string(), true, false);
  EXPECT_TRUE(mentions(s, "'" + (dir / "summary.json").string() + "' is read-only")) << s.message();
  fs::permissions(dir / "summary.json", fs::perms::owner_write, fs::perm_options::add);
  EXPECT_TRUE(check_run_dir(dir.string(), true, false));

  // --out itself may be a link to a directory (runs -> /scratch/runs).
  const fs::path real = tmp.path() / "real", link = tmp.path() / "link";
  fs::create_directories(real);
  fs::create_directory_symlink(real, link);
  EXPECT_TRUE(check_run_dir(link.string(), false, false));
}

}  // namespace
}  // namespace blockscale::train
