// Tests of gemm/gemm.h (the FP8 blockwise GEMM and its checks). The reference is
// formats::reference_gemm (fp64, exact products) on the same QuantizedMatrix operands whose bytes
// are uploaded in quant/'s layout (data row-major, scales packed with formats::pack_gemm_scales).
// D is poisoned (0xFF bytes: NaN in bf16 and fp32) before every run, and its padding columns
// (ldd > n) must stay poisoned.
//
// ---- The error bound (random data) ----
// Per output d = alpha * sum_kb s_kb P_kb + beta * c, with P_kb = sum_{k in kb} a_k b_k (e4m3
// products are exact in fp32) and s_kb = sa * sb.
//  1. Tensor core, inside one 128-of-K block (4 wgmma k32 steps). Hopper's FP8 path does not keep
//     fp32: products are aligned and the sum kept with ~13 fraction bits, truncated (DeepSeek-V3
//     report sec. 3.3.2, "around 14 bits"; Khattak & Mikaitis 2025, "Accurate models of NVIDIA
//     tensor cores": e8m13 on H100). That is why the kernel promotes every 128. Model:
//     |P^ - P| <= n_t * u_tc * sum |a_k b_k|, u_tc = 2^-13, n_t = 8 truncations per block (one
//     per <= 16 products; generous).
//  2. Promotion in fp32 (u = 2^-24): sa * sb, the product with P^ and the fma into the running
//     sum each round once; over KB blocks the running sum's error is <= (KB + 3) u sum |s P|.
//  3. Epilogue: alpha * acc and + beta * c round twice more (2u of |alpha acc| + |beta c|), then
//     the store rounds to D's type: u_out = 2^-24 (fp32) or 2^-8 (bf16: 8 significant bits, RNE)
//     relative to |d|.
//  So |d^ - d| <= |alpha| (n_t u_tc + (KB + 5) u) (|A| |B|^T)_mn + 2u |beta c| + u_out |d|(1 + tiny),
//  and by the triangle inequality over all elements (Frobenius norms):
//    ||D^ - D|| <= |alpha| (n_t u_tc + (KB + 5) u) ||abs|| + 2u |beta| ||C|| + 1.01 u_out ||D||
//  where abs = |A| |B|^T is formats::reference_gemm on the operands with the signs of codes and
//  scales cleared. An fp32-exact accumulator would give ~1e-6 * sqrt(K)-sized errors; the FP8
//  tensor core's 13 bits make the first term dominate (relative error ~1e-4 for random signs,
//  ~1e-3 x ||abs|| / ||D|| worst case). The test asserts the bound and prints measured / bound.
// The bit-exact cases and the tile widths are in gemm_exact_test.cpp; the argument checks, the
// dispatch rule, the tile order and the scale-block rule in gemm_checks_test.cpp; the operands,
// the GEMM run and the shape cases they all use in gemm_fp8_harness.h.
// ---- Tiles ----
// The sm90 kernel has three tiles (128 x 128, 128 x 192 and 256 x 128:
// gemm/launchers.h); every GPU case runs each against the same reference, and GemmTileWidths
// checks that all give the same bits (same operations per element). GEMM_TEST_TILE=128 (192, 256)
// runs one tile only: the GPU check script's fallback when another crashes.
// GPU tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/reference_gemm.h"
#include "gemm/gemm.h"
#include "gemm/launchers.h"  // the cuBLASLt launcher
#include "tests/gemm/gemm_fp8_harness.h"
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK, expect_error

