// gemm_test's exact cases (the bound on random data: gemm_test.cpp's header; the harness:
// gemm_fp8_harness.h).
// ---- Exact cases ----
// With codes in {0, +-0.5, +-1, +-1.5, +-2} and power-of-two scales 2^[-2, 2], every partial sum,
// scale product, promotion and (K <= 1024) running sum is exact in both the 13-bit tensor-core
// accumulator and fp32, so D must equal the reference rounded once to D's type, bit for bit.
// These catch layout, scale-indexing, swizzle and tile-edge bugs that a loose bound could hide.
// ---- Tiles ----
// The sm90 kernel's three tiles (gemm/launchers.h) must give the same bits: GemmTileWidths runs
// random data through each (GEMM_TEST_TILE, which selects one tile, skips it).
// GPU tests skip without a GPU; GemmExactPremise runs everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/reference_gemm.h"
#include "formats/scalar_codecs.h"
#include "gemm/gemm.h"
#include "tests/gemm/gemm_fp8_harness.h"
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK

namespace {

using namespace blockscale_test::fp8_blockwise;  // gemm_fp8_harness.h
using blockscale_test::element_value;
using blockscale_test::round_to;

// rows x k codes drawn from {0, +-0.5, +-1, +-1.5, +-2} and scales 2^[-2, 2], set directly.
void exact_operand(int64_t rows, int64_t k, Format recipe, uint64_t seed, HostOperand* op) {
  std::mt19937_64 rng(seed);
  const float values[] = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 1.5f, -1.5f, 2.0f, -2.0f};
  std::uniform_int_distribution<int> pick(0, 8), exponent(-2, 2);
  bf::QuantizedMatrix& q = op->q;
  q = bf::QuantizedMatrix();
  q.recipe = recipe;
  q.rows = rows;
  q.cols = k;
  q.block_rows = recipe == Format::kFp8Block1x128 ? 1 : 128;
  q.block_cols = 128;
  q.data.resize(static_cast<size_t>(rows * k));
  for (auto& code : q.data) code = bf::encode_e4m3(values[pick(rng)]);
  q.scales_f32.resize(static_cast<size_t>(q.scale_rows() * q.scale_cols()));
  for (auto& s : q.scales_f32) s = std::ldexp(1.0f, exponent(rng));
}

// ---- Exact data: bit-for-bit ---------------------------------------------------------------------

class GemmExact : public ::testing::TestWithParam<ShapeCase> {};
TEST_P(GemmExact, BitExact) {
  SKIP_WITHOUT_GPU();
  const ShapeCase c = GetParam();
  HostOperand a, b;
  exact_operand(c.m, c.k, Format::kFp8Block1x128, seed_of(c, 21), &a);
  exact_operand(c.n, c.k, c.b_recipe, seed_of(c, 22), &b);
  if (HasFatalFailure()) return;
  for (int variant = 0; variant < 3; ++variant) {
    // 0: bf16 D, beta 0; 1: fp32 D, alpha 0.5, beta 1 (fp32 C); 2: fp32 D, beta 0, ldd padded.
    const DType d_type = variant == 0 ? DType::kBf16 : DType::kF32;
    const float alpha = variant == 1 ? 0.5f : 1.0f, beta = variant == 1 ? 1.0f : 0.0f;
    const bg::GemmProblem p = problem(c.m, c.n, c.k, c.b_recipe, d_type, c.n + (variant == 2 ? 5 : 0), alpha, beta);
    std::vector<double> cmat;
    if (beta != 0.0f) {  // dyadic C: multiples of 2^-6 below 2^10 (exact sums)
      std::mt19937_64 rng(seed_of(c, 23));
      std::uniform_int_distribution<int> v(-65536, 65536);
      cmat.resize(static_cast<size_t>(p.m * p.ldc));
      for (auto& x : cmat) x = std::ldexp(static_cast<double>(v(rng)), -6);
    }
    std::vector<double> ref;
    const blockscale::Status s =
        bf::reference_gemm(a.q, b.q, alpha, beta, cmat.empty() ? nullptr : cmat.data(), p.ldc, &ref);
    ASSERT_TRUE(s.is_ok()) << s.message();
    for (const Sm90Fp8Tile tile : tiles_under_test()) {
      SCOPED_TRACE(tile_name(tile));
      GemmRun r;
      run_gemm(p, a, b, cmat.empty() ? nullptr : &cmat, false, tile, &r);
      if (HasFatalFailure()) return;
      EXPECT_EQ(padding_written(p, r), 0);
      int64_t bad = 0;
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          const double want_exact = ref[static_cast<size_t>(i * p.n + j)];
          const double want = round_to(want_exact, d_type);
          const double got = element_value(r.d, i * p.ldd + j, d_type);
          if (got == want) continue;
          if (bad++ < 5)
            ADD_FAILURE() << "variant " << variant << " D(" << i << ", " << j << ") = " << got << ", want " << want;
        }
      EXPECT_EQ(bad, 0) << "mismatches in variant " << variant;
    }
  }
}
std::vector<ShapeCase> exact_shapes() {
  std::vector<ShapeCase> cases;
  for (Format r : {Format::kFp8Block128x128, Format::kFp8Block1x128})
    for (ShapeCase c : {ShapeCase{1, 1, 128, r}, ShapeCase{127, 129, 384, r}, ShapeCase{129, 127, 1024, r},
                        ShapeCase{129, 320, 384, r}, ShapeCase{1000, 1000, 256, r}, ShapeCase{300, 2000, 1024, r}})
      cases.push_back(c);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Shapes, GemmExact, ::testing::ValuesIn(exact_shapes()), shape_name);

