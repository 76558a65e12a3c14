// The block-scaled GEMM's argument checks and dispatch rule (gemm/gemm.h: can_implement,
// can_implement_for_arch, is_block_scaled_pair): which recipe pairs it takes, the K rule, the
// pointer, alignment and overlap rules with the argument each error names, and which kernel each
// architecture gets. No GPU needed: the pointers are never dereferenced (the GPU runs are in
// gemm_block_scaled_test's sources: gemm_block_scaled_test.cpp, gemm_block_scaled_exact_test.cpp,
// gemm_block_scaled_nvfp4_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/recipe.h"
#include "formats/scale_layout.h"
#include "gemm/gemm.h"
#include "tests/gemm/block_scaled_pairs.h"
#include "tests/status_test.h"  // defines: expect_error

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bf::Format;
using bf::DType;
using blockscale_test::expect_error;
using blockscale_test::pair_label;
using blockscale_test::Pair;
using blockscale_test::problem;
using blockscale_test::supported_pairs;

bg::GemmProblem valid_problem(const Pair& pair) {
  return problem(pair, 256, 384, 512, DType::kBf16, 384, 1.0f, 0.0f);
}

TEST(GemmBlockScaledCanImplement, SupportedPairsAreExactlyTheTen) {
  const std::vector<Pair> supported = supported_pairs();
  for (Format a : bf::all_formats())
    for (Format b : bf::all_formats()) {
      const bool want = std::any_of(supported.begin(), supported.end(),
                                    [&](const Pair& p) { return p.a == a && p.b == b; });
      EXPECT_EQ(bg::is_block_scaled_pair(a, b), want) << pair_label({a, b});
      if (want) {
        EXPECT_FALSE(bg::is_fp8_blockwise_pair(a, b)) << pair_label({a, b});
        const blockscale::Status s = bg::can_implement(valid_problem({a, b}));
        EXPECT_TRUE(s.is_ok()) << pair_label({a, b}) << ": " << s.message();
      } else if (!bg::is_fp8_blockwise_pair(a, b)) {
        expect_error(bg::can_implement(valid_problem({a, b})), "a_recipe, b_recipe: the pair");
      }
    }
}

TEST(GemmBlockScaledCanImplement, UnsupportedPairsNameThePair) {
  const Pair unsupported[] = {{Format::kMxfp4, Format::kMxfp8E4M3},
                              {Format::kNvfp4, Format::kMxfp4},
                              {Format::kFp8Block1x128, Format::kMxfp8E4M3},
                              {Format::kMxfp8E4M3, Format::kFp8Block128x128},
                              {Format::kMxfp4, Format::kNvfp4},
                              {Format::kNvfp4, Format::kMxfp8E5M2},
                              {Format::kMxfp6E2M3, Format::kMxfp8E4M3},
                              {Format::kMxfp8E4M3, Format::kMxfp6E3M2}};
  for (const Pair& pair : unsupported)
    expect_error(bg::can_implement(valid_problem(pair)), std::string("a_recipe, b_recipe: the pair (") +
                                                             bf::format_name(pair.a) + ", " + bf::format_name(pair.b) +
                                                             ")");
}

TEST(GemmBlockScaledCanImplement, KIsAPositiveMultipleOf32) {
  for (const Pair& pair : supported_pairs()) {
    bg::GemmProblem p = valid_problem(pair);
    for (int64_t k : {32, 64, 96, 160, 4096}) {
      p.k = k;
      EXPECT_TRUE(bg::can_implement(p).is_ok()) << pair_label(pair) << " k " << k;
    }
    for (int64_t k : {0, -32, 16, 48, 100, 136}) {
      p.k = k;
      expect_error(bg::can_implement(p), "k: must be a positive multiple of 32");
    }
  }
}

