// gemm_block_scaled_test's NVFP4 cases: the tensor decode scale S_dec is applied, and from the
// right operand; NVFP4 2D (16x16) weights. The harness and the bound each run is checked against:
// gemm_block_scaled_harness.h. GPU tests skip without a GPU; the premise test runs everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "formats/quantize.h"
#include "gemm/gemm.h"
#include "tests/gemm/block_scaled_pairs.h"
#include "tests/gemm/gemm_block_scaled_harness.h"
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK

namespace {

using namespace blockscale_test::block_scaled;  // gemm_block_scaled_harness.h
using blockscale_test::element_value;
using blockscale_test::pair_name;
using blockscale_test::Pair;
using blockscale_test::supported_pairs;

// ---- NVFP4: the tensor scale ------------------------------------------------------------------

// Scaling an NVFP4 tensor by 2^10 scales its amax and S_dec by 2^10 and leaves its codes and block
// scales as they were; so a run with the scaled tensor must give exactly 2^10 times the fp32 D
// (the epilogue's products with a power of two are exact): S_dec is read, and from the right
// operand. Each run is also checked against its own reference.
void scaled_by_1024(const bf::QuantizedMatrix& q, const std::vector<float>& x, HostOperand* out) {
  std::vector<float> scaled(x);
  for (auto& v : scaled) v *= 1024.0f;
  bf::QuantizeOptions options;
  options.recipe = Format::kNvfp4;
  const blockscale::Status s = bf::quantize(scaled.data(), q.rows, q.cols, q.cols, options, bf::Direction::kRowwise,
                                            &out->q);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_EQ(out->q.data, q.data) << "codes changed with the amax";
  ASSERT_EQ(out->q.scales, q.scales) << "block scales changed with the amax";
  ASSERT_EQ(out->q.global_scale_dec, 1024.0f * q.global_scale_dec);
}

class GemmBlockScaledNvfp4TensorScale : public BlockScaledPair {};
TEST_P(GemmBlockScaledNvfp4TensorScale, ScaleDecIsApplied) {
  SKIP_WITHOUT_GPU();
  const Pair pair = GetParam();
  const int64_t m = 200, n = 136, k = 256;
  std::mt19937_64 rng(seed_of(pair, m, n, k, 71));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> xa(static_cast<size_t>(m * k)), xb(static_cast<size_t>(n * k));
  for (auto& v : xa) v = static_cast<float>(normal(rng));
  for (auto& v : xb) v = static_cast<float>(normal(rng));
  GemmCase base;
  base.pair = pair, base.m = m, base.n = n, base.k = k;
  bf::QuantizeOptions options;
  options.recipe = pair.a;
  ASSERT_TRUE(bf::quantize(xa.data(), m, k, k, options, bf::Direction::kRowwise, &base.a.q).is_ok());
  options.recipe = pair.b;
  ASSERT_TRUE(bf::quantize(xb.data(), n, k, k, options, bf::Direction::kRowwise, &base.b.q).is_ok());
  if (HasFatalFailure()) return;
  finish_case(&base);
  const Variant fp32_d{DType::kF32, 1.0f, 0.0f, DType::kF32, 0, false, "fp32 D"};
  GemmRun d_base;
  check_variant(base, fp32_d, 0, &d_base);
  if (HasFatalFailure()) return;
  for (const bool scale_a : {false, true}) {
    if (scale_a && pair.a != Format::kNvfp4) continue;
    SCOPED_TRACE(scale_a ? "A's amax x 2^10" : "B's amax x 2^10");
    GemmCase scaled = base;
    if (scale_a) scaled_by_1024(base.a.q, xa, &scaled.a);
    else scaled_by_1024(base.b.q, xb, &scaled.b);
    if (HasFatalFailure()) return;
    finish_case(&scaled);
    GemmRun d_scaled;
    check_variant(scaled, fp32_d, 0, &d_scaled);
    if (HasFatalFailure()) return;
    int64_t bad = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      const double want = 1024.0 * element_value(d_base.d, i, DType::kF32);
      const double got = element_value(d_scaled.d, i, DType::kF32);
      if (got != want && bad++ < 5) ADD_FAILURE() << "D(" << i / n << ", " << i % n << ") = " << got << ", want " << want;
    }
    EXPECT_EQ(bad, 0) << "outputs that are not 2^10 times the unscaled run's";
  }
}

// NVFP4 2D (16x16) weights: B's tile scales repeated over each tile's 16 rows, as quant/ writes
// them (n = 200 ends inside a tile).
TEST_P(GemmBlockScaledNvfp4TensorScale, TwoDimensionalWeights) {
  SKIP_WITHOUT_GPU();
  const Pair pair = GetParam();
  GemmCase c;
  random_case(pair, 130, 200, 256, seed_of(pair, 130, 200, 256, 81), &c, 0, 0, 4, true);
  if (HasFatalFailure()) return;
  ASSERT_EQ(c.b.q.block_rows, 16);
  check_variant(c, kBf16Plain, 0);
  check_variant(c, kFp32Accumulate, seed_of(pair, 130, 200, 256, 82));
}

std::vector<Pair> nvfp4_pairs() {
  std::vector<Pair> pairs;
  for (const Pair& p : supported_pairs())
    if (p.b == Format::kNvfp4) pairs.push_back(p);
  return pairs;
}


INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledNvfp4TensorScale, ::testing::ValuesIn(nvfp4_pairs()), pair_name);

// GemmBlockScaledNvfp4TensorScale's premise: x and 2^10 x quantize to the same codes and block
// scales, S_dec x 2^10.
TEST(GemmBlockScaledPremise, Nvfp4AmaxTimes1024ChangesOnlyTheTensorScale) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> x(64 * 96);
  for (auto& v : x) v = static_cast<float>(std::ldexp(normal(rng), static_cast<int>(rng() % 9) - 4));
  HostOperand op, scaled;
  bf::QuantizeOptions options;
  options.recipe = Format::kNvfp4;
  ASSERT_TRUE(bf::quantize(x.data(), 64, 96, 96, options, bf::Direction::kRowwise, &op.q).is_ok());
  scaled_by_1024(op.q, x, &scaled);
}

}  // namespace
