// Tests of formats/io/quantized_file.h, round trips: every recipe x direction x option x odd
// shape quantized, written to a .safetensors file, reopened and read back field by field and
// byte for byte, the dequantized values bit for bit.
#include "tests/formats/io/quantized_file_test_helpers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace blockscale::io {
namespace {

using namespace quantized_file_testing;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

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

}  // namespace
}  // namespace blockscale::io
