// gemm_block_scaled_test's exact cases (the bound on random data: gemm_block_scaled_test.cpp's
// header; the harness: gemm_block_scaled_harness.h).
// ---- Exact cases ----
// Codes from small dyadic sets and scales whose exponents span a few binades (the span shrinks as
// K grows), chosen so that every product is a multiple of one unit q and every output's sum of
// |products| is at most 2^24 q: then every partial sum, in any order and under any truncation, is
// an fp32 value; alpha and S_dec are powers of two and C is dyadic on the same grid, so D must be
// the reference rounded once to D's type, bit for bit. Scales differ between neighbouring blocks,
// K spans several 128-element chunks with a partial last one (K = 160, 416), M and N cross
// 128-row scale tiles: layout, swizzle, scale-indexing and K-order bugs change the bits.
// Every case asserts that premise on its own data (GemmBlockScaledPremise checks it without a GPU).
// GPU tests skip without a GPU; the premise test runs everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "formats/reference_gemm.h"
#include "formats/scalar_codecs.h"
#include "gemm/gemm.h"
#include "tests/gemm/block_scaled_pairs.h"
#include "tests/gemm/gemm_block_scaled_harness.h"
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK

namespace {

using namespace blockscale_test::block_scaled;  // gemm_block_scaled_harness.h
using blockscale_test::element_value;
using blockscale_test::round_to;
using blockscale_test::absolute;
using blockscale_test::pair_label;
using blockscale_test::pair_name;
using blockscale_test::Pair;
using blockscale_test::problem;
using blockscale_test::supported_pairs;

void put_code(bf::QuantizedMatrix* q, int64_t r, int64_t c, uint32_t code) {
  uint8_t* row = q->data.data() + r * q->data_row_bytes();
  if (!bf::is_fp4(q->recipe)) {
    row[c] = static_cast<uint8_t>(code);
    return;
  }
  uint8_t& byte = row[c / 2];
  byte = c % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0u) | code) : static_cast<uint8_t>((byte & 0x0Fu) | (code << 4));
}

// The exact cases' codes and scales (see the header). Magnitudes of element values: E4M3 every
// multiple of 1/8 in [1, 2) (all eight mantissas) and {0, 1/4, 1/2, 3/4, 2, 5/2, 3}; E5M2 multiples
// of 1/4 up to 2 and {5/2, 3}; E2M1 all eight. Signs random (zeros included, -0 too).
std::vector<float> exact_magnitudes(Format r) {
  if (bf::is_fp4(r)) return {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (r == Format::kMxfp8E5M2) return {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f};
  return {0.0f,  0.25f,  0.5f, 0.75f,  1.0f, 1.125f, 1.25f, 1.375f,
          1.5f, 1.625f, 1.75f, 1.875f, 2.0f, 2.5f,   3.0f};
}

// Scales: E8M0 2^e with e in a window of `span + 1` exponents around 0; UE4M3 (1 + m/8) 2^e with
// m from the mantissa set and e in a window of span + 1. The spans keep K x (mean |a| / q_a) x
// (mean |b| / q_b) a few times below 2^24 (GemmBlockScaledPremise checks the premise on the data).
struct ExactScales {
  int span;
  std::vector<int> mantissas;  // NVFP4 only
};
ExactScales exact_scales(Format r, int64_t k) {
  if (r != Format::kNvfp4) return {k <= 256 ? 4 : k <= 1024 ? 3 : 2, {}};
  if (k <= 256) return {1, {0, 1, 2, 3, 4, 5, 6, 7}};
  if (k <= 1024) return {0, {0, 1, 2, 3, 4, 5, 6, 7}};
  return {0, {0, 2, 4, 6}};
}

// rows x k codes and scales set directly; every scale differs from the one of the previous block
// in its row. s_dec: NVFP4's tensor decode scale (a power of two).
void exact_operand(int64_t rows, int64_t k, Format recipe, float s_dec, uint64_t seed, HostOperand* op) {
  std::mt19937_64 rng(seed);
  bf::QuantizedMatrix& q = op->q;
  q = bf::QuantizedMatrix();
  q.recipe = recipe;
  q.rows = rows;
  q.cols = k;
  q.block_rows = 1;
  q.block_cols = bf::default_block_cols(recipe);
  q.global_scale_dec = recipe == Format::kNvfp4 ? s_dec : 1.0f;
  q.data.assign(static_cast<size_t>(rows * q.data_row_bytes()), 0);
  const std::vector<float> magnitudes = exact_magnitudes(recipe);
  std::uniform_int_distribution<size_t> pick(0, magnitudes.size() - 1);
  std::uniform_int_distribution<int> coin(0, 1);
  const bf::MinifloatSpec& spec = bf::element_spec(recipe);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const float v = magnitudes[pick(rng)];
      put_code(&q, r, c, bf::encode_minifloat(coin(rng) ? -v : v, spec));
    }
  const ExactScales s = exact_scales(recipe, k);
  const int lo = -s.span / 2;
  const size_t n_mantissas = std::max<size_t>(s.mantissas.size(), 1);
  const int choices = (s.span + 1) * static_cast<int>(n_mantissas);  // >= 2 by construction
  std::uniform_int_distribution<int> step(1, choices - 1);
  q.scales.assign(static_cast<size_t>(rows * q.scale_cols()), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int choice = 0;
    for (int64_t j = 0; j < q.scale_cols(); ++j) {
      choice = (choice + step(rng)) % choices;  // never the previous block's scale
      const int e = lo + choice / static_cast<int>(n_mantissas);
      q.scales[static_cast<size_t>(r * q.scale_cols() + j)] =
          recipe == Format::kNvfp4
              ? bf::encode_ue4m3(std::ldexp(1.0f + s.mantissas[choice % n_mantissas] / 8.0f, e))
              : static_cast<uint8_t>(e + 127);
    }
  }
}

