// Tests of gemm/gemm.h's MX / NVFP4 GEMM (the block-scaled pairs: mxfp8 | mxfp8_e5m2 x mxfp8 |
// mxfp8_e5m2 | mxfp4 | nvfp4, mxfp4 x mxfp4, nvfp4 x nvfp4); its argument checks and dispatch
// rule are in gemm_block_scaled_checks_test.cpp. The
// reference is formats::reference_gemm (fp64, exact products) on the same QuantizedMatrix
// operands, uploaded as quant/ writes them: data row-major (K bytes per row, K / 2 for E2M1), byte
// scales packed with formats::pack_gemm_scales, NVFP4's S_dec as a device float (nullptr for
// every other operand: the API ignores it there). D is poisoned (0xFF bytes: NaN in bf16 and fp32)
// before every run and its padding columns (ldd > n) must keep their bytes.
//
// ---- The error bound (random data) ----
// Per output d = alpha * sA * sB * P + beta * c, P = sum_k a_k b_k, a_k = element x block scale,
// sA / sB the NVFP4 tensor decode scales (1 for MX operands).
//  1. The kernel converts each a_k, b_k to bf16 exactly (docs/numerics.md's scale ranges; the
//     extreme-scale tests assert their scales lie inside them) and bf16 x bf16 products are exact
//     in fp32 (16 significant bits) while they stay in fp32's normal range (asserted where it is
//     in question).
//  2. Accumulation: Hopper's bf16 wgmma adds each k16 step of 16 products into the fp32
//     accumulator in one multi-term addition whose terms are aligned to the largest exponent and
//     whose result is normalised, both by truncation (Khattak & Mikaitis 2025, "Accurate models
//     of NVIDIA tensor cores"). Model, generous: each step errs by at most 2 u_tc (one truncation
//     for the aligned terms, one for the sum), u_tc = 2^-23, relative to the sum of the magnitudes
//     so far, which is at most S = sum_k |a_k b_k|. K / 16 steps, plus a few for a kernel that
//     splits K and adds the parts: |acc^ - P| <= 2 (K/16 + 4) u_tc S.
//  3. Epilogue in fp32 (u = 2^-24): alpha * sA * sB (two roundings), times acc (one), beta * c and
//     the sum (two): <= 4u |alpha sA sB| S + 2u |beta c|; then the store rounds to D's type:
//     u_out = 2^-24 (fp32) or 2^-8 (bf16: 8 significant bits, RNE) relative to |d|.
//  Summed over the elements (triangle inequality in the Frobenius norm):
//    ||D^ - D|| <= |alpha| (2 (K/16 + 4) u_tc + 4u) ||abs|| + 2u |beta| ||C|| + 1.01 u_out ||D||
//  where abs = |A| |B|^T (S_dec included) is formats::reference_gemm on the operands with the
//  codes' signs cleared. The first term dominates for fp32 D (~(K/8) 2^-23 ||abs||; random signs
//  make ||abs|| ~ sqrt(K) ||D||), the last for bf16 D. Each test prints measured / bound.
// The exact cases are in gemm_block_scaled_exact_test.cpp, NVFP4's tensor scale in
// gemm_block_scaled_nvfp4_test.cpp, the operands, the GEMM run and the check of one output variant
// in gemm_block_scaled_harness.h.
// GPU tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "formats/quantize.h"
#include "formats/reference_gemm.h"
#include "gemm/gemm.h"
#include "tests/gemm/block_scaled_pairs.h"
#include "tests/gemm/gemm_block_scaled_harness.h"
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK

