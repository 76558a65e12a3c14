// Tests of formats/reference_gemm.h. Operands are built by hand (codes and scales set directly),
// so the tests do not depend on quantize(). Expected results come from hand arithmetic or from a
// naive long-double triple loop over the values the generator encoded, never from the code under
// test.
#include "formats/reference_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/scalar_codecs.h"
#include "tests/status_test.h"  // defines: mentions

namespace blockscale::formats {
namespace {

using blockscale_test::mentions;

using LD = long double;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An operand and the exact value of each element (row-major), recorded while encoding it.
struct Operand {
  QuantizedMatrix q;
  std::vector<LD> v;
};

const MinifloatSpec& spec_of(Format r) {
  switch (r) {
    case Format::kMxfp8E5M2:
      return kE5M2;
    case Format::kMxfp6E2M3:
      return kE2M3;
    case Format::kMxfp6E3M2:
      return kE3M2;
    case Format::kMxfp4:
    case Format::kNvfp4:
      return kE2M1;
    default:
      return kE4M3;
  }
}

bool is_mx_recipe(Format r) {
  return r == Format::kMxfp8E4M3 || r == Format::kMxfp8E5M2 || r == Format::kMxfp6E2M3 ||
         r == Format::kMxfp6E3M2 || r == Format::kMxfp4;
}
bool is_fp4_recipe(Format r) { return r == Format::kMxfp4 || r == Format::kNvfp4; }
bool is_fp8_block_recipe(Format r) {
  return r == Format::kFp8Block1x128 || r == Format::kFp8Block128x128;
}

// An empty operand of the right shape: block shape, data and scale buffers sized, all zero.
QuantizedMatrix shell(Format r, int64_t rows, int64_t cols, bool nvfp4_2d = false) {
  QuantizedMatrix q;
  q.recipe = r;
  q.rows = rows;
  q.cols = cols;
  q.block_rows = r == Format::kFp8Block128x128 ? 128 : (r == Format::kNvfp4 && nvfp4_2d ? 16 : 1);
  q.block_cols = r == Format::kNvfp4 ? 16 : (is_fp8_block_recipe(r) ? 128 : 32);
  q.data.assign(static_cast<size_t>(rows * (is_fp4_recipe(r) ? (cols + 1) / 2 : cols)), 0);
  const size_t n_scales = static_cast<size_t>(((rows + q.block_rows - 1) / q.block_rows) *
                                              ((cols + q.block_cols - 1) / q.block_cols));
  if (is_fp8_block_recipe(r))
    q.scales_f32.assign(n_scales, 1.0f);
  else
    q.scales.assign(n_scales, 0);
  return q;
}

void put_code(QuantizedMatrix* q, int64_t r, int64_t c, uint32_t code) {
  if (is_fp4_recipe(q->recipe)) {
    uint8_t& byte = q->data[r * ((q->cols + 1) / 2) + c / 2];
    byte = c % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0u) | code)
                      : static_cast<uint8_t>((byte & 0x0Fu) | (code << 4));
  } else {
    q->data[r * q->cols + c] = static_cast<uint8_t>(code);
  }
}

// Random finite element codes and random scales; values never all zero.
Operand random_operand(Format r, int64_t rows, int64_t cols, std::mt19937& rng,
                       bool nvfp4_2d = false) {
  Operand o{shell(r, rows, cols, nvfp4_2d), {}};
  QuantizedMatrix& q = o.q;
  const MinifloatSpec& spec = spec_of(r);
  const uint32_t n_codes = 1u << (spec.exp_bits + spec.man_bits + 1);
  const int64_t scale_cols = (cols + q.block_cols - 1) / q.block_cols;
  std::vector<LD> scale(is_fp8_block_recipe(r) ? q.scales_f32.size() : q.scales.size());
  if (r == Format::kNvfp4) q.global_scale_dec = 0.375f;
  for (size_t i = 0; i < scale.size(); ++i) {
    if (is_mx_recipe(r)) {
      q.scales[i] = static_cast<uint8_t>(120 + rng() % 15);  // 2^-7 .. 2^7
      scale[i] = std::ldexp(1.0L, static_cast<int>(q.scales[i]) - 127);
    } else if (r == Format::kNvfp4) {
      q.scales[i] = static_cast<uint8_t>(0x20 + rng() % 0x40);  // UE4M3 0.125 .. 30
      scale[i] = static_cast<LD>(decode_ue4m3(q.scales[i])) * static_cast<LD>(q.global_scale_dec);
    } else {
      q.scales_f32[i] = std::uniform_real_distribution<float>(0.01f, 10.0f)(rng);
      scale[i] = q.scales_f32[i];
    }
  }
  o.v.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      uint32_t code;
      float x;
      do {  // skip NaN / Inf codes
        code = rng() % n_codes;
        x = decode_minifloat(code, spec);
      } while (!std::isfinite(x));
      put_code(&q, i, j, code);
      o.v[i * cols + j] =
          static_cast<LD>(x) * scale[(i / q.block_rows) * scale_cols + j / q.block_cols];
    }
  }
  return o;
}

