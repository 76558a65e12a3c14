// Replays the fuzzing regression corpus (tests/formats/io_corpus/) through both parsers, and
// corrupts valid files at random (seeded): every input must give a Status, never a crash, and a
// file that parses must only ever point inside itself.
//
// Corpus file names: "ok-*" must parse, "err-*" must fail, anything else (inputs the fuzzers
// found interesting) may do either.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "formats/io/npy.h"
#include "formats/io/safetensors.h"

namespace blockscale::io {
namespace {

namespace fs = std::filesystem;
using formats::DType;

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() % 255 + 1);
  return v;
}

// Parses `bytes` as .npy; on success checks the result is self-consistent.
Status check_npy(const std::vector<uint8_t>& bytes) {
  NpyArray a;
  Status s = parse_npy(bytes.data(), bytes.size(), &a);
  if (!s) return s;
  uint64_t n = 0;
  EXPECT_TRUE(shape_nbytes(a.shape, a.dtype, &n));
  EXPECT_EQ(a.data.size(), n);
  if (dtype_is_float(a.dtype)) {
    std::vector<float> f;
    EXPECT_TRUE(to_float(a.view(), &f));
  }
  return s;
}

// Parses `bytes` as .safetensors; on success checks every view lies inside `bytes`, the views
// tile the byte buffer, and the float ones widen.
Status check_safetensors(const std::vector<uint8_t>& bytes) {
  SafetensorsFile f;
  Status s = SafetensorsFile::parse(bytes.data(), bytes.size(), &f);
  if (!s) return s;
  const uint8_t* end = bytes.data() + bytes.size();
  size_t total = 0;
  for (const std::string& name : f.names()) {
    TensorView t;
    EXPECT_TRUE(f.tensor(name, &t));
    EXPECT_TRUE(check_view(t, name));
    EXPECT_TRUE(t.nbytes == 0 || (t.data >= bytes.data() + 8 && t.data + t.nbytes <= end)) << name;
    total += t.nbytes;
    if (dtype_is_float(t.dtype)) {
      std::vector<float> v;
      EXPECT_TRUE(f.tensor_as_float(name, &v));
    }
  }
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(8 + header + total, bytes.size());
  return s;
}

void replay(const char* sub, Status (*check)(const std::vector<uint8_t>&), size_t min_files) {
  const fs::path dir = fs::path(BLOCKSCALE_IO_CORPUS_DIR) / sub;
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const Status s = check(read_file(entry.path()));
    if (name.rfind("ok-", 0) == 0) EXPECT_TRUE(s) << name << ": " << s.message();
    if (name.rfind("err-", 0) == 0) EXPECT_FALSE(s) << name << " parsed";
    if (!s) EXPECT_FALSE(s.message().empty()) << name;
    ++files;
  }
  EXPECT_GE(files, min_files) << "corpus " << dir << " is missing files";
}

TEST(IoCorpus, NpyFilesGiveAStatus) { replay("npy", check_npy, 20); }
TEST(IoCorpus, SafetensorsFilesGiveAStatus) { replay("safetensors", check_safetensors, 20); }

// The file readers take the same paths as the in-memory parsers; replay the corpus through them.
TEST(IoCorpus, FileReadersAgreeWithParsers) {
  for (const auto& entry : fs::directory_iterator(fs::path(BLOCKSCALE_IO_CORPUS_DIR) / "npy")) {
    NpyArray a, b;
    const auto bytes = read_file(entry.path());
    EXPECT_EQ(read_npy(entry.path().string(), &a).is_ok(), parse_npy(bytes.data(), bytes.size(), &b).is_ok())
        << entry.path();
    EXPECT_EQ(a.data, b.data);
  }
  for (const auto& entry : fs::directory_iterator(fs::path(BLOCKSCALE_IO_CORPUS_DIR) / "safetensors")) {
    SafetensorsFile a, b;
    const auto bytes = read_file(entry.path());
    EXPECT_EQ(SafetensorsFile::open(entry.path().string(), &a).is_ok(),
              SafetensorsFile::parse(bytes.data(), bytes.size(), &b).is_ok())
        << entry.path();
    EXPECT_EQ(a.names(), b.names());
  }
}

// ---- randomized corruption --------------------------------------------------------------------

