// Tests of the M-grouped (MoE) GEMM (gemm/grouped.h) against formats::reference_gemm_m_grouped
// (fp64) on fresh random data, for FP8 blockwise and every MX / NVFP4 recipe pair.
//
// Routing cases: uneven experts with an empty one and a 1-token one, all tokens on one expert
// between empty ones, many experts with random counts (zeros included, none a multiple of 128),
// (once with 16-byte D rows, which the FP8 TMA-store kernel takes), and one expert (the dense
// problem). Expert starts at rows that are not multiples of 128 cross
// the 128-row scale tiles of MX A operands, which the grouped kernel reads in 3-tile boxes.
// FP8 blockwise on the grouped kernel also runs at each forced tile (128 x 128, 128 x 192,
// 256 x 128: gemm/launchers.h), each of which must write the automatic choice's bytes.
// D is poisoned (0xFF: NaN in bf16 and fp32) first; every element must be written and finite,
// and the Frobenius error must be within the bound of the dense tests for the recipe:
//   FP8 blockwise (tests/gemm/gemm_test.cpp):
//     |alpha| (8 * 2^-13 + (k/128 + 5) u) ||abs|| + 2u |beta| ||C|| + 1.01 u_out ||D||
//   MX / NVFP4 (tests/gemm/gemm_block_scaled_test.cpp):
//     |alpha| (2 (k/16 + 4) 2^-23 + 4u) ||abs|| + 2u |beta| ||C|| + 1.01 u_out ||D||
// with u = 2^-24, u_out = 2^-8 (bf16 D) or u (fp32 D), abs = |A| |B_g|^T per expert. Each expert
// quantizes its own B (NVFP4: its own tensor scale, so b_scale_dec holds one float per expert).
// Also: the argument checks (CPU) and a malformed group_ends array (ends past m, decreasing ends:
// clamped on the device, no write outside D).
// The per-expert cuBLASLt route (host_group_ends, FP8 blockwise on sm_90; GroupedHostEnds): the
// same bound and poison checks, with the route automatic and forced, on experts whose row counts
// are not multiples of 4 (rounded up over the next expert's rows, or the wgmma kernel for the
// last expert and with beta != 0), empty experts, fp32 C; and, with beta 0, D equal element for
// element to the grouped kernel's (1x128 x 128x128: the same sums in the same order).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "formats/reference_gemm.h"
#include "formats/scale_layout.h"
#include "gemm/grouped.h"
#include "gemm/launchers.h"  // the tile selector
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK, expect_error

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bf::Format;
using bf::DType;
using blockscale_test::absolute;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::RouteScope;
using blockscale_test::element_value;
using blockscale_test::encode;
using blockscale_test::expect_error;
using blockscale_test::frobenius;
using blockscale_test::gemm_scales;

using Pair = blockscale_test::RecipePair;

std::vector<Pair> all_pairs() {
  std::vector<Pair> pairs = {{Format::kFp8Block1x128, Format::kFp8Block128x128}};
  for (Format a : {Format::kMxfp8E4M3, Format::kMxfp8E5M2})
    for (Format b : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp4, Format::kNvfp4}) pairs.push_back({a, b});
  pairs.push_back({Format::kMxfp4, Format::kMxfp4});
  pairs.push_back({Format::kNvfp4, Format::kNvfp4});
  return pairs;
}

// rows x k normal values (scaled by 2^[-3, 3] per 16 elements) quantized with formats::quantize.
bf::QuantizedMatrix random_quantized(int64_t rows, int64_t k, Format recipe, std::mt19937_64* rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> offset(-3, 3);
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (size_t i = 0; i < x.size(); i += 16) {
    const int e = offset(*rng);
    for (size_t j = i; j < std::min(x.size(), i + 16); ++j) x[j] = static_cast<float>(std::ldexp(normal(*rng), e));
  }
  bf::QuantizeOptions options;
  options.recipe = recipe;
  bf::QuantizedMatrix q;
  const blockscale::Status s = bf::quantize(x.data(), rows, k, k, options, bf::Direction::kRowwise, &q);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return q;
}

