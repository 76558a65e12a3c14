// Tests of formats/io/npy.h: round trips of every dtype and rank, Fortran order, format
// versions, np.save's exact header bytes, and one test per rule the parser enforces.
#include "formats/io/npy.h"
#include "tests/fifo_reader.h"
#include "tests/status_test.h"  // defines: mentions
#include "tests/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace blockscale::io {
namespace {

using blockscale_test::mentions;

namespace fs = std::filesystem;
using formats::DType;

using blockscale_test::TempDir;

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Random bytes 1..255: never all zeros, so a dropped or misplaced byte shows.
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(1, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(dist(rng));
  return v;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A .npy file with the given version and header dict, padded like np.save, then `data`.
std::vector<uint8_t> npy_file(const std::string& dict, const std::vector<uint8_t>& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append(64 - (prefix + header.size() + 1) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> f = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (size_t k = 0; k < prefix - 8; ++k) f.push_back(static_cast<uint8_t>(header.size() >> (8 * k)));
  f.insert(f.end(), header.begin(), header.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

Status parse(const std::vector<uint8_t>& bytes, NpyArray* a) { return parse_npy(bytes.data(), bytes.size(), a); }

// ---- round trips ------------------------------------------------------------------------------

const DType kNpyDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBf16, DType::kU8,  DType::kI32, DType::kBool,
                            DType::kI8,  DType::kI16, DType::kU16, DType::kU32,  DType::kI64, DType::kU64};

struct RoundTripCase {
  DType dtype;
  std::vector<int64_t> shape;
};

class NpyRoundTrip : public testing::TestWithParam<RoundTripCase> {};

TEST_P(NpyRoundTrip, WriteThenReadGivesTheSameArray) {
  const RoundTripCase& c = GetParam();
  TempDir dir;
  const auto bytes = random_bytes(static_cast<size_t>(numel(c.shape)) * dtype_size(c.dtype), 7);
  const TensorView t{c.dtype, c.shape, bytes.data(), bytes.size()};
  const std::string path = dir.file("a.npy");
  ASSERT_TRUE(write_npy(path, t)) << "write";

  NpyArray a;
  const Status s = read_npy(path, &a);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(a.dtype, c.dtype);
  EXPECT_EQ(a.shape, c.shape);
  EXPECT_EQ(a.data, bytes);

  // The data starts 64-byte aligned, as numpy writes it; encode_npy is the same bytes.
  const auto file = read_file(path);
  EXPECT_EQ((file.size() - bytes.size()) % 64, 0u);
  std::vector<uint8_t> encoded;
  ASSERT_TRUE(encode_npy(t, &encoded));
  EXPECT_EQ(encoded, file);
  EXPECT_EQ(dir.num_entries(), 1u) << "a temporary file was left behind";
}

std::vector<RoundTripCase> round_trip_cases() {
  // Rank 0 (a scalar), 1, 3, a zero dimension, and rank 6.
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3, 4}, {3, 0, 2}, {1, 2, 1, 3, 1, 2}};
  std::vector<RoundTripCase> cases;
  for (DType d : kNpyDTypes) {
    for (const auto& s : shapes) cases.push_back({d, s});
  }
  return cases;
}

std::string case_name(const testing::TestParamInfo<RoundTripCase>& info) {
  std::string n = std::string(dtype_name(info.param.dtype)) + "_rank" + std::to_string(info.param.shape.size());
  for (int64_t d : info.param.shape) n += "_" + std::to_string(d);
  return n;
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, NpyRoundTrip, testing::ValuesIn(round_trip_cases()), case_name);

TEST(Npy, HeaderBytesMatchNpSave) {
  // np.save(np.zeros((2, 3), np.float32)) and np.save(np.float32(0)), numpy 2.4: keys sorted,
  // 21 - len(str(shape[0])) spare spaces, padded to 64 bytes with a final '\n'.
  const float zeros[6] = {};
  const auto expected = [](const std::string& dict) {
    std::string h = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict;
    h.append(127 - h.size(), ' ');
    return h + '\n';
  };
  std::vector<uint8_t> out;
  ASSERT_TRUE(encode_npy(TensorView{DType::kF32, {2, 3}, reinterpret_cast<const uint8_t*>(zeros), 24}, &out));
  EXPECT_EQ(std::string(out.begin(), out.begin() + 128),
            expected("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(20, ' ')));
  ASSERT_TRUE(encode_npy(TensorView{DType::kF32, {}, reinterpret_cast<const uint8_t*>(zeros), 4}, &out));
  EXPECT_EQ(std::string(out.begin(), out.begin() + 128),
            expected("{'descr': '<f4', 'fortran_order': False, 'shape': (), }"));
  ASSERT_TRUE(encode_npy(TensorView{DType::kF32, {1}, reinterpret_cast<const uint8_t*>(zeros), 4}, &out));
  EXPECT_EQ(std::string(out.begin(), out.begin() + 128),
            expected("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }" + std::string(20, ' ')));
}

TEST(Npy, FortranOrderIsReadAsRowMajor) {
  // a[i][j][k] = 100i + 10j + k stored column-major (i fastest), shape (2, 3, 4).
  std::vector<int32_t> col(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) col[i + 2 * (j + 3 * k)] = 100 * i + 10 * j + k;
  std::vector<uint8_t> data(96);
  std::memcpy(data.data(), col.data(), 96);
  NpyArray a;
  const Status s = parse(npy_file("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", data), &a);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(a.shape, (std::vector<int64_t>{2, 3, 4}));
  std::vector<int32_t> row(24);
  std::memcpy(row.data(), a.data.data(), 96);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(row[(i * 3 + j) * 4 + k], 100 * i + 10 * j + k) << i << j << k;

  // Through a file too, and the degenerate cases: rank 1 and a zero dimension.
  TempDir dir;
  const auto bytes = npy_file("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", data);
  std::ofstream(dir.file("f.npy"), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  NpyArray b;
  ASSERT_TRUE(read_npy(dir.file("f.npy"), &b));
  EXPECT_EQ(b.data, a.data);
  ASSERT_TRUE(parse(npy_file("{'descr': '<i4', 'fortran_order': True, 'shape': (6,), }", std::vector<uint8_t>(data.begin(), data.begin() + 24)), &b));
  EXPECT_EQ(b.data, std::vector<uint8_t>(data.begin(), data.begin() + 24));
  ASSERT_TRUE(parse(npy_file("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 0, 3), }", {}), &b));
  EXPECT_TRUE(b.data.empty());
}

TEST(Npy, Versions2And3AndPython2Headers) {
  const auto data = random_bytes(24, 3);
  for (int major : {2, 3}) {
    NpyArray a;
    const Status s = parse(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data, major), &a);
    ASSERT_TRUE(s) << "version " << major << ": " << s.message();
    EXPECT_EQ(a.data, data);
  }
  NpyArray a;
  ASSERT_TRUE(parse(npy_file("{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (1L, 3L)}", data), &a));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{1, 3}));
  auto v4 = npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data, 2);
  v4[6] = 4;
  EXPECT_TRUE(mentions(parse(v4, &a), "version 4.0"));
  v4[6] = 1;
  v4[7] = 1;
  EXPECT_TRUE(mentions(parse(v4, &a), "version 1.1"));
}

TEST(Npy, Bf16IsReadFromMlDtypesDescr) {
  // ml_dtypes' bfloat16 saves with descr '<V2'.
  const std::vector<uint8_t> data = {0x80, 0x3F, 0x00, 0xC0, 0x49, 0x40};  // 1, -2, 3.140625
  NpyArray a;
  ASSERT_TRUE(parse(npy_file("{'descr': '<V2', 'fortran_order': False, 'shape': (3,), }", data), &a));
  EXPECT_EQ(a.dtype, DType::kBf16);
  std::vector<float> f;
  ASSERT_TRUE(to_float(a.view(), &f));
  EXPECT_EQ(f, (std::vector<float>{1.0f, -2.0f, 3.140625f}));
}

// ---- malformed input --------------------------------------------------------------------------

const char kDict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

TEST(NpyErrors, EveryTruncationIsAnError) {
  const auto good = npy_file(kDict, random_bytes(24, 1));
  NpyArray a;
  ASSERT_TRUE(parse(good, &a));
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    EXPECT_TRUE(mentions(parse(cut, &a), "truncated") || mentions(parse(cut, &a), "'\\n'")) << n;
  }
  EXPECT_TRUE(mentions(parse_npy(nullptr, 0, &a), "truncated"));
}

