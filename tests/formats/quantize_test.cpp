// Tests of formats/quantize.cpp: dispatch over every recipe, argument validation, output geometry,
// dequantize / dequantize_exact against docs/numerics.md's formulas, columnwise = rowwise of the
// transpose, partial blocks = zero padding, row stride, poisoned outputs, the non-finite policy.
// Byte-exact golden vectors of each recipe live in mx_/nvfp4_/fp8_block_quantize_test.cpp.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "tests/status_test.h"  // defines: expect_error

namespace bf = blockscale::formats;
using bf::Direction;
using bf::QuantizedMatrix;
using bf::QuantizeOptions;
using bf::Format;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Seeded normal values times `magnitude`; the padding columns of a row (ld > cols) hold NaN so
// that a read outside the matrix shows up.
std::vector<float> random_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed,
                                 float magnitude = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * ld), kNaN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * ld + c] = n(rng) * magnitude;
  return x;
}

std::vector<float> transpose(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * ld + c];
  return t;
}

struct Case {
  const char* name;
  QuantizeOptions opt;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

QuantizeOptions make(Format r) { QuantizeOptions o; o.recipe = r; return o; }

std::vector<Case> all_cases();

std::vector<Case> cases_without_sr() {
  std::vector<Case> v;
  for (const Case& c : all_cases())
    if (!c.opt.stochastic_rounding) v.push_back(c);
  return v;
}

std::vector<Case> all_cases() {
  std::vector<Case> c;
  c.push_back({"mxfp8", make(Format::kMxfp8E4M3)});
  QuantizeOptions o = make(Format::kMxfp8E4M3); o.rounding = bf::ScaleRounding::kFloor;
  c.push_back({"mxfp8_floor", o});
  c.push_back({"mxfp8_e5m2", make(Format::kMxfp8E5M2)});
  c.push_back({"mxfp6_e2m3", make(Format::kMxfp6E2M3)});
  c.push_back({"mxfp6_e3m2", make(Format::kMxfp6E3M2)});
  c.push_back({"mxfp4", make(Format::kMxfp4)});
  o = make(Format::kMxfp4); o.rounding = bf::ScaleRounding::kFloor;
  c.push_back({"mxfp4_floor", o});
  c.push_back({"nvfp4", make(Format::kNvfp4)});
  o = make(Format::kNvfp4); o.nvfp4_2d = true;
  c.push_back({"nvfp4_2d", o});
  o = make(Format::kNvfp4); o.stochastic_rounding = true; o.sr_seed = 0x1234567890ull; o.sr_offset = 77;
  c.push_back({"nvfp4_sr", o});
  o = make(Format::kNvfp4); o.has_tensor_amax = true; o.tensor_amax = 3.5f;
  c.push_back({"nvfp4_given_amax", o});
  c.push_back({"fp8_1x128", make(Format::kFp8Block1x128)});
  o = make(Format::kFp8Block1x128); o.pow2_scales = true;
  c.push_back({"fp8_1x128_pow2", o});
  c.push_back({"fp8_128x128", make(Format::kFp8Block128x128)});
  o = make(Format::kFp8Block128x128); o.pow2_scales = true;
  c.push_back({"fp8_128x128_pow2", o});
  return c;
}

QuantizeOptions rht_options() {
  QuantizeOptions o = make(Format::kNvfp4);
  o.hadamard = true;
  return o;
}

int expected_block_rows(const QuantizeOptions& o) {
  if (o.recipe == Format::kFp8Block128x128) return 128;
  if (o.recipe == Format::kNvfp4 && o.nvfp4_2d) return 16;
  return 1;
}
int expected_block_cols(Format r) {
  if (r == Format::kNvfp4) return 16;
  if (r == Format::kFp8Block1x128 || r == Format::kFp8Block128x128) return 128;
  return 32;
}
bool fp4(Format r) { return r == Format::kMxfp4 || r == Format::kNvfp4; }
bool fp8_block(Format r) { return r == Format::kFp8Block1x128 || r == Format::kFp8Block128x128; }
bool mx(Format r) { return !fp8_block(r) && r != Format::kNvfp4; }

// The element code at (r, c), unpacked here from the bytes (not with formats::element_code).
uint32_t code_at(const QuantizedMatrix& q, int64_t r, int64_t c) {
  if (!fp4(q.recipe)) return q.data[r * q.cols + c];
  const uint8_t b = q.data[r * ((q.cols + 1) / 2) + c / 2];
  return (c & 1) ? b >> 4 : b & 0xF;
}

float decode_elem(Format r, uint32_t code) {
  switch (r) {
    case Format::kMxfp8E5M2: return bf::decode_e5m2(code);
    case Format::kMxfp6E2M3: return bf::decode_e2m3(code);
    case Format::kMxfp6E3M2: return bf::decode_e3m2(code);
    case Format::kMxfp4: case Format::kNvfp4: return bf::decode_e2m1(code);
    default: return bf::decode_e4m3(code);
  }
}

void expect_same(const QuantizedMatrix& a, const QuantizedMatrix& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.recipe, b.recipe);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.block_rows, b.block_rows);
  EXPECT_EQ(a.block_cols, b.block_cols);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.scales, b.scales);
  ASSERT_EQ(a.scales_f32.size(), b.scales_f32.size());
  for (size_t i = 0; i < a.scales_f32.size(); ++i)
    ASSERT_EQ(fbits(a.scales_f32[i]), fbits(b.scales_f32[i])) << "scales_f32[" << i << "]";
  EXPECT_EQ(fbits(a.global_scale_dec), fbits(b.global_scale_dec));
  EXPECT_EQ(a.nonfinite_seen, b.nonfinite_seen);
}