// Naive product P = A · B^T (A: m x k, B: n x k) in long double, and sum |a||b| per element
// (the scale of the rounding error any fp64 accumulation may make).
void naive_product(const std::vector<LD>& a, const std::vector<LD>& b, int64_t m, int64_t n,
                   int64_t k, int64_t k0, int64_t k1, std::vector<LD>* p, std::vector<LD>* mag) {
  p->assign(static_cast<size_t>(m * n), 0.0L);
  mag->assign(static_cast<size_t>(m * n), 0.0L);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t t = k0; t < k1; ++t) {
        (*p)[i * n + j] += a[i * k + t] * b[j * k + t];
        (*mag)[i * n + j] += std::fabs(a[i * k + t] * b[j * k + t]);
      }
}

// |got - expected| <= 1e-13 * (|alpha| * mag + |beta * c|): fp64 accumulation of up to a few
// hundred terms; a wrong block scale is off by a factor >= 2 and fails by far.
void expect_matches(const std::vector<double>& got, const std::vector<LD>& p,
                    const std::vector<LD>& mag, double alpha, double beta,
                    const std::vector<double>& c, int64_t n, int64_t ldc) {
  ASSERT_EQ(got.size(), p.size());
  for (size_t idx = 0; idx < p.size(); ++idx) {
    const int64_t i = static_cast<int64_t>(idx) / n, j = static_cast<int64_t>(idx) % n;
    const LD cv = beta != 0.0 ? beta * static_cast<LD>(c[i * ldc + j]) : 0.0L;
    const LD expect = alpha * p[idx] + cv;
    const LD tol = 1e-13L * (std::fabs(alpha) * mag[idx] + std::fabs(cv));
    ASSERT_LE(std::fabs(static_cast<LD>(got[idx]) - expect), tol)
        << "element (" << i << ", " << j << "): got " << got[idx] << " expected "
        << static_cast<double>(expect);
  }
}

std::vector<double> random_c(int64_t rows, int64_t ld, std::mt19937& rng) {
  std::vector<double> c(static_cast<size_t>(rows * ld));
  for (auto& x : c) x = std::uniform_real_distribution<double>(-3.0, 3.0)(rng);
  return c;
}

// ---- Hand-computed products -------------------------------------------------------------------

TEST(ReferenceGemm, HandComputedMxfp8) {
  // A (1 x 64): block 0 = 1.0 x 2^0, block 1 = 1.5 x 2^3 = 12.
  QuantizedMatrix a = shell(Format::kMxfp8E4M3, 1, 64);
  for (int c = 0; c < 64; ++c) a.data[c] = c < 32 ? 0x38 : 0x3C;  // E4M3 1.0, 1.5
  a.scales = {127, 130};
  // B (2 x 64): row 0 = 1.0 x 2^0 everywhere; row 1 = -2.0 x 2^-1 then 0.5 x 2^1.
  QuantizedMatrix b = shell(Format::kMxfp8E4M3, 2, 64);
  for (int c = 0; c < 64; ++c) {
    b.data[c] = 0x38;
    b.data[64 + c] = c < 32 ? 0xC0 : 0x30;  // E4M3 -2.0, 0.5
  }
  b.scales = {127, 127, 126, 128};
  std::vector<double> d(1, kNaN);  // poisoned, wrong size
  ASSERT_TRUE(reference_gemm(a, b, 1.0, 0.0, nullptr, 0, &d).is_ok());
  // D[0][0] = 32*1 + 32*12 = 416; D[0][1] = 32*(1 * -1) + 32*(12 * 1) = 352.
  EXPECT_EQ(d, (std::vector<double>{416.0, 352.0}));
  ASSERT_TRUE(reference_gemm(a, b, 0.5, 0.0, nullptr, 0, &d).is_ok());
  EXPECT_EQ(d, (std::vector<double>{208.0, 176.0}));
}