namespace {

using namespace blockscale_test::block_scaled;  // gemm_block_scaled_harness.h
using blockscale_test::pair_name;
using blockscale_test::Pair;
using blockscale_test::problem;
using blockscale_test::supported_pairs;

// ---- Recipe pairs (tests/gemm/block_scaled_pairs.h) --------------------------------------------

bool has_nvfp4(const Pair& p) { return p.a == Format::kNvfp4 || p.b == Format::kNvfp4; }

// The E8M0 scale exponents for which element x 2^e is exact in bf16 (docs/numerics.md).
void exact_scale_range(Format r, int* lo, int* hi) {
  if (r == Format::kMxfp8E5M2) *lo = -117, *hi = 112;
  else if (r == Format::kMxfp4) *lo = -132, *hi = 125;
  else *lo = -124, *hi = 119;  // E4M3
}


// Every output configuration on one shape that crosses 128-row scale tiles (m 257) and ends K on
// a partial 128 chunk (416 = 3 x 128 + 32).
class GemmBlockScaledVariants : public BlockScaledPair {};
TEST_P(GemmBlockScaledVariants, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  GemmCase c;
  random_case(GetParam(), 257, 200, 416, seed_of(GetParam(), 257, 200, 416, 1), &c);
  if (HasFatalFailure()) return;
  const DType bf16 = DType::kBf16, fp32 = DType::kF32;
  const Variant variants[] = {
      kBf16Plain,
      {fp32, 1.0f, 0.0f, fp32, 5, false, "fp32 D, beta 0, ldd n+5"},
      kFp32Accumulate,
      {fp32, 1.0f, 1.0f, fp32, 2, true, "fp32 D += AB in place (C == D), ldd n+2"},
      {bf16, -0.5f, 1.0f, bf16, 1, true, "bf16 D = -0.5 AB + bf16 C in place, ldd n+1"},
      {fp32, 2.0f, 0.5f, bf16, 2, false, "fp32 D = 2 AB + 0.5 bf16 C, ldd n+2"},
      {bf16, 1.0f, 1.0f, fp32, 0, false, "bf16 D = AB + fp32 C"},
  };
  uint64_t salt = 2;
  for (const Variant& v : variants) check_variant(c, v, seed_of(GetParam(), 257, 200, 416, salt++));
}

// M, N in {1, 127, 129, 1000} crossed, K 64 or 96 (alternating): tile and scale-tile edges.
class GemmBlockScaledOddShapes : public BlockScaledPair {};
TEST_P(GemmBlockScaledOddShapes, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  int index = 0;
  for (int64_t m : {1, 127, 129, 1000})
    for (int64_t n : {1, 127, 129, 1000}) {
      const int64_t k = index++ % 2 == 0 ? 64 : 96;
      SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
      GemmCase c;
      random_case(GetParam(), m, n, k, seed_of(GetParam(), m, n, k, 11), &c);
      if (HasFatalFailure()) return;
      check_variant(c, kBf16Plain, seed_of(GetParam(), m, n, k, 12));
      check_variant(c, kFp32Accumulate, seed_of(GetParam(), m, n, k, 13));
    }
}

// K from one MX block to 4096: 32, 96 (odd number of MX blocks), 128, 160 (partial 128 chunk),
// 1024, 4096 (the bound's accumulation term at its largest).
class GemmBlockScaledKLengths : public BlockScaledPair {};
TEST_P(GemmBlockScaledKLengths, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  for (int64_t k : {32, 96, 128, 160, 1024, 4096}) {
    SCOPED_TRACE("k " + std::to_string(k));
    GemmCase c;
    random_case(GetParam(), 130, 136, k, seed_of(GetParam(), 130, 136, k, 21), &c);
    if (HasFatalFailure()) return;
    check_variant(c, kBf16Plain, seed_of(GetParam(), 130, 136, k, 22));
    check_variant(c, kFp32Accumulate, seed_of(GetParam(), 130, 136, k, 23));
  }
}

// M or N = 16385: 129 scale tiles of 128 rows and one row more (a subset of pairs, every operand
// recipe on the long side; the fp64 reference bounds the runtime).
class GemmBlockScaledLongSide : public BlockScaledPair {};
TEST_P(GemmBlockScaledLongSide, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  const Pair pair = GetParam();
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{16385, 72, 128}, Shape{96, 16385, 96}}) {
    SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n));
    GemmCase c;
    random_case(pair, s.m, s.n, s.k, seed_of(pair, s.m, s.n, s.k, 31), &c);
    if (HasFatalFailure()) return;
    check_variant(c, kBf16Plain, seed_of(pair, s.m, s.n, s.k, 32));
    check_variant(c, kFp32Accumulate, seed_of(pair, s.m, s.n, s.k, 33));
  }
}

// ---- Tiny and huge scales ----------------------------------------------------------------------

// The smallest and largest nonzero |value| of an operand (exact dequantization, S_dec included).
void value_range(const bf::QuantizedMatrix& q, double* lo, double* hi) {
  std::vector<double> v;
  const blockscale::Status s = bf::dequantize_exact(q, &v);
  ASSERT_TRUE(s.is_ok()) << s.message();
  *lo = std::numeric_limits<double>::infinity(), *hi = 0;
  for (double x : v)
    if (x != 0 && std::isfinite(x)) *lo = std::min(*lo, std::fabs(x)), *hi = std::max(*hi, std::fabs(x));
}