namespace {

using namespace blockscale_test::fp8_blockwise;  // gemm_fp8_harness.h
using blockscale_test::element_value;
using blockscale_test::round_to;
using blockscale_test::expect_error;
using blockscale_test::frobenius;

// The operand with every code's sign and every scale's sign cleared: reference_gemm on two of
// these is |A| |B|^T, the sum of absolute products the error bound scales with.
bf::QuantizedMatrix absolute(const bf::QuantizedMatrix& q) {
  bf::QuantizedMatrix a = q;
  for (auto& code : a.data) code &= 0x7F;
  for (auto& s : a.scales_f32) s = std::fabs(s);
  return a;
}

// ---- Random data against the bound -------------------------------------------------------------

// Runs one GEMM on a, b (C random when beta != 0) and checks it against the derived bound.
void check_random(const bg::GemmProblem& p, const HostOperand& a, const HostOperand& b, bool in_place,
                  uint64_t seed, Via via = Via::kKernel) {
  std::vector<double> c;
  if (p.beta != 0.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> d0;
    const blockscale::Status s0 = bf::reference_gemm(a.q, b.q, 1.0, 0.0, nullptr, 0, &d0);
    ASSERT_TRUE(s0.is_ok()) << s0.message();
    const double rms = frobenius(d0) / std::sqrt(static_cast<double>(d0.size())) + 1e-30;
    c.assign(static_cast<size_t>(p.m * p.ldc), 0.0);
    for (auto& x : c) {  // C as its stored type holds it (bf16 C is rounded before the reference)
      x = static_cast<float>(normal(rng) * rms);
      x = round_to(x, p.c_type);
    }
  }
  std::vector<double> ref, abs_ref;
  blockscale::Status s = bf::reference_gemm(a.q, b.q, p.alpha, p.beta, c.empty() ? nullptr : c.data(), p.ldc, &ref);
  ASSERT_TRUE(s.is_ok()) << s.message();
  s = bf::reference_gemm(absolute(a.q), absolute(b.q), 1.0, 0.0, nullptr, 0, &abs_ref);
  ASSERT_TRUE(s.is_ok()) << s.message();

  const double u = std::ldexp(1.0, -24), u_tc = std::ldexp(1.0, -13);
  const double u_out = p.d_type == DType::kBf16 ? std::ldexp(1.0, -8) : u;
  const double k_blocks = static_cast<double>(p.k / 128);
  double c2 = 0;  // ||C||^2 over the m x n elements read
  if (!c.empty())
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        const double x = c[static_cast<size_t>(i * p.ldc + j)];
        c2 += x * x;
      }
  const double bound = std::fabs(p.alpha) * (8 * u_tc + (k_blocks + 5) * u) * frobenius(abs_ref) +
                       2 * u * std::fabs(p.beta) * std::sqrt(c2) + 1.01 * u_out * frobenius(ref);
  const double ref_norm = frobenius(ref);

  const bool cublaslt = via != Via::kKernel;
  const std::vector<Sm90Fp8Tile> tiles = cublaslt ? std::vector<Sm90Fp8Tile>{Sm90Fp8Tile::kAuto} : tiles_under_test();
  for (const Sm90Fp8Tile tile : tiles) {
    SCOPED_TRACE(via == Via::kCublasLtLaunch ? std::string("cuBLASLt")
                 : via == Via::kRunAuto    ? std::string("gemm::run, automatic route")
                                           : tile_name(tile));
    GemmRun r;
    run_gemm(p, a, b, c.empty() ? nullptr : &c, in_place, tile, &r, via);
    if (::testing::Test::HasFatalFailure()) return;
    if (!in_place)  // in place, the padding holds C's values, not the poison
      EXPECT_EQ(padding_written(p, r), 0) << "bytes written in the padding columns [n, ldd)";
    double err2 = 0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        const double got = element_value(r.d, i * p.ldd + j, p.d_type);
        if (!std::isfinite(got)) {
          ++nonfinite;
          continue;
        }
        const double diff = got - ref[static_cast<size_t>(i * p.n + j)];
        err2 += diff * diff;
      }
    EXPECT_EQ(nonfinite, 0) << "non-finite (unwritten: still the NaN poison, or overflowed) outputs";
    const double err = std::sqrt(err2);
    std::printf("gemm_test: %s m %lld n %lld k %lld b %s d %s beta %g%s: rel_err %.3e bound %.3e"
                " (err/bound %.3f)\n",
                via == Via::kRunAuto ? "auto" : cublaslt ? "cublaslt" : tile_name(tile).c_str(),
                static_cast<long long>(p.m), static_cast<long long>(p.n),
                static_cast<long long>(p.k), bf::format_name(p.b_recipe), bf::dtype_name(p.d_type), p.beta,
                in_place ? " in place" : "", err / ref_norm, bound / ref_norm, err / bound);
    EXPECT_LE(err, bound) << "relative Frobenius error " << err / ref_norm << " above the derived bound "
                          << bound / ref_norm;
  }
}