TEST(ReferenceGemm, HandComputedNvfp4WithTensorScale) {
  // A (1 x 32): E2M1 6.0; block scales 2.0 (UE4M3 0x40) and 0.5 (0x30); S_dec 0.25 -> 3, 0.75.
  QuantizedMatrix a = shell(Format::kNvfp4, 1, 32);
  for (auto& byte : a.data) byte = 0x77;
  a.scales = {0x40, 0x30};
  a.global_scale_dec = 0.25f;
  // B (1 x 32): E2M1 -1.5 (0xB), block scales 1.0 (0x38), S_dec 2 -> -3 everywhere.
  QuantizedMatrix b = shell(Format::kNvfp4, 1, 32);
  for (auto& byte : b.data) byte = 0xBB;
  b.scales = {0x38, 0x38};
  b.global_scale_dec = 2.0f;
  std::vector<double> d;
  ASSERT_TRUE(reference_gemm(a, b, 1.0, 0.0, nullptr, 0, &d).is_ok());
  EXPECT_EQ(d, std::vector<double>{16 * 3.0 * -3.0 + 16 * 0.75 * -3.0});  // -180
}

TEST(ReferenceGemm, HandComputedFp8BlockwiseAndMixedRecipes) {
  // A (1 x 128) FP8 1x128: 1.0 x 0.25. B (2 x 128) FP8 128x128, one scale 3.0 for both rows:
  // row 0 = 2.0, row 1 = 0.5.
  QuantizedMatrix a = shell(Format::kFp8Block1x128, 1, 128);
  for (auto& byte : a.data) byte = 0x38;
  a.scales_f32 = {0.25f};
  QuantizedMatrix b = shell(Format::kFp8Block128x128, 2, 128);
  for (int c = 0; c < 128; ++c) {
    b.data[c] = 0x40;
    b.data[128 + c] = 0x30;
  }
  b.scales_f32 = {3.0f};
  std::vector<double> d;
  ASSERT_TRUE(reference_gemm(a, b, 1.0, 0.0, nullptr, 0, &d).is_ok());
  EXPECT_EQ(d, (std::vector<double>{128 * 0.25 * 6.0, 128 * 0.25 * 1.5}));  // 192, 48

  // MXFP8 A (1 x 32, 1.0 x 2^2) times NVFP4 B (1 x 32, 0.5 x 1.0 x S_dec 1): 32 * 4 * 0.5.
  QuantizedMatrix mx = shell(Format::kMxfp8E4M3, 1, 32);
  for (auto& byte : mx.data) byte = 0x38;
  mx.scales = {129};
  QuantizedMatrix nv = shell(Format::kNvfp4, 1, 32);
  for (auto& byte : nv.data) byte = 0x11;
  nv.scales = {0x38, 0x38};
  ASSERT_TRUE(reference_gemm(mx, nv, 1.0, 0.0, nullptr, 0, &d).is_ok());
  EXPECT_EQ(d, std::vector<double>{64.0});
}

TEST(ReferenceGemm, NanScaleBlockMakesItsRowNan) {
  QuantizedMatrix a = shell(Format::kMxfp8E4M3, 2, 32);
  for (auto& byte : a.data) byte = 0x38;
  a.scales = {0xFF, 127};  // row 0 holds a non-finite block
  QuantizedMatrix b = shell(Format::kMxfp8E4M3, 1, 32);
  for (auto& byte : b.data) byte = 0x38;
  b.scales = {127};
  std::vector<double> d;
  ASSERT_TRUE(reference_gemm(a, b, 1.0, 0.0, nullptr, 0, &d).is_ok());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_EQ(d[1], 32.0);
}

// ---- Random operands against the long-double loop -------------------------------------------

struct RecipePair {
  Format a;
  Format b;
  bool b_2d;
  int64_t m, n, k;
};

class ReferenceGemmRandom : public testing::TestWithParam<RecipePair> {};

