// Tests of formats/io/quantized_file.h: every recipe x direction x option quantized, written to a
// .safetensors file and read back field by field and bit for bit; the file as a plain
// safetensors file (dtypes, shapes, metadata strings, nibble order, the worked example of
// docs/file-format.md); the "both directions" convention; one test per rule the reader enforces;
// add_quantized_tensor's checks; matrix_view and quantized_tensor_names.
#include "formats/io/quantized_file.h"
#include "tests/status_test.h"  // defines: mentions
#include "tests/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace blockscale::io {
namespace {

using blockscale_test::mentions;

namespace f = blockscale::formats;
namespace fs = std::filesystem;
using f::Format;
using Tensors = std::vector<std::pair<std::string, TensorView>>;
using Meta = std::map<std::string, std::string>;

using blockscale_test::TempDir;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Seeded normal values whose magnitude changes every 8 elements (so blocks get different scales),
// with some exact zeros and tiny values; never all zero.
std::vector<float> random_input(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 12);
  std::vector<float> x(static_cast<size_t>(n));
  float scale = 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 8 == 0) scale = std::ldexp(1.0f, exponent(rng));
    x[i] = (rng() % 17 == 0) ? 0.0f : normal(rng) * scale;
  }
  if (x[0] == 0.0f) x[0] = 1.5f;
  return x;
}

// ---- round trips of every recipe, direction and option ----------------------------------------

struct Variant {
  std::string name;
  f::QuantizeOptions options;
};

std::vector<Variant> variants_of(Format r) {
  f::QuantizeOptions o;
  o.recipe = r;
  if (f::is_mx(r)) {
    f::QuantizeOptions floor = o;
    floor.rounding = f::ScaleRounding::kFloor;
    return {{"ceil", o}, {"floor", floor}};
  }
  if (r == Format::kNvfp4) {
    f::QuantizeOptions two_d = o, rht = o, sr = o;
    two_d.nvfp4_2d = true;
    rht.hadamard = true;
    sr.stochastic_rounding = true;
    sr.sr_seed = 0x1234'5678'9abcULL;
    return {{"1d", o}, {"2d", two_d}, {"rht", rht}, {"sr", sr}};
  }
  f::QuantizeOptions pow2 = o;
  pow2.pow2_scales = true;
  return {{"plain", o}, {"pow2", pow2}};
}

struct RoundTripCase {
  Format recipe;
  Variant variant;
  f::Direction direction;
  std::vector<int64_t> shape;
};

std::vector<RoundTripCase> round_trip_cases() {
  const std::vector<std::vector<int64_t>> shapes = {{1, 1}, {3, 33}, {130, 257}, {2, 5, 64}, {37}, {2, 16, 48}};
  std::vector<RoundTripCase> cases;
  for (Format r : f::all_formats()) {
    for (const Variant& v : variants_of(r)) {
      for (f::Direction d : {f::Direction::kRowwise, f::Direction::kColumnwise}) {
        for (const auto& shape : shapes) {
          // The Hadamard transform needs a block dimension that is a multiple of 16.
          const int64_t block_dim = d == f::Direction::kRowwise ? shape.back() : numel(shape) / shape.back();
          if (v.options.hadamard && block_dim % 16 != 0) continue;
          cases.push_back({r, v, d, shape});
        }
      }
    }
  }
  return cases;
}

void PrintTo(const RoundTripCase& c, std::ostream* os) {
  *os << f::format_name(c.recipe) << " " << c.variant.name << " "
      << (c.direction == f::Direction::kRowwise ? "rowwise" : "columnwise") << " [";
  for (size_t k = 0; k < c.shape.size(); ++k) *os << (k ? "," : "") << c.shape[k];
  *os << "]";
}

std::string case_name(const testing::TestParamInfo<RoundTripCase>& info) {
  const RoundTripCase& c = info.param;
  std::string n = std::string(f::format_name(c.recipe)) + "_" + c.variant.name + "_" +
                  (c.direction == f::Direction::kRowwise ? "row" : "col");
  for (int64_t d : c.shape) n += "_" + std::to_string(d);
  return n;
}

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Every field of `back` (read from a file) equals `want` (in memory), byte for byte, and both
// dequantize to the same bits.
void expect_same(const QuantizedTensor& want, const QuantizedTensor& back) {
  EXPECT_EQ(back.name, want.name);
  EXPECT_EQ(back.shape, want.shape);
  EXPECT_EQ(back.direction, want.direction);
  EXPECT_EQ(back.rounding, f::is_mx(want.q.recipe) ? want.rounding : f::ScaleRounding::kCeil);
  EXPECT_EQ(back.hadamard, want.hadamard);
  const f::QuantizedMatrix &a = want.q, &b = back.q;
  EXPECT_EQ(b.recipe, a.recipe);
  EXPECT_EQ(b.rows, a.rows);
  EXPECT_EQ(b.cols, a.cols);
  EXPECT_EQ(b.block_rows, a.block_rows);
  EXPECT_EQ(b.block_cols, a.block_cols);
  EXPECT_EQ(b.data, a.data);
  EXPECT_EQ(b.scales, a.scales);
  EXPECT_EQ(float_bytes(b.scales_f32), float_bytes(a.scales_f32));
  EXPECT_EQ(bits(b.global_scale_dec), bits(a.global_scale_dec));
  EXPECT_FALSE(b.nonfinite_seen) << "nonfinite_seen is not stored";
  std::vector<float> da, db;
  ASSERT_TRUE(f::dequantize(a, &da));
  ASSERT_TRUE(f::dequantize(b, &db));
  EXPECT_EQ(float_bytes(db), float_bytes(da));
}