// Pointer checks come before any device query, so fake (never dereferenced) addresses serve.
// Where a rule is not broken the call goes on to the device query (an error without a GPU), so
// those cases only check that the error, if any, is not about S_dec.
TEST(GemmBlockScaledCanImplement, PointerRulesNameTheArgument) {
  alignas(256) static uint8_t arena[1 << 20];
  auto pointers = [&] {  // 256 x 384 x 512; A at most 128 KB (FP8), B at most 96 KB (FP4)
    bg::GemmArguments a;
    a.a_data = arena;
    a.b_data = arena + (128 << 10);
    a.a_scales = arena + (320 << 10);  // <= 8 KB
    a.b_scales = arena + (336 << 10);  // <= 12 KB
    a.d = arena + (512 << 10);         // 192 KB of bf16
    a.a_scale_dec = reinterpret_cast<const float*>(arena + (960 << 10));
    a.b_scale_dec = reinterpret_cast<const float*>(arena + (960 << 10) + 16);
    return a;
  };
  auto about_scale_dec = [](const blockscale::Status& s) {
    return !s.is_ok() && s.message().find("scale_dec") != std::string::npos;
  };
  const bg::GemmProblem nv = valid_problem({Format::kNvfp4, Format::kNvfp4});
  EXPECT_FALSE(about_scale_dec(bg::can_implement(nv, pointers()))) << bg::can_implement(nv, pointers()).message();
  bg::GemmArguments a = pointers();
  a.a_scale_dec = nullptr;
  expect_error(bg::can_implement(nv, a), "a_scale_dec: must be a 4-byte aligned device pointer");
  a = pointers(), a.a_scale_dec = reinterpret_cast<const float*>(arena + (960 << 10) + 2);
  expect_error(bg::can_implement(nv, a), "a_scale_dec: must be a 4-byte aligned device pointer");
  a = pointers(), a.b_scale_dec = nullptr;
  expect_error(bg::can_implement(nv, a), "b_scale_dec: must be a 4-byte aligned device pointer");
  a = pointers(), a.b_scale_dec = reinterpret_cast<const float*>(arena + (960 << 10) + 17);
  expect_error(bg::can_implement(nv, a), "b_scale_dec: must be a 4-byte aligned device pointer");

  // S_dec is required for NVFP4 operands only.
  const bg::GemmProblem mixed = valid_problem({Format::kMxfp8E4M3, Format::kNvfp4});
  a = pointers(), a.a_scale_dec = nullptr;
  EXPECT_FALSE(about_scale_dec(bg::can_implement(mixed, a))) << bg::can_implement(mixed, a).message();
  a.b_scale_dec = nullptr;
  expect_error(bg::can_implement(mixed, a), "b_scale_dec: must be a 4-byte aligned device pointer");
  const bg::GemmProblem mx = valid_problem({Format::kMxfp8E4M3, Format::kMxfp4});
  a = pointers(), a.a_scale_dec = nullptr, a.b_scale_dec = nullptr;
  EXPECT_FALSE(about_scale_dec(bg::can_implement(mx, a))) << bg::can_implement(mx, a).message();

  // Byte scales keep the 16-byte rule.
  a = pointers(), a.a_scales = arena + (320 << 10) + 4;
  expect_error(bg::can_implement(mx, a), "a_scales: must be 16-byte aligned");
  a = pointers(), a.b_scales = nullptr;
  expect_error(bg::can_implement(mx, a), "b_scales: must not be null");
}

// The overlap checks size FP4 data as k / 2 bytes per row and scales as the swizzled buffer.
TEST(GemmBlockScaledCanImplement, OverlapChecksUseThePackedSizes) {
  alignas(256) static uint8_t arena[1 << 20];
  const bg::GemmProblem p = valid_problem({Format::kMxfp4, Format::kMxfp4});  // 256 x 384 x 512
  const int64_t a_bytes = 256 * 512 / 2;
  const int64_t a_scale_bytes = bf::swizzled_scale_bytes(256, 512 / 32);
  ASSERT_EQ(a_scale_bytes, 4096);
  bg::GemmArguments ok;
  ok.a_data = arena;                  // 64 KB
  ok.b_data = arena + (256 << 10);    // 96 KB
  ok.a_scales = arena + (384 << 10);  // 4 KB
  ok.b_scales = arena + (768 << 10);  // 6 KB
  ok.d = arena + (512 << 10);         // 192 KB of bf16
  auto with_d_at = [&](uint8_t* d) {
    bg::GemmArguments a = ok;
    a.d = d;
    return bg::can_implement(p, a);
  };
  auto no_overlap = [](const blockscale::Status& s) { return s.message().find("overlaps") == std::string::npos; };
  EXPECT_TRUE(no_overlap(with_d_at(arena + a_bytes))) << with_d_at(arena + a_bytes).message();
  expect_error(with_d_at(arena + a_bytes - 2), "d: overlaps a_data");
  EXPECT_TRUE(no_overlap(with_d_at(arena + (384 << 10) + a_scale_bytes)));
  expect_error(with_d_at(arena + (384 << 10) + a_scale_bytes - 2), "d: overlaps a_scales");
  // The same address overlaps FP8 data, k bytes per row.
  bg::GemmProblem fp8 = p;
  fp8.a_recipe = Format::kMxfp8E4M3;
  bg::GemmArguments a = ok;
  a.d = arena + a_bytes;
  expect_error(bg::can_implement(fp8, a), "d: overlaps a_data");
}

TEST(GemmBlockScaledDispatch, ArchitectureRule) {
  for (const Pair& pair : supported_pairs()) {
    SCOPED_TRACE(pair_label(pair));
    const bg::GemmProblem p = valid_problem(pair);
    bg::GemmKernel kernel = bg::GemmKernel::kNone;
    EXPECT_TRUE(bg::can_implement_for_arch(p, 90, &kernel).is_ok());
    EXPECT_EQ(kernel, bg::GemmKernel::kSm90BlockScaledExact);
    EXPECT_TRUE(bg::can_implement_for_arch(p, 100, &kernel).is_ok());
    EXPECT_EQ(kernel, bg::GemmKernel::kCublasLtBlockScaled);
    for (int sm : {70, 80, 86, 89, 120}) {
      expect_error(bg::can_implement_for_arch(p, sm, &kernel), "need sm_90 (Hopper wgmma) or sm_100");
      EXPECT_EQ(kernel, bg::GemmKernel::kNone);
    }
    bg::GemmProblem bad_k = p;
    bad_k.k = 48;  // problem errors come first
    expect_error(bg::can_implement_for_arch(bad_k, 90, &kernel), "k: must be a positive multiple of 32");
    EXPECT_EQ(kernel, bg::GemmKernel::kNone);
  }
}

}  // namespace