TEST_P(ReferenceGemmRandom, MatchesNaiveLoopWithAlphaBeta) {
  const RecipePair p = GetParam();
  std::mt19937 rng(1234u + static_cast<uint32_t>(p.m * 7 + p.n * 3 + p.k));
  const Operand a = random_operand(p.a, p.m, p.k, rng);
  const Operand b = random_operand(p.b, p.n, p.k, rng, p.b_2d);
  std::vector<LD> prod, mag;
  naive_product(a.v, b.v, p.m, p.n, p.k, 0, p.k, &prod, &mag);

  std::vector<double> d(3, kNaN);
  ASSERT_TRUE(reference_gemm(a.q, b.q, 1.0, 0.0, nullptr, 0, &d).is_ok());
  expect_matches(d, prod, mag, 1.0, 0.0, {}, p.n, p.n);

  const int64_t ldc = p.n + 3;
  const std::vector<double> c = random_c(p.m, ldc, rng);
  d.assign(d.size(), kNaN);
  ASSERT_TRUE(reference_gemm(a.q, b.q, -0.5, 1.0, c.data(), ldc, &d).is_ok());
  expect_matches(d, prod, mag, -0.5, 1.0, c, p.n, ldc);
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, ReferenceGemmRandom,
    testing::Values(RecipePair{Format::kMxfp8E4M3, Format::kMxfp8E4M3, false, 5, 7, 256},
                    RecipePair{Format::kMxfp8E5M2, Format::kMxfp4, false, 3, 9, 96},
                    RecipePair{Format::kMxfp6E2M3, Format::kMxfp6E3M2, false, 4, 4, 64},
                    RecipePair{Format::kNvfp4, Format::kNvfp4, false, 6, 5, 48},
                    RecipePair{Format::kMxfp8E4M3, Format::kNvfp4, true, 2, 33, 64},
                    RecipePair{Format::kFp8Block1x128, Format::kFp8Block128x128, false, 3, 130,
                               256},
                    RecipePair{Format::kFp8Block1x128, Format::kFp8Block1x128, false, 1, 1, 384}),
    [](const testing::TestParamInfo<RecipePair>& info) {
      const RecipePair& p = info.param;
      return std::string(format_name(p.a)) + "_x_" + format_name(p.b) + (p.b_2d ? "_2d_" : "_") +
             std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k);
    });

TEST(ReferenceGemm, BetaZeroDoesNotReadC) {
  std::mt19937 rng(5);
  const Operand a = random_operand(Format::kMxfp8E4M3, 2, 32, rng);
  const Operand b = random_operand(Format::kMxfp8E4M3, 3, 32, rng);
  const std::vector<double> c(6, kNaN);
  std::vector<double> d;
  ASSERT_TRUE(reference_gemm(a.q, b.q, 1.0, 0.0, c.data(), 3, &d).is_ok());
  for (double x : d) EXPECT_TRUE(std::isfinite(x));
}

TEST(ReferenceGemm, BadInputNamesTheArgument) {
  std::mt19937 rng(6);
  const Operand a = random_operand(Format::kMxfp8E4M3, 2, 64, rng);
  const Operand b = random_operand(Format::kMxfp8E4M3, 3, 64, rng);
  const Operand b96 = random_operand(Format::kMxfp8E4M3, 3, 96, rng);
  const std::vector<double> keep = {7.0};
  std::vector<double> d = keep;
  EXPECT_TRUE(mentions(reference_gemm(a.q, b96.q, 1, 0, nullptr, 0, &d), "b.cols"));
  // K = 48 is a valid MXFP8 matrix (a partial block) but not a GEMM operand.
  const Operand a48 = random_operand(Format::kMxfp8E4M3, 2, 48, rng);
  const Operand b48 = random_operand(Format::kMxfp8E4M3, 3, 48, rng);
  const Status s48 = reference_gemm(a48.q, b48.q, 1, 0, nullptr, 0, &d);
  EXPECT_TRUE(mentions(s48, "a.cols") && mentions(s48, "multiple of")) << s48.message();
  // NVFP4 with K = 16 times FP8 1x128: K must be a multiple of both blocks.
  const Operand n16 = random_operand(Format::kNvfp4, 2, 16, rng);
  const Operand f16 = random_operand(Format::kFp8Block1x128, 3, 16, rng);
  EXPECT_TRUE(mentions(reference_gemm(n16.q, f16.q, 1, 0, nullptr, 0, &d), "b.cols"));
  const std::vector<double> c(6, 1.0);
  EXPECT_TRUE(mentions(reference_gemm(a.q, b.q, 1, 1, nullptr, 3, &d), "c must not be null"));
  EXPECT_TRUE(mentions(reference_gemm(a.q, b.q, 1, 1, c.data(), 2, &d), "ldc"));
  EXPECT_TRUE(mentions(reference_gemm(a.q, b.q, 1, 0, nullptr, 0, nullptr), "d must not be null"));
  QuantizedMatrix broken = b.q;
  broken.scales.pop_back();
  EXPECT_TRUE(mentions(reference_gemm(a.q, broken, 1, 0, nullptr, 0, &d), "b.scales"));
  EXPECT_EQ(d, keep);  // untouched on error
}