// One random corruption of `f`: flip bits, overwrite bytes (mostly in the header, where the
// parser lives), truncate, extend, insert or delete bytes, or overwrite a length field.
std::vector<uint8_t> corrupt(std::vector<uint8_t> f, size_t header_end, std::mt19937& rng) {
  const auto pos = [&](bool in_header) {
    const size_t limit = in_header ? std::min(header_end, f.size()) : f.size();
    return limit ? rng() % limit : 0;
  };
  const int kinds = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < kinds && !f.empty(); ++k) {
    switch (rng() % 7) {
      case 0: f[pos(rng() % 4 != 0)] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 1: f[pos(true)] = static_cast<uint8_t>(rng()); break;
      case 2: f.resize(rng() % f.size()); break;
      case 3: for (int n = rng() % 64; n >= 0; --n) f.push_back(static_cast<uint8_t>(rng())); break;
      case 4: f.insert(f.begin() + pos(true), static_cast<uint8_t>("{}[],:\"0123456789 \n'()"[rng() % 23])); break;
      case 5: f.erase(f.begin() + pos(true)); break;
      case 6: {  // a length field: safetensors' 8 bytes at 0, npy's 2 or 4 bytes at 8
        const uint64_t v = rng() % 2 ? rng() : (uint64_t{1} << (rng() % 64)) + rng() % 3 - 1;
        const size_t at = f.size() > 12 && f[0] == 0x93 ? 8 : 0;
        for (size_t b = 0; b < 8 && at + b < f.size() && (at == 0 || b < 4); ++b) f[at + b] = static_cast<uint8_t>(v >> (8 * b));
        break;
      }
    }
  }
  return f;
}

TEST(IoCorruption, RandomlyCorruptedNpyFiles) {
  std::vector<std::vector<uint8_t>> valid;
  const std::pair<DType, std::vector<int64_t>> arrays[] = {
      {DType::kF32, {3, 4}}, {DType::kBf16, {2, 2, 2}}, {DType::kU8, {}}, {DType::kI32, {0, 3}}, {DType::kF64, {5}}};
  for (const auto& [d, shape] : arrays) {
    uint64_t n = 0;
    ASSERT_TRUE(shape_nbytes(shape, d, &n));
    const auto data = random_bytes(n, 1);
    std::vector<uint8_t> f;
    ASSERT_TRUE(encode_npy(TensorView{d, shape, data.data(), data.size()}, &f));
    valid.push_back(f);
  }
  // A Fortran-order file, rank 3.
  std::string h = "{'descr': '<f2', 'fortran_order': True, 'shape': (2, 3, 2), }";
  h.append(64 - (10 + h.size() + 1) % 64, ' ');
  h += '\n';
  std::vector<uint8_t> fortran = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(h.size()), 0};
  fortran.insert(fortran.end(), h.begin(), h.end());
  const auto d = random_bytes(24, 2);
  fortran.insert(fortran.end(), d.begin(), d.end());
  valid.push_back(fortran);

  std::mt19937 rng(20240611);
  int ok = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto& v = valid[i % valid.size()];
    if (check_npy(corrupt(v, 128, rng))) ++ok;
  }
  for (const auto& v : valid) EXPECT_TRUE(check_npy(v));
  EXPECT_LT(ok, 4000);  // most corruptions are caught
}

TEST(IoCorruption, RandomlyCorruptedSafetensorsFiles) {
  const fs::path dir = fs::temp_directory_path() / ("blockscale_corrupt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::vector<uint8_t>> store;
  std::vector<std::pair<std::string, TensorView>> tensors;
  const std::pair<DType, std::vector<int64_t>> specs[] = {
      {DType::kF32, {3, 4}}, {DType::kBf16, {2, 2, 2}}, {DType::kF8E4M3, {7}}, {DType::kF8E5M2, {}},
      {DType::kU8, {0, 5}}, {DType::kI32, {2}}, {DType::kF64, {1, 1}}, {DType::kF16, {3}}};
  store.reserve(std::size(specs));
  for (const auto& [d, shape] : specs) {
    uint64_t n = 0;
    ASSERT_TRUE(shape_nbytes(shape, d, &n));
    store.push_back(random_bytes(n, static_cast<uint32_t>(store.size())));
    tensors.push_back({"t" + std::to_string(store.size()), TensorView{d, shape, store.back().data(), n}});
  }
  ASSERT_TRUE(write_safetensors((dir / "a").string(), tensors, {{"format", "pt"}}));
  ASSERT_TRUE(write_safetensors((dir / "b").string(), {tensors[0], tensors[4]}));
  const std::vector<std::vector<uint8_t>> valid = {read_file(dir / "a"), read_file(dir / "b")};
  fs::remove_all(dir);

  std::mt19937 rng(20240612);
  int ok = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto& v = valid[i % valid.size()];
    uint64_t header = 0;
    std::memcpy(&header, v.data(), 8);
    if (check_safetensors(corrupt(v, 8 + header, rng))) ++ok;
  }
  for (const auto& v : valid) EXPECT_TRUE(check_safetensors(v));
  EXPECT_LT(ok, 4000);
}

}  // namespace
}  // namespace blockscale::io