struct GroupedCase {
  Pair pair;
  int64_t n = 0, k = 0;
  std::vector<int64_t> counts;  // tokens per expert
  DType d_type = DType::kBf16;
  float alpha = 1.0f, beta = 0.0f;  // beta != 0: an fp32 C (not in place)
  bool host_ends = false;           // give host_group_ends (and the workspace) too
};


// Runs one case on the GPU and checks it against the reference; the label names it in failures.
void check_case(const GroupedCase& gc, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int groups = static_cast<int>(gc.counts.size());
  std::vector<int64_t> ends;
  int64_t m = 0;
  for (int64_t c : gc.counts) ends.push_back(m += c);
  const std::string label = std::string(bf::format_name(gc.pair.a)) + " x " + bf::format_name(gc.pair.b) +
                            ", m " + std::to_string(m) + ", n " + std::to_string(gc.n) + ", k " +
                            std::to_string(gc.k) + ", " + std::to_string(groups) + " experts";
  SCOPED_TRACE(label);

  const bf::QuantizedMatrix a = random_quantized(m, gc.k, gc.pair.a, &rng);
  std::vector<bf::QuantizedMatrix> b;
  std::vector<uint8_t> b_codes, b_scales;
  std::vector<float> b_dec;
  bg::GroupedGemmProblem p;
  p.num_groups = groups, p.m = m, p.n = gc.n, p.k = gc.k;
  p.a_recipe = gc.pair.a, p.b_recipe = gc.pair.b;
  p.d_type = gc.d_type, p.c_type = DType::kF32;
  p.ldd = gc.n, p.ldc = gc.n;
  p.alpha = gc.alpha, p.beta = gc.beta;
  for (int g = 0; g < groups; ++g) {
    b.push_back(random_quantized(gc.n, gc.k, gc.pair.b, &rng));
    b_codes.insert(b_codes.end(), b[g].data.begin(), b[g].data.end());
    std::vector<uint8_t> s = gemm_scales(b[g]);
    ASSERT_EQ(static_cast<int64_t>(s.size()), bg::grouped_b_scale_bytes(p)) << "expert scale stride";
    b_scales.insert(b_scales.end(), s.begin(), s.end());
    b_dec.push_back(b[g].global_scale_dec);
  }
  std::vector<double> c;
  if (gc.beta != 0.0f) {
    std::normal_distribution<double> normal(0.0, std::sqrt(static_cast<double>(gc.k)));
    c.resize(static_cast<size_t>(m * gc.n));
    for (double& x : c) x = static_cast<float>(normal(rng));
  }

  std::vector<double> ref, abs_ref;
  blockscale::Status s = bf::reference_gemm_m_grouped(a, b, ends, gc.alpha, gc.beta, c.empty() ? nullptr : c.data(),
                                                        gc.n, &ref);
  ASSERT_TRUE(s.is_ok()) << s.message();
  std::vector<bf::QuantizedMatrix> b_abs;
  for (const auto& q : b) b_abs.push_back(absolute(q));
  s = bf::reference_gemm_m_grouped(absolute(a), b_abs, ends, 1.0, 0.0, nullptr, 0, &abs_ref);
  ASSERT_TRUE(s.is_ok()) << s.message();

  const std::vector<uint8_t> a_scales = gemm_scales(a);
  std::vector<int32_t> ends32(ends.begin(), ends.end());
  DeviceBuffer a_data, a_sc, a_dec, b_data, b_sc, b_dec_buf, ends_buf, c_buf, d_buf;
  ASSERT_OK(a_data.upload(a.data.data(), a.data.size(), "a_data"));
  ASSERT_OK(a_sc.upload(a_scales.data(), a_scales.size(), "a_sc"));
  ASSERT_OK(a_dec.upload(&a.global_scale_dec, sizeof(float), "a_dec"));
  ASSERT_OK(b_data.upload(b_codes.data(), b_codes.size(), "b_data"));
  ASSERT_OK(b_sc.upload(b_scales.data(), b_scales.size(), "b_sc"));
  ASSERT_OK(b_dec_buf.upload(b_dec.data(), b_dec.size() * sizeof(float), "b_dec_buf"));
  ASSERT_OK(ends_buf.upload(ends32.data(), ends32.size() * sizeof(int32_t), "ends_buf"));
  const std::vector<uint8_t> poison(static_cast<size_t>(m * gc.n * static_cast<int64_t>(blockscale::formats::dtype_size(gc.d_type))), 0xFF);
  ASSERT_OK(d_buf.upload(poison.data(), poison.size(), "d_buf"));
  if (!c.empty()) {
    const std::vector<uint8_t> c_bytes = encode(c, DType::kF32);
    ASSERT_OK(c_buf.upload(c_bytes.data(), c_bytes.size(), "c_buf"));
  }
  bg::GroupedGemmArguments args;
  args.a_data = a_data.data(), args.a_scales = a_sc.data();
  args.b_data = b_data.data(), args.b_scales = b_sc.data();
  args.a_scale_dec = p.a_recipe == Format::kNvfp4 ? a_dec.as<float>() : nullptr;
  args.b_scale_dec = p.b_recipe == Format::kNvfp4 ? b_dec_buf.as<float>() : nullptr;
  args.group_ends = ends_buf.as<int32_t>();
  args.c = c.empty() ? nullptr : c_buf.data();
  args.d = d_buf.data();
  DeviceBuffer workspace;
  const size_t ws_bytes = gc.host_ends ? bg::workspace_size(p) : 0;
  if (gc.host_ends) {
    args.host_group_ends = ends32.data();
    ASSERT_OK(workspace.alloc(ws_bytes, "workspace"));
  }
  s = bg::run(p, args, workspace.data(), ws_bytes, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> d(poison.size());
  ASSERT_CUDA(cudaMemcpy(d.data(), d_buf.data(), d.size(), cudaMemcpyDeviceToHost));
  if (gc.host_ends && gc.beta == 0.0f) {  // the grouped kernel on the same operands: the same bytes
    const bg::GemmRoute route = bg::gemm_route();
    bg::set_gemm_route(bg::GemmRoute::kKernel);
    ASSERT_CUDA(cudaMemcpy(d_buf.data(), poison.data(), poison.size(), cudaMemcpyHostToDevice));
    s = bg::run(p, args, workspace.data(), ws_bytes, nullptr);
    bg::set_gemm_route(route);
    ASSERT_TRUE(s.is_ok()) << s.message();
    std::vector<uint8_t> d_kernel(poison.size());
    ASSERT_CUDA(cudaMemcpy(d_kernel.data(), d_buf.data(), d.size(), cudaMemcpyDeviceToHost));
    int64_t differ = 0;
    for (int64_t i = 0; i < m * gc.n; ++i)
      differ += element_value(d, i, gc.d_type) != element_value(d_kernel, i, gc.d_type);
    EXPECT_EQ(differ, 0) << "elements differing from the grouped kernel's";
  }

  if (bf::is_fp8_block(gc.pair.a) && !gc.host_ends) {  // every tile: the automatic choice's bytes
    using bg::detail::Sm90Fp8Tile;
    for (const Sm90Fp8Tile tile :
         {Sm90Fp8Tile::kN128, Sm90Fp8Tile::kN192, Sm90Fp8Tile::kM256, Sm90Fp8Tile::kM256Pair}) {
      ASSERT_CUDA(cudaMemcpy(d_buf.data(), poison.data(), poison.size(), cudaMemcpyHostToDevice));
      bg::detail::set_sm90_fp8_tile(tile);
      s = bg::run(p, args, nullptr, 0, nullptr);
      bg::detail::set_sm90_fp8_tile(Sm90Fp8Tile::kAuto);
      ASSERT_TRUE(s.is_ok()) << s.message();
      std::vector<uint8_t> d_tile(poison.size());
      ASSERT_CUDA(cudaMemcpy(d_tile.data(), d_buf.data(), d_tile.size(), cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(d_tile.data(), d.data(), d.size()), 0)
          << "forced tile " << static_cast<int>(tile) << " differs from the automatic choice's D";
    }
  }

  int64_t non_finite = 0;
  double err2 = 0;
  for (int64_t i = 0; i < m * gc.n; ++i) {
    const double v = element_value(d, i, gc.d_type);
    if (!std::isfinite(v)) {
      if (non_finite++ < 3) ADD_FAILURE() << "D[" << i / gc.n << ", " << i % gc.n << "] = " << v << " (unwritten?)";
      continue;
    }
    err2 += (v - ref[static_cast<size_t>(i)]) * (v - ref[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(non_finite, 0);
  const double u = std::ldexp(1.0, -24), u_out = gc.d_type == DType::kBf16 ? std::ldexp(1.0, -8) : u;
  const double accumulate = bf::is_fp8_block(gc.pair.a)
                                ? 8 * std::ldexp(1.0, -13) + (static_cast<double>(gc.k / 128) + 5) * u
                                : 2 * (static_cast<double>(gc.k / 16) + 4) * std::ldexp(1.0, -23) + 4 * u;
  const double bound = std::fabs(gc.alpha) * accumulate * frobenius(abs_ref) +
                       2 * u * std::fabs(gc.beta) * frobenius(c) + 1.01 * u_out * frobenius(ref);
  EXPECT_LE(std::sqrt(err2), bound) << "relative error " << std::sqrt(err2) / frobenius(ref);
}

class GroupedPair : public ::testing::TestWithParam<Pair> {};

// Empty and 1-token experts, counts that are not multiples of 128, bf16 D.
TEST_P(GroupedPair, UnevenExperts) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 200, 256, {0, 1, 300, 77}}, 1);
}

// All tokens on one expert, with empty experts before and after; fp32 D accumulating onto C.
TEST_P(GroupedPair, AllTokensOnOneExpertAccumulating) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 130, 384, {0, 517, 0}, DType::kF32, 1.0f, 1.0f}, 2);
}

