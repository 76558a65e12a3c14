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
// ---- Exact cases ----
// With codes in {0, +-0.5, +-1, +-1.5, +-2} and power-of-two scales 2^[-2, 2], every partial sum,
// scale product, promotion and (K <= 1024) running sum is exact in both the 13-bit tensor-core
// accumulator and fp32, so D must equal the reference rounded once to D's type, bit for bit.
// These catch layout, scale-indexing, swizzle and tile-edge bugs that a loose bound could hide.
// ---- Tiles ----
// The sm90 kernel has three tiles (128 x 128, 128 x 192 and, for 128x128 B, 256 x 128:
// gemm/launchers.h); every GPU case runs each against the same reference, and GemmTileWidths
// checks that all give the same bits (same operations per element). GEMM_TEST_TILE=128 (192, 256)
// runs one tile only: the GPU check script's fallback when another crashes.
// GPU tests skip without a GPU; the argument checks, the dispatch rule, the tile order and the
// scale-block rule run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "formats/reference_gemm.h"
#include "formats/scale_layout.h"
#include "gemm/common/scale_blocks.h"
#include "gemm/common/tile_scheduler.h"
#include "gemm/gemm.h"
#include "gemm/launchers.h"  // the tile-width selector
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK, expect_error

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bf::Format;
using bg::MatrixType;
using bg::detail::Sm90Fp8Tile;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::RouteScope;
using blockscale_test::element_bytes;
using blockscale_test::element_value;
using blockscale_test::encode;
using blockscale_test::round_to;
using blockscale_test::expect_error;
using blockscale_test::gemm_scales;

// ---- Operands ----------------------------------------------------------------------------------

// A quantized operand and its scales packed in the GEMM layout of its recipe.
struct HostOperand {
  bf::QuantizedMatrix q;
  std::vector<uint8_t> packed_scales;  // gemm_scales(q)
};

// rows x k random values quantized with formats::quantize: normal samples times `magnitude`
// times a power of two in [2^-4, 2^4] drawn per 128-element block (so scales differ per block).
void random_operand(int64_t rows, int64_t k, Format recipe, double magnitude, uint64_t seed, HostOperand* op) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> exponent(-4, 4);
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < k / 128; ++kb) {
      const double block = magnitude * std::ldexp(1.0, exponent(rng));
      for (int64_t i = 0; i < 128; ++i) x[static_cast<size_t>(r * k + kb * 128 + i)] = static_cast<float>(normal(rng) * block);
    }
  bf::QuantizeOptions options;
  options.recipe = recipe;
  const blockscale::Status s = bf::quantize(x.data(), rows, k, k, options, bf::Direction::kRowwise, &op->q);
  ASSERT_TRUE(s.is_ok()) << s.message();
  op->packed_scales = gemm_scales(op->q);
}

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
  op->packed_scales = gemm_scales(op->q);
}

// The operand with every code's sign and every scale's sign cleared: reference_gemm on two of
// these is |A| |B|^T, the sum of absolute products the error bound scales with.
bf::QuantizedMatrix absolute(const bf::QuantizedMatrix& q) {
  bf::QuantizedMatrix a = q;
  for (auto& code : a.data) code &= 0x7F;
  for (auto& s : a.scales_f32) s = std::fabs(s);
  return a;
}

// ---- Running the GEMM --------------------------------------------------------------------------

struct GemmRun {
  std::vector<uint8_t> d;  // m x ldd elements of d_type, as the GPU left them
  blockscale::Status status = blockscale::Status::ok();
};

std::string tile_name(Sm90Fp8Tile t) {
  return t == Sm90Fp8Tile::kN192 ? "tile 128 x 192" : t == Sm90Fp8Tile::kM256 ? "tile 256 x 128" : "tile 128 x 128";
}

// The tiles every GPU case runs: all three, or the one GEMM_TEST_TILE names (128, 192 or 256).
// 256 x 128 applies to 128x128 B only; with 1x128 B it runs 128 x 128 (gemm/launchers.h).
std::vector<Sm90Fp8Tile> tiles_under_test() {
  const char* env = std::getenv("GEMM_TEST_TILE");
  const std::string only = env ? env : "";
  if (only == "128") return {Sm90Fp8Tile::kN128};
  if (only == "192") return {Sm90Fp8Tile::kN192};
  if (only == "256") return {Sm90Fp8Tile::kM256};
  return {Sm90Fp8Tile::kN128, Sm90Fp8Tile::kN192, Sm90Fp8Tile::kM256};
}

