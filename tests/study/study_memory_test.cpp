// `blockscale study` on a real safetensors file with a 256 MiB tensor: every tensor is studied
// (or skipped with a reason) and the process's peak resident size stays far below the file's
// size, because tensors are read in chunks from the mapping and its pages handed back.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/io/safetensors.h"
#include "formats/scalar_codecs.h"

namespace blockscale {
namespace {

namespace fs = std::filesystem;
using formats::DType;

// Streams `count` bf16 values of a cheap deterministic pseudo-random sequence to `w`.
void write_bf16(io::SafetensorsWriter* w, const std::string& name, int64_t count, uint64_t seed) {
  std::vector<uint16_t> buf(size_t{1} << 20);
  uint64_t s = seed;
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), count - done);
    for (int64_t i = 0; i < n; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;  // LCG
      const float u = static_cast<float>(static_cast<int32_t>(s >> 32)) * 0x1.0p-31f;
      buf[i] = formats::float_to_bf16_bits_rn(u * u * u * 4.0f);  // heavier tails than uniform
    }
    ASSERT_TRUE(w->write(name, buf.data(), static_cast<size_t>(n) * 2));
    done += n;
  }
}

template <typename T>
void write_values(io::SafetensorsWriter* w, const std::string& name, const std::vector<T>& v) {
  ASSERT_TRUE(w->write(name, v.data(), v.size() * sizeof(T)));
}

// Runs argv with stdout and stderr to files; returns the exit status and the peak RSS in KiB.
int run(const std::vector<std::string>& args, const fs::path& out, const fs::path& err, long* max_rss_kib) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  *max_rss_kib = usage.ru_maxrss;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(StudyMemory, LargeSafetensorsFileStudiedInBoundedMemory) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("study_memory_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "model.safetensors";
  const int64_t big_rows = 8192, big_cols = 16384;  // bf16: 256 MiB
  {
    io::SafetensorsWriter w;
    ASSERT_TRUE(w.open(file.string(), {{"big", DType::kBf16, {big_rows, big_cols}},
                                       {"proj", DType::kF32, {96, 256}},
                                       {"conv", DType::kF16, {4, 3, 2, 64}},
                                       {"bias", DType::kBf16, {1000}},
                                       {"step", DType::kI64, {1}},
                                       {"scalar", DType::kF32, {}}}));
    for (const io::TensorSpec& t : w.order()) {
      if (t.name == "big") write_bf16(&w, "big", big_rows * big_cols, 1);
      if (t.name == "proj") write_values(&w, "proj", std::vector<float>(96 * 256, 0.25f));
      if (t.name == "conv") write_values(&w, "conv", std::vector<uint16_t>(4 * 3 * 2 * 64, 0x3C00));
      if (t.name == "bias") write_bf16(&w, "bias", 1000, 2);
      if (t.name == "step") write_values(&w, "step", std::vector<int64_t>{7});
      if (t.name == "scalar") write_values(&w, "scalar", std::vector<float>{1.0f});
      ASSERT_FALSE(HasFatalFailure());
    }
    ASSERT_TRUE(w.finish());
  }
  const uintmax_t file_bytes = fs::file_size(file);
  ASSERT_GT(file_bytes, uintmax_t{256} << 20);

  long rss_kib = 0;
  const int rc = run({BLOCKSCALE_CLI, "study", "--in", file.string(), "--recipes", "mxfp8",
                      "--json", "--out-dir", (dir / "out").string()},
                     dir / "stdout.json", dir / "stderr.txt", &rss_kib);
  std::ifstream err_file(dir / "stderr.txt");
  const std::string err((std::istreambuf_iterator<char>(err_file)), {});
  ASSERT_EQ(rc, 0) << err;
  // The binary's own footprint (with CUDA, the cuBLAS libraries it links map ~90 MiB at start)
  // is measured on --help and taken off: the bound is on what the study's data costs.
  long base_kib = 0;
  ASSERT_EQ(run({BLOCKSCALE_CLI, "study", "--help"}, dir / "help.txt", dir / "help_err.txt", &base_kib), 0);
  const double rss_mib = (rss_kib - base_kib) / 1024.0;
  std::printf("peak RSS %.1f MiB above the binary's %.1f MiB for a %.1f MiB file\n", rss_mib, base_kib / 1024.0,
              file_bytes / 1048576.0);
  EXPECT_LT(rss_mib, 128.0) << "peak RSS should stay well under the file size";

  std::ifstream out(dir / "stdout.json");
  const nlohmann::json j = nlohmann::json::parse(out);
  std::set<std::string> studied;
  for (const auto& t : j["tensors"]) {
    studied.insert(t["name"]);
    ASSERT_EQ(t["results"].size(), 2u);  // mxfp8 and mxfp8/floor
    EXPECT_GT(t["results"][0]["sqnr_db"].is_null() ? 1e9 : t["results"][0]["sqnr_db"].get<double>(), 20.0);
  }
  EXPECT_EQ(studied, (std::set<std::string>{"big", "proj", "conv", "bias"}));
  std::set<std::string> skipped;
  for (const auto& s : j["skipped"]) skipped.insert(s["name"]);
  EXPECT_EQ(skipped, (std::set<std::string>{"step", "scalar"}));
  EXPECT_NE(err.find("blockscale study: skipping 'step': dtype I64"), std::string::npos) << err;
  EXPECT_NE(err.find("/4] big 8192x16384 ..."), std::string::npos) << err;  // progress
  for (const char* f : {"study.csv", "study.json", "study.svg"}) EXPECT_TRUE(fs::exists(dir / "out" / f)) << f;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace blockscale