QuantizedMatrix poisoned() {
  QuantizedMatrix q;
  q.recipe = Format::kMxfp6E3M2;
  q.rows = 7; q.cols = 9; q.block_rows = 3; q.block_cols = 5;
  q.data.assign(1000, 0xA5);
  q.scales.assign(77, 0x5A);
  q.scales_f32.assign(33, -123.0f);
  q.global_scale_dec = 123.0f;
  q.nonfinite_seen = true;
  return q;
}

bf::QuantizedMatrix quantize_ok(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld,
                                const QuantizeOptions& o, Direction d) {
  QuantizedMatrix q;
  blockscale::Status s = bf::quantize(x.data(), rows, cols, ld, o, d, &q);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return q;
}

struct Shape { int64_t rows, cols; };
void PrintTo(const Shape& s, std::ostream* os) { *os << s.rows << "x" << s.cols; }
const Shape kShapes[] = {{1, 1}, {1, 33}, {33, 1}, {31, 17}, {129, 65}, {3, 130}, {64, 48}, {130, 257}};

// ---- dispatch, geometry, columnwise, zero padding -------------------------------------------

class AllRecipes : public ::testing::TestWithParam<std::tuple<Case, Shape>> {};

TEST_P(AllRecipes, GeometryAndSizes) {
  const auto [c, s] = GetParam();
  const int64_t ld = s.cols + 3;
  const auto x = random_matrix(s.rows, s.cols, ld, 11);
  for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
    QuantizedMatrix q = poisoned();
    auto st = bf::quantize(x.data(), s.rows, s.cols, ld, c.opt, d, &q);
    ASSERT_TRUE(st.is_ok()) << st.message();
    const int64_t R = d == Direction::kRowwise ? s.rows : s.cols;
    const int64_t C = d == Direction::kRowwise ? s.cols : s.rows;
    EXPECT_EQ(q.recipe, c.opt.recipe);
    EXPECT_EQ(q.rows, R);
    EXPECT_EQ(q.cols, C);
    EXPECT_EQ(q.block_rows, expected_block_rows(c.opt));
    EXPECT_EQ(q.block_cols, expected_block_cols(c.opt.recipe));
    const int64_t row_bytes = fp4(c.opt.recipe) ? (C + 1) / 2 : C;
    EXPECT_EQ(q.data_row_bytes(), row_bytes);
    EXPECT_EQ(q.data.size(), static_cast<size_t>(R * row_bytes));
    const int64_t nscales = ((R + q.block_rows - 1) / q.block_rows) *
                            ((C + q.block_cols - 1) / q.block_cols);
    if (fp8_block(c.opt.recipe)) {
      EXPECT_EQ(q.scales_f32.size(), static_cast<size_t>(nscales));
      EXPECT_TRUE(q.scales.empty());
    } else {
      EXPECT_EQ(q.scales.size(), static_cast<size_t>(nscales));
      EXPECT_TRUE(q.scales_f32.empty());
    }
    EXPECT_FALSE(q.nonfinite_seen) << "NaN in the ld padding must not be read";
    EXPECT_TRUE(bf::validate(q, "q").is_ok());
    // A poisoned output and a fresh one end up identical (every field is written).
    expect_same(q, quantize_ok(x, s.rows, s.cols, ld, c.opt, d), "poisoned vs fresh");
    // Odd-length FP4 rows leave the high nibble of the last byte 0.
    if (fp4(q.recipe) && (C & 1))
      for (int64_t r = 0; r < R; ++r) EXPECT_EQ(q.data[r * row_bytes + row_bytes - 1] >> 4, 0);
  }
}

