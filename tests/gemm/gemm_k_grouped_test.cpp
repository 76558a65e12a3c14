// Tests of the K-grouped (MoE wgrad) GEMM (gemm/grouped.h, GroupMode::kK) against
// formats::reference_gemm_k_grouped (fp64) on fresh random data, for FP8 blockwise and every MX /
// NVFP4 recipe pair whose operands share a padded token axis (equal block lengths).
//
// The operands are what quant/'s grouped quantize writes: dY (T x m) and X (T x n), tokens sorted
// by expert, quantized columnwise per expert with formats::quantize_grouped_columnwise (each
// expert padded to the block), then widened with zero codes and scales to grouped_capacity()
// token columns. Routing cases: uneven experts with an empty and a 1-token one, all tokens on one
// expert (fp32 D accumulating into C, the main gradient), many experts with random counts, one
// expert. MX / NVFP4 experts start inside a 128-token stage, so the kernel's stage masking is on
// every path. D is poisoned (0xFF) first: every element must be written and finite, and the
// Frobenius error within the bounds of the dense tests (tests/gemm/gemm_grouped_test.cpp), with k
// = the capacity. Also: a NaN token in one expert stays in that expert's dW (the neighbours'
// stages read its blocks and must mask them), the end-to-end path through quant/'s GPU grouped
// quantize, and the argument checks. FP8 blockwise with fp32 D and beta 0 takes the staged
// kernel (TMA stores of 64-row boxes, clipped at each expert's last row and at n): a row stride
// past n and a guard after D, both poisoned, must come back untouched, and enough tiles for
// several per CTA reuse its shared-memory buffer.
// The per-expert cuBLASLt route (host_group_ends, FP8 blockwise on sm_90; KGroupedHostEnds), with
// the route automatic and forced: the same checks on uneven experts (empty ones with beta 0: a
// memset), accumulation in place with empty experts, a padded row stride and bf16 D.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "formats/reference_gemm.h"
#include "formats/scale_layout.h"
#include "gemm/device_operand.h"
#include "gemm/grouped.h"
#include "quant/quantize.h"
#include "tests/gemm/gemm_fp8_harness.h"  // defines: tiles_under_test, TileScope, tile_name
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK, expect_error

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
namespace bq = blockscale::quant;
using bf::Format;
using bf::DType;
using blockscale_test::absolute;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::element_value;
using blockscale_test::fp8_blockwise::tile_name;
using blockscale_test::fp8_blockwise::tiles_under_test;
using blockscale_test::fp8_blockwise::TileScope;
using bg::detail::Sm90Fp8Tile;
using blockscale_test::encode;
using blockscale_test::expect_error;
using blockscale_test::frobenius;

using Pair = blockscale_test::RecipePair;

std::vector<Pair> all_pairs() {
  std::vector<Pair> pairs = {{Format::kFp8Block1x128, Format::kFp8Block1x128}};
  for (Format a : {Format::kMxfp8E4M3, Format::kMxfp8E5M2})
    for (Format b : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp4}) pairs.push_back({a, b});
  pairs.push_back({Format::kMxfp4, Format::kMxfp4});
  pairs.push_back({Format::kNvfp4, Format::kNvfp4});
  return pairs;
}

// The token capacity quant/'s grouped quantize would allocate for these recipes (the larger).
int64_t capacity_of(const Pair& pair, int64_t tokens, int groups) {
  int64_t cap = 0;
  for (Format r : {pair.a, pair.b}) {
    bq::GroupedQuantizeProblem p;
    p.dense.recipe = r, p.dense.rows = tokens, p.dense.cols = 1, p.dense.ld = 1;
    p.dense.directions = bf::Direction::kColumnwise;
    p.num_groups = groups;
    cap = std::max(cap, bq::grouped_capacity(p));
  }
  return cap;
}

// q (rows x padded tokens) widened to rows x capacity, as quant/ writes it.
bf::QuantizedMatrix widened(const bf::QuantizedMatrix& q, int64_t capacity) {
  bf::QuantizedMatrix w;
  const blockscale::Status s = bf::pad_columns(q, capacity, &w);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return w;
}