TEST(NpyErrors, PreambleAndHeaderRules) {
  NpyArray a;
  auto f = npy_file(kDict, random_bytes(24, 1));
  f[1] = 'X';
  EXPECT_TRUE(mentions(parse(f, &a), "bad magic"));
  f = npy_file(kDict, random_bytes(24, 1));
  f[10 + 118 - 1] = ' ';  // the '\n' ending the header
  EXPECT_TRUE(mentions(parse(f, &a), "not terminated by '\\n'"));
  f = npy_file(kDict, random_bytes(24, 1), 2);
  f[10] = 0x20;  // header length 0x200000 + ..., over the 1 MiB limit
  EXPECT_TRUE(mentions(parse(f, &a), "exceeds the limit"));
  f = npy_file(kDict, random_bytes(24, 1));
  f[9] = 0x7F;  // header length ~32 KiB, beyond the file
  EXPECT_TRUE(mentions(parse(f, &a), "runs past the end"));
}

TEST(NpyErrors, DictRules) {
  const auto d = random_bytes(24, 1);
  const std::pair<const char*, const char*> cases[] = {
      {"{'fortran_order': False, 'shape': (2, 3), }", "missing key 'descr'"},
      {"{'descr': '<f4', 'shape': (2, 3), }", "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, }", "missing key 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", "unexpected key 'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }", "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", "must be a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", "trailing comma"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", "malformed 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", "non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "overflows int64"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", "overflow"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", "after the dict"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3), }", "expected ','"},
      {"'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "start with '{'"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3), }", "expected ':' after 'descr'"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3), }", "escape"},
      {"{'descr: '<f4', 'fortran_order': False, 'shape': (2, 3), }", "expected ':' after 'descr: '"},
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", "big-endian"},
      {"{'descr': '<V1', 'fortran_order': False, 'shape': (2, 3), }", "save fp8 data as uint8"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }", "unsupported '<c8'"},
      {"{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }", "unsupported '|O'"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", "structured"},
  };
  for (const auto& [dict, why] : cases) {
    NpyArray a;
    const Status s = parse(npy_file(dict, d), &a);
    EXPECT_TRUE(mentions(s, why)) << dict << " -> " << (s ? "ok" : s.message());
  }
  std::string deep = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (int k = 0; k < 65; ++k) deep += "1, ";
  NpyArray a;
  EXPECT_TRUE(mentions(parse(npy_file(deep + "), }", random_bytes(4, 1)), &a), "rank"));
}