class QuantizedFileRoundTrip : public testing::TestWithParam<RoundTripCase> {};

TEST_P(QuantizedFileRoundTrip, ReadBackEqualsTheQuantizedMatrix) {
  const RoundTripCase& c = GetParam();
  int64_t rows = 0, cols = 0;
  ASSERT_TRUE(matrix_view(c.shape, &rows, &cols));
  std::vector<float> x = random_input(rows * cols, static_cast<uint32_t>(rows * 1000 + cols));
  if (rows > 128 && cols > 128) {  // NaN scales must survive the file too (other blocks stay finite)
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[rows * cols - 7] = -std::numeric_limits<float>::infinity();
  }
  QuantizedTensor t;
  t.name = "model.layers.0.w";
  t.shape = c.shape;
  t.direction = c.direction;
  t.rounding = c.variant.options.rounding;
  t.hadamard = c.variant.options.hadamard;
  ASSERT_TRUE(f::quantize(x.data(), rows, cols, cols, c.variant.options, c.direction, &t.q));
  ASSERT_TRUE(std::any_of(t.q.data.begin(), t.q.data.end(), [](uint8_t b) { return b != 0; }))
      << "all-zero element codes would make the comparison vacuous";
  EXPECT_EQ(t.q.nonfinite_seen, rows > 128 && cols > 128);
  Tensors tensors;
  Meta meta;
  const Status add = add_quantized_tensor(t, &tensors, &meta);
  ASSERT_TRUE(add) << add.message();
  EXPECT_EQ(tensors.size(), c.recipe == Format::kNvfp4 ? 3u : 2u);
  EXPECT_EQ(meta.size(), 6u);

  TempDir dir;
  const std::string path = dir.file("q.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, meta));
  SafetensorsFile file;
  ASSERT_TRUE(SafetensorsFile::open(path, &file));
  EXPECT_EQ(quantized_tensor_names(file), std::vector<std::string>{t.name});
  QuantizedTensor back;
  const Status read = read_quantized_tensor(file, t.name, &back);
  ASSERT_TRUE(read) << read.message();
  expect_same(t, back);
}

INSTANTIATE_TEST_SUITE_P(AllRecipes, QuantizedFileRoundTrip, testing::ValuesIn(round_trip_cases()), case_name);

// ---- helpers for the schema and error tests ---------------------------------------------------

// A quantized entry `name` with its tensors and metadata (views into `t`, which stays put).
struct Entry {
  QuantizedTensor t;
  Tensors tensors;
  Meta meta;
};

void build(Entry* e, Format r, std::vector<int64_t> shape, f::Direction d = f::Direction::kRowwise,
           bool nvfp4_2d = false, const std::string& name = "w", uint32_t seed = 7) {
  f::QuantizeOptions o;
  o.recipe = r;
  o.nvfp4_2d = nvfp4_2d;
  int64_t rows = 0, cols = 0;
  ASSERT_TRUE(matrix_view(shape, &rows, &cols));
  const std::vector<float> x = random_input(rows * cols, seed);
  e->t.name = name;
  e->t.shape = std::move(shape);
  e->t.direction = d;
  ASSERT_TRUE(f::quantize(x.data(), rows, cols, cols, o, d, &e->t.q));
  const Status s = add_quantized_tensor(e->t, &e->tensors, &e->meta);
  ASSERT_TRUE(s) << s.message();
}

TensorView* find(Tensors* tensors, const std::string& name) {
  for (auto& [n, v] : *tensors)
    if (n == name) return &v;
  return nullptr;
}

void erase(Tensors* tensors, const std::string& name) {
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    if (it->first == name) {
      tensors->erase(it);
      return;
    }
  }
  FAIL() << "no tensor " << name;
}

// Writes the tensors and metadata and reads entry `name` back.
Status write_and_read(const Tensors& tensors, const Meta& meta, const std::string& name = "w",
                      QuantizedTensor* out = nullptr) {
  TempDir dir;
  const std::string path = dir.file("q.safetensors");
  const Status w = write_safetensors(path, tensors, meta);
  if (!w) return Status::error("test setup: " + w.message());
  SafetensorsFile file;
  BS_RETURN_IF_ERROR(SafetensorsFile::open(path, &file));
  QuantizedTensor local;
  return read_quantized_tensor(file, name, out ? out : &local);
}

Status read_with_meta(const Entry& e, const std::string& key, const std::string& value) {
  Meta meta = e.meta;
  meta[key] = value;
  return write_and_read(e.tensors, meta);
}