// tokens x cols normal values, scaled by 2^[-3, 3] per 16 elements.
std::vector<float> random_tokens(int64_t tokens, int64_t cols, std::mt19937_64* rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> offset(-3, 3);
  std::vector<float> x(static_cast<size_t>(tokens * cols));
  for (size_t i = 0; i < x.size(); i += 16) {
    const int e = offset(*rng);
    for (size_t j = i; j < std::min(x.size(), i + 16); ++j) x[j] = static_cast<float>(std::ldexp(normal(*rng), e));
  }
  return x;
}

struct KGroupedCase {
  Pair pair;
  int64_t m = 0, n = 0;  // dW is m x n per expert: dY has m columns, X n
  std::vector<int64_t> counts;
  DType d_type = DType::kF32;
  float alpha = 1.0f, beta = 0.0f;  // beta != 0: C = D, the fp32 main gradient, updated in place
  int64_t nan_token = -1;           // >= 0: dY[nan_token, 0] = NaN
  int64_t ldd_pad = 0;              // D's row stride is n + ldd_pad (beta 0 only); the padding stays poisoned
  bool host_ends = false;           // give host_group_ends (and the workspace) too
};

struct Operands {
  bf::QuantizedMatrix a, b;    // columnwise copies, padded tokens (the reference's operands)
  std::vector<int64_t> ends;   // padded cumulative ends
  int64_t capacity = 0;
};

Operands make_operands(const KGroupedCase& kc, std::mt19937_64* rng, std::vector<float>* dy, std::vector<float>* x) {
  Operands o;
  std::vector<int64_t> ends;
  int64_t tokens = 0;
  for (int64_t c : kc.counts) ends.push_back(tokens += c);
  *dy = random_tokens(tokens, kc.m, rng);
  *x = random_tokens(tokens, kc.n, rng);
  if (kc.nan_token >= 0) (*dy)[static_cast<size_t>(kc.nan_token * kc.m)] = std::numeric_limits<float>::quiet_NaN();
  bf::QuantizeOptions oa, ob;
  oa.recipe = kc.pair.a, ob.recipe = kc.pair.b;
  std::vector<int64_t> ends_b;
  blockscale::Status s = bf::quantize_grouped_columnwise(dy->data(), tokens, kc.m, kc.m, ends, oa, &o.a, &o.ends);
  EXPECT_TRUE(s.is_ok()) << s.message();
  s = bf::quantize_grouped_columnwise(x->data(), tokens, kc.n, kc.n, ends, ob, &o.b, &ends_b);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(o.ends, ends_b) << "both operands padded alike (same block length)";
  o.capacity = capacity_of(kc.pair, tokens, static_cast<int>(kc.counts.size()));
  return o;
}

bg::GroupedGemmProblem problem_of(const KGroupedCase& kc, int64_t capacity) {
  bg::GroupedGemmProblem p;
  p.mode = bg::GroupMode::kK;
  p.num_groups = static_cast<int>(kc.counts.size());
  p.m = kc.m, p.n = kc.n, p.k = capacity;
  p.a_recipe = kc.pair.a, p.b_recipe = kc.pair.b;
  p.c_type = kc.d_type, p.d_type = kc.d_type;
  p.ldc = p.ldd = kc.n + kc.ldd_pad;
  p.alpha = kc.alpha, p.beta = kc.beta;
  return p;
}