TEST_P(AllRecipes, ColumnwiseIsRowwiseOfTranspose) {
  const auto [c, s] = GetParam();
  const int64_t ld = s.cols + 1;
  const auto x = random_matrix(s.rows, s.cols, ld, 21, 3.0f);
  const auto xt = transpose(x, s.rows, s.cols, ld);
  const QuantizedMatrix col = quantize_ok(x, s.rows, s.cols, ld, c.opt, Direction::kColumnwise);
  const QuantizedMatrix row_t = quantize_ok(xt, s.cols, s.rows, s.rows, c.opt, Direction::kRowwise);
  expect_same(col, row_t, "columnwise(x) vs rowwise(x^T)");
}

// SR draws depend on the stored column count (the element index), so a zero-padded copy draws
// other words by design: this check runs over the deterministic cases only.
class PartialBlocks : public AllRecipes {};

TEST_P(PartialBlocks, AreZeroPadded) {
  const auto [c, s] = GetParam();
  const auto x = random_matrix(s.rows, s.cols, s.cols, 31, 0.5f);
  for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
    // Pad the stored orientation up to whole blocks with zeros, quantize, and compare.
    const int br = expected_block_rows(c.opt), bc = expected_block_cols(c.opt.recipe);
    int64_t pr = d == Direction::kRowwise ? s.rows : s.cols;  // stored rows
    int64_t pc = d == Direction::kRowwise ? s.cols : s.rows;  // stored cols
    const int64_t R = pr, C = pc;
    pr = (pr + br - 1) / br * br;
    pc = (pc + bc - 1) / bc * bc;
    const int64_t in_rows = d == Direction::kRowwise ? pr : pc;
    const int64_t in_cols = d == Direction::kRowwise ? pc : pr;
    std::vector<float> xp(static_cast<size_t>(in_rows * in_cols), 0.0f);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t cc = 0; cc < s.cols; ++cc) xp[r * in_cols + cc] = x[r * s.cols + cc];
    const QuantizedMatrix q = quantize_ok(x, s.rows, s.cols, s.cols, c.opt, d);
    const QuantizedMatrix qp = quantize_ok(xp, in_rows, in_cols, in_cols, c.opt, d);
    ASSERT_EQ(q.scale_rows(), qp.scale_rows());
    ASSERT_EQ(q.scale_cols(), qp.scale_cols());
    EXPECT_EQ(q.scales, qp.scales);
    EXPECT_EQ(q.scales_f32, qp.scales_f32);
    EXPECT_EQ(fbits(q.global_scale_dec), fbits(qp.global_scale_dec));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t cc = 0; cc < C; ++cc)
        ASSERT_EQ(code_at(q, r, cc), code_at(qp, r, cc)) << "at " << r << "," << cc;
  }
}