std::string tensor_string(const SafetensorsFile& file, const std::string& name) {
  TensorView v;
  if (!file.tensor(name, &v)) return "missing";
  std::string s = std::string(dtype_name(v.dtype)) + "[";
  for (size_t k = 0; k < v.shape.size(); ++k) s += (k ? "," : "") + std::to_string(v.shape[k]);
  return s + "]";
}

// ---- the file as a plain safetensors file ------------------------------------------------------

TEST(QuantizedFile, TheFileIsReadableByItsPlainSchema) {
  Entry a, b, c, d;
  build(&a, Format::kMxfp4, {2, 5, 64}, f::Direction::kColumnwise, false, "a");
  build(&b, Format::kNvfp4, {40, 48}, f::Direction::kRowwise, true, "b");
  build(&c, Format::kFp8Block128x128, {3, 33}, f::Direction::kRowwise, false, "c");
  build(&d, Format::kMxfp8E5M2, {70}, f::Direction::kRowwise, false, "d");
  Tensors tensors;
  Meta meta;
  a.t.rounding = f::ScaleRounding::kFloor;  // recorded as the caller says (a ceil quantize here)
  for (Entry* e : {&a, &b, &c, &d}) ASSERT_TRUE(add_quantized_tensor(e->t, &tensors, &meta));
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("q.safetensors"), tensors, meta));
  SafetensorsFile file;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("q.safetensors"), &file));

  EXPECT_EQ(file.num_tensors(), 9u);
  EXPECT_EQ(tensor_string(file, "a.data"), "U8[64,5]");  // columnwise: [cols, rows], 2 per byte
  EXPECT_EQ(tensor_string(file, "a.scale"), "U8[64,1]");
  EXPECT_EQ(tensor_string(file, "b.data"), "U8[40,24]");
  EXPECT_EQ(tensor_string(file, "b.scale"), "U8[3,3]");
  EXPECT_EQ(tensor_string(file, "b.global_scale"), "F32[]");
  EXPECT_EQ(tensor_string(file, "c.data"), "F8_E4M3[3,33]");
  EXPECT_EQ(tensor_string(file, "c.scale"), "F32[1,1]");
  EXPECT_EQ(tensor_string(file, "d.data"), "F8_E5M2[1,70]");  // rank 1: one row
  EXPECT_EQ(tensor_string(file, "d.scale"), "U8[1,3]");
  const Meta want = {
      {"a.block", "1x32"}, {"a.direction", "columnwise"}, {"a.recipe", "mxfp4"},
      {"a.rounding", "floor"}, {"a.shape", "[2,5,64]"}, {"a.transform", "none"},
      {"b.block", "16x16"}, {"b.direction", "rowwise"}, {"b.recipe", "nvfp4"},
      {"b.rounding", "rn"}, {"b.shape", "[40,48]"}, {"b.transform", "none"},
      {"c.block", "128x128"}, {"c.direction", "rowwise"}, {"c.recipe", "fp8_block128x128"},
      {"c.rounding", "rn"}, {"c.shape", "[3,33]"}, {"c.transform", "none"},
      {"d.block", "1x32"}, {"d.direction", "rowwise"}, {"d.recipe", "mxfp8_e5m2"},
      {"d.rounding", "ceil"}, {"d.shape", "[70]"}, {"d.transform", "none"}};
  EXPECT_EQ(file.metadata(), want);
  EXPECT_EQ(quantized_tensor_names(file), (std::vector<std::string>{"a", "b", "c", "d"}));

  // Nibble order: the lower column index in the low nibble.
  TensorView v;
  ASSERT_TRUE(file.tensor("a.data", &v));
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t col = 0; col < 10; ++col) {
      const uint8_t byte = v.data[r * 5 + col / 2];
      ASSERT_EQ(col % 2 ? byte >> 4 : byte & 0xF, f::element_code(a.t.q, r, col)) << r << "," << col;
    }
  }
  // The global scale and the fp32 scales are the in-memory values.
  std::vector<float> g;
  ASSERT_TRUE(file.tensor_as_float("b.global_scale", &g));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(bits(g[0]), bits(b.t.q.global_scale_dec));
  EXPECT_NE(g[0], 1.0f);
  std::vector<float> s;
  ASSERT_TRUE(file.tensor_as_float("c.scale", &s));
  EXPECT_EQ(float_bytes(s), float_bytes(c.t.q.scales_f32));
}

// docs/file-format.md's Python snippet, in C++: MXFP8 dequantized from the plain tensors alone.
TEST(QuantizedFile, Mxfp8DequantizesByHandFromThePlainTensors) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 70});
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("q.safetensors"), e.tensors, e.meta));
  SafetensorsFile file;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("q.safetensors"), &file));
  TensorView data, scale;
  ASSERT_TRUE(file.tensor("w.data", &data));
  ASSERT_TRUE(file.tensor("w.scale", &scale));
  std::vector<float> want;
  ASSERT_TRUE(f::dequantize(e.t.q, &want));
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 70; ++c) {
      const float x = f::decode_e4m3(data.data[r * 70 + c]) * std::ldexp(1.0f, scale.data[r * 3 + c / 32] - 127);
      ASSERT_EQ(bits(x), bits(want[r * 70 + c])) << r << "," << c;
    }
  }
}