// ---- Exact data: bit-for-bit -------------------------------------------------------------------

// The largest power of two that divides v (finite, nonzero): the weight of its last set bit.
double last_bit(double v) {
  int e;
  const double f = std::frexp(std::fabs(v), &e);  // |v| = f 2^e, f in [0.5, 1)
  const uint64_t mantissa = static_cast<uint64_t>(std::ldexp(f, 53));
  return std::ldexp(1.0, e - 53 + __builtin_ctzll(mantissa));
}

// The finest last bit over an operand's nonzero values (S_dec included).
double finest_bit(const bf::QuantizedMatrix& q) {
  std::vector<double> v;
  if (!bf::dequantize_exact(q, &v).is_ok()) return 0;
  double unit = std::numeric_limits<double>::infinity();
  for (double x : v)
    if (x != 0) unit = std::min(unit, last_bit(x));
  return unit;
}

// The exact cases' premise (see the header): every product is a multiple of *unit and every
// output's sum of |products| is at most 2^24 *unit. *headroom: log2 of 2^24 unit / the largest sum.
void check_exact_premise(const HostOperand& a, const HostOperand& b, double* unit, double* headroom) {
  std::vector<double> abs_ref;
  const blockscale::Status s = bf::reference_gemm(absolute(a.q), absolute(b.q), 1.0, 0.0, nullptr, 0, &abs_ref);
  ASSERT_TRUE(s.is_ok()) << s.message();
  *unit = finest_bit(a.q) * finest_bit(b.q);
  const double largest = *std::max_element(abs_ref.begin(), abs_ref.end());
  *headroom = 24 - std::log2(largest / *unit);
  ASSERT_GE(*headroom, 0.0) << "a sum of |products| needs more than fp32's 24 bits";
}

struct ExactShape {
  int64_t m, n, k;
};
// K: one MX block; 160 (5 MX / 10 NVFP4 scale columns: a partial 4-column scale tile and a partial
// 128 chunk); 416; 1024; 4096. M, N cross the 128-row scale tiles.
const ExactShape kExactShapes[] = {{1, 1, 32}, {129, 131, 160}, {300, 264, 416}, {257, 130, 1024}, {130, 257, 4096}};

// NVFP4 tensor scales of the exact cases: powers of two, different for A and B.
constexpr float kExactScaleDecA = 0.25f, kExactScaleDecB = 8.0f;

void exact_case(const Pair& pair, const ExactShape& s, HostOperand* a, HostOperand* b) {
  exact_operand(s.m, s.k, pair.a, kExactScaleDecA, seed_of(pair, s.m, s.n, s.k, 61), a);
  exact_operand(s.n, s.k, pair.b, kExactScaleDecB, seed_of(pair, s.m, s.n, s.k, 62), b);
}