std::vector<ShapeCase> odd_shapes() {
  std::vector<ShapeCase> cases;
  for (Format r : {Format::kFp8Block128x128, Format::kFp8Block1x128})
    for (int64_t m : {1, 127, 129, 1000})
      for (int64_t n : {1, 127, 129, 1000})
        for (int64_t k : {128, 384, 1024}) cases.push_back({m, n, k, r});
  for (Format r : {Format::kFp8Block128x128, Format::kFp8Block1x128}) {
    // 128 x 192 tiles: n = 192 + 128 ends a tile on a scale-block edge; 449 ends one inside a block.
    cases.push_back({200, 320, 256, r});
    cases.push_back({130, 449, 512, r});
    cases.push_back({16385, 129, 384, r});
    cases.push_back({127, 16385, 128, r});
    cases.push_back({256, 384, 16384, r});  // long K: many promotions
    // K blocks not a multiple of 4: the 128x128 B scales come in boxes of 4 K blocks, the last
    // partly past K; 320 and 449 columns straddle column blocks at 192 wide.
    cases.push_back({300, 449, 640, r});
    cases.push_back({129, 320, 896, r});
    cases.push_back({1000, 200, 1152, r});
  }
  return cases;
}

class GemmRandom : public ::testing::TestWithParam<ShapeCase> {};

// bf16 D with beta 0 (fprop / dgrad), then fp32 D += fp32 C with beta 1 and padded strides
// (wgrad accumulation), on the same operands.
TEST_P(GemmRandom, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  const ShapeCase c = GetParam();
  HostOperand a, b;
  random_operand(c.m, c.k, Format::kFp8Block1x128, 1.0, seed_of(c, 1), &a);
  random_operand(c.n, c.k, c.b_recipe, 1.0, seed_of(c, 2), &b);
  if (HasFatalFailure()) return;
  check_random(problem(c.m, c.n, c.k, c.b_recipe, DType::kBf16, c.n, 1.0f, 0.0f), a, b, false, seed_of(c, 3));
  check_random(problem(c.m, c.n, c.k, c.b_recipe, DType::kF32, c.n + 3, 1.0f, 1.0f), a, b, false,
               seed_of(c, 4));
}
INSTANTIATE_TEST_SUITE_P(Shapes, GemmRandom, ::testing::ValuesIn(odd_shapes()), shape_name);