// The worked example of docs/file-format.md: keep the two in step.
TEST(QuantizedFile, WorkedExampleOfTheDocs) {
  const std::vector<float> x = {1.0f, -0.5f, 3.0f, 0.25f, 12.0f, -1.0f};
  QuantizedTensor t;
  t.name = "w";
  t.shape = {2, 3};
  f::QuantizeOptions o;
  o.recipe = Format::kMxfp4;
  ASSERT_TRUE(f::quantize(x.data(), 2, 3, 3, o, f::Direction::kRowwise, &t.q));
  EXPECT_EQ(t.q.data, (std::vector<uint8_t>{0xA4, 0x07, 0x70, 0x09}));
  EXPECT_EQ(t.q.scales, (std::vector<uint8_t>{0x7E, 0x80}));
  Tensors tensors;
  Meta meta;
  ASSERT_TRUE(add_quantized_tensor(t, &tensors, &meta));
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("w.safetensors"), tensors, meta));
  std::ifstream in(dir.file("w.safetensors"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string header =
      "{\"__metadata__\":{\"w.block\":\"1x32\",\"w.direction\":\"rowwise\",\"w.recipe\":\"mxfp4\","
      "\"w.rounding\":\"ceil\",\"w.shape\":\"[2,3]\",\"w.transform\":\"none\"},"
      "\"w.data\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
      "\"w.scale\":{\"dtype\":\"U8\",\"shape\":[2,1],\"data_offsets\":[4,6]}}";
  ASSERT_GE(bytes.size(), 8 + header.size());
  EXPECT_EQ(bytes.substr(8, header.size()), header);
  EXPECT_EQ(bytes.substr(bytes.size() - 6), std::string("\xA4\x07\x70\x09\x7E\x80", 6));
  std::vector<float> d;
  ASSERT_TRUE(f::dequantize(t.q, &d));
  EXPECT_EQ(d, (std::vector<float>{1.0f, -0.5f, 3.0f, 0.0f, 12.0f, -1.0f}));
}

// "both": the rowwise copy is NAME, the columnwise one NAME.columnwise, with the same NAME.shape.
// NVFP4 2D copies hold identical values, so the columnwise copy transposed back must equal the
// rowwise one bit for bit.
TEST(QuantizedFile, BothDirectionsConvention) {
  Entry row, col;
  build(&row, Format::kNvfp4, {2, 16, 40}, f::Direction::kRowwise, true, "w", 11);
  build(&col, Format::kNvfp4, {2, 16, 40}, f::Direction::kColumnwise, true, "w.columnwise", 11);
  Tensors tensors;
  Meta meta;
  ASSERT_TRUE(add_quantized_tensor(row.t, &tensors, &meta));
  ASSERT_TRUE(add_quantized_tensor(col.t, &tensors, &meta));
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("q.safetensors"), tensors, meta));
  SafetensorsFile file;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("q.safetensors"), &file));
  EXPECT_EQ(quantized_tensor_names(file), (std::vector<std::string>{"w", "w.columnwise"}));
  EXPECT_EQ(file.metadata().at("w.shape"), "[2,16,40]");
  EXPECT_EQ(file.metadata().at("w.columnwise.shape"), "[2,16,40]");
  QuantizedTensor r, c;
  ASSERT_TRUE(read_quantized_tensor(file, "w", &r));
  ASSERT_TRUE(read_quantized_tensor(file, "w.columnwise", &c));
  ASSERT_EQ(c.q.rows, 40);
  ASSERT_EQ(c.q.cols, 32);
  std::vector<float> dr, dc;
  ASSERT_TRUE(f::dequantize(r.q, &dr));
  ASSERT_TRUE(f::dequantize(c.q, &dc));
  for (int64_t i = 0; i < 32; ++i)
    for (int64_t j = 0; j < 40; ++j) ASSERT_EQ(bits(dc[j * 32 + i]), bits(dr[i * 40 + j])) << i << "," << j;
}

// Views may be unaligned in files other writers produce: the reader copies with memcpy.
TEST(QuantizedFile, ReadsUnalignedTensors) {
  Entry e;
  build(&e, Format::kFp8Block1x128, {5, 300});
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("q.safetensors"), e.tensors, e.meta));
  std::ifstream in(dir.file("q.safetensors"), std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<uint8_t> shifted(1);
  shifted.insert(shifted.end(), bytes.begin(), bytes.end());
  SafetensorsFile file;
  ASSERT_TRUE(SafetensorsFile::parse(shifted.data() + 1, bytes.size(), &file));
  TensorView scale;
  ASSERT_TRUE(file.tensor("w.scale", &scale));
  EXPECT_NE(reinterpret_cast<uintptr_t>(scale.data) % 4, 0u) << "the test meant an unaligned view";
  QuantizedTensor back;
  ASSERT_TRUE(read_quantized_tensor(file, "w", &back));
  expect_same(e.t, back);
}

