// Tests of formats/grouped_quantize.cpp: the MoE columnwise copy. Each expert's token range is
// padded with zero rows to a multiple of the block length (32 MX, 16 NVFP4, 128 FP8 blockwise);
// checked against (a) the plain columnwise quantize of an explicitly zero-padded input, byte for
// byte (SR and RHT included, since both are defined on the stored matrix), and (b) each expert
// quantized alone (its slice, then zero padding). Bad group_ends are rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/quantize.h"

namespace bf = blockscale::formats;
using bf::Direction;
using bf::QuantizedMatrix;
using bf::QuantizeOptions;
using bf::Format;

namespace {

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

std::vector<float> random_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * ld + c] = n(rng) * (1.0f + r % 7);  // experts differ
  return x;
}

struct Case { const char* name; QuantizeOptions opt; int block; };
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  auto mk = [](Format r) { QuantizeOptions o; o.recipe = r; return o; };
  std::vector<Case> v;
  v.push_back({"mxfp8", mk(Format::kMxfp8E4M3), 32});
  v.push_back({"mxfp4", mk(Format::kMxfp4), 32});
  v.push_back({"nvfp4", mk(Format::kNvfp4), 16});
  QuantizeOptions o = mk(Format::kNvfp4); o.nvfp4_2d = true;
  v.push_back({"nvfp4_2d", o, 16});
  o = mk(Format::kNvfp4); o.stochastic_rounding = true; o.sr_seed = 4711; o.sr_offset = 9;
  v.push_back({"nvfp4_sr", o, 16});
  o = mk(Format::kNvfp4); o.hadamard = true;
  v.push_back({"nvfp4_rht", o, 16});
  v.push_back({"fp8_1x128", mk(Format::kFp8Block1x128), 128});
  o = mk(Format::kFp8Block1x128); o.pow2_scales = true;
  v.push_back({"fp8_1x128_pow2", o, 128});
  v.push_back({"fp8_128x128", mk(Format::kFp8Block128x128), 128});
  return v;
}

struct Groups { const char* name; std::vector<int64_t> ends; };
void PrintTo(const Groups& g, std::ostream* os) { *os << g.name; }

const Groups kGroups[] = {
    {"mixed_with_empty", {10, 10, 45, 70}},
    {"one_token_experts", {0, 1, 2, 70}},
    {"single_expert", {70}},
    {"all_on_one_of_three", {0, 70, 70}},
    {"aligned_and_odd", {32, 64, 64, 65, 70}},
};

uint32_t code_at(const QuantizedMatrix& q, int64_t r, int64_t c) {
  if (q.recipe != Format::kMxfp4 && q.recipe != Format::kNvfp4) return q.data[r * q.cols + c];
  const uint8_t b = q.data[r * ((q.cols + 1) / 2) + c / 2];
  return (c & 1) ? b >> 4 : b & 0xF;
}

class Grouped : public ::testing::TestWithParam<std::tuple<Case, Groups>> {};

TEST_P(Grouped, EqualsColumnwiseOfZeroPaddedInput) {
  const auto [c, g] = GetParam();
  const int64_t rows = 70, cols = 48, ld = 50;
  auto x = random_matrix(rows, cols, ld, 1234);
  x[40 * ld + 3] = std::numeric_limits<float>::quiet_NaN();  // one NaN block, inside an expert
  // Expected padded ends, and the explicitly padded input.
  std::vector<int64_t> want_ends;
  std::vector<std::pair<int64_t, int64_t>> src;  // padded row -> source row (-1: zero)
  int64_t prev = 0, padded = 0;
  for (int64_t e : g.ends) {
    const int64_t n = e - prev;
    const int64_t pn = (n + c.block - 1) / c.block * c.block;
    for (int64_t t = 0; t < pn; ++t) src.push_back({padded + t, t < n ? prev + t : -1});
    padded += pn;
    want_ends.push_back(padded);
    prev = e;
  }
  std::vector<float> xp(static_cast<size_t>(padded * cols), 0.0f);
  for (auto [pr, sr] : src)
    if (sr >= 0)
      for (int64_t j = 0; j < cols; ++j) xp[pr * cols + j] = x[sr * ld + j];

  QuantizedMatrix q;
  q.data.assign(17, 0xEE);  // poisoned
  q.nonfinite_seen = false;
  std::vector<int64_t> ends = {-5, -5, -5, -5, -5, -5, -5, -5};
  auto st = bf::quantize_grouped_columnwise(x.data(), rows, cols, ld, g.ends, c.opt, &q, &ends);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(ends, want_ends);
  ASSERT_EQ(q.rows, cols);
  ASSERT_EQ(q.cols, padded);

  QuantizedMatrix ref;
  st = bf::quantize(xp.data(), padded, cols, cols, c.opt, Direction::kColumnwise, &ref);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(q.block_rows, ref.block_rows);
  EXPECT_EQ(q.block_cols, ref.block_cols);
  EXPECT_EQ(q.data, ref.data);
  EXPECT_EQ(q.scales, ref.scales);
  ASSERT_EQ(q.scales_f32.size(), ref.scales_f32.size());
  for (size_t i = 0; i < q.scales_f32.size(); ++i)
    EXPECT_EQ(fbits(q.scales_f32[i]), fbits(ref.scales_f32[i])) << i;
  EXPECT_EQ(fbits(q.global_scale_dec), fbits(ref.global_scale_dec));
  EXPECT_TRUE(q.nonfinite_seen);
  EXPECT_TRUE(bf::validate(q, "grouped").is_ok());
}