TEST(NpyErrors, DataSizeMustMatchTheShape) {
  NpyArray a;
  EXPECT_TRUE(mentions(parse(npy_file(kDict, random_bytes(23, 1)), &a), "truncated: 23 data bytes"));
  EXPECT_TRUE(mentions(parse(npy_file(kDict, random_bytes(25, 1)), &a), "1 unexpected bytes"));
  // A hostile shape never causes a large allocation: the size check comes first.
  EXPECT_TRUE(mentions(parse(npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (1000000, 1000000), }",
                                      random_bytes(8, 1)), &a), "truncated"));
}

TEST(NpyErrors, FileErrorsNameThePath) {
  TempDir dir;
  NpyArray a;
  EXPECT_TRUE(mentions(read_npy(dir.file("missing.npy"), &a), "missing.npy"));
  EXPECT_TRUE(mentions(read_npy(dir.file(""), &a), "not a regular file"));
  std::ofstream(dir.file("short.npy")) << "\x93NUMPY";
  EXPECT_TRUE(mentions(read_npy(dir.file("short.npy"), &a), "truncated"));
  EXPECT_TRUE(mentions(read_npy(dir.file("short.npy"), &a), "short.npy"));
}

TEST(NpyErrors, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  NpyArray a;
  const std::string msg =
      blockscale_test::read_fifo(dir.file("in.npy"), [&](const std::string& p) { return read_npy(p, &a); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

// ---- writer errors ----------------------------------------------------------------------------

TEST(NpyWriter, RejectsBadViewsAndLeavesNoFile) {
  TempDir dir;
  const auto bytes = random_bytes(8, 1);
  EXPECT_TRUE(mentions(write_npy(dir.file("a.npy"), TensorView{DType::kF8E4M3, {8}, bytes.data(), 8}), "no .npy form"));
  EXPECT_TRUE(mentions(write_npy(dir.file("a.npy"), TensorView{DType::kF32, {3}, bytes.data(), 8}), "nbytes (8)"));
  EXPECT_TRUE(mentions(write_npy(dir.file("a.npy"), TensorView{DType::kF32, {2}, nullptr, 8}), "data is null"));
  EXPECT_TRUE(mentions(write_npy(dir.file("a.npy"), TensorView{DType::kF32, {-2}, bytes.data(), 8}), "negative"));
  EXPECT_TRUE(mentions(write_npy(dir.file("no/such/dir/a.npy"), TensorView{DType::kF32, {2}, bytes.data(), 8}),
                       "temporary file"));
  EXPECT_EQ(dir.num_entries(), 0u);
}

TEST(NpyWriter, ReplacesAnExistingFile) {
  TempDir dir;
  const auto a = random_bytes(8, 1), b = random_bytes(4, 2);
  ASSERT_TRUE(write_npy(dir.file("x.npy"), TensorView{DType::kU8, {8}, a.data(), 8}));
  ASSERT_TRUE(write_npy(dir.file("x.npy"), TensorView{DType::kI32, {}, b.data(), 4}));
  NpyArray r;
  ASSERT_TRUE(read_npy(dir.file("x.npy"), &r));
  EXPECT_EQ(r.dtype, DType::kI32);
  EXPECT_EQ(r.data, b);
  EXPECT_EQ(dir.num_entries(), 1u);
  // A failed write leaves the old file as it was.
  EXPECT_FALSE(write_npy(dir.file("x.npy"), TensorView{DType::kF8E5M2, {8}, a.data(), 8}));
  ASSERT_TRUE(read_npy(dir.file("x.npy"), &r));
  EXPECT_EQ(r.data, b);
}

}  // namespace
}  // namespace blockscale::io