class GemmBlockScaledExact : public BlockScaledPair {};
TEST_P(GemmBlockScaledExact, BitExact) {
  SKIP_WITHOUT_GPU();
  const Pair pair = GetParam();
  const DType bf16 = DType::kBf16, fp32 = DType::kF32;
  const Variant variants[] = {
      {bf16, 1.0f, 0.0f, fp32, 0, false, "bf16 D"},
      {fp32, -1.0f, 0.0f, fp32, 0, false, "fp32 D, alpha -1"},
      {fp32, 0.5f, 1.0f, fp32, 5, false, "fp32 D = 0.5 AB + fp32 C, ldd n+5"},
      {bf16, 2.0f, 1.0f, bf16, 1, true, "bf16 D = 2 AB + bf16 C in place, ldd n+1"},
  };
  for (const ExactShape& s : kExactShapes) {
    SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k));
    HostOperand a, b;
    exact_case(pair, s, &a, &b);
    if (HasFatalFailure()) return;
    double unit, headroom;
    check_exact_premise(a, b, &unit, &headroom);
    if (HasFatalFailure()) return;
    uint64_t salt = 63;
    for (const Variant& v : variants) {
      SCOPED_TRACE(v.name);
      const bg::GemmProblem p = problem(pair, s.m, s.n, s.k, v.d_type, s.n + v.pad, v.alpha, v.beta, v.c_type);
      std::vector<double> cmat;
      if (v.beta != 0.0f) {  // dyadic on the products' grid, 8 significant bits (exact in bf16)
        std::mt19937_64 rng(seed_of(pair, s.m, s.n, s.k, salt++));
        std::uniform_int_distribution<int> mantissa(-255, 255), shift(0, 6);
        cmat.resize(static_cast<size_t>(p.m * p.ldc));
        for (auto& x : cmat) x = std::ldexp(mantissa(rng) * std::fabs(v.alpha) * unit, shift(rng));
      }
      std::vector<double> ref;
      ASSERT_TRUE(bf::reference_gemm(a.q, b.q, v.alpha, v.beta, cmat.empty() ? nullptr : cmat.data(), p.ldc, &ref)
                      .is_ok());
      int64_t inexact = 0;  // the premise's last step: alpha AB + beta C is an fp32 value
      for (double x : ref) inexact += static_cast<double>(static_cast<float>(x)) != x;
      ASSERT_EQ(inexact, 0) << "reference values that are not fp32 values";
      GemmRun r;
      run_gemm(p, a, b, cmat.empty() ? nullptr : &cmat, v.in_place, kPoison, &r);
      if (HasFatalFailure()) return;
      EXPECT_EQ(padding_changed(p, r), 0) << "bytes changed in the padding columns [n, ldd)";
      int64_t bad = 0;
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          const double want = round_to(ref[static_cast<size_t>(i * p.n + j)], v.d_type);
          const double got = element_value(r.d, i * p.ldd + j, v.d_type);
          if (got == want) continue;
          if (bad++ < 5) ADD_FAILURE() << "D(" << i << ", " << j << ") = " << got << ", want " << want;
        }
      EXPECT_EQ(bad, 0) << "mismatches";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledExact, ::testing::ValuesIn(supported_pairs()), pair_name);

// ---- No GPU needed: the premises (the argument checks and the dispatch rule:
// gemm_block_scaled_checks_test.cpp) --------------------------------------------------------------

// GemmBlockScaledExact's premise for every pair and shape (the largest reference is skipped: slow
// in debug builds; the GPU test asserts it anyway).
TEST(GemmBlockScaledPremise, ExactCasesSumExactlyInFp32) {
  for (const Pair& pair : supported_pairs())
    for (const ExactShape& s : kExactShapes) {
      if (s.m * s.n * s.k > (int64_t{1} << 26)) continue;
      SCOPED_TRACE(pair_label(pair) + " k " + std::to_string(s.k));
      HostOperand a, b;
      exact_case(pair, s, &a, &b);
      double unit, headroom;
      check_exact_premise(a, b, &unit, &headroom);
    }
}


}  // namespace