// Runs the GEMM on the device operands; D starts as `d_init` (C too when beta != 0: in place).
std::vector<uint8_t> run_gpu(const bg::GroupedGemmProblem& p, const bf::QuantizedMatrix& a,
                             const bf::QuantizedMatrix& b, const std::vector<int64_t>& ends,
                             const std::vector<uint8_t>& d_init, bool host_ends = false) {
  const std::vector<int32_t> ends32(ends.begin(), ends.end());
  bg::DeviceOperand a_dev, b_dev;
  DeviceBuffer ends_buf, d_buf;
  std::vector<uint8_t> d(d_init.size());
  EXPECT_OK(a_dev.upload(a));
  EXPECT_OK(b_dev.upload(b));
  EXPECT_OK(ends_buf.upload(ends32.data(), ends32.size() * 4, "ends_buf"));
  EXPECT_OK(d_buf.upload(d_init.data(), d_init.size(), "d_buf"));
  bg::GroupedGemmArguments args;
  args.a_data = a_dev.data(), args.a_scales = a_dev.scales(), args.b_data = b_dev.data(), args.b_scales = b_dev.scales();
  args.a_scale_dec = p.a_recipe == Format::kNvfp4 ? a_dev.scale_dec() : nullptr;
  args.b_scale_dec = p.b_recipe == Format::kNvfp4 ? b_dev.scale_dec() : nullptr;
  args.group_ends = ends_buf.as<int32_t>();
  args.c = p.beta != 0.0f ? d_buf.data() : nullptr;
  args.d = d_buf.data();
  DeviceBuffer workspace;
  const size_t ws_bytes = host_ends ? bg::workspace_size(p) : 0;
  if (host_ends) {
    args.host_group_ends = ends32.data();
    EXPECT_OK(workspace.alloc(ws_bytes, "workspace"));
  }
  const blockscale::Status s = bg::run(p, args, workspace.data(), ws_bytes, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_CUDA(cudaDeviceSynchronize());
  EXPECT_CUDA(cudaMemcpy(d.data(), d_buf.data(), d.size(), cudaMemcpyDeviceToHost));
  return d;
}

// The dense tests' bound for a reduction of length k (docs in tests/gemm/gemm_grouped_test.cpp).
double error_bound(const bg::GroupedGemmProblem& p, double abs_norm, double c_norm, double ref_norm) {
  const double u = std::ldexp(1.0, -24), u_out = p.d_type == DType::kBf16 ? std::ldexp(1.0, -8) : u;
  const double accumulate = bf::is_fp8_block(p.a_recipe)
                                ? 8 * std::ldexp(1.0, -13) + (static_cast<double>(p.k / 128) + 5) * u
                                : 2 * (static_cast<double>(p.k / 16) + 4) * std::ldexp(1.0, -23) + 4 * u;
  return std::fabs(p.alpha) * accumulate * abs_norm + 2 * u * std::fabs(p.beta) * c_norm + 1.01 * u_out * ref_norm;
}

// Checks experts [0, G) except `skip` (-1: none) of D against the reference.
void check_case(const KGroupedCase& kc, uint64_t seed, int skip_expert = -1) {
  std::mt19937_64 rng(seed);
  std::vector<float> dy, x;
  const Operands o = make_operands(kc, &rng, &dy, &x);
  const int groups = static_cast<int>(kc.counts.size());
  SCOPED_TRACE(std::string(bf::format_name(kc.pair.a)) + " x " + bf::format_name(kc.pair.b) + ", m " +
               std::to_string(kc.m) + ", n " + std::to_string(kc.n) + ", padded tokens " +
               std::to_string(o.ends.back()) + ", capacity " + std::to_string(o.capacity) + ", " +
               std::to_string(groups) + " experts");
  const bg::GroupedGemmProblem p = problem_of(kc, o.capacity);
  const int64_t out = int64_t{groups} * kc.m * kc.n;
  ASSERT_TRUE(kc.ldd_pad == 0 || kc.beta == 0.0f) << "a padded D row is for beta 0 cases";
  const int64_t esize = static_cast<int64_t>(blockscale::formats::dtype_size(kc.d_type)), stored = int64_t{groups} * kc.m * p.ldd, guard = 256;

  std::vector<double> c;
  if (kc.beta != 0.0f) {  // an existing main gradient, exactly representable in D's type
    std::normal_distribution<double> normal(0.0, 16.0);
    c.resize(static_cast<size_t>(out));
    for (double& v : c) v = blockscale_test::round_to(normal(rng), kc.d_type);
  }
  std::vector<double> ref, abs_ref;
  blockscale::Status s =
      bf::reference_gemm_k_grouped(o.a, o.b, o.ends, kc.alpha, kc.beta, c.empty() ? nullptr : c.data(), &ref);
  ASSERT_TRUE(s.is_ok()) << s.message();
  s = bf::reference_gemm_k_grouped(absolute(o.a), absolute(o.b), o.ends, 1.0, 0.0, nullptr, &abs_ref);
  ASSERT_TRUE(s.is_ok()) << s.message();

  const std::vector<uint8_t> d_init =
      c.empty() ? std::vector<uint8_t>(static_cast<size_t>(stored * esize + guard), 0xFF) : encode(c, kc.d_type);
  // FP8 blockwise runs at every tile (each must give the first's bits); the others at their one.
  const bool fp8 = kc.pair.a == Format::kFp8Block1x128;
  const std::vector<Sm90Fp8Tile> tiles = fp8 ? tiles_under_test() : std::vector<Sm90Fp8Tile>{Sm90Fp8Tile::kAuto};
  std::vector<uint8_t> d;
  for (const Sm90Fp8Tile tile : tiles) {
    const TileScope scope(tile);
    const std::vector<uint8_t> out_bytes =
        run_gpu(p, widened(o.a, o.capacity), widened(o.b, o.capacity), o.ends, d_init, kc.host_ends);
    if (d.empty()) {
      d = out_bytes;
    } else {
      EXPECT_TRUE(out_bytes == d) << tile_name(tile) << " differs from " << tile_name(tiles.front());
    }
  }
  if (c.empty()) {  // nothing written past n in a row, or after D
    int64_t touched = 0;
    for (int64_t r = 0; r < int64_t{groups} * kc.m; ++r)
      for (int64_t b = (r * p.ldd + kc.n) * esize; b < (r + 1) * p.ldd * esize; ++b)
        touched += d[static_cast<size_t>(b)] != 0xFF;
    for (int64_t b = stored * esize; b < stored * esize + guard; ++b) touched += d[static_cast<size_t>(b)] != 0xFF;
    EXPECT_EQ(touched, 0) << "bytes written outside D's n columns";
  }

  int64_t non_finite = 0;
  std::vector<double> err, sel_ref, sel_abs, sel_c;
  for (int64_t i = 0; i < out; ++i) {
    const int g = static_cast<int>(i / (kc.m * kc.n));
    if (g == skip_expert) continue;
    const double v = element_value(d, i / kc.n * p.ldd + i % kc.n, kc.d_type);
    if (!std::isfinite(v)) {
      if (non_finite++ < 3) ADD_FAILURE() << "expert " << g << " D[" << (i / kc.n) % kc.m << ", " << i % kc.n << "] = " << v;
      continue;
    }
    err.push_back(v - ref[static_cast<size_t>(i)]);
    sel_ref.push_back(ref[static_cast<size_t>(i)]);
    sel_abs.push_back(abs_ref[static_cast<size_t>(i)]);
    if (!c.empty()) sel_c.push_back(c[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(non_finite, 0);
  const double bound = error_bound(p, frobenius(sel_abs), frobenius(sel_c), frobenius(sel_ref));
  EXPECT_LE(frobenius(err), bound) << "relative error " << frobenius(err) / frobenius(sel_ref);
}

class KGroupedPair : public ::testing::TestWithParam<Pair> {};

// Empty and 1-token experts, counts that are not multiples of the block or of 128; fp32 D.
TEST_P(KGroupedPair, UnevenExperts) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 200, 136, {0, 1, 300, 77, 45}}, 11);
}

// All tokens on one expert between empty ones; fp32 D accumulating into itself (beta = 1): the
// empty experts' dW must come back unchanged.
TEST_P(KGroupedPair, AllTokensOnOneExpertAccumulating) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 130, 256, {0, 517, 0}, DType::kF32, 1.0f, 1.0f}, 12);
}