// The sm_100 path's cuBLASLt call for FP8 blockwise, run on this (Hopper) GPU: cuBLASLt's blockwise
// FP8 matmul computes the same contract (each 128-of-K block's products summed, then scaled into
// fp32), so the same derived bound holds; and for fprop / dgrad it is the sm_90 kernel's result
// bit for bit on these shapes (docs/performance.md: cuBLASLt's bf16 D equal to ours). Shapes
// cuBLASLt takes: M and N multiples of 4, D's rows 16-byte aligned. bf16 D at beta 0, fp32 D +=
// fp32 C (beta 1, ldd padded by 4), and fp32 D in place (C == D), as the training step's wgrad
// accumulates.
class GemmCublasLt : public ::testing::TestWithParam<ShapeCase> {};
TEST_P(GemmCublasLt, WithinDerivedBoundAndEqualsTheSm90Kernel) {
  SKIP_WITHOUT_GPU();
  const ShapeCase c = GetParam();
  HostOperand a, b;
  random_operand(c.m, c.k, Format::kFp8Block1x128, 1.0, seed_of(c, 41), &a);
  random_operand(c.n, c.k, c.b_recipe, 1.0, seed_of(c, 42), &b);
  if (HasFatalFailure()) return;
  check_random(problem(c.m, c.n, c.k, c.b_recipe, DType::kBf16, c.n, 1.0f, 0.0f), a, b, false, seed_of(c, 43),
               Via::kCublasLtLaunch);
  check_random(problem(c.m, c.n, c.k, c.b_recipe, DType::kF32, c.n + 4, 1.0f, 1.0f), a, b, false,
               seed_of(c, 44), Via::kCublasLtLaunch);
  check_random(problem(c.m, c.n, c.k, c.b_recipe, DType::kF32, c.n, 1.0f, 1.0f), a, b, true, seed_of(c, 45),
               Via::kCublasLtLaunch);
  if (c.b_recipe != Format::kFp8Block128x128) return;
  const bg::GemmProblem p = problem(c.m, c.n, c.k, c.b_recipe, DType::kBf16, c.n, 1.0f, 0.0f);
  GemmRun lt, ours;
  run_gemm(p, a, b, nullptr, false, Sm90Fp8Tile::kAuto, &lt, Via::kCublasLtLaunch);
  run_gemm(p, a, b, nullptr, false, Sm90Fp8Tile::kAuto, &ours);
  if (HasFatalFailure()) return;
  int64_t differ = 0;
  for (size_t i = 0; i < lt.d.size(); i += 2) differ += std::memcmp(lt.d.data() + i, ours.d.data() + i, 2) != 0;
  std::printf("gemm_test: cublaslt vs sm90 kernel, %lld x %lld x %lld bf16 D: %lld of %lld elements differ\n",
              static_cast<long long>(c.m), static_cast<long long>(c.n), static_cast<long long>(c.k),
              static_cast<long long>(differ), static_cast<long long>(lt.d.size() / 2));
  EXPECT_EQ(differ, 0);
}
INSTANTIATE_TEST_SUITE_P(Shapes, GemmCublasLt,
                         ::testing::Values(ShapeCase{256, 384, 512, Format::kFp8Block128x128},
                                           ShapeCase{132, 264, 384, Format::kFp8Block128x128},
                                           ShapeCase{1024, 2816, 2048, Format::kFp8Block128x128},
                                           ShapeCase{256, 384, 512, Format::kFp8Block1x128},
                                           ShapeCase{2048, 1408, 1024, Format::kFp8Block1x128}),
                         shape_name);