// Each expert alone, quantized columnwise (NVFP4 given the whole tensor's amax, which sets the one
// tensor scale), equals its slice of the grouped output; the padding columns hold +0 codes.
// Runs over the cases without SR (draws depend on the position in the output) and without the
// Hadamard transform (an expert alone needs a multiple of 16 tokens); both are covered by
// EqualsColumnwiseOfZeroPaddedInput.
class GroupedSlices : public Grouped {};

TEST_P(GroupedSlices, EachExpertSliceEqualsTheExpertAlone) {
  auto [c, g] = GetParam();
  const int64_t rows = 70, cols = 48;
  const auto x = random_matrix(rows, cols, cols, 99);
  QuantizedMatrix q;
  std::vector<int64_t> ends;
  auto st = bf::quantize_grouped_columnwise(x.data(), rows, cols, cols, g.ends, c.opt, &q, &ends);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_EQ(ends.size(), g.ends.size());
  QuantizeOptions alone = c.opt;
  if (alone.recipe == Format::kNvfp4) {
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    alone.has_tensor_amax = true;
    alone.tensor_amax = amax;
  }
  const int bc = q.block_cols;
  const int64_t sc = q.scale_cols();
  int64_t prev = 0, pstart = 0;
  for (size_t e = 0; e < g.ends.size(); ++e) {
    SCOPED_TRACE("expert " + std::to_string(e));
    const int64_t n = g.ends[e] - prev, pend = ends[e];
    ASSERT_EQ(pend - pstart, (n + c.block - 1) / c.block * c.block);
    if (n > 0) {
      QuantizedMatrix a;
      st = bf::quantize(x.data() + prev * cols, n, cols, cols, alone, Direction::kColumnwise, &a);
      ASSERT_TRUE(st.is_ok()) << st.message();
      ASSERT_EQ(a.rows, cols);
      ASSERT_EQ(a.scale_rows(), q.scale_rows());
      for (int64_t r = 0; r < cols; ++r) {
        for (int64_t t = 0; t < pend - pstart; ++t)
          ASSERT_EQ(code_at(q, r, pstart + t), t < n ? code_at(a, r, t) : 0u) << r << "," << t;
      }
      for (int64_t i = 0; i < q.scale_rows(); ++i)
        for (int64_t b = 0; b < a.scale_cols(); ++b) {
          const int64_t gi = i * sc + pstart / bc + b, ai = i * a.scale_cols() + b;
          if (a.scales_f32.empty()) ASSERT_EQ(q.scales[gi], a.scales[ai]) << i << "," << b;
          else ASSERT_EQ(fbits(q.scales_f32[gi]), fbits(a.scales_f32[ai])) << i << "," << b;
        }
    }
    prev = g.ends[e];
    pstart = pend;
  }
}

INSTANTIATE_TEST_SUITE_P(Grouped, Grouped,
                         ::testing::Combine(::testing::ValuesIn(cases()), ::testing::ValuesIn(kGroups)),
                         [](const auto& i) {
                           return std::string(std::get<0>(i.param).name) + "_" + std::get<1>(i.param).name;
                         });

std::vector<Case> cases_without_sr_or_rht() {
  std::vector<Case> v;
  for (const Case& c : cases())
    if (!c.opt.stochastic_rounding && !c.opt.hadamard) v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Grouped, GroupedSlices,
                         ::testing::Combine(::testing::ValuesIn(cases_without_sr_or_rht()),
                                            ::testing::ValuesIn(kGroups)),
                         [](const auto& i) {
                           return std::string(std::get<0>(i.param).name) + "_" + std::get<1>(i.param).name;
                         });

constexpr int64_t kRows = 70, kCols = 48;