TEST(QuantizedFile, NamesAreTheRecipeKeysSorted) {
  Entry b, ab, a;
  build(&b, Format::kMxfp8E4M3, {4, 4}, f::Direction::kRowwise, false, "b");
  build(&ab, Format::kMxfp8E4M3, {4, 4}, f::Direction::kRowwise, false, "a.b");
  build(&a, Format::kMxfp8E4M3, {4, 4}, f::Direction::kRowwise, false, "a");
  Tensors tensors;
  Meta meta = {{"framework", "pt"}, {".recipe", "mxfp8"}, {"recipe", "x"}};
  for (Entry* e : {&b, &ab, &a}) ASSERT_TRUE(add_quantized_tensor(e->t, &tensors, &meta));
  const float one = 1.0f;
  tensors.push_back({"plain", TensorView{DType::F32, {}, reinterpret_cast<const uint8_t*>(&one), 4}});
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("q.safetensors"), tensors, meta));
  SafetensorsFile file;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("q.safetensors"), &file));
  // Sorted by name, not by key ("a.b.recipe" sorts before "a.recipe").
  EXPECT_EQ(quantized_tensor_names(file), (std::vector<std::string>{"a", "a.b", "b"}));
}

// ---- matrix_view --------------------------------------------------------------------------------

TEST(QuantizedFile, MatrixView) {
  int64_t r = -1, c = -1;
  ASSERT_TRUE(matrix_view({7}, &r, &c));
  EXPECT_EQ(r, 1);
  EXPECT_EQ(c, 7);
  ASSERT_TRUE(matrix_view({2, 3, 5, 64}, &r, &c));
  EXPECT_EQ(r, 30);
  EXPECT_EQ(c, 64);
  EXPECT_TRUE(mentions(matrix_view({}, &r, &c), "rank 0 (a scalar) has no 2D view"));
  EXPECT_TRUE(mentions(matrix_view({3, 0, 4}, &r, &c), "empty tensor"));
  EXPECT_TRUE(mentions(matrix_view({0}, &r, &c), "empty tensor"));
  EXPECT_TRUE(mentions(matrix_view({3, -1}, &r, &c), "negative"));
  EXPECT_TRUE(mentions(matrix_view({int64_t{1} << 32, int64_t{1} << 32}, &r, &c), "overflows"));
  EXPECT_TRUE(mentions(matrix_view({int64_t{1} << 40, int64_t{1} << 30, 1}, &r, &c), "overflows"));
  EXPECT_EQ(r, 30) << "an error must leave rows unchanged";
}

// ---- add_quantized_tensor's checks --------------------------------------------------------------

class QuantizedFileAddErrors : public testing::Test {
 protected:
  void SetUp() override { build(&e_, Format::kMxfp8E4M3, {3, 40}); }
  // Adds t to a fresh pair of containers holding one unrelated entry; they must be unchanged.
  Status add(const QuantizedTensor& t) {
    Tensors tensors = e_.tensors;
    Meta meta = e_.meta;
    const Status s = add_quantized_tensor(t, &tensors, &meta);
    if (!s) {
      EXPECT_EQ(tensors.size(), e_.tensors.size()) << "an error changed tensors";
      EXPECT_EQ(meta, e_.meta) << "an error changed metadata";
    }
    return s;
  }
  QuantizedTensor fresh(Format r, bool nvfp4_2d = false, f::Direction d = f::Direction::kRowwise) {
    Entry e;
    build(&e, r, {32, 48}, d, nvfp4_2d, "v");
    return e.t;
  }
  Entry e_;
};

TEST_F(QuantizedFileAddErrors, AValidEntryIsAccepted) { EXPECT_TRUE(add(fresh(Format::kNvfp4))); }

TEST_F(QuantizedFileAddErrors, EmptyName) {
  QuantizedTensor t = fresh(Format::kMxfp4);
  t.name = "";
  EXPECT_TRUE(mentions(add(t), "name: the entry name must not be empty"));
}

TEST_F(QuantizedFileAddErrors, ShapeMismatch) {
  QuantizedTensor t = fresh(Format::kMxfp4);
  t.shape = {32, 49};
  EXPECT_TRUE(mentions(add(t), "shape [32,49]"));
  t.shape = {48, 32};  // the transpose: only right for a columnwise copy
  EXPECT_TRUE(mentions(add(t), "rowwise copy stores [rows, cols]"));
  t.direction = f::Direction::kColumnwise;
  EXPECT_TRUE(add(t));
  t.shape = {32, 48};
  EXPECT_TRUE(mentions(add(t), "columnwise copy stores [cols, rows]"));
  t.shape = {2, 16, 48};  // rank 3 with the same 2D view
  t.direction = f::Direction::kRowwise;
  EXPECT_TRUE(add(t));
  t.direction = f::Direction::kBoth;  // a stored tensor is one copy
  EXPECT_TRUE(mentions(add(t), "direction: a stored copy is rowwise or columnwise"));
}

TEST_F(QuantizedFileAddErrors, ScalarAndEmptyShapes) {
  QuantizedTensor t = fresh(Format::kMxfp4);
  t.shape = {};
  EXPECT_TRUE(mentions(add(t), "rank 0"));
  t.shape = {0, 48};
  EXPECT_TRUE(mentions(add(t), "empty tensor"));
}

