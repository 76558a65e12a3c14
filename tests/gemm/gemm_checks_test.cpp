// gemm_test's checks that need no GPU (gemm/gemm.h's can_implement, can_implement_for_arch and
// workspace_size; the tile order of gemm/common/tile_scheduler.h; the B-scale block rule of
// gemm/common/scale_blocks.h; the sm90 tile selector), and the empty problem that launches nothing.
// Pointer checks come before any device query, so fake (never dereferenced) addresses serve.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "formats/recipe.h"
#include "gemm/common/scale_blocks.h"
#include "gemm/common/tile_scheduler.h"
#include "gemm/gemm.h"
#include "gemm/launchers.h"  // the tile-width selector
#include "tests/gemm/gemm_fp8_harness.h"
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: expect_error

namespace {

using namespace blockscale_test::fp8_blockwise;  // gemm_fp8_harness.h
using blockscale_test::RouteScope;
using blockscale_test::expect_error;

// An empty problem launches nothing and succeeds.
TEST(GemmRun, EmptyProblemIsOk) {
  bg::GemmProblem p = problem(0, 5, 128, Format::kFp8Block128x128, DType::kBf16, 5, 1.0f, 0.0f);
  EXPECT_TRUE(bg::run(p, bg::GemmArguments(), nullptr, 0, nullptr).is_ok());
}

// ---- No GPU needed: the checks, the dispatch rule, the tile order ---------------------------------

bg::GemmProblem valid_problem() {
  return problem(256, 384, 512, Format::kFp8Block128x128, DType::kBf16, 384, 1.0f, 0.0f);
}

TEST(GemmCanImplement, ValidProblemsPass) {
  EXPECT_TRUE(bg::can_implement(valid_problem()).is_ok());
  bg::GemmProblem p = valid_problem();
  p.b_recipe = Format::kFp8Block1x128;
  p.beta = 1.0f, p.ldc = 400, p.c_type = DType::kF32, p.d_type = DType::kF32;
  EXPECT_TRUE(bg::can_implement(p).is_ok());
  p.m = 0;  // empty: strides are not checked
  p.ldd = 0;
  EXPECT_TRUE(bg::can_implement(p).is_ok());
}

TEST(GemmCanImplement, EachRuleNamesItsArgument) {
  bg::GemmProblem p = valid_problem();
  p.m = -1;
  expect_error(bg::can_implement(p), "m: must be >= 0");
  p = valid_problem(), p.n = -3;
  expect_error(bg::can_implement(p), "n: must be >= 0");
  p = valid_problem(), p.m = int64_t{1} << 31;
  expect_error(bg::can_implement(p), "m: must be < 2^31");
  p = valid_problem(), p.n = int64_t{1} << 32;
  expect_error(bg::can_implement(p), "n: must be < 2^31");
  p = valid_problem(), p.k = 200;
  expect_error(bg::can_implement(p), "k: must be a positive multiple of 128");
  p = valid_problem(), p.k = 0;
  expect_error(bg::can_implement(p), "k: must be a positive multiple of 128");
  p = valid_problem(), p.k = int64_t{1} << 31;
  expect_error(bg::can_implement(p), "k: must be < 2^31");
  p = valid_problem(), p.ldd = 383;
  expect_error(bg::can_implement(p), "ldd: must be >= n");
  p = valid_problem(), p.beta = 1.0f, p.ldc = 100;
  expect_error(bg::can_implement(p), "ldc: must be >= n");
  p = valid_problem(), p.ldc = 0;  // beta == 0: C is not read, ldc free
  EXPECT_TRUE(bg::can_implement(p).is_ok());
  p = valid_problem(), p.alpha = NAN;
  expect_error(bg::can_implement(p), "alpha: must be finite");
  p = valid_problem(), p.beta = INFINITY;
  expect_error(bg::can_implement(p), "beta: must be finite");
  p = valid_problem(), p.d_type = DType::kI32;
  expect_error(bg::can_implement(p), "d_type: must be BF16 or F32, got I32");
  p = valid_problem(), p.c_type = DType::kF16;
  expect_error(bg::can_implement(p), "c_type: must be BF16 or F32, got F16");
  p = valid_problem(), p.d_type = static_cast<DType>(200);
  expect_error(bg::can_implement(p), "d_type: must be BF16 or F32, got an unknown dtype");
}

// FP8 blockwise pairs: A 1x128 with B 128x128 or 1x128. Any other pair with an FP8 blockwise
// operand (128x128 A, or one FP8 blockwise operand beside an MX / NVFP4 one) names the pair.
TEST(GemmCanImplement, Fp8BlockwisePairRules) {
  EXPECT_TRUE(bg::is_fp8_blockwise_pair(Format::kFp8Block1x128, Format::kFp8Block128x128));
  EXPECT_TRUE(bg::is_fp8_blockwise_pair(Format::kFp8Block1x128, Format::kFp8Block1x128));
  for (Format a : bf::all_formats())
    for (Format b : bf::all_formats()) {
      if (!bf::is_fp8_block(a) && !bf::is_fp8_block(b)) continue;  // MX / NVFP4: gemm_block_scaled_test
      bg::GemmProblem p = valid_problem();
      p.a_recipe = a, p.b_recipe = b;
      const std::string pair = std::string(bf::format_name(a)) + ", " + bf::format_name(b);
      EXPECT_FALSE(bg::is_block_scaled_pair(a, b)) << pair;
      if (bg::is_fp8_blockwise_pair(a, b)) {
        EXPECT_TRUE(bg::can_implement(p).is_ok()) << pair;
      } else {
        expect_error(bg::can_implement(p), "a_recipe, b_recipe: the pair (" + pair + ") is not supported");
      }
    }
}

TEST(GemmDispatch, ArchitectureRule) {
  bg::GemmKernel kernel = bg::GemmKernel::kNone;
  EXPECT_TRUE(bg::can_implement_for_arch(valid_problem(), 90, &kernel).is_ok());
  EXPECT_EQ(kernel, bg::GemmKernel::kCublasLtBlockScaled);  // FP8 blockwise, a shape cuBLASLt takes, m <= 512
  bg::GemmProblem tall = valid_problem();
  tall.m = 516;  // cuBLASLt takes it, but from 513 rows up the wgmma kernel runs
  EXPECT_TRUE(bg::can_implement_for_arch(tall, 90, &kernel).is_ok());
  EXPECT_EQ(kernel, bg::GemmKernel::kSm90Fp8Blockwise);
  {
    const RouteScope route(bg::GemmRoute::kCublasLt);
    EXPECT_TRUE(bg::can_implement_for_arch(tall, 90, &kernel).is_ok());
    EXPECT_EQ(kernel, bg::GemmKernel::kCublasLtBlockScaled);
  }
  bg::GemmProblem odd = valid_problem();
  odd.m = 257;
  EXPECT_TRUE(bg::can_implement_for_arch(odd, 90, &kernel).is_ok());
  EXPECT_EQ(kernel, bg::GemmKernel::kSm90Fp8Blockwise);
  {
    const RouteScope route(bg::GemmRoute::kKernel);
    EXPECT_TRUE(bg::can_implement_for_arch(valid_problem(), 90, &kernel).is_ok());
    EXPECT_EQ(kernel, bg::GemmKernel::kSm90Fp8Blockwise);
  }
  {
    const RouteScope route(bg::GemmRoute::kCublasLt);
    expect_error(bg::can_implement_for_arch(odd, 90, &kernel), "m, n, ldd, ldc: the FP8 blockwise route is forced");
  }
  EXPECT_TRUE(bg::can_implement_for_arch(valid_problem(), 100, &kernel).is_ok());
  EXPECT_EQ(kernel, bg::GemmKernel::kCublasLtBlockScaled);
  for (int sm : {70, 80, 86, 89, 120}) {
    expect_error(bg::can_implement_for_arch(valid_problem(), sm, &kernel), "need sm_90 (Hopper wgmma) or sm_100");
    EXPECT_EQ(kernel, bg::GemmKernel::kNone);
  }
  bg::GemmProblem p = valid_problem();
  p.k = 100;  // problem errors come first
  expect_error(bg::can_implement_for_arch(p, 90), "k: must be");
}

// Pointer checks come before any device query, so fake (never dereferenced) addresses serve.
TEST(GemmCanImplement, PointerRulesNameTheArgument) {
  alignas(256) static uint8_t arena[1 << 20];
  const bg::GemmProblem p = valid_problem();  // 256 x 384 x 512
  bg::GemmArguments ok;
  ok.a_data = arena;                                                   // 128 KB
  ok.b_data = arena + (1 << 17);                                       // 192 KB
  ok.a_scales = reinterpret_cast<const float*>(arena + (5 << 16));     // 4 KB
  ok.b_scales = reinterpret_cast<const float*>(arena + (5 << 16) + 8192);
  ok.d = arena + (6 << 16);                                            // 192 KB of bf16
  auto with = [&](auto change) {
    bg::GemmArguments a = ok;
    change(a);
    return bg::can_implement(p, a);
  };
  expect_error(with([](auto& a) { a.a_data = nullptr; }), "a_data: must not be null");
  expect_error(with([](auto& a) { a.a_data += 8; }), "a_data: must be 16-byte aligned");
  expect_error(with([](auto& a) { a.b_data = nullptr; }), "b_data: must not be null");
  expect_error(with([](auto& a) { a.b_data += 1; }), "b_data: must be 16-byte aligned");
  expect_error(with([](auto& a) { a.a_scales = nullptr; }), "a_scales: must not be null");
  expect_error(with([](auto& a) { a.a_scales = static_cast<const float*>(a.a_scales) + 1; }),
               "a_scales: must be 16-byte aligned");
  expect_error(with([](auto& a) { a.b_scales = nullptr; }), "b_scales: must not be null");
  expect_error(with([](auto& a) { a.b_scales = static_cast<const float*>(a.b_scales) + 2; }),
               "b_scales: must be 16-byte aligned");
  expect_error(with([](auto& a) { a.d = nullptr; }), "d: must not be null");
  expect_error(with([](auto& a) { a.d = static_cast<uint8_t*>(a.d) + 1; }), "d: must be 2-byte aligned");
  expect_error(with([&](auto& a) { a.d = arena + 4096; }), "d: overlaps a_data");
  expect_error(with([&](auto& a) { a.d = arena + (1 << 17) + 64; }), "d: overlaps b_data");
  expect_error(with([&](auto& a) { a.d = arena + (5 << 16) + 16; }), "d: overlaps a_scales");

  bg::GemmProblem pc = p;
  pc.beta = 1.0f, pc.ldc = p.n, pc.c_type = DType::kF32, pc.d_type = DType::kF32;
  bg::GemmArguments a = ok;
  a.c = nullptr;
  expect_error(bg::can_implement(pc, a), "c: must not be null");
  a.c = arena + (9 << 16) + 2;
  expect_error(bg::can_implement(pc, a), "c: must be 4-byte aligned (fp32) when beta != 0");
  a.c = static_cast<uint8_t*>(ok.d) + 4;  // overlaps D, but not D itself
  expect_error(bg::can_implement(pc, a), "c: must be d itself");
  pc.c_type = DType::kBf16;  // same pointer, different type: not in place
  a.c = ok.d;
  expect_error(bg::can_implement(pc, a), "c: must be d itself");
}

TEST(GemmWorkspace, Fp8BlockwiseOffersCublasLtItsWorkspace) {
  EXPECT_EQ(bg::workspace_size(valid_problem()), size_t{32} << 20);
  bg::GemmProblem mx = valid_problem();
  mx.a_recipe = mx.b_recipe = Format::kMxfp8E4M3;
  EXPECT_EQ(bg::workspace_size(mx), 0u);
}

TEST(TileOrder, EveryTileExactlyOnce) {
  for (int tiles_m : {1, 3, 8, 9, 64, 129})
    for (int tiles_n : {1, 2, 7, 32})
      for (int group : {1, 8, 16}) {
        bg::TileOrder order{tiles_m, tiles_n, group};
        std::set<std::pair<int, int>> seen;
        for (int32_t t = 0; t < order.num_tiles(); ++t) {
          int32_t tm, tn;
          order.coords(t, &tm, &tn);
          ASSERT_TRUE(tm >= 0 && tm < tiles_m && tn >= 0 && tn < tiles_n) << t;
          seen.insert({tm, tn});
        }
        EXPECT_EQ(static_cast<int>(seen.size()), tiles_m * tiles_n) << tiles_m << "x" << tiles_n << " group " << group;
      }
}

// The kernel's per-group B-scale block rule is the plain column division, for every tile start.
TEST(ScaleBlocks, OffsetIsTheColumnsBlock) {
  for (int32_t tile_n = 0; tile_n < 64; ++tile_n) {
    const int32_t n0_128 = tile_n * 128, n0_192 = tile_n * 192;
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(bg::b_scale_block_offset<128>(n0_128, j), (n0_128 + 8 * j) / 128 - n0_128 / 128) << tile_n << " " << j;
    for (int j = 0; j < 24; ++j) {
      const int32_t first = n0_192 + 8 * j;
      EXPECT_EQ(bg::b_scale_block_offset<192>(n0_192, j), first / 128 - n0_192 / 128) << tile_n << " " << j;
      EXPECT_EQ(first / 128, (first + 7) / 128) << "a column group straddles two scale blocks";
    }
  }
}

TEST(Sm90TileSelector, DefaultIsAutoAndSettable) {
  EXPECT_EQ(bg::detail::sm90_fp8_tile(), Sm90Fp8Tile::kAuto);
  {
    const TileScope scope(Sm90Fp8Tile::kN192);
    EXPECT_EQ(bg::detail::sm90_fp8_tile(), Sm90Fp8Tile::kN192);
  }
  EXPECT_EQ(bg::detail::sm90_fp8_tile(), Sm90Fp8Tile::kAuto);
}

}  // namespace
