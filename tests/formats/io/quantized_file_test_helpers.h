// Helpers shared by the tests of formats/io/quantized_file.h: seeded inputs, a quantized entry
// with its tensors and metadata, a write-then-read of one entry, and the field-by-field check of a
// tensor read back against the one in memory.
#pragma once

#include "formats/io/quantized_file.h"
#include "tests/status_test.h"  // defines: mentions
#include "tests/temp_dir.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace blockscale::io::quantized_file_testing {

using blockscale_test::mentions;
using blockscale_test::TempDir;

namespace f = blockscale::formats;
namespace fs = std::filesystem;
using f::DType;
using f::Format;
using Tensors = std::vector<std::pair<std::string, TensorView>>;
using Meta = std::map<std::string, std::string>;

// Seeded normal values whose magnitude changes every 8 elements (so blocks get different scales),
// with some exact zeros and tiny values; never all zero.
inline std::vector<float> random_input(int64_t n, uint32_t seed) {
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

inline std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Every field of `back` (read from a file) equals `want` (in memory), byte for byte, and both
// dequantize to the same bits.
inline void expect_same(const QuantizedTensor& want, const QuantizedTensor& back) {
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

// A quantized entry `name` with its tensors and metadata (views into `t`, which stays put).
struct Entry {
  QuantizedTensor t;
  Tensors tensors;
  Meta meta;
};

inline void build(Entry* e, Format r, std::vector<int64_t> shape, f::Direction d = f::Direction::kRowwise,
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

inline TensorView* find(Tensors* tensors, const std::string& name) {
  for (auto& [n, v] : *tensors)
    if (n == name) return &v;
  return nullptr;
}

inline void erase(Tensors* tensors, const std::string& name) {
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    if (it->first == name) {
      tensors->erase(it);
      return;
    }
  }
  FAIL() << "no tensor " << name;
}

// Writes the tensors and metadata and reads entry `name` back.
inline Status write_and_read(const Tensors& tensors, const Meta& meta, const std::string& name = "w",
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

inline Status read_with_meta(const Entry& e, const std::string& key, const std::string& value) {
  Meta meta = e.meta;
  meta[key] = value;
  return write_and_read(e.tensors, meta);
}

}  // namespace blockscale::io::quantized_file_testing