// Nine experts, random counts 0..260 (zeros forced), bf16 D, alpha != 1.
TEST_P(KGroupedPair, ManyExpertsRandomCounts) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(13);
  std::uniform_int_distribution<int64_t> count(0, 260);
  std::vector<int64_t> counts;
  for (int g = 0; g < 9; ++g) counts.push_back(g % 4 == 1 ? 0 : count(rng));
  check_case({GetParam(), 129, 257, counts, DType::kBf16, -0.5f, 0.0f}, 13);
}

// One expert: a dense wgrad through the grouped path.
TEST_P(KGroupedPair, OneExpert) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 256, 128, {700}}, 14);
}

// A NaN token in expert 1: its neighbours' stages hold its blocks (MX / NVFP4 experts start
// inside a stage) and must mask them; experts 0 and 2 stay finite and within the bound.
TEST_P(KGroupedPair, NanStaysInItsExpert) {
  SKIP_WITHOUT_GPU();
  KGroupedCase kc{GetParam(), 128, 128, {70, 40, 90}};
  kc.nan_token = 75;
  check_case(kc, 15, /*skip_expert=*/1);
}

// D's rows longer than n (the padding poisoned), rows per expert not a multiple of 64, an empty
// expert: every store stays inside its expert's m x n (the staged FP8 kernel's TMA boxes clip
// there).
TEST_P(KGroupedPair, PaddedRowsStayUntouched) {
  SKIP_WITHOUT_GPU();
  KGroupedCase kc{GetParam(), 200, 136, {300, 0, 77, 513}};
  kc.ldd_pad = 12;
  check_case(kc, 18);
}