TEST_F(QuantizedFileAddErrors, OptionsThatDoNotBelongToTheRecipe) {
  QuantizedTensor t = fresh(Format::kNvfp4);
  t.rounding = f::ScaleRounding::kFloor;
  EXPECT_TRUE(mentions(add(t), "rounding: floor applies to MX recipes only, not nvfp4"));
  QuantizedTensor b = fresh(Format::kMxfp8E4M3);
  b.rounding = f::ScaleRounding::kBoth;  // a stored tensor has one rule
  EXPECT_TRUE(mentions(add(b), "rounding: a stored copy has one rule, ceil or floor"));
  QuantizedTensor m = fresh(Format::kMxfp8E4M3);
  m.hadamard = true;
  EXPECT_TRUE(mentions(add(m), "hadamard: applies to nvfp4"));
  QuantizedTensor two_d = fresh(Format::kNvfp4, true);
  two_d.hadamard = true;
  EXPECT_TRUE(mentions(add(two_d), "hadamard: applies to nvfp4 with 1x16 blocks only"));
  QuantizedTensor g = fresh(Format::kFp8Block1x128);
  g.q.global_scale_dec = 2.0f;
  EXPECT_TRUE(mentions(add(g), "q.global_scale_dec"));
  QuantizedTensor n = fresh(Format::kNvfp4);
  n.q.global_scale_dec = 0.0f;
  EXPECT_TRUE(mentions(add(n), "q.global_scale_dec"));
}

TEST_F(QuantizedFileAddErrors, InvalidMatrix) {
  QuantizedTensor t = fresh(Format::kMxfp8E4M3);
  t.q.data.pop_back();
  EXPECT_TRUE(mentions(add(t), "q.data"));
  t = fresh(Format::kMxfp8E4M3);
  t.q.block_cols = 16;
  EXPECT_TRUE(mentions(add(t), "block shape"));
}

TEST_F(QuantizedFileAddErrors, KeysAlreadyPresent) {
  QuantizedTensor t = fresh(Format::kMxfp4);
  t.name = "w";  // e_ is entry "w"
  EXPECT_TRUE(mentions(add(t), "metadata key 'w.recipe' is already in the file"));
  // A foreign tensor under one of the entry's names: the write refuses the duplicate.
  Tensors tensors = {{"v.scale", TensorView{DType::U8, {1}, e_.t.q.data.data(), 1}}};
  Meta meta;
  const QuantizedTensor v = fresh(Format::kMxfp4);
  ASSERT_TRUE(add_quantized_tensor(v, &tensors, &meta));
  TempDir dir;
  EXPECT_TRUE(mentions(write_safetensors(dir.file("q.safetensors"), tensors, meta), "duplicate name 'v.scale'"));
  EXPECT_FALSE(fs::exists(dir.file("q.safetensors")));
  tensors.clear();
  meta = {{"v.shape", "[1]"}};
  EXPECT_TRUE(mentions(add_quantized_tensor(fresh(Format::kMxfp4), &tensors, &meta), "'v.shape'"));
  EXPECT_TRUE(mentions(add_quantized_tensor(fresh(Format::kMxfp4), nullptr, &meta), "null"));
}

// ---- read_quantized_tensor's checks: one per rule ----------------------------------------------

TEST(QuantizedFileReadErrors, MissingMetadataKey) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  for (const char* suffix : {".recipe", ".rounding", ".direction", ".shape", ".block", ".transform"}) {
    Meta meta = e.meta;
    ASSERT_EQ(meta.erase(std::string("w") + suffix), 1u);
    const Status s = write_and_read(e.tensors, meta);
    EXPECT_TRUE(mentions(s, "'w" + std::string(suffix) + "': missing metadata key")) << s.message();
  }
  EXPECT_TRUE(mentions(write_and_read(e.tensors, e.meta, "x"), "'x.recipe': missing metadata key"));
}

TEST(QuantizedFileReadErrors, MissingTensor) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  for (const char* key : {"w.data", "w.scale"}) {
    Tensors tensors = e.tensors;
    erase(&tensors, key);
    EXPECT_TRUE(mentions(write_and_read(tensors, e.meta), "'" + std::string(key) + "': missing tensor"));
  }
}

TEST(QuantizedFileReadErrors, UnknownValues) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  EXPECT_TRUE(mentions(read_with_meta(e, "w.recipe", "mxfp9"), "'w.recipe': unknown recipe 'mxfp9'"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.rounding", "up"), "'w.rounding': unknown rounding 'up'"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.direction", "both"), "'w.direction': unknown direction 'both'"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.direction", "Rowwise"), "'w.direction'"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.transform", "rht8"), "'w.transform': unknown transform 'rht8'"));
}

TEST(QuantizedFileReadErrors, RoundingMustBelongToTheRecipe) {
  Entry mx, nv;
  build(&mx, Format::kMxfp8E4M3, {3, 33});
  build(&nv, Format::kNvfp4, {3, 32});
  EXPECT_TRUE(mentions(read_with_meta(mx, "w.rounding", "rn"), "'w.rounding': 'rn' does not belong to recipe mxfp8"));
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.rounding", "ceil"), "'w.rounding': 'ceil' does not belong to recipe nvfp4"));
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.rounding", "floor"), "expected rn"));
  EXPECT_TRUE(read_with_meta(mx, "w.rounding", "floor")) << "floor is an MX rounding";
}