// Selects a tile for one scope; the automatic choice comes back after it.
struct TileScope {
  explicit TileScope(Sm90Fp8Tile t) { bg::detail::set_sm90_fp8_tile(t); }
  ~TileScope() { bg::detail::set_sm90_fp8_tile(Sm90Fp8Tile::kAuto); }
};


// How a case runs: gemm::run on the wgmma kernel (the route forced to it, at the given tile
// width), the cuBLASLt launcher called directly, or gemm::run's automatic route.
enum class Via { kKernel, kCublasLtLaunch, kRunAuto };

// Uploads the operands (and C: m x ldc fp32 / bf16 values when beta != 0), poisons D, runs.
// in_place: C is D (D is initialised with C instead of the poison).
void run_gemm(const bg::GemmProblem& p, const HostOperand& a, const HostOperand& b, const std::vector<double>* c,
              bool in_place, Sm90Fp8Tile tile, GemmRun* out, Via via = Via::kKernel) {
  DeviceBuffer a_data, a_scales, b_data, b_scales, c_buf, d_buf;
  ASSERT_OK(a_data.upload(a.q.data.data(), a.q.data.size(), "a_data"));
  ASSERT_OK(b_data.upload(b.q.data.data(), b.q.data.size(), "b_data"));
  ASSERT_OK(a_scales.upload(a.packed_scales, "a_scales"));
  ASSERT_OK(b_scales.upload(b.packed_scales, "b_scales"));
  const int64_t d_bytes = p.m * p.ldd * element_bytes(p.d_type);
  ASSERT_OK(d_buf.alloc(static_cast<size_t>(d_bytes), "d_buf"));
  ASSERT_CUDA(cudaMemset(d_buf.data(), 0xFF, static_cast<size_t>(d_bytes)));
  if (c != nullptr) {
    const std::vector<uint8_t> c_bytes = encode(*c, p.c_type);
    if (in_place) {
      ASSERT_CUDA(cudaMemcpy(d_buf.data(), c_bytes.data(), c_bytes.size(), cudaMemcpyHostToDevice));
    } else {
      ASSERT_OK(c_buf.upload(c_bytes.data(), c_bytes.size(), "c_buf"));
    }
  }
  bg::GemmArguments args;
  args.a_data = a_data.data();
  args.a_scales = a_scales.as<float>();
  args.b_data = b_data.data();
  args.b_scales = b_scales.as<float>();
  args.c = c == nullptr ? nullptr : in_place ? static_cast<const void*>(d_buf.data()) : c_buf.data();
  args.d = d_buf.data();
  DeviceBuffer workspace;
  ASSERT_OK(workspace.alloc(bg::workspace_size(p), "workspace"));
  if (via == Via::kCublasLtLaunch) {
    out->status = bg::detail::launch_cublaslt_block_scaled(p, args, workspace.data(), workspace.size(), nullptr);
  } else {
    const TileScope scope(tile);
    const RouteScope route(via == Via::kKernel ? bg::Sm90Fp8Route::kKernel : bg::Sm90Fp8Route::kAuto);
    out->status = bg::run(p, args, workspace.data(), workspace.size(), nullptr);
  }
  ASSERT_TRUE(out->status.is_ok()) << out->status.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  out->d.resize(static_cast<size_t>(d_bytes));
  ASSERT_CUDA(cudaMemcpy(out->d.data(), d_buf.data(), out->d.size(), cudaMemcpyDeviceToHost));
}

// Every element in columns [n, ldd) must still hold the poison (0xFF bytes).
int64_t padding_written(const bg::GemmProblem& p, const GemmRun& r) {
  const int64_t e = element_bytes(p.d_type);
  int64_t bad = 0;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = p.n * e; j < p.ldd * e; ++j) bad += r.d[static_cast<size_t>(i * p.ldd * e + j)] != 0xFF;
  return bad;
}

double frobenius(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

bg::GemmProblem problem(int64_t m, int64_t n, int64_t k, Format b_recipe, MatrixType d_type, int64_t ldd,
                        float alpha, float beta, MatrixType c_type = MatrixType::kFp32) {
  bg::GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a_recipe = Format::kFp8Block1x128;
  p.b_recipe = b_recipe;
  p.d_type = d_type, p.c_type = c_type;
  p.ldd = ldd, p.ldc = ldd;
  p.alpha = alpha, p.beta = beta;
  return p;
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
  const double u_out = p.d_type == MatrixType::kBf16 ? std::ldexp(1.0, -8) : u;
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
                static_cast<long long>(p.k), bf::format_name(p.b_recipe), bg::matrix_type_name(p.d_type), p.beta,
                in_place ? " in place" : "", err / ref_norm, bound / ref_norm, err / bound);
    EXPECT_LE(err, bound) << "relative Frobenius error " << err / ref_norm << " above the derived bound "
                          << bound / ref_norm;
  }
}