// 8 experts of 1024 x 640 outputs: 320 tiles, so each CTA stores several through the staged
// kernel's one buffer (the wait for the previous tile's stores to have read it).
TEST_P(KGroupedPair, SeveralTilesPerCta) {
  SKIP_WITHOUT_GPU();
  check_case({GetParam(), 1024, 640, {130, 200, 0, 310, 64, 256, 129, 90}}, 19);
}

INSTANTIATE_TEST_SUITE_P(Pairs, KGroupedPair, ::testing::ValuesIn(all_pairs()), blockscale_test::recipe_pair_name);

// The per-expert cuBLASLt route: automatic, and forced.
class KGroupedHostEnds : public ::testing::TestWithParam<bg::GemmRoute> {
 protected:
  void SetUp() override { bg::set_gemm_route(GetParam()); }
  void TearDown() override { bg::set_gemm_route(bg::GemmRoute::kAuto); }
  static KGroupedCase fp8(int64_t m, int64_t n, std::vector<int64_t> counts, DType d_type = DType::kF32,
                          float alpha = 1.0f, float beta = 0.0f) {
    KGroupedCase kc{{Format::kFp8Block1x128, Format::kFp8Block1x128}, m, n, std::move(counts), d_type, alpha, beta};
    kc.host_ends = true;
    return kc;
  }
};

TEST_P(KGroupedHostEnds, UnevenExperts) {
  SKIP_WITHOUT_GPU();
  check_case(fp8(200, 136, {0, 1, 300, 77, 45}), 41);
}

TEST_P(KGroupedHostEnds, AccumulatingInPlaceWithEmptyExperts) {
  SKIP_WITHOUT_GPU();
  check_case(fp8(128, 256, {0, 517, 0}, DType::kF32, 1.0f, 1.0f), 42);
}

TEST_P(KGroupedHostEnds, PaddedRowsStayUntouched) {
  SKIP_WITHOUT_GPU();
  KGroupedCase kc = fp8(200, 136, {300, 0, 77, 513});
  kc.ldd_pad = 12;
  check_case(kc, 43);
}

TEST_P(KGroupedHostEnds, Bf16ManyExperts) {
  SKIP_WITHOUT_GPU();
  check_case(fp8(256, 264, {130, 200, 0, 310, 64, 256, 129, 90}, DType::kBf16, -0.5f), 44);
}

INSTANTIATE_TEST_SUITE_P(Routes, KGroupedHostEnds,
                         ::testing::Values(bg::GemmRoute::kAuto, bg::GemmRoute::kCublasLt),
                         [](const ::testing::TestParamInfo<bg::GemmRoute>& info) {
                           return std::string(info.param == bg::GemmRoute::kAuto ? "Auto" : "CublasLt");
                         });