TEST(QuantizedFileReadErrors, TransformMustBelongToTheRecipe) {
  Entry mx, nv2d, nv_odd;
  build(&mx, Format::kMxfp8E4M3, {3, 32});
  build(&nv2d, Format::kNvfp4, {16, 32}, f::Direction::kRowwise, true);
  build(&nv_odd, Format::kNvfp4, {3, 33});
  for (const Entry* e : {&mx, &nv2d, &nv_odd})
    EXPECT_TRUE(mentions(read_with_meta(*e, "w.transform", "rht16"), "'w.transform': rht16 applies to nvfp4 with 1x16"));
  Entry nv;
  build(&nv, Format::kNvfp4, {3, 32});
  QuantizedTensor back;
  Meta meta = nv.meta;
  meta["w.transform"] = "rht16";
  ASSERT_TRUE(write_and_read(nv.tensors, meta, "w", &back));
  EXPECT_TRUE(back.hadamard);
}

TEST(QuantizedFileReadErrors, MalformedShape) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  for (const char* bad : {"", "3,33", "[3,,33]", "[3,33", "[3,-33]", "[a]", "[3.0,33]", "[03,33]",
                          "[3,33]x", "(3, 33)", "[+3,33]", "[99999999999999999999,1]", "[3 33]"}) {
    const Status s = read_with_meta(e, "w.shape", bad);
    EXPECT_TRUE(mentions(s, "'w.shape': ") && mentions(s, "is not a JSON list")) << bad << ": " << s.message();
  }
  EXPECT_TRUE(read_with_meta(e, "w.shape", " [ 3 , 33 ] ")) << "JSON whitespace is allowed";
  EXPECT_TRUE(read_with_meta(e, "w.shape", "[1,3,33]")) << "the same 2D view";
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[]"), "'w.shape': shape []: rank 0"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[0,33]"), "'w.shape': shape [0,33]: empty tensor"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[4294967296,4294967296]"), "overflows"));
  std::string deep = "[";
  for (int k = 0; k < 65; ++k) deep += k ? ",1" : "1";
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", deep + "]"), "'w.shape': rank exceeds"));
}

TEST(QuantizedFileReadErrors, ShapeThatDoesNotMatchTheTensors) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[3,34]"), "'w.data': shape [3,33], expected [3,34]"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[33,3]"), "'w.data': shape [3,33], expected [33,3]"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.direction", "columnwise"), "'w.data': shape [3,33], expected [33,3]"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[2,33]"), "'w.data': shape [3,33], expected [2,33]"));
}

TEST(QuantizedFileReadErrors, Block) {
  Entry mx, nv;
  build(&mx, Format::kMxfp8E4M3, {3, 33});
  build(&nv, Format::kNvfp4, {3, 32});
  for (const char* bad : {"", "1by32", "x32", "1x", "1x32 ", "1X32", "-1x32", "1x32x1", "01x32"})
    EXPECT_TRUE(mentions(read_with_meta(mx, "w.block", bad), "'w.block': ")) << bad;
  EXPECT_TRUE(mentions(read_with_meta(mx, "w.block", "1by32"), "is not ROWSxCOLS"));
  EXPECT_TRUE(mentions(read_with_meta(mx, "w.block", "1x16"), "'w.block': '1x16' is not a block of recipe mxfp8 (1x32)"));
  EXPECT_TRUE(mentions(read_with_meta(mx, "w.block", "32x32"), "is not a block of recipe mxfp8"));
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.block", "32x32"), "(1x16 or 16x16)"));
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.block", "99999999999x16"), "is not a block"));
  // A legal block that the tensors were not quantized with: the scale shape says so.
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.block", "16x16"), "'w.scale': shape [3,2], expected [1,2]"));
}