TEST(GroupedValidation, BadArgumentsRejected) {
  const int64_t rows = kRows, cols = kCols;
  const auto x = random_matrix(rows, cols, cols, 7);
  QuantizeOptions o;
  o.recipe = Format::kMxfp8E4M3;
  QuantizedMatrix poisoned;
  poisoned.data.assign(5, 0xAB);
  poisoned.rows = 3;
  const std::vector<int64_t> poisoned_ends = {1, 2, 3};
  auto check = [&](const std::vector<int64_t>& ge, const float* px, bool null_out, bool null_ends,
                   const std::string& must_mention, int64_t r = kRows, int64_t c = kCols,
                   int64_t ld = kCols) {
    QuantizedMatrix q = poisoned;
    std::vector<int64_t> ends = poisoned_ends;
    auto st = bf::quantize_grouped_columnwise(px, r, c, ld, ge, o, null_out ? nullptr : &q,
                                              null_ends ? nullptr : &ends);
    ASSERT_FALSE(st.is_ok()) << "should fail: " << must_mention;
    EXPECT_NE(st.message().find(must_mention), std::string::npos) << st.message();
    EXPECT_EQ(q.data, poisoned.data);
    EXPECT_EQ(q.rows, 3);
    EXPECT_EQ(ends, poisoned_ends);
  };
  check({40, 30, 70}, x.data(), false, false, "group_ends");   // decreasing
  check({10, 60}, x.data(), false, false, "group_ends");       // last != rows
  check({10, 80}, x.data(), false, false, "group_ends");       // last > rows
  check({-1, 70}, x.data(), false, false, "group_ends");       // negative
  check({}, x.data(), false, false, "group_ends");             // no experts
  check({70}, nullptr, false, false, "x");
  check({70}, x.data(), true, false, "out");
  check({70}, x.data(), false, true, "padded_group_ends");
  check({70}, x.data(), false, false, "cols", rows, 0, cols);
  check({70}, x.data(), false, false, "ld", rows, cols, cols - 1);
  o.hadamard = true;  // hadamard is NVFP4-only
  check({70}, x.data(), false, false, "hadamard");
}

// pad_columns: the codes and MX / NVFP4 scales of quantizing the input with zero rows appended
// (zero codes; E8M0 / UE4M3 0 for an all-zero block). FP8 blockwise: quantize() gives an all-zero
// block the scale 1.0f, but quant/ writes 0.0f past the padded total, and pad_columns does too.
TEST(PadColumns, EqualsQuantizingZeroPaddedTokens) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (Format r : {Format::kMxfp8E4M3, Format::kMxfp4, Format::kNvfp4, Format::kFp8Block1x128}) {
    SCOPED_TRACE(bf::format_name(r));
    const int64_t block = bf::default_block_cols(r), tokens = 2 * block, cols = 40, capacity = 5 * block;
    std::vector<float> x(static_cast<size_t>(capacity * cols), 0.0f);
    for (size_t i = 0; i < static_cast<size_t>(tokens * cols); ++i) x[i] = normal(rng);
    QuantizeOptions o;
    o.recipe = r;
    QuantizedMatrix short_q, long_q, padded;
    ASSERT_TRUE(bf::quantize(x.data(), tokens, cols, cols, o, Direction::kColumnwise, &short_q).is_ok());
    ASSERT_TRUE(bf::quantize(x.data(), capacity, cols, cols, o, Direction::kColumnwise, &long_q).is_ok());
    ASSERT_TRUE(bf::pad_columns(short_q, capacity, &padded).is_ok());
    EXPECT_EQ(padded.cols, long_q.cols);
    EXPECT_EQ(padded.data, long_q.data);
    EXPECT_EQ(padded.scales, long_q.scales);
    std::vector<float> want_f32 = long_q.scales_f32;
    for (int64_t r = 0; !want_f32.empty() && r < long_q.scale_rows(); ++r)
      for (int64_t c = short_q.scale_cols(); c < long_q.scale_cols(); ++c)
        want_f32[static_cast<size_t>(r * long_q.scale_cols() + c)] = 0.0f;
    EXPECT_EQ(padded.scales_f32, want_f32);
  }
  QuantizedMatrix q, out;
  q.recipe = Format::kMxfp8E4M3, q.rows = 1, q.cols = 32, q.data.assign(32, 0), q.scales.assign(1, 0);
  EXPECT_FALSE(bf::pad_columns(q, 48, &out).is_ok()) << "not a multiple of the block";
  EXPECT_FALSE(bf::pad_columns(q, 0, &out).is_ok()) << "narrower than q";
}

}  // namespace
