// Tests of formats/io/quantized_file.h, the file as a plain safetensors file: dtypes, shapes,
// metadata strings and nibble order; MXFP8 dequantized by hand; the worked example of
// docs/file-format.md; the "both directions" convention; unaligned tensors; quantized_tensor_names
// and matrix_view.
#include "tests/formats/io/quantized_file_test_helpers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace blockscale::io {
namespace {

using namespace quantized_file_testing;

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
  tensors.push_back({"plain", TensorView{DType::kF32, {}, reinterpret_cast<const uint8_t*>(&one), 4}});
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

}  // namespace
}  // namespace blockscale::io