// Nine experts, random counts 0..260 drawn from `seed` (experts 1 and 5 empty).
std::vector<int64_t> nine_random_counts(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> count(0, 260);
  std::vector<int64_t> counts;
  for (int g = 0; g < 9; ++g) counts.push_back(g % 4 == 1 ? 0 : count(rng));
  return counts;
}

// Nine experts, random counts, odd n, alpha != 1.
TEST_P(GroupedPair, ManyExpertsRandomCounts) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 129, 256, nine_random_counts(3), DType::kBf16, -0.5f, 0.0f}, 3);
}

// The same routing with 16-byte D rows (n 256, fp32 D): the FP8 kernel that stores through TMA
// (sm90_fp8_gemm) takes it, and its threads copy the rows of every box an expert ends inside.
TEST_P(GroupedPair, ManyExpertsRandomCountsAlignedRows) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 256, 256, nine_random_counts(5), DType::kF32, -0.5f, 0.0f}, 5);
}

// Nine K blocks (128x128 B scales arrive in boxes of 4 K blocks: the third is mostly past K) and
// 320 columns (a 192-wide tile straddles two column blocks), experts of 0, 129, 300 and 1 rows.
TEST_P(GroupedPair, NineKBlocks) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 320, 1152, {0, 129, 300, 1}}, 6);
}