// dequantize = decode(q) * scale exactly as docs/numerics.md writes it, in fp32; dequantize_exact
// the same product in fp64 (exact). element_code agrees with the packed bytes.
TEST_P(AllRecipes, DequantizeFollowsTheFormula) {
  const auto [c, s] = GetParam();
  auto x = random_matrix(s.rows, s.cols, s.cols, 41, 7.0f);
  for (size_t i = 0; i < x.size(); i += 5) x[i] *= 1e-3f;  // spread within blocks
  for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
    const QuantizedMatrix q = quantize_ok(x, s.rows, s.cols, s.cols, c.opt, d);
    std::vector<float> deq(3, -7.0f);
    std::vector<double> deqx(5, -7.0);
    ASSERT_TRUE(bf::dequantize(q, &deq).is_ok());
    ASSERT_TRUE(bf::dequantize_exact(q, &deqx).is_ok());
    ASSERT_EQ(deq.size(), static_cast<size_t>(q.rows * q.cols));
    ASSERT_EQ(deqx.size(), static_cast<size_t>(q.rows * q.cols));
    const int64_t sc = q.scale_cols();
    for (int64_t r = 0; r < q.rows; ++r) {
      for (int64_t cc = 0; cc < q.cols; ++cc) {
        const uint32_t code = code_at(q, r, cc);
        ASSERT_EQ(bf::element_code(q, r, cc), code);
        const float e = decode_elem(q.recipe, code);
        const int64_t si = (r / q.block_rows) * sc + cc / q.block_cols;
        float want;
        double want_x;
        if (mx(q.recipe)) {
          const float X = bf::decode_e8m0(q.scales[si]);
          want = e * X;
          want_x = static_cast<double>(e) * X;
        } else if (q.recipe == Format::kNvfp4) {
          const float sb = bf::decode_ue4m3(q.scales[si]);
          want = (e * sb) * q.global_scale_dec;
          want_x = static_cast<double>(e) * sb * q.global_scale_dec;
        } else {
          want = e * q.scales_f32[si];
          want_x = static_cast<double>(e) * q.scales_f32[si];
        }
        ASSERT_EQ(fbits(deq[r * q.cols + cc]), fbits(want)) << r << "," << cc;
        ASSERT_EQ(deqx[r * q.cols + cc], want_x) << r << "," << cc;
      }
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Case, Shape>>& i) {
  const auto& [c, s] = i.param;
  return std::string(c.name) + "_" + std::to_string(s.rows) + "x" + std::to_string(s.cols);
}

INSTANTIATE_TEST_SUITE_P(Quantize, AllRecipes,
                         ::testing::Combine(::testing::ValuesIn(all_cases()),
                                            ::testing::ValuesIn(kShapes)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Quantize, PartialBlocks,
                         ::testing::Combine(::testing::ValuesIn(cases_without_sr()),
                                            ::testing::ValuesIn(kShapes)),
                         case_name);

// Hadamard needs the block dimension to be a multiple of 16: its own shapes.
const Shape kRhtShapes[] = {{16, 16}, {16, 48}, {48, 32}, {160, 64}, {5, 32}};

class RhtShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(RhtShapes, ColumnwiseIsRowwiseOfTranspose) {
  const Shape s = GetParam();
  const auto x = random_matrix(s.rows, s.cols, s.cols, 51);
  const auto xt = transpose(x, s.rows, s.cols, s.cols);
  const QuantizedMatrix row = quantize_ok(x, s.rows, s.cols, s.cols, rht_options(), Direction::kRowwise);
  EXPECT_EQ(row.rows, s.rows);
  if (s.rows % 16 != 0) return;  // columnwise would need rows % 16 == 0
  const QuantizedMatrix col = quantize_ok(x, s.rows, s.cols, s.cols, rht_options(), Direction::kColumnwise);
  const QuantizedMatrix row_t = quantize_ok(xt, s.cols, s.rows, s.rows, rht_options(), Direction::kRowwise);
  expect_same(col, row_t, "rht columnwise(x) vs rowwise(x^T)");
}

INSTANTIATE_TEST_SUITE_P(Quantize, RhtShapes, ::testing::ValuesIn(kRhtShapes),
                         [](const auto& i) {
                           return std::to_string(i.param.rows) + "x" + std::to_string(i.param.cols);
                         });

// ---- non-finite policy, all recipes ---------------------------------------------------------

class NonFinite : public ::testing::TestWithParam<Case> {};

TEST_P(NonFinite, BlockGetsNanScaleZeroCodesOthersUnaffected) {
  Case c = GetParam();
  if (c.opt.recipe == Format::kNvfp4) {  // decouple the tensor scale from the Inf (own test)
    c.opt.has_tensor_amax = true;
    c.opt.tensor_amax = 4.0f;
  }
  const int64_t rows = 40, cols = 300;
  const auto clean = random_matrix(rows, cols, cols, 61);
  const std::pair<int64_t, int64_t> bad[] = {{1, 5}, {3, 140}, {39, 299}};
  const float vals[] = {kNaN, kInf, -kInf};
  auto x = clean;
  auto zeroed = clean;
  for (int i = 0; i < 3; ++i) {
    x[bad[i].first * cols + bad[i].second] = vals[i];
    zeroed[bad[i].first * cols + bad[i].second] = 0.0f;
  }
  for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
    SCOPED_TRACE(d == Direction::kRowwise ? "rowwise" : "columnwise");
    const QuantizedMatrix q = quantize_ok(x, rows, cols, cols, c.opt, d);
    const QuantizedMatrix ref = quantize_ok(zeroed, rows, cols, cols, c.opt, d);
    EXPECT_TRUE(q.nonfinite_seen);
    EXPECT_FALSE(ref.nonfinite_seen);
    std::vector<float> deq;
    ASSERT_TRUE(bf::dequantize(q, &deq).is_ok());
    const int64_t sc = q.scale_cols();
    std::vector<bool> nan_block(static_cast<size_t>(q.scale_rows() * sc), false);
    for (auto [r, cc] : bad) {
      const int64_t sr = d == Direction::kRowwise ? r : cc, scol = d == Direction::kRowwise ? cc : r;
      nan_block[(sr / q.block_rows) * sc + scol / q.block_cols] = true;
    }
    for (int64_t i = 0; i < q.scale_rows() * sc; ++i) {
      if (nan_block[i]) {
        if (fp8_block(q.recipe)) EXPECT_TRUE(std::isnan(q.scales_f32[i])) << i;
        else EXPECT_EQ(q.scales[i], mx(q.recipe) ? 0xFF : 0x7F) << i;
      } else if (fp8_block(q.recipe)) {
        EXPECT_EQ(fbits(q.scales_f32[i]), fbits(ref.scales_f32[i])) << i;
      } else {
        EXPECT_EQ(q.scales[i], ref.scales[i]) << i;
      }
    }
    for (int64_t r = 0; r < q.rows; ++r)
      for (int64_t cc = 0; cc < q.cols; ++cc) {
        const bool nb = nan_block[(r / q.block_rows) * sc + cc / q.block_cols];
        if (nb) {
          ASSERT_EQ(code_at(q, r, cc), 0u) << r << "," << cc;
          ASSERT_TRUE(std::isnan(deq[r * q.cols + cc])) << r << "," << cc;
        } else {
          ASSERT_EQ(code_at(q, r, cc), code_at(ref, r, cc)) << r << "," << cc;
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Quantize, NonFinite, ::testing::ValuesIn(all_cases()),
                         [](const auto& i) { return std::string(i.param.name); });

TEST(QuantizeNonFinite, Nvfp4MeasuredAmaxIgnoresNanCountsInf) {
  // NaN only: amax_t is the max over the finite values, so S_dec = amax_t / 2688 as without it.
  const int64_t rows = 4, cols = 32;
  auto x = random_matrix(rows, cols, cols, 71);
  x[0] = 100.0f;  // amax_t = 100 whatever the NaN does
  auto xn = x;
  xn[40] = kNaN;
  const QuantizedMatrix a = quantize_ok(x, rows, cols, cols, make(Format::kNvfp4), Direction::kRowwise);
  const QuantizedMatrix b = quantize_ok(xn, rows, cols, cols, make(Format::kNvfp4), Direction::kRowwise);
  EXPECT_EQ(fbits(a.global_scale_dec), fbits(b.global_scale_dec));
  EXPECT_EQ(a.global_scale_dec, 1.0f / (2688.0f / 100.0f));
  EXPECT_TRUE(b.nonfinite_seen);
  // +Inf: amax_t = Inf, S_enc = 2688 / Inf = 0 -> S_enc = 1, S_dec = 1.
  xn[40] = kInf;
  const QuantizedMatrix c = quantize_ok(xn, rows, cols, cols, make(Format::kNvfp4), Direction::kRowwise);
  EXPECT_EQ(c.global_scale_dec, 1.0f);
  EXPECT_EQ(c.scales[1 * 2 + 0], 0x7F);  // index 40 = row 1, col 8: block (1, 0) holds the Inf
  EXPECT_TRUE(c.nonfinite_seen);
}

// ---- argument validation --------------------------------------------------------------------

using blockscale_test::expect_error;

TEST(QuantizeValidation, BadArgumentsAreRejectedAndOutIsUnchanged) {
  const auto x = random_matrix(32, 64, 64, 81);
  const QuantizeOptions o = make(Format::kMxfp8E4M3);
  const QuantizedMatrix before = poisoned();
  QuantizedMatrix q = before;
  expect_error(bf::quantize(nullptr, 32, 64, 64, o, Direction::kRowwise, &q), "x");
  expect_error(bf::quantize(x.data(), 32, 64, 64, o, Direction::kRowwise, nullptr), "out");
  expect_error(bf::quantize(x.data(), 0, 64, 64, o, Direction::kRowwise, &q), "rows");
  expect_error(bf::quantize(x.data(), -3, 64, 64, o, Direction::kRowwise, &q), "rows");
  expect_error(bf::quantize(x.data(), 32, 0, 64, o, Direction::kRowwise, &q), "cols");
  expect_error(bf::quantize(x.data(), 32, -1, 64, o, Direction::kColumnwise, &q), "cols");
  expect_error(bf::quantize(x.data(), 32, 64, 63, o, Direction::kRowwise, &q), "ld");
  expect_error(bf::quantize(x.data(), 32, 64, 63, o, Direction::kColumnwise, &q), "ld");
  expect_error(bf::quantize(x.data(), 32, 64, 64, o, Direction::kBoth, &q), "direction");
  QuantizeOptions both = o;
  both.rounding = bf::ScaleRounding::kBoth;  // the study's request for two rules, not one rule
  expect_error(bf::quantize(x.data(), 32, 64, 64, both, Direction::kRowwise, &q), "options.rounding");
  expect_same(q, before, "out after errors");
}

TEST(QuantizeValidation, HadamardNeedsBlockDimMultipleOf16) {
  const auto x = random_matrix(48, 48, 48, 91);
  QuantizedMatrix q = poisoned();
  const QuantizeOptions o = rht_options();
  expect_error(bf::quantize(x.data(), 48, 24, 48, o, Direction::kRowwise, &q), "hadamard");
  expect_error(bf::quantize(x.data(), 24, 48, 48, o, Direction::kColumnwise, &q), "hadamard");
  expect_error(bf::quantize(x.data(), 17, 48, 48, o, Direction::kColumnwise, &q), "hadamard");
  expect_same(q, poisoned(), "out after errors");
  // The other dimension is free: 24 rows rowwise, 24 cols columnwise.
  EXPECT_TRUE(bf::quantize(x.data(), 24, 48, 48, o, Direction::kRowwise, &q).is_ok());
  EXPECT_TRUE(bf::quantize(x.data(), 48, 24, 48, o, Direction::kColumnwise, &q).is_ok());
}

struct Mismatch {
  const char* name;  // the option the error must name
  QuantizeOptions opt;
};

std::vector<Mismatch> mismatches() {
  std::vector<Mismatch> m;
  for (Format r : {Format::kMxfp8E4M3, Format::kMxfp4, Format::kNvfp4}) {
    QuantizeOptions o = make(r); o.pow2_scales = true; m.push_back({"pow2_scales", o});
  }
  for (Format r : {Format::kMxfp8E4M3, Format::kMxfp4, Format::kFp8Block1x128, Format::kFp8Block128x128}) {
    QuantizeOptions o = make(r); o.nvfp4_2d = true; m.push_back({"nvfp4_2d", o});
    o = make(r); o.stochastic_rounding = true; m.push_back({"stochastic_rounding", o});
    o = make(r); o.hadamard = true; m.push_back({"hadamard", o});
    // (interpretation) a tensor amax means nothing outside NVFP4; silently ignoring it would hide
    // a caller's mistake.
    o = make(r); o.has_tensor_amax = true; o.tensor_amax = 1.0f; m.push_back({"tensor_amax", o});
  }
  for (Format r : {Format::kNvfp4, Format::kFp8Block1x128, Format::kFp8Block128x128}) {
    QuantizeOptions o = make(r); o.rounding = bf::ScaleRounding::kFloor; m.push_back({"rounding", o});
  }
  // (interpretation) a given tensor amax must be a non-negative number.
  for (float a : {-1.0f, kNaN}) {
    QuantizeOptions o = make(Format::kNvfp4); o.has_tensor_amax = true; o.tensor_amax = a;
    m.push_back({"tensor_amax", o});
  }
  return m;
}

void PrintTo(const Mismatch& m, std::ostream* os) {
  *os << bf::format_name(m.opt.recipe) << " with " << m.name;
}

class OptionMismatch : public ::testing::TestWithParam<Mismatch> {};

TEST_P(OptionMismatch, IsRejectedNamingTheOption) {
  const Mismatch m = GetParam();
  const auto x = random_matrix(32, 64, 64, 101);
  QuantizedMatrix q = poisoned();
  SCOPED_TRACE(std::string(bf::format_name(m.opt.recipe)) + " with " + m.name);
  expect_error(bf::quantize(x.data(), 32, 64, 64, m.opt, Direction::kRowwise, &q), m.name);
  expect_same(q, poisoned(), "out after error");
}

INSTANTIATE_TEST_SUITE_P(Quantize, OptionMismatch, ::testing::ValuesIn(mismatches()),
                         [](const auto& i) {
                           return std::string(bf::format_name(i.param.opt.recipe)) + "_" +
                                  i.param.name + "_" + std::to_string(i.index);
                         });

TEST(QuantizeValidation, DequantizeAndValidateRejectInconsistentMatrices) {
  const auto x = random_matrix(8, 40, 40, 111);
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name);
    const QuantizedMatrix q = quantize_ok(x, 8, 40, 40, c.opt, Direction::kRowwise);
    EXPECT_TRUE(bf::validate(q, "weights").is_ok());
    std::vector<float> f;
    std::vector<double> d;
    expect_error(bf::dequantize(q, nullptr), "out");
    expect_error(bf::dequantize_exact(q, nullptr), "out");
    QuantizedMatrix bad = q;
    bad.data.pop_back();
    expect_error(bf::validate(bad, "weights"), "weights");
    EXPECT_FALSE(bf::dequantize(bad, &f).is_ok());
    EXPECT_FALSE(bf::dequantize_exact(bad, &d).is_ok());
    bad = q;
    if (fp8_block(q.recipe)) bad.scales_f32.push_back(1.0f); else bad.scales.push_back(1);
    expect_error(bf::validate(bad, "weights"), "weights");
    EXPECT_FALSE(bf::dequantize(bad, &f).is_ok());
    bad = q;
    bad.rows = 0;
    EXPECT_FALSE(bf::validate(bad, "weights").is_ok());
  }
}

// check_scales accepts every scale quantize writes (the NaN of a block that held NaN or Inf, and
// FP8 blockwise's +0 for a block of tiny subnormals included) and refuses the others, naming the
// scale's position and value.
TEST(QuantizeValidation, CheckScalesAcceptsWhatQuantizeWritesAndNothingElse) {
  const int64_t rows = 130, cols = 300;
  auto x = random_matrix(rows, cols, cols, 131);
  x[5] = kNaN;                                                    // block (0, 0): a NaN scale
  for (int64_t c = 0; c < cols; ++c) x[129 * cols + c] = 1e-45f;  // the last row: tiny subnormals
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name);
    const QuantizedMatrix q = quantize_ok(x, rows, cols, cols, c.opt, Direction::kRowwise);
    EXPECT_TRUE(bf::check_scales(q, "'w.scale'").is_ok()) << bf::check_scales(q, "'w.scale'").message();
    const int64_t last = q.scale_rows() * q.scale_cols() - 1;
    const std::string at_last =
        "'w.scale': scale (" + std::to_string(q.scale_rows() - 1) + ", " + std::to_string(q.scale_cols() - 1) + ") is ";
    QuantizedMatrix bad = q;
    if (fp8_block(q.recipe)) {
      if (c.opt.recipe == Format::kFp8Block1x128 && !c.opt.pow2_scales)
        EXPECT_EQ(fbits(q.scales_f32[last]), 0u) << "a +0 scale for the row of subnormals";
      for (float v : {-1.0f, -0.0f, kInf, -kInf, -kNaN}) {
        bad.scales_f32[last] = v;
        expect_error(bf::check_scales(bad, "'w.scale'"), at_last);
        expect_error(bf::check_scales(bad, "'w.scale'"), "finite values >= 0 (or NaN");
      }
      bad.scales_f32[last] = kNaN;
      EXPECT_TRUE(bf::check_scales(bad, "'w.scale'").is_ok());
    } else if (q.recipe == Format::kNvfp4) {
      for (int code : {0x80, 0xFE, 0xFF}) {
        bad.scales[last] = static_cast<uint8_t>(code);
        expect_error(bf::check_scales(bad, "'w.scale'"), at_last + "code 0x");
        expect_error(bf::check_scales(bad, "'w.scale'"), "UE4M3 codes 0x00-0x7F");
      }
    } else {
      for (int code = 0; code < 256; ++code) {  // E8M0: every code is a scale
        bad.scales[last] = static_cast<uint8_t>(code);
        EXPECT_TRUE(bf::check_scales(bad, "'w.scale'").is_ok()) << code;
      }
    }
  }
}

// Repeated calls give the same bytes (no hidden state, e.g. in the SR generator).
TEST(Quantize, DeterministicAcrossCalls) {
  const auto x = random_matrix(33, 70, 70, 121);
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name);
    expect_same(quantize_ok(x, 33, 70, 70, c.opt, Direction::kRowwise),
                quantize_ok(x, 33, 70, 70, c.opt, Direction::kRowwise), "repeat");
  }
}

}  // namespace