// ---- Tile widths: the same bits ------------------------------------------------------------------

// Random (inexact) data, so the tensor core's truncation and every fp32 rounding are exercised:
// every tile must still write the bytes of the 128 x 128 one, padding included, for bf16 and fp32
// D, beta 0 and 1, single- and multi-tile shapes (both 192-tile starting offsets into a scale
// block; 256-row tiles ending inside M).
class GemmTileWidths : public ::testing::TestWithParam<ShapeCase> {};
TEST_P(GemmTileWidths, BitIdentical) {
  SKIP_WITHOUT_GPU();
  if (tiles_under_test().size() < 2) GTEST_SKIP() << "GEMM_TEST_TILE selects one tile";
  const ShapeCase c = GetParam();
  HostOperand a, b;
  random_operand(c.m, c.k, Format::kFp8Block1x128, 1.0, seed_of(c, 31), &a);
  random_operand(c.n, c.k, c.b_recipe, 1.0, seed_of(c, 32), &b);
  if (HasFatalFailure()) return;
  for (int variant = 0; variant < 2; ++variant) {
    // 0: bf16 D, beta 0; 1: fp32 D += fp32 C (beta 1), ldd padded.
    const DType d_type = variant == 0 ? DType::kBf16 : DType::kF32;
    const bg::GemmProblem p = problem(c.m, c.n, c.k, c.b_recipe, d_type, c.n + 2 * variant, 1.0f,
                                      static_cast<float>(variant));
    std::vector<double> cmat;
    if (variant == 1) {
      std::mt19937_64 rng(seed_of(c, 33));
      std::normal_distribution<double> normal(0.0, 100.0);
      cmat.resize(static_cast<size_t>(p.m * p.ldc));
      for (auto& x : cmat) x = static_cast<float>(normal(rng));
    }
    GemmRun narrow;
    run_gemm(p, a, b, cmat.empty() ? nullptr : &cmat, false, Sm90Fp8Tile::kN128, &narrow);
    for (const Sm90Fp8Tile tile : {Sm90Fp8Tile::kN192, Sm90Fp8Tile::kM256}) {
      GemmRun other;
      run_gemm(p, a, b, cmat.empty() ? nullptr : &cmat, false, tile, &other);
      if (HasFatalFailure()) return;
      const int64_t e = static_cast<int64_t>(blockscale::formats::dtype_size(d_type));
      int64_t differ = 0;
      for (int64_t i = 0; i < p.m * p.ldd; ++i) {
        if (std::memcmp(narrow.d.data() + i * e, other.d.data() + i * e, static_cast<size_t>(e)) == 0) continue;
        if (differ++ < 5)
          ADD_FAILURE() << "variant " << variant << " D(" << i / p.ldd << ", " << i % p.ldd << "): 128 x 128 "
                        << element_value(narrow.d, i, d_type) << ", " << tile_name(tile) << " "
                        << element_value(other.d, i, d_type);
      }
      EXPECT_EQ(differ, 0) << "elements that differ from 128 x 128 in " << tile_name(tile) << ", variant " << variant;
    }
  }
}
std::vector<ShapeCase> width_shapes() {
  std::vector<ShapeCase> cases;
  for (Format r : {Format::kFp8Block128x128, Format::kFp8Block1x128})
    for (ShapeCase c : {ShapeCase{100, 150, 256, r}, ShapeCase{257, 577, 384, r}, ShapeCase{1000, 1000, 1024, r},
                        ShapeCase{2048, 2304, 512, r}})
      cases.push_back(c);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Shapes, GemmTileWidths, ::testing::ValuesIn(width_shapes()), shape_name);

// The premise of GemmExact, on the host: every exact case's reference (variant 1: alpha 0.5,
// beta 1, dyadic C) is an fp32 value, so "round once to D's type" is the whole error budget.
TEST(GemmExactPremise, ReferenceIsAnFp32Value) {
  for (const ShapeCase& c : exact_shapes()) {
    if (c.m * c.n > 200000) continue;  // the host reference of the big cases is slow in debug builds
    HostOperand a, b;
    exact_operand(c.m, c.k, Format::kFp8Block1x128, seed_of(c, 21), &a);
    exact_operand(c.n, c.k, c.b_recipe, seed_of(c, 22), &b);
    std::vector<double> cmat(static_cast<size_t>(c.m * c.n), std::ldexp(-65536.0, -6)), ref;
    ASSERT_TRUE(bf::reference_gemm(a.q, b.q, 0.5, 1.0, cmat.data(), c.n, &ref).is_ok());
    int64_t inexact = 0;
    for (double v : ref) inexact += static_cast<double>(static_cast<float>(v)) != v;
    EXPECT_EQ(inexact, 0) << c;
  }
}


}  // namespace