// One expert: the dense problem through the grouped path.
TEST_P(GroupedPair, OneExpert) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 257, 512, {300}}, 4);
}

INSTANTIATE_TEST_SUITE_P(Pairs, GroupedPair, ::testing::ValuesIn(all_pairs()), blockscale_test::recipe_pair_name);

// FP8 blockwise experts of 4096 rows and more (the automatic choice runs 256 x 128 tiles in 2-CTA
// clusters there): 33 tile rows x 5 column pairs over the clusters, several rounds each; 9 column
// tiles, so the second CTA of every last pair works past N and stores nothing; an expert ends
// inside a tile.
TEST(GroupedGemm, LargeExpertsInClusters) {
  SKIP_WITHOUT_GPU();
  check_case({{Format::kFp8Block1x128, Format::kFp8Block128x128}, 1152, 256, {4100, 4096}}, 8);
}

// The per-expert cuBLASLt route: automatic, and forced (every expert the route can take goes
// through cuBLASLt).
class GroupedHostEnds : public ::testing::TestWithParam<bg::GemmRoute> {};

GroupedCase host_ends_case(std::vector<int64_t> counts, int64_t n, int64_t k, DType d_type, float beta) {
  GroupedCase gc{{Format::kFp8Block1x128, Format::kFp8Block128x128}, n, k, std::move(counts), d_type, 1.0f, beta};
  gc.host_ends = true;
  return gc;
}