struct ShapeCase {
  int64_t m, n, k;
  Format b_recipe;
};
std::ostream& operator<<(std::ostream& os, const ShapeCase& c) {
  return os << c.m << "x" << c.n << "x" << c.k << "_" << bf::format_name(c.b_recipe);
}
std::string shape_name(const ::testing::TestParamInfo<ShapeCase>& info) {
  const ShapeCase& c = info.param;
  return "m" + std::to_string(c.m) + "_n" + std::to_string(c.n) + "_k" + std::to_string(c.k) +
         (c.b_recipe == Format::kFp8Block1x128 ? "_wgrad1x128" : "_w128x128");
}
uint64_t seed_of(const ShapeCase& c, uint64_t salt) {
  return static_cast<uint64_t>(c.m) * 1000003u + static_cast<uint64_t>(c.n) * 10007u + static_cast<uint64_t>(c.k) * 101u +
         (c.b_recipe == Format::kFp8Block1x128 ? 7u : 0u) + salt * 0x9E3779B97F4A7C15ull;
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
  check_random(problem(c.m, c.n, c.k, c.b_recipe, MatrixType::kBf16, c.n, 1.0f, 0.0f), a, b, false, seed_of(c, 3));
  check_random(problem(c.m, c.n, c.k, c.b_recipe, MatrixType::kFp32, c.n + 3, 1.0f, 1.0f), a, b, false,
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
  check_random(problem(c.m, c.n, c.k, c.b_recipe, MatrixType::kBf16, c.n, 1.0f, 0.0f), a, b, false, seed_of(c, 43),
               Via::kCublasLtLaunch);
  check_random(problem(c.m, c.n, c.k, c.b_recipe, MatrixType::kFp32, c.n + 4, 1.0f, 1.0f), a, b, false,
               seed_of(c, 44), Via::kCublasLtLaunch);
  check_random(problem(c.m, c.n, c.k, c.b_recipe, MatrixType::kFp32, c.n, 1.0f, 1.0f), a, b, true, seed_of(c, 45),
               Via::kCublasLtLaunch);
  if (c.b_recipe != Format::kFp8Block128x128) return;
  const bg::GemmProblem p = problem(c.m, c.n, c.k, c.b_recipe, MatrixType::kBf16, c.n, 1.0f, 0.0f);
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
  const bg::GemmProblem fprop = problem(c.m, c.n, c.k, c.b_recipe, MatrixType::kBf16, c.n, 1.0f, 0.0f);
  const bg::GemmProblem wgrad = problem(c.m, c.n, c.k, c.b_recipe, MatrixType::kFp32, c.n + 4, 1.0f, 1.0f);
  for (const bg::GemmProblem& p : {fprop, wgrad}) {
    bg::GemmKernel kernel = bg::GemmKernel::kNone;
    ASSERT_TRUE(bg::can_implement_for_arch(p, 90, &kernel).is_ok());
    const bool lt = c.m % 4 == 0 && c.n % 4 == 0 && (p.d_type == MatrixType::kFp32 || c.n % 8 == 0) && c.m <= 512;
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
  DeviceBuffer a_data, a_scales, b_data, b_scales, d;
  ASSERT_OK(a_data.upload(a.q.data.data(), a.q.data.size(), "a_data"));
  ASSERT_OK(b_data.upload(b.q.data.data(), b.q.data.size(), "b_data"));
  ASSERT_OK(a_scales.upload(a.packed_scales, "a_scales"));
  ASSERT_OK(b_scales.upload(b.packed_scales, "b_scales"));
  ASSERT_OK(d.alloc(132 * 260 * 2, "d"));
  const bg::GemmProblem p = problem(132, 260, 384, Format::kFp8Block128x128, MatrixType::kBf16, 260, 1.0f, 0.0f);
  bg::GemmArguments args;
  args.a_data = a_data.data(), args.a_scales = a_scales.data();
  args.b_data = b_data.data(), args.b_scales = b_scales.data();
  args.d = d.data();
  expect_error(bg::detail::launch_cublaslt_block_scaled(p, args, nullptr, 0, nullptr),
               "cuBLASLt found no algorithm for m=132, n=260, k=384");
}

// Tiny and huge scales (values around 1e-20 x 1e+15 and 1e+18 x 1e+15: scale products far from
// 1 in both directions, results still normal fp32 / bf16), alpha != 1, bf16 C, in-place C == D.
struct ScaleCase {
  double a_magnitude, b_magnitude;
  float alpha, beta;
  MatrixType c_type, d_type;
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
    ::testing::Values(ScaleCase{1e-20, 1e15, 1.0f, 0.0f, MatrixType::kFp32, MatrixType::kFp32, false, "tiny_a"},
                      ScaleCase{1e-20, 1e15, 1.0f, 0.0f, MatrixType::kFp32, MatrixType::kBf16, false, "tiny_a_bf16"},
                      ScaleCase{1e18, 1e15, 1.0f, 0.0f, MatrixType::kFp32, MatrixType::kFp32, false, "huge"},
                      ScaleCase{1e18, 1e15, 0.5f, 0.0f, MatrixType::kFp32, MatrixType::kBf16, false, "huge_bf16"},
                      ScaleCase{1e-12, 1e-12, 1.0f, 0.0f, MatrixType::kFp32, MatrixType::kFp32, false, "tiny_both"},
                      ScaleCase{1.0, 1.0, -2.0f, 0.5f, MatrixType::kBf16, MatrixType::kFp32, false, "alpha_bf16_c"},
                      ScaleCase{1.0, 1.0, 1.0f, 1.0f, MatrixType::kFp32, MatrixType::kFp32, true, "in_place_wgrad"}),
    [](const ::testing::TestParamInfo<ScaleCase>& info) { return std::string(info.param.name); });

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
    const MatrixType d_type = variant == 0 ? MatrixType::kBf16 : MatrixType::kFp32;
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
    const MatrixType d_type = variant == 0 ? MatrixType::kBf16 : MatrixType::kFp32;
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
      const int64_t e = element_bytes(d_type);
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

// An empty problem launches nothing and succeeds.
TEST(GemmRun, EmptyProblemIsOk) {
  bg::GemmProblem p = problem(0, 5, 128, Format::kFp8Block128x128, MatrixType::kBf16, 5, 1.0f, 0.0f);
  EXPECT_TRUE(bg::run(p, bg::GemmArguments(), nullptr, 0, nullptr).is_ok());
}

// ---- No GPU needed: the checks, the dispatch rule, the tile order ---------------------------------

bg::GemmProblem valid_problem() {
  return problem(256, 384, 512, Format::kFp8Block128x128, MatrixType::kBf16, 384, 1.0f, 0.0f);
}

TEST(GemmCanImplement, ValidProblemsPass) {
  EXPECT_TRUE(bg::can_implement(valid_problem()).is_ok());
  bg::GemmProblem p = valid_problem();
  p.b_recipe = Format::kFp8Block1x128;
  p.beta = 1.0f, p.ldc = 400, p.c_type = MatrixType::kFp32, p.d_type = MatrixType::kFp32;
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
  p = valid_problem(), p.d_type = static_cast<MatrixType>(7);
  expect_error(bg::can_implement(p), "d_type: must be bf16 or fp32");
  p = valid_problem(), p.c_type = static_cast<MatrixType>(7);
  expect_error(bg::can_implement(p), "c_type: must be bf16 or fp32");
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
    const RouteScope route(bg::Sm90Fp8Route::kCublasLt);
    EXPECT_TRUE(bg::can_implement_for_arch(tall, 90, &kernel).is_ok());
    EXPECT_EQ(kernel, bg::GemmKernel::kCublasLtBlockScaled);
  }
  bg::GemmProblem odd = valid_problem();
  odd.m = 257;
  EXPECT_TRUE(bg::can_implement_for_arch(odd, 90, &kernel).is_ok());
  EXPECT_EQ(kernel, bg::GemmKernel::kSm90Fp8Blockwise);
  {
    const RouteScope route(bg::Sm90Fp8Route::kKernel);
    EXPECT_TRUE(bg::can_implement_for_arch(valid_problem(), 90, &kernel).is_ok());
    EXPECT_EQ(kernel, bg::GemmKernel::kSm90Fp8Blockwise);
  }
  {
    const RouteScope route(bg::Sm90Fp8Route::kCublasLt);
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
  pc.beta = 1.0f, pc.ldc = p.n, pc.c_type = MatrixType::kFp32, pc.d_type = MatrixType::kFp32;
  bg::GemmArguments a = ok;
  a.c = nullptr;
  expect_error(bg::can_implement(pc, a), "c: must not be null");
  a.c = arena + (9 << 16) + 2;
  expect_error(bg::can_implement(pc, a), "c: must be 4-byte aligned (fp32) when beta != 0");
  a.c = static_cast<uint8_t*>(ok.d) + 4;  // overlaps D, but not D itself
  expect_error(bg::can_implement(pc, a), "c: must be d itself");
  pc.c_type = MatrixType::kBf16;  // same pointer, different type: not in place
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