TEST(QuantizedFileReadErrors, DataDtypeAndShape) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  Tensors tensors = e.tensors;
  find(&tensors, "w.data")->dtype = DType::U8;
  EXPECT_TRUE(mentions(write_and_read(tensors, e.meta), "'w.data': dtype U8, expected F8_E4M3"));
  // The same bytes under another recipe with the same block.
  EXPECT_TRUE(mentions(read_with_meta(e, "w.recipe", "mxfp8_e5m2"), "'w.data': dtype F8_E4M3, expected F8_E5M2"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.recipe", "mxfp4"), "'w.data': dtype F8_E4M3, expected U8"));
  tensors = e.tensors;
  find(&tensors, "w.data")->shape = {1, 99};
  EXPECT_TRUE(mentions(write_and_read(tensors, e.meta), "'w.data': shape [1,99], expected [3,33]"));
}

TEST(QuantizedFileReadErrors, ScaleDtypeAndShape) {
  Entry mx, fp8;
  build(&mx, Format::kMxfp8E4M3, {3, 33});
  build(&fp8, Format::kFp8Block1x128, {2, 200});
  Tensors tensors = fp8.tensors;
  TensorView* s = find(&tensors, "w.scale");
  s->dtype = DType::U8;
  s->shape = {2, 8};
  EXPECT_TRUE(mentions(write_and_read(tensors, fp8.meta), "'w.scale': dtype U8, expected F32"));
  tensors = mx.tensors;
  const std::vector<uint8_t> four(24, 1);
  *find(&tensors, "w.scale") = TensorView{DType::F32, {3, 2}, four.data(), 24};
  EXPECT_TRUE(mentions(write_and_read(tensors, mx.meta), "'w.scale': dtype F32, expected U8"));
  tensors = mx.tensors;
  find(&tensors, "w.scale")->shape = {2, 3};
  EXPECT_TRUE(mentions(write_and_read(tensors, mx.meta), "'w.scale': shape [2,3], expected [3,2]"));
  *find(&tensors, "w.scale") = TensorView{DType::U8, {3, 3}, four.data(), 9};
  EXPECT_TRUE(mentions(write_and_read(tensors, mx.meta), "'w.scale': shape [3,3], expected [3,2]"));
}

TEST(QuantizedFileReadErrors, GlobalScaleIffNvfp4) {
  Entry nv, mx;
  build(&nv, Format::kNvfp4, {3, 32});
  build(&mx, Format::kMxfp8E4M3, {3, 33});
  Tensors tensors = nv.tensors;
  erase(&tensors, "w.global_scale");
  EXPECT_TRUE(mentions(write_and_read(tensors, nv.meta), "'w.global_scale': missing tensor"));
  const float g = 0.5f;
  tensors = mx.tensors;
  tensors.push_back({"w.global_scale", TensorView{DType::F32, {}, reinterpret_cast<const uint8_t*>(&g), 4}});
  EXPECT_TRUE(mentions(write_and_read(tensors, mx.meta), "'w.global_scale': only nvfp4 entries have a global scale"));
  tensors = nv.tensors;
  find(&tensors, "w.global_scale")->shape = {1};
  EXPECT_TRUE(mentions(write_and_read(tensors, nv.meta), "'w.global_scale': shape [1], expected []"));
  tensors = nv.tensors;
  find(&tensors, "w.global_scale")->dtype = DType::I32;
  EXPECT_TRUE(mentions(write_and_read(tensors, nv.meta), "'w.global_scale': dtype I32, expected F32"));
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    tensors = nv.tensors;
    find(&tensors, "w.global_scale")->data = reinterpret_cast<const uint8_t*>(&bad);
    EXPECT_TRUE(mentions(write_and_read(tensors, nv.meta), "'w.global_scale': ")) << bad;
  }
}

TEST(QuantizedFileReadErrors, ScalesQuantizeNeverWrites) {
  Entry fp8, nv;
  build(&fp8, Format::kFp8Block1x128, {3, 300});
  build(&nv, Format::kNvfp4, {3, 32});
  // The views point into t.q: a scale changed there is what the file holds.
  for (float bad : {-0.5f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()}) {
    fp8.t.q.scales_f32[4] = bad;  // block (1, 1) of a 3 x 3 grid
    EXPECT_TRUE(mentions(write_and_read(fp8.tensors, fp8.meta), "'w.scale': scale (1, 1) is ")) << bad;
    EXPECT_TRUE(mentions(write_and_read(fp8.tensors, fp8.meta), "finite values >= 0 (or NaN")) << bad;
  }
  fp8.t.q.scales_f32[4] = std::numeric_limits<float>::quiet_NaN();  // a block that held NaN
  EXPECT_TRUE(write_and_read(fp8.tensors, fp8.meta));
  nv.t.q.scales[3] = 0x85;  // block (1, 1) of 3 x 2
  EXPECT_TRUE(mentions(write_and_read(nv.tensors, nv.meta), "'w.scale': scale (1, 1) is code 0x85"));
}

TEST(QuantizedFileReadErrors, ElementCodesTheDecodersWouldMisread) {
  Entry fp4, fp6;
  build(&fp4, Format::kMxfp4, {3, 33});
  build(&fp6, Format::kMxfp6E3M2, {3, 33});
  fp4.t.q.data[2 * 17 + 16] |= 0x10;  // row 2's padding nibble (the views point into t.q)
  EXPECT_TRUE(mentions(write_and_read(fp4.tensors, fp4.meta), "'w.data': row 2 has a non-zero padding nibble"));
  fp6.t.q.data[40] |= 0x40;
  EXPECT_TRUE(mentions(write_and_read(fp6.tensors, fp6.meta), "'w.data': element (1, 7) is not a 6-bit code"));
}

TEST(QuantizedFileReadErrors, ArgumentsAndAnErrorLeavesOutUnchanged) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("q.safetensors"), e.tensors, e.meta));
  SafetensorsFile file;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("q.safetensors"), &file));
  EXPECT_TRUE(mentions(read_quantized_tensor(file, "w", nullptr), "out: must not be null"));
  QuantizedTensor out;
  out.name = "untouched";
  EXPECT_TRUE(mentions(read_quantized_tensor(file, "", &out), "name: the entry name must not be empty"));
  EXPECT_TRUE(mentions(read_quantized_tensor(file, "v", &out), "'v.recipe'"));
  EXPECT_EQ(out.name, "untouched");
  EXPECT_TRUE(out.q.data.empty());
}

}  // namespace
}  // namespace blockscale::io