// Rows 37, 1 and 129 rounded up to 4 over the next experts' rows; an empty expert; bf16 D.
TEST_P(GroupedHostEnds, RoundedExperts) {
  SKIP_WITHOUT_GPU();
  RouteScope route(GetParam());
  check_case(host_ends_case({37, 0, 1, 300, 129, 64}, 256, 512, DType::kBf16, 0.0f), 31);
}

// The last expert's 3 rows cannot be rounded (nothing after them): the wgmma kernel runs it.
TEST_P(GroupedHostEnds, LastExpertNotAMultipleOf4) {
  SKIP_WITHOUT_GPU();
  RouteScope route(GetParam());
  check_case(host_ends_case({5, 250, 3}, 136, 256, DType::kF32, 0.0f), 32);
}

// fp32 C (not D) with beta 1: experts of 64, 8 and 100 rows through cuBLASLt, the 7-row one
// (C would be read for rows that are not its own) through the kernel.
TEST_P(GroupedHostEnds, AccumulatingIntoC) {
  SKIP_WITHOUT_GPU();
  RouteScope route(GetParam());
  check_case(host_ends_case({64, 8, 0, 7, 100}, 128, 384, DType::kF32, 1.0f), 33);
}

// Nine experts, random counts 0..300 (zeros forced).
TEST_P(GroupedHostEnds, ManyExpertsRandomCounts) {
  SKIP_WITHOUT_GPU();
  RouteScope route(GetParam());
  std::mt19937_64 rng(34);
  std::uniform_int_distribution<int64_t> count(0, 300);
  std::vector<int64_t> counts;
  for (int g = 0; g < 9; ++g) counts.push_back(g % 4 == 2 ? 0 : count(rng));
  check_case(host_ends_case(counts, 384, 384, DType::kBf16, 0.0f), 34);
}

INSTANTIATE_TEST_SUITE_P(Routes, GroupedHostEnds,
                         ::testing::Values(bg::GemmRoute::kAuto, bg::GemmRoute::kCublasLt),
                         [](const ::testing::TestParamInfo<bg::GemmRoute>& info) {
                           return std::string(info.param == bg::GemmRoute::kAuto ? "Auto" : "CublasLt");
                         });

// Host ends that break the rules are refused with their name.
TEST(GroupedHostEnds, BadHostEndsNameTheArgument) {
  SKIP_WITHOUT_GPU();
  bg::GroupedGemmProblem p;
  p.num_groups = 2, p.m = 64, p.n = 128, p.k = 128, p.d_type = DType::kF32, p.ldd = 128;
  DeviceBuffer a, as, b, bs, ends, d, ws;
  ASSERT_OK(a.alloc(64 * 128, "a"));
  ASSERT_OK(as.alloc(64 * 4, "as"));
  ASSERT_OK(b.alloc(2 * 128 * 128, "b"));
  ASSERT_OK(bs.alloc(2 * 16, "bs"));
  ASSERT_OK(ends.alloc(8, "ends"));
  ASSERT_OK(d.alloc(64 * 128 * 4, "d"));
  ASSERT_OK(ws.alloc(bg::workspace_size(p), "ws"));
  bg::GroupedGemmArguments args;
  args.a_data = a.data(), args.a_scales = as.data(), args.b_data = b.data(), args.b_scales = bs.data();
  args.group_ends = ends.as<int32_t>(), args.d = d.data();
  const int32_t decreasing[2] = {40, 30}, past_m[2] = {40, 65};
  args.host_group_ends = decreasing;
  expect_error(bg::run(p, args, ws.data(), bg::workspace_size(p), nullptr), "host_group_ends: must be non-decreasing");
  args.host_group_ends = past_m;
  expect_error(bg::run(p, args, ws.data(), bg::workspace_size(p), nullptr),
               "host_group_ends: the last end must be <= m");
  const int32_t fine[2] = {40, 64};
  args.host_group_ends = fine;
  expect_error(bg::run(p, args, nullptr, 0, nullptr), "workspace_bytes: the per-expert cuBLASLt route");
}