// quant/'s GPU grouped quantize writes the operands and the padded ends; the GEMM consumes them
// as they are (no host round trip), checked against the reference on formats' copies.
TEST(KGroupedGemm, FromQuantsGroupedQuantize) {
  SKIP_WITHOUT_GPU();
  for (const Pair pair : {Pair{Format::kFp8Block1x128, Format::kFp8Block1x128},
                          Pair{Format::kMxfp8E4M3, Format::kMxfp8E4M3}, Pair{Format::kNvfp4, Format::kNvfp4}}) {
    SCOPED_TRACE(bf::format_name(pair.a));
    const KGroupedCase kc{pair, 192, 160, {33, 0, 250, 1}};
    std::mt19937_64 rng(16);
    std::vector<float> dy, x;
    const Operands o = make_operands(kc, &rng, &dy, &x);
    const int64_t tokens = static_cast<int64_t>(dy.size()) / kc.m;
    std::vector<int32_t> ends32;
    int64_t e = 0;
    for (int64_t c : kc.counts) ends32.push_back(static_cast<int32_t>(e += c));

    DeviceBuffer dy_buf, x_buf, ends_buf, pends, a_data, a_sc, a_dec, b_data, b_sc, b_dec, d_buf;
    ASSERT_OK(dy_buf.upload(dy.data(), dy.size() * 4, "dy_buf"));
    ASSERT_OK(x_buf.upload(x.data(), x.size() * 4, "x_buf"));
    ASSERT_OK(ends_buf.upload(ends32.data(), ends32.size() * 4, "ends_buf"));
    ASSERT_OK(pends.alloc(ends32.size() * 4, "pends"));
    const auto quantize = [&](const DeviceBuffer& in, int64_t cols, Format r,
                              DeviceBuffer* data, DeviceBuffer* scales, DeviceBuffer* dec) {
      bq::GroupedQuantizeProblem q;
      q.dense.recipe = r, q.dense.input_type = bf::DType::kF32;
      q.dense.rows = tokens, q.dense.cols = cols, q.dense.ld = cols;
      q.dense.directions = bf::Direction::kColumnwise;
      q.num_groups = static_cast<int>(kc.counts.size());
      EXPECT_EQ(bq::grouped_capacity(q), o.capacity);
      EXPECT_OK(data->alloc(static_cast<size_t>(bq::grouped_columnwise_data_bytes(q)), "data"));
      EXPECT_OK(scales->alloc(static_cast<size_t>(bq::grouped_columnwise_scale_bytes(q)), "scales"));
      EXPECT_OK(dec->alloc(4, "dec"));
      DeviceBuffer workspace;
      EXPECT_OK(workspace.alloc(std::max<size_t>(1, bq::workspace_size(q)), "workspace"));
      bq::GroupedQuantizeInputs qi;
      qi.x = in.data(), qi.group_ends = ends_buf.as<int32_t>();
      bq::GroupedQuantizeOutputs qo;
      qo.dense.columnwise_data = data->data(), qo.dense.columnwise_scales = scales->data();
      qo.dense.columnwise_scale_dec = dec->as<float>();
      qo.padded_group_ends = pends.as<int32_t>();
      const blockscale::Status s = bq::run(q, qi, qo, workspace.data(), bq::workspace_size(q), nullptr);
      EXPECT_TRUE(s.is_ok()) << s.message();
    };
    quantize(dy_buf, kc.m, pair.a, &a_data, &a_sc, &a_dec);
    quantize(x_buf, kc.n, pair.b, &b_data, &b_sc, &b_dec);

    const bg::GroupedGemmProblem p = problem_of(kc, o.capacity);
    const int64_t out = int64_t{4} * kc.m * kc.n;
    const std::vector<uint8_t> poison(static_cast<size_t>(out * 4), 0xFF);
    ASSERT_OK(d_buf.upload(poison.data(), poison.size(), "d_buf"));
    bg::GroupedGemmArguments args;
    args.a_data = a_data.data(), args.a_scales = a_sc.data(), args.b_data = b_data.data(), args.b_scales = b_sc.data();
    args.a_scale_dec = pair.a == Format::kNvfp4 ? a_dec.as<float>() : nullptr;
    args.b_scale_dec = pair.b == Format::kNvfp4 ? b_dec.as<float>() : nullptr;
    args.group_ends = pends.as<int32_t>();
    args.d = d_buf.data();
    const blockscale::Status s = bg::run(p, args, nullptr, 0, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<uint8_t> d(poison.size());
    ASSERT_CUDA(cudaMemcpy(d.data(), d_buf.data(), d.size(), cudaMemcpyDeviceToHost));

    std::vector<double> ref, abs_ref;
    ASSERT_TRUE(bf::reference_gemm_k_grouped(o.a, o.b, o.ends, 1.0, 0.0, nullptr, &ref).is_ok());
    ASSERT_TRUE(bf::reference_gemm_k_grouped(absolute(o.a), absolute(o.b), o.ends, 1.0, 0.0, nullptr, &abs_ref).is_ok());
    std::vector<double> err;
    for (int64_t i = 0; i < out; ++i) err.push_back(element_value(d, i, DType::kF32) - ref[static_cast<size_t>(i)]);
    EXPECT_LE(frobenius(err), error_bound(p, frobenius(abs_ref), 0.0, frobenius(ref)))
        << "relative error " << frobenius(err) / frobenius(ref);
  }
}

// Ends past k and a decreasing end are clamped on the device; D (between poisoned guards) is
// written in full and nothing outside it.
TEST(KGroupedGemm, MalformedEndsStayInBounds) {
  SKIP_WITHOUT_GPU();
  const Pair pair{Format::kMxfp8E4M3, Format::kMxfp8E4M3};
  const KGroupedCase kc{pair, 128, 128, {100, 50}};
  std::mt19937_64 rng(17);
  std::vector<float> dy, x;
  const Operands o = make_operands(kc, &rng, &dy, &x);
  bg::GroupedGemmProblem p = problem_of(kc, o.capacity);
  p.num_groups = 3;
  const std::vector<int64_t> bad_ends = {96, 64, 1 << 30};  // decreasing, then past k
  const int64_t guard = 4096, d_bytes = 3 * kc.m * kc.n * 4;
  std::vector<uint8_t> poison(static_cast<size_t>(d_bytes + 2 * guard), 0xFF);
  const bf::QuantizedMatrix a = widened(o.a, o.capacity), b = widened(o.b, o.capacity);
  const std::vector<int32_t> ends32(bad_ends.begin(), bad_ends.end());
  bg::DeviceOperand a_dev, b_dev;
  DeviceBuffer ends_buf, d_buf;
  ASSERT_OK(a_dev.upload(a));
  ASSERT_OK(b_dev.upload(b));
  ASSERT_OK(ends_buf.upload(ends32.data(), ends32.size() * 4, "ends_buf"));
  ASSERT_OK(d_buf.upload(poison.data(), poison.size(), "d_buf"));
  bg::GroupedGemmArguments args;
  args.a_data = a_dev.data(), args.a_scales = a_dev.scales(), args.b_data = b_dev.data(), args.b_scales = b_dev.scales();
  args.group_ends = ends_buf.as<int32_t>();
  args.d = d_buf.data() + guard;
  const blockscale::Status s = bg::run(p, args, nullptr, 0, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> got(poison.size());
  ASSERT_CUDA(cudaMemcpy(got.data(), d_buf.data(), got.size(), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < guard; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)], 0xFF) << "written before D at byte " << i;
    ASSERT_EQ(got[static_cast<size_t>(guard + d_bytes + i)], 0xFF) << "written after D at byte " << i;
  }
  // Clamped ends {96, 96, capacity}: expert 1 empty (zeros), all of D written and finite.
  const std::vector<uint8_t> d(got.begin() + guard, got.begin() + guard + d_bytes);
  for (int64_t i = 0; i < 3 * kc.m * kc.n; ++i) ASSERT_TRUE(std::isfinite(element_value(d, i, DType::kF32))) << i;
  for (int64_t i = kc.m * kc.n; i < 2 * kc.m * kc.n; ++i) ASSERT_EQ(element_value(d, i, DType::kF32), 0.0) << i;
}