// The premise of the scale cases: every MX scale lies in the recipe's exact range, every nonzero
// product lies in fp32's normal range and no sum of |products| comes near fp32's overflow.
void expect_scales_in_exact_range(const GemmCase& c) {
  for (const HostOperand* op : {&c.a, &c.b}) {
    if (op->q.recipe == Format::kNvfp4) continue;
    int lo, hi;
    exact_scale_range(op->q.recipe, &lo, &hi);
    const auto [min_code, max_code] = std::minmax_element(op->q.scales.begin(), op->q.scales.end());
    ASSERT_GE(*min_code - 127, lo) << bf::format_name(op->q.recipe) << ": a scale below the exact range";
    ASSERT_LE(*max_code - 127, hi) << bf::format_name(op->q.recipe) << ": a scale above the exact range";
  }
  double a_lo, a_hi, b_lo, b_hi;
  value_range(c.a.q, &a_lo, &a_hi);
  value_range(c.b.q, &b_lo, &b_hi);
  if (::testing::Test::HasFatalFailure()) return;
  // The accumulator holds the products without S_dec (applied in the epilogue).
  const double a_dec = c.a.q.recipe == Format::kNvfp4 ? c.a.q.global_scale_dec : 1.0;
  const double b_dec = c.b.q.recipe == Format::kNvfp4 ? c.b.q.global_scale_dec : 1.0;
  ASSERT_GE(a_lo / a_dec * (b_lo / b_dec), std::ldexp(1.0, -126)) << "a product below fp32's normal range";
  ASSERT_LE(a_hi / a_dec * (b_hi / b_dec), std::ldexp(1.0, 126)) << "a product near fp32's overflow";
  ASSERT_LE(c.abs_max / (a_dec * b_dec), std::ldexp(1.0, 126)) << "a sum of |products| near fp32's overflow";
}

// Target scale exponents of A and B (MX: the E8M0 exponent; NVFP4: the tensor's magnitude).
struct ScaleCase {
  int a_log2, b_log2;
  const char* name;
};

// Tiny x huge and huge x tiny for every pair; for pairs without NVFP4 also each operand within 5
// of the end of its exact range (the bf16 conversion then makes subnormals or values near 2^127).
// An NVFP4 operand's values stay near 1 (its magnitude goes into S_dec), so it cannot balance an
// MX operand at the range's edge: fp32 would underflow or overflow regardless of the kernel.
class GemmBlockScaledExtremeScales : public BlockScaledPair {};
TEST_P(GemmBlockScaledExtremeScales, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  const Pair pair = GetParam();
  std::vector<ScaleCase> cases = {{-100, 90, "tiny A (2^-100), huge B (2^90)"},
                                  {90, -100, "huge A (2^90), tiny B (2^-100)"}};
  if (!has_nvfp4(pair)) {
    int a_lo, a_hi, b_lo, b_hi;
    exact_scale_range(pair.a, &a_lo, &a_hi);
    exact_scale_range(pair.b, &b_lo, &b_hi);
    cases.push_back({a_lo + 5, b_hi - 5, "A at the bottom, B at the top of the exact range"});
    cases.push_back({a_hi - 5, b_lo + 5, "A at the top, B at the bottom of the exact range"});
  }
  uint64_t salt = 41;
  for (const ScaleCase& s : cases) {
    SCOPED_TRACE(s.name);
    GemmCase c;
    random_case(pair, 257, 144, 512, seed_of(pair, 257, 144, 512, salt++), &c, s.a_log2, s.b_log2, 3);
    if (HasFatalFailure()) return;
    expect_scales_in_exact_range(c);
    if (HasFatalFailure()) return;
    check_variant(c, {DType::kF32, 1.0f, 0.0f, DType::kF32, 1, false, "fp32 D, ldd n+1"}, 0);
    check_variant(c, {DType::kBf16, 0.5f, 0.0f, DType::kF32, 0, false, "bf16 D, alpha 0.5"}, 0);
  }
}

// ---- Non-finite input --------------------------------------------------------------------------