// gemm::run's automatic route on sm_90: cuBLASLt where it takes the shape (m and n multiples of 4,
// rows of D and C 16-byte aligned, C's type D's) and m <= 512, the wgmma kernel otherwise, as
// can_implement_for_arch says. The same bound either way, on the odd shapes (most of which run on
// the kernel) and on shapes cuBLASLt takes; bf16 D at beta 0 and fp32 D += fp32 C.
class GemmAutoRoute : public ::testing::TestWithParam<ShapeCase> {};
TEST_P(GemmAutoRoute, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  const ShapeCase c = GetParam();
  HostOperand a, b;
  random_operand(c.m, c.k, Format::kFp8Block1x128, 1.0, seed_of(c, 51), &a);
  random_operand(c.n, c.k, c.b_recipe, 1.0, seed_of(c, 52), &b);
  if (HasFatalFailure()) return;
  const bg::GemmProblem fprop = problem(c.m, c.n, c.k, c.b_recipe, DType::kBf16, c.n, 1.0f, 0.0f);
  const bg::GemmProblem wgrad = problem(c.m, c.n, c.k, c.b_recipe, DType::kF32, c.n + 4, 1.0f, 1.0f);
  for (const bg::GemmProblem& p : {fprop, wgrad}) {
    bg::GemmKernel kernel = bg::GemmKernel::kNone;
    ASSERT_TRUE(bg::can_implement_for_arch(p, 90, &kernel).is_ok());
    const bool lt = c.m % 4 == 0 && c.n % 4 == 0 && (p.d_type == DType::kF32 || c.n % 8 == 0) && c.m <= 512;
    EXPECT_EQ(kernel, lt ? bg::GemmKernel::kCublasLtBlockScaled : bg::GemmKernel::kSm90Fp8Blockwise);
  }
  check_random(fprop, a, b, false, seed_of(c, 53), Via::kRunAuto);
  check_random(wgrad, a, b, false, seed_of(c, 54), Via::kRunAuto);
}
std::vector<ShapeCase> auto_route_shapes() {
  std::vector<ShapeCase> cases = odd_shapes();
  for (Format r : {Format::kFp8Block128x128, Format::kFp8Block1x128}) {
    cases.push_back({512, 1024, 1024, r});
    cases.push_back({1028, 264, 384, r});
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Shapes, GemmAutoRoute, ::testing::ValuesIn(auto_route_shapes()), shape_name);

// A shape cuBLASLt refuses (bf16 D rows of 520 bytes: not 16-byte aligned) is an error that names
// the problem, not a launch failure or a silent no-op.
TEST(GemmCublasLt, RefusalNamesTheProblem) {
  SKIP_WITHOUT_GPU();
  HostOperand a, b;
  random_operand(132, 384, Format::kFp8Block1x128, 1.0, 51, &a);
  random_operand(260, 384, Format::kFp8Block128x128, 1.0, 52, &b);
  if (HasFatalFailure()) return;
  bg::DeviceOperand a_dev, b_dev;
  ASSERT_OK(a_dev.upload(a.q));
  ASSERT_OK(b_dev.upload(b.q));
  DeviceBuffer d;
  ASSERT_OK(d.alloc(132 * 260 * 2, "d"));
  const bg::GemmProblem p = problem(132, 260, 384, Format::kFp8Block128x128, DType::kBf16, 260, 1.0f, 0.0f);
  bg::GemmArguments args;
  args.a_data = a_dev.data(), args.a_scales = a_dev.scales();
  args.b_data = b_dev.data(), args.b_scales = b_dev.scales();
  args.d = d.data();
  expect_error(bg::detail::launch_cublaslt_block_scaled(p, args, nullptr, 0, nullptr),
               "cuBLASLt found no algorithm for m=132, n=260, k=384");
}

// Tiny and huge scales (values around 1e-20 x 1e+15 and 1e+18 x 1e+15: scale products far from
// 1 in both directions, results still normal fp32 / bf16), alpha != 1, bf16 C, in-place C == D.
struct ScaleCase {
  double a_magnitude, b_magnitude;
  float alpha, beta;
  DType c_type, d_type;
  bool in_place;
  const char* name;
};
class GemmScales : public ::testing::TestWithParam<ScaleCase> {};
TEST_P(GemmScales, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  const ScaleCase s = GetParam();
  for (Format r : {Format::kFp8Block128x128, Format::kFp8Block1x128}) {
    const ShapeCase c{257, 300, 1024, r};
    HostOperand a, b;
    random_operand(c.m, c.k, Format::kFp8Block1x128, s.a_magnitude, seed_of(c, 11), &a);
    random_operand(c.n, c.k, r, s.b_magnitude, seed_of(c, 12), &b);
    if (HasFatalFailure()) return;
    check_random(problem(c.m, c.n, c.k, r, s.d_type, c.n + 1, s.alpha, s.beta, s.c_type), a, b, s.in_place,
                 seed_of(c, 13));
  }
}
INSTANTIATE_TEST_SUITE_P(
    Scales, GemmScales,
    ::testing::Values(ScaleCase{1e-20, 1e15, 1.0f, 0.0f, DType::kF32, DType::kF32, false, "tiny_a"},
                      ScaleCase{1e-20, 1e15, 1.0f, 0.0f, DType::kF32, DType::kBf16, false, "tiny_a_bf16"},
                      ScaleCase{1e18, 1e15, 1.0f, 0.0f, DType::kF32, DType::kF32, false, "huge"},
                      ScaleCase{1e18, 1e15, 0.5f, 0.0f, DType::kF32, DType::kBf16, false, "huge_bf16"},
                      ScaleCase{1e-12, 1e-12, 1.0f, 0.0f, DType::kF32, DType::kF32, false, "tiny_both"},
                      ScaleCase{1.0, 1.0, -2.0f, 0.5f, DType::kBf16, DType::kF32, false, "alpha_bf16_c"},
                      ScaleCase{1.0, 1.0, 1.0f, 1.0f, DType::kF32, DType::kF32, true, "in_place_wgrad"}),
    [](const ::testing::TestParamInfo<ScaleCase>& info) { return std::string(info.param.name); });

}  // namespace