// ---- Argument checks (no GPU needed) -----------------------------------------------------------

bg::GroupedGemmProblem valid_problem() {
  bg::GroupedGemmProblem p;
  p.mode = bg::GroupMode::kK;
  p.num_groups = 8, p.m = 4096, p.n = 7168, p.k = 4096 + 8 * 128;
  p.a_recipe = Format::kFp8Block1x128, p.b_recipe = Format::kFp8Block1x128;
  p.c_type = p.d_type = DType::kF32;
  p.ldc = p.ldd = p.n;
  p.beta = 1.0f;
  return p;
}

TEST(KGroupedGemmChecks, RulesNameTheArgument) {
  bg::GemmKernel kernel;
  EXPECT_TRUE(bg::can_implement_for_arch(valid_problem(), 90, &kernel).is_ok());
  EXPECT_EQ(kernel, bg::GemmKernel::kSm90Fp8Blockwise);
  bg::GroupedGemmProblem p = valid_problem();
  p.b_recipe = Format::kFp8Block128x128;
  expect_error(bg::can_implement(p), "K-grouped (wgrad) FP8 blockwise GEMM takes X quantized along the tokens");
  p = valid_problem();
  p.k = 4000;
  expect_error(bg::can_implement(p), "k: must be a positive multiple of 128");
  p = valid_problem();
  p.a_recipe = p.b_recipe = Format::kNvfp4, p.k = 4096 + 16;
  expect_error(bg::can_implement(p), "k: must be a positive multiple of 32");
  p = valid_problem();
  p.a_recipe = Format::kMxfp8E4M3, p.b_recipe = Format::kNvfp4;
  expect_error(bg::can_implement(p), "block lengths must match");
  p = valid_problem();
  p.mode = static_cast<bg::GroupMode>(7);
  expect_error(bg::can_implement(p), "mode");
  p.mode = bg::GroupMode::kDense;  // a grouped problem is M- or K-grouped
  expect_error(bg::can_implement(p), "mode");
  p = valid_problem();
  p.num_groups = 1024, p.m = p.n = 1 << 20, p.ldc = p.ldd = p.n;
  expect_error(bg::can_implement(p), "output tiles");
  expect_error(bg::can_implement_for_arch(valid_problem(), 100), "sm_90 (Hopper) only");
}