// A NaN in one block of A's row 5 and an Inf in B's row 17 (its last block): the quantizer gives
// both blocks a NaN scale, so D's row 5 and column 17 are NaN and nothing else is. Run twice: over
// the NaN poison (a finite output left unwritten shows as NaN) and over zeros (a NaN output left
// unwritten shows as 0).
class GemmBlockScaledNonFinite : public BlockScaledPair {};
TEST_P(GemmBlockScaledNonFinite, NanExactlyInTheAffectedRowsAndColumns) {
  SKIP_WITHOUT_GPU();
  const Pair pair = GetParam();
  const int64_t m = 140, n = 150, k = 160, bad_row = 5, bad_col = 17;
  std::mt19937_64 rng(seed_of(pair, m, n, k, 51));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> xa(static_cast<size_t>(m * k)), xb(static_cast<size_t>(n * k));
  for (auto& v : xa) v = static_cast<float>(normal(rng));
  for (auto& v : xb) v = static_cast<float>(normal(rng));
  xa[static_cast<size_t>(bad_row * k + 40)] = std::numeric_limits<float>::quiet_NaN();
  xb[static_cast<size_t>(bad_col * k + k - 1)] = std::numeric_limits<float>::infinity();
  GemmCase c;
  c.pair = pair, c.m = m, c.n = n, c.k = k;
  for (auto [x, rows, recipe, op] : {std::make_tuple(&xa, m, pair.a, &c.a), std::make_tuple(&xb, n, pair.b, &c.b)}) {
    bf::QuantizeOptions options;
    options.recipe = recipe;
    const blockscale::Status s = bf::quantize(x->data(), rows, k, k, options, bf::Direction::kRowwise, &op->q);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_TRUE(op->q.nonfinite_seen);
  }
  if (HasFatalFailure()) return;
  finish_case(&c);
  std::vector<double> ref;
  ASSERT_TRUE(bf::reference_gemm(c.a.q, c.b.q, 1.0, 0.0, nullptr, 0, &ref).is_ok());
  for (int64_t i = 0; i < m; ++i)  // the premise: the reference is NaN in exactly that cross
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(std::isnan(ref[static_cast<size_t>(i * n + j)]), i == bad_row || j == bad_col) << i << ", " << j;
  for (uint8_t poison : {kPoison, uint8_t{0}}) {
    SCOPED_TRACE(poison == 0 ? "D zeroed before the run" : "D poisoned with 0xFF before the run");
    check_variant(c, kBf16Plain, 0, nullptr, poison);
    check_variant(c, {DType::kF32, 1.0f, 0.0f, DType::kF32, 2, false, "fp32 D, ldd n+2"}, 0, nullptr,
                  poison);
  }
}

// Every operand recipe on each long side, without running all ten pairs at 16385.
std::vector<Pair> long_side_pairs() {
  return {{Format::kMxfp8E4M3, Format::kNvfp4},
          {Format::kMxfp8E5M2, Format::kMxfp8E4M3},
          {Format::kMxfp8E4M3, Format::kMxfp8E5M2},
          {Format::kMxfp4, Format::kMxfp4},
          {Format::kNvfp4, Format::kNvfp4}};
}

INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledVariants, ::testing::ValuesIn(supported_pairs()), pair_name);
INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledOddShapes, ::testing::ValuesIn(supported_pairs()), pair_name);
INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledKLengths, ::testing::ValuesIn(supported_pairs()), pair_name);
INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledLongSide, ::testing::ValuesIn(long_side_pairs()), pair_name);
INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledExtremeScales, ::testing::ValuesIn(supported_pairs()), pair_name);
INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledNonFinite, ::testing::ValuesIn(supported_pairs()), pair_name);


// An empty problem launches nothing and succeeds, without pointers (S_dec included).
TEST(GemmBlockScaledRun, EmptyProblemIsOk) {
  const Pair pair{Format::kNvfp4, Format::kNvfp4};
  EXPECT_TRUE(bg::run(problem(pair, 0, 5, 64, DType::kBf16, 5, 1.0f, 0.0f), bg::GemmArguments(), nullptr, 0,
                      nullptr)
                  .is_ok());
  EXPECT_TRUE(bg::run(problem(pair, 7, 0, 64, DType::kF32, 0, 1.0f, 0.0f), bg::GemmArguments(), nullptr, 0,
                      nullptr)
                  .is_ok());
}

}  // namespace