// Ends past m and a decreasing end are clamped on the device: experts become empty or shorter,
// rows outside [0, m) are never written (D sits between two poisoned guard regions).
TEST(GroupedGemm, MalformedEndsStayInBounds) {
  SKIP_WITHOUT_GPU();
  const int64_t m = 150, n = 128, k = 128;
  std::mt19937_64 rng(5);
  const Pair pair{Format::kMxfp8E4M3, Format::kMxfp8E4M3};
  const bf::QuantizedMatrix a = random_quantized(m, k, pair.a, &rng);
  std::vector<uint8_t> b_codes, b_scales;
  for (int g = 0; g < 3; ++g) {
    const bf::QuantizedMatrix q = random_quantized(n, k, pair.b, &rng);
    b_codes.insert(b_codes.end(), q.data.begin(), q.data.end());
    const std::vector<uint8_t> sc = gemm_scales(q);
    b_scales.insert(b_scales.end(), sc.begin(), sc.end());
  }
  const std::vector<int32_t> ends = {100, 60, 100000};  // decreasing, then past m
  const std::vector<uint8_t> a_scales = gemm_scales(a);
  const int64_t guard = 4096, d_bytes = m * n * 2;
  std::vector<uint8_t> poison(static_cast<size_t>(d_bytes + 2 * guard), 0xFF);
  DeviceBuffer a_data, a_sc, b_data, b_sc, ends_buf, d_buf;
  ASSERT_OK(a_data.upload(a.data.data(), a.data.size(), "a_data"));
  ASSERT_OK(a_sc.upload(a_scales.data(), a_scales.size(), "a_sc"));
  ASSERT_OK(b_data.upload(b_codes.data(), b_codes.size(), "b_data"));
  ASSERT_OK(b_sc.upload(b_scales.data(), b_scales.size(), "b_sc"));
  ASSERT_OK(ends_buf.upload(ends.data(), ends.size() * 4, "ends_buf"));
  ASSERT_OK(d_buf.upload(poison.data(), poison.size(), "d_buf"));
  bg::GroupedGemmProblem p;
  p.num_groups = 3, p.m = m, p.n = n, p.k = k;
  p.a_recipe = pair.a, p.b_recipe = pair.b;
  p.d_type = DType::kBf16, p.ldd = n;
  bg::GroupedGemmArguments args;
  args.a_data = a_data.data(), args.a_scales = a_sc.data(), args.b_data = b_data.data(), args.b_scales = b_sc.data();
  args.group_ends = ends_buf.as<int32_t>();
  args.d = d_buf.data() + guard;
  const blockscale::Status s = bg::run(p, args, nullptr, 0, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> out(poison.size());
  ASSERT_CUDA(cudaMemcpy(out.data(), d_buf.data(), out.size(), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < guard; ++i) {
    ASSERT_EQ(out[static_cast<size_t>(i)], 0xFF) << "written before D at byte " << i;
    ASSERT_EQ(out[static_cast<size_t>(guard + d_bytes + i)], 0xFF) << "written after D at byte " << i;
  }
  // Clamped ends {100, 100, 150}: rows 0..99 expert 0, expert 1 empty, rows 100..149 expert 2.
  std::vector<uint8_t> d(out.begin() + guard, out.begin() + guard + d_bytes);
  for (int64_t i = 0; i < m * n; ++i) ASSERT_TRUE(std::isfinite(element_value(d, i, DType::kBf16))) << i;
}

// ---- Argument checks (no GPU needed) -----------------------------------------------------------

bg::GroupedGemmProblem valid_problem() {
  bg::GroupedGemmProblem p;
  p.num_groups = 4, p.m = 1000, p.n = 256, p.k = 512;
  p.a_recipe = Format::kMxfp8E4M3, p.b_recipe = Format::kNvfp4;
  p.ldd = 256;
  return p;
}

TEST(GroupedGemmChecks, ValidProblemPasses) {
  EXPECT_TRUE(bg::can_implement(valid_problem()).is_ok());
  bg::GroupedGemmProblem p = valid_problem();
  p.a_recipe = Format::kFp8Block1x128, p.b_recipe = Format::kFp8Block128x128;
  EXPECT_TRUE(bg::can_implement(p).is_ok()) << bg::can_implement(p).message();
  bg::GemmKernel kernel;
  EXPECT_TRUE(bg::can_implement_for_arch(p, 90, &kernel).is_ok());
  EXPECT_EQ(kernel, bg::GemmKernel::kSm90Fp8Blockwise);
  EXPECT_TRUE(bg::can_implement_for_arch(valid_problem(), 90, &kernel).is_ok());
  EXPECT_EQ(kernel, bg::GemmKernel::kSm90BlockScaledExact);
}

TEST(GroupedGemmChecks, RulesNameTheArgument) {
  bg::GroupedGemmProblem p = valid_problem();
  p.num_groups = 0;
  expect_error(bg::can_implement(p), "num_groups");
  p.num_groups = 1025;
  expect_error(bg::can_implement(p), "num_groups");
  p = valid_problem();
  p.a_recipe = Format::kFp8Block1x128, p.b_recipe = Format::kFp8Block1x128;
  expect_error(bg::can_implement(p), "fp8_block128x128");
  p = valid_problem();
  p.k = 100;
  expect_error(bg::can_implement(p), "k: must be a positive multiple of 32");
  p = valid_problem();
  p.ldd = 10;
  expect_error(bg::can_implement(p), "ldd");
  p = valid_problem();
  p.n = 1 << 22, p.num_groups = 1000, p.ldd = p.n;
  expect_error(bg::can_implement(p), "n * num_groups");
  expect_error(bg::can_implement_for_arch(valid_problem(), 100), "sm_90 (Hopper) only");
  EXPECT_EQ(bg::grouped_b_scale_bytes(valid_problem()), bf::swizzled_scale_bytes(256, 512 / 16));
}

TEST(GroupedGemmChecks, PointersAreChecked) {
  SKIP_WITHOUT_GPU();
  bg::GroupedGemmProblem p = valid_problem();
  DeviceBuffer buf;
  ASSERT_OK(buf.alloc(1 << 24, "buf"));
  bg::GroupedGemmArguments args;
  args.a_data = buf.data(), args.a_scales = buf.data() + (1 << 20), args.b_data = buf.data() + (2 << 20);
  args.b_scales = buf.data() + (3 << 20), args.a_scale_dec = nullptr;
  args.b_scale_dec = reinterpret_cast<const float*>(buf.data() + (4 << 20));
  args.group_ends = reinterpret_cast<const int32_t*>(buf.data() + (5 << 20));
  args.d = buf.data() + (6 << 20);
  args.b_scale_dec = nullptr;  // B is NVFP4: one S_dec per expert is required
  expect_error(bg::can_implement(p, args), "b_scale_dec");
  args.b_scale_dec = reinterpret_cast<const float*>(buf.data() + (4 << 20));
  args.group_ends = nullptr;
  expect_error(bg::can_implement(p, args), "group_ends: must not be null");
  args.group_ends = reinterpret_cast<const int32_t*>(buf.data() + (5 << 20));
  args.d = buf.data() + (2 << 20);  // on top of b_data
  expect_error(bg::can_implement(p, args), "d: overlaps b_data");
  args.d = buf.data() + (6 << 20);
  EXPECT_TRUE(bg::can_implement(p, args).is_ok()) << bg::can_implement(p, args).message();
}

}  // namespace