TEST(KGroupedGemmChecks, PointersAreChecked) {
  SKIP_WITHOUT_GPU();
  bg::GroupedGemmProblem p = valid_problem();
  p.m = 256, p.n = 128, p.k = 1024, p.ldc = p.ldd = 128, p.num_groups = 4;
  DeviceBuffer buf;
  ASSERT_OK(buf.alloc(1 << 24, "buf"));
  bg::GroupedGemmArguments args;
  args.a_data = buf.data(), args.a_scales = buf.data() + (1 << 20), args.b_data = buf.data() + (2 << 20);
  args.b_scales = buf.data() + (3 << 20);
  args.group_ends = reinterpret_cast<const int32_t*>(buf.data() + (5 << 20));
  args.d = buf.data() + (6 << 20);
  args.c = nullptr;
  expect_error(bg::can_implement(p, args), "c: must not be null");
  args.c = buf.data() + (6 << 20) + 4 * 128;  // C overlapping D (4 experts x 256 x 128 fp32) but not D itself
  expect_error(bg::can_implement(p, args), "c: must be d itself");
  args.c = args.d;
  EXPECT_TRUE(bg::can_implement(p, args).is_ok()) << bg::can_implement(p, args).message();
  args.d = buf.data() + (5 << 20) - 4 * 256 * 128;  // D's last expert on top of group_ends
  args.c = args.d;
  expect_error(bg::can_implement(p, args), "d: overlaps group_ends");
}

}  // namespace