// ---- M-grouped -------------------------------------------------------------------------------

struct MGroupCase {
  std::vector<int64_t> group_ends;
  Format a_recipe;
  Format b_recipe;
  int64_t k;
};

class MGrouped : public testing::TestWithParam<MGroupCase> {};

TEST_P(MGrouped, EachExpertsRowsUseItsWeights) {
  const MGroupCase p = GetParam();
  const int64_t m = p.group_ends.back(), n = 6, k = p.k;
  std::mt19937 rng(77u + static_cast<uint32_t>(m));
  const Operand a = random_operand(p.a_recipe, m, k, rng);
  std::vector<Operand> experts;
  std::vector<QuantizedMatrix> b;
  for (size_t g = 0; g < p.group_ends.size(); ++g) {
    experts.push_back(random_operand(p.b_recipe, n, k, rng));
    b.push_back(experts.back().q);
  }
  const int64_t ldc = n + 1;
  const std::vector<double> c = random_c(m, ldc, rng);
  std::vector<double> d(1, kNaN);
  ASSERT_TRUE(reference_gemm_m_grouped(a.q, b, p.group_ends, 2.0, -1.0, c.data(), ldc, &d).is_ok());
  ASSERT_EQ(static_cast<int64_t>(d.size()), m * n);

  int64_t begin = 0;
  for (size_t g = 0; g < p.group_ends.size(); ++g) {
    const int64_t rows = p.group_ends[g] - begin;
    if (rows > 0) {
      const std::vector<LD> a_rows(a.v.begin() + begin * k, a.v.begin() + (begin + rows) * k);
      std::vector<LD> prod, mag;
      naive_product(a_rows, experts[g].v, rows, n, k, 0, k, &prod, &mag);
      const std::vector<double> d_rows(d.begin() + begin * n, d.begin() + (begin + rows) * n);
      const std::vector<double> c_rows(c.begin() + begin * ldc, c.end());
      SCOPED_TRACE("expert " + std::to_string(g));
      expect_matches(d_rows, prod, mag, 2.0, -1.0, c_rows, n, ldc);
    }
    begin = p.group_ends[g];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Groups, MGrouped,
    testing::Values(
        // empty, 1-token, empty, 8 tokens
        MGroupCase{{0, 1, 1, 9}, Format::kMxfp8E4M3, Format::kMxfp8E4M3, 64},
        // all tokens on one expert; mixed recipes
        MGroupCase{{0, 0, 7, 7}, Format::kMxfp8E4M3, Format::kNvfp4, 64},
        MGroupCase{{1, 2, 3}, Format::kNvfp4, Format::kMxfp4, 32},  // one token each
        MGroupCase{{0, 130, 131}, Format::kFp8Block1x128, Format::kFp8Block128x128, 256},
        MGroupCase{{5}, Format::kMxfp8E5M2, Format::kMxfp8E5M2, 96}),  // a single expert
    [](const testing::TestParamInfo<MGroupCase>& info) {
      return std::string(format_name(info.param.a_recipe)) + "_x_" +
             format_name(info.param.b_recipe) + "_case" + std::to_string(info.index);
    });

TEST(MGrouped, BadGroupEndsAndExpertsNameTheArgument) {
  std::mt19937 rng(8);
  const Operand a = random_operand(Format::kMxfp8E4M3, 9, 64, rng);
  std::vector<QuantizedMatrix> b;
  for (int g = 0; g < 4; ++g) b.push_back(random_operand(Format::kMxfp8E4M3, 6, 64, rng).q);
  std::vector<double> d;
  auto run = [&](const std::vector<int64_t>& ends, const std::vector<QuantizedMatrix>& experts) {
    return reference_gemm_m_grouped(a.q, experts, ends, 1, 0, nullptr, 0, &d);
  };
  ASSERT_TRUE(run({2, 4, 6, 9}, b).is_ok());
  EXPECT_TRUE(mentions(run({3, 2, 9, 9}, b), "group_ends[1]"));  // decreasing
  EXPECT_TRUE(mentions(run({-1, 2, 9, 9}, b), "group_ends[0]"));
  EXPECT_TRUE(mentions(run({1, 2, 3, 8}, b), "group_ends[3]"));  // last != rows
  EXPECT_TRUE(mentions(run({1, 2, 3, 10}, b), "a.rows"));
  EXPECT_TRUE(mentions(run({2, 9, 9}, b), "group_ends has 3"));
  EXPECT_TRUE(mentions(run({}, {}), "at least one expert"));
  std::vector<QuantizedMatrix> bad_n = b;
  bad_n[2] = random_operand(Format::kMxfp8E4M3, 5, 64, rng).q;
  EXPECT_TRUE(mentions(run({2, 4, 6, 9}, bad_n), "b[2].rows"));
  std::vector<QuantizedMatrix> bad_k = b;
  bad_k[1] = random_operand(Format::kMxfp8E4M3, 6, 96, rng).q;
  EXPECT_TRUE(mentions(run({2, 4, 6, 9}, bad_k), "b[1].cols"));
  EXPECT_TRUE(mentions(reference_gemm_m_grouped(a.q, b, {2, 4, 6, 9}, 1, 1, nullptr, 6, &d), "c"));
}

// ---- K-grouped -------------------------------------------------------------------------------

struct KGroupCase {
  Format a_recipe;
  Format b_recipe;
  std::vector<int64_t> ends;
};

class KGrouped : public testing::TestWithParam<KGroupCase> {};

TEST_P(KGrouped, EachExpertSumsOnlyItsTokens) {
  const KGroupCase p = GetParam();
  const int64_t n = 5, kout = 7, kpad = p.ends.back(), groups = static_cast<int64_t>(p.ends.size());
  std::mt19937 rng(99u + static_cast<uint32_t>(kpad));
  const Operand a = random_operand(p.a_recipe, n, kpad, rng);
  const Operand b = random_operand(p.b_recipe, kout, kpad, rng);
  const std::vector<double> c = random_c(groups * n, kout, rng);
  for (const double beta : {0.0, 1.0}) {
    std::vector<double> d(2, kNaN);
    ASSERT_TRUE(
        reference_gemm_k_grouped(a.q, b.q, p.ends, 1.5, beta, beta != 0 ? c.data() : nullptr, &d)
            .is_ok());
    ASSERT_EQ(static_cast<int64_t>(d.size()), groups * n * kout);
    int64_t begin = 0;
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<LD> prod, mag;
      naive_product(a.v, b.v, n, kout, kpad, begin, p.ends[g], &prod, &mag);
      const std::vector<double> dg(d.begin() + g * n * kout, d.begin() + (g + 1) * n * kout);
      const std::vector<double> cg(c.begin() + g * n * kout, c.begin() + (g + 1) * n * kout);
      SCOPED_TRACE("expert " + std::to_string(g) + " beta " + std::to_string(beta));
      expect_matches(dg, prod, mag, 1.5, beta, cg, kout, kout);
      begin = p.ends[g];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Groups, KGrouped,
    testing::Values(KGroupCase{Format::kMxfp8E4M3, Format::kMxfp8E4M3, {0, 32, 32, 128}},
                    KGroupCase{Format::kNvfp4, Format::kNvfp4, {16, 16, 48, 64}},
                    KGroupCase{Format::kMxfp8E4M3, Format::kNvfp4, {64, 64, 64}},  // one expert
                    KGroupCase{Format::kFp8Block1x128, Format::kFp8Block1x128, {128, 256}}),
    [](const testing::TestParamInfo<KGroupCase>& info) {
      return std::string(format_name(info.param.a_recipe)) + "_x_" +
             format_name(info.param.b_recipe) + "_case" + std::to_string(info.index);
    });

TEST(KGrouped, EmptyExpertGetsBetaTimesC) {
  std::mt19937 rng(10);
  const Operand a = random_operand(Format::kMxfp8E4M3, 2, 32, rng);
  const Operand b = random_operand(Format::kMxfp8E4M3, 3, 32, rng);
  const std::vector<double> c = random_c(2 * 2, 3, rng);
  std::vector<double> d;
  ASSERT_TRUE(reference_gemm_k_grouped(a.q, b.q, {0, 32}, 1.0, 2.0, c.data(), &d).is_ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d[i], 2.0 * c[i]);
}

TEST(KGrouped, BadGroupEndsNameTheArgument) {
  std::mt19937 rng(11);
  const Operand a = random_operand(Format::kMxfp8E4M3, 5, 128, rng);
  const Operand b = random_operand(Format::kMxfp8E4M3, 7, 128, rng);
  const Operand b_nv = random_operand(Format::kNvfp4, 7, 128, rng);
  const Operand b96 = random_operand(Format::kMxfp8E4M3, 7, 96, rng);
  std::vector<double> d;
  auto run = [&](const QuantizedMatrix& bq, const std::vector<int64_t>& ends) {
    return reference_gemm_k_grouped(a.q, bq, ends, 1, 0, nullptr, &d);
  };
  ASSERT_TRUE(run(b.q, {32, 128}).is_ok());
  const Status unaligned = run(b.q, {16, 128});  // MXFP8 blocks are 32 long
  EXPECT_TRUE(mentions(unaligned, "padded_group_ends[0]") && mentions(unaligned, "multiple"))
      << unaligned.message();
  EXPECT_TRUE(mentions(run(b_nv.q, {48, 128}), "padded_group_ends[0]"));   // 48 % 32 != 0 for a
  EXPECT_TRUE(mentions(run(b.q, {64, 32, 128}), "padded_group_ends[1]"));  // decreasing
  EXPECT_TRUE(mentions(run(b.q, {32, 96}), "a.cols"));                     // last != Kpad
  EXPECT_TRUE(mentions(run(b.q, {}), "at least one expert"));
  EXPECT_TRUE(mentions(run(b96.q, {32, 96}), "b.cols"));
  EXPECT_TRUE(mentions(reference_gemm_k_grouped(a.q, b.q, {128}, 1, 1, nullptr, &d), "c must not"));
}

// ---- Plain fp64 GEMM -------------------------------------------------------------------------

TEST(ReferenceGemmF64, MatchesNaiveLoop) {
  const int64_t m = 7, n = 5, k = 33, ldc = 6;
  std::mt19937 rng(12);
  std::vector<double> a(m * k), b(n * k);
  for (auto& x : a) x = std::uniform_real_distribution<double>(-2, 2)(rng);
  for (auto& x : b) x = std::uniform_real_distribution<double>(-2, 2)(rng);
  const std::vector<LD> al(a.begin(), a.end()), bl(b.begin(), b.end());
  std::vector<LD> prod, mag;
  naive_product(al, bl, m, n, k, 0, k, &prod, &mag);
  const std::vector<double> c = random_c(m, ldc, rng);
  std::vector<double> d;
  ASSERT_TRUE(
      reference_gemm_f64(a.data(), b.data(), m, n, k, 0.75, 0.5, c.data(), ldc, &d).is_ok());
  expect_matches(d, prod, mag, 0.75, 0.5, c, n, ldc);
  ASSERT_TRUE(reference_gemm_f64(a.data(), b.data(), m, n, 0, 1.0, 0.0, nullptr, 0, &d).is_ok());
  EXPECT_EQ(d, std::vector<double>(m * n, 0.0));  // K = 0: empty sum
  EXPECT_TRUE(mentions(reference_gemm_f64(nullptr, b.data(), m, n, k, 1, 0, nullptr, 0, &d), "a"));
  EXPECT_TRUE(
      mentions(reference_gemm_f64(a.data(), b.data(), -1, n, k, 1, 0, nullptr, 0, &d), "m, n, k"));
  EXPECT_TRUE(
      mentions(reference_gemm_f64(a.data(), b.data(), m, n, k, 1, 1, c.data(), 4, &d), "ldc"));
}

}  // namespace
}  // namespace blockscale::formats
