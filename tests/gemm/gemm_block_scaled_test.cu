// Tests of gemm/gemm.h's MX / NVFP4 GEMM (the block-scaled pairs: mxfp8 | mxfp8_e5m2 x mxfp8 |
// mxfp8_e5m2 | mxfp4 | nvfp4, mxfp4 x mxfp4, nvfp4 x nvfp4); its argument checks and dispatch
// rule are in gemm_block_scaled_checks_test.cu. The
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
// ---- Exact cases ----
// Codes from small dyadic sets and scales whose exponents span a few binades (the span shrinks as
// K grows), chosen so that every product is a multiple of one unit q and every output's sum of
// |products| is at most 2^24 q: then every partial sum, in any order and under any truncation, is
// an fp32 value; alpha and S_dec are powers of two and C is dyadic on the same grid, so D must be
// the reference rounded once to D's type, bit for bit. Scales differ between neighbouring blocks,
// K spans several 128-element chunks with a partial last one (K = 160, 416), M and N cross
// 128-row scale tiles: layout, swizzle, scale-indexing and K-order bugs change the bits.
// Every case asserts that premise on its own data (GemmBlockScaledPremise checks it without a GPU).
// GPU tests skip without a GPU; the premise tests run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "formats/quantize.h"
#include "formats/reference_gemm.h"
#include "formats/scale_layout.h"
#include "gemm/gemm.h"
#include "tests/gemm/block_scaled_pairs.h"
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK, expect_error

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bf::Format;
using bg::MatrixType;
using blockscale_test::element_bytes;
using blockscale_test::element_value;
using blockscale_test::encode;
using blockscale_test::round_to;
using blockscale_test::absolute;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::expect_error;
using blockscale_test::gemm_scales;
using blockscale_test::pair_label;
using blockscale_test::pair_name;
using blockscale_test::Pair;
using blockscale_test::problem;
using blockscale_test::supported_pairs;

constexpr uint8_t kPoison = 0xFF;  // NaN in bf16 and fp32

// ---- Recipe pairs (tests/gemm/block_scaled_pairs.h) --------------------------------------------

bool has_nvfp4(const Pair& p) { return p.a == Format::kNvfp4 || p.b == Format::kNvfp4; }

uint64_t seed_of(const Pair& pair, int64_t m, int64_t n, int64_t k, uint64_t salt) {
  return static_cast<uint64_t>(pair.a) * 1000003u + static_cast<uint64_t>(pair.b) * 100019u +
         static_cast<uint64_t>(m) * 10007u + static_cast<uint64_t>(n) * 101u + static_cast<uint64_t>(k) +
         salt * 0x9E3779B97F4A7C15ull;
}

// The E8M0 scale exponents for which element x 2^e is exact in bf16 (docs/numerics.md).
void exact_scale_range(Format r, int* lo, int* hi) {
  if (r == Format::kMxfp8E5M2) *lo = -117, *hi = 112;
  else if (r == Format::kMxfp4) *lo = -132, *hi = 125;
  else *lo = -124, *hi = 119;  // E4M3
}

// ---- Operands ----------------------------------------------------------------------------------

// A quantized operand and its scales in the GEMM layout (swizzled 128x4, one scale per row and
// block: NVFP4 2D tile scales are repeated over the tile's rows, as quant/ writes them).
struct HostOperand {
  bf::QuantizedMatrix q;
  std::vector<uint8_t> swizzled_scales;  // gemm_scales(q)
};

// log2 of the element format's largest value, rounded down: 8 (E4M3), 15 (E5M2), 2 (E2M1).
int element_max_exponent(Format r) { return static_cast<int>(std::floor(std::log2(bf::element_max(r)))); }

// rows x k values quantized rowwise with formats::quantize. Each value is a normal sample times
// 2^(log2_magnitude + a per-16-element offset in [-spread, spread]); one in four is further divided
// by 2^[1, 16], so that small and subnormal codes occur in every element format. For MX recipes
// log2_magnitude is shifted by the element format's top exponent so that it is roughly the E8M0
// scale exponent the blocks get; for NVFP4 it is the tensor's magnitude (S_dec follows it).
void random_operand(int64_t rows, int64_t k, Format recipe, int log2_magnitude, int spread, uint64_t seed,
                    HostOperand* op, bool nvfp4_2d = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> offset(-spread, spread), shrink(1, 16), quarter(0, 3);
  const int base = log2_magnitude + (recipe == Format::kNvfp4 ? 0 : element_max_exponent(recipe) - 1);
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < k; c0 += 16) {
      const int chunk = base + offset(rng);
      for (int64_t c = c0; c < c0 + 16; ++c) {
        const int e = chunk - (quarter(rng) == 0 ? shrink(rng) : 0);
        x[static_cast<size_t>(r * k + c)] = static_cast<float>(std::ldexp(normal(rng), e));
      }
    }
  bf::QuantizeOptions options;
  options.recipe = recipe;
  options.nvfp4_2d = nvfp4_2d;
  const blockscale::Status s = bf::quantize(x.data(), rows, k, k, options, bf::Direction::kRowwise, &op->q);
  ASSERT_TRUE(s.is_ok()) << s.message();
  op->swizzled_scales = gemm_scales(op->q);
}

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
  op->swizzled_scales = gemm_scales(op->q);
}


// ---- Running the GEMM --------------------------------------------------------------------------

struct GemmRun {
  std::vector<uint8_t> d;        // m x ldd elements of d_type, as the GPU left them
  std::vector<uint8_t> initial;  // D's bytes before the run: the poison, or C's bytes in place
};

// Uploads the operands (and C: m x ldc values when beta != 0), fills D with `poison` (or with C
// when in place), runs, and reads D back. S_dec is uploaded for NVFP4 operands only.
void run_gemm(const bg::GemmProblem& p, const HostOperand& a, const HostOperand& b, const std::vector<double>* c,
              bool in_place, uint8_t poison, GemmRun* out) {
  DeviceBuffer a_data, a_scales, a_dec, b_data, b_scales, b_dec, c_buf, d_buf;
  ASSERT_OK(a_data.upload(a.q.data.data(), a.q.data.size(), "a_data"));
  ASSERT_OK(b_data.upload(b.q.data.data(), b.q.data.size(), "b_data"));
  ASSERT_OK(a_scales.upload(a.swizzled_scales, "a_scales"));
  ASSERT_OK(b_scales.upload(b.swizzled_scales, "b_scales"));
  ASSERT_OK(a_dec.upload(&a.q.global_scale_dec, sizeof(float), "a_dec"));
  ASSERT_OK(b_dec.upload(&b.q.global_scale_dec, sizeof(float), "b_dec"));
  const int64_t d_bytes = p.m * p.ldd * element_bytes(p.d_type);
  out->initial.assign(static_cast<size_t>(d_bytes), poison);
  if (c != nullptr) {
    const std::vector<uint8_t> c_bytes = encode(*c, p.c_type);
    if (in_place) {
      ASSERT_EQ(c_bytes.size(), out->initial.size()) << "in place: C must be D's shape and type";
      out->initial = c_bytes;
    } else {
      ASSERT_OK(c_buf.upload(c_bytes.data(), c_bytes.size(), "c_buf"));
    }
  }
  ASSERT_OK(d_buf.upload(out->initial.data(), out->initial.size(), "d_buf"));
  bg::GemmArguments args;
  args.a_data = a_data.data();
  args.a_scales = a_scales.data();
  args.b_data = b_data.data();
  args.b_scales = b_scales.data();
  args.a_scale_dec = p.a_recipe == Format::kNvfp4 ? a_dec.as<float>() : nullptr;
  args.b_scale_dec = p.b_recipe == Format::kNvfp4 ? b_dec.as<float>() : nullptr;
  args.c = c == nullptr ? nullptr : in_place ? static_cast<const void*>(d_buf.data()) : c_buf.data();
  args.d = d_buf.data();
  const blockscale::Status s = bg::run(p, args, nullptr, bg::workspace_size(p), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  out->d.resize(static_cast<size_t>(d_bytes));
  ASSERT_CUDA(cudaMemcpy(out->d.data(), d_buf.data(), out->d.size(), cudaMemcpyDeviceToHost));
}

// Bytes in the padding columns [n, ldd) that differ from what D held before the run.
int64_t padding_changed(const bg::GemmProblem& p, const GemmRun& r) {
  const int64_t e = element_bytes(p.d_type);
  int64_t bad = 0;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = p.n * e; j < p.ldd * e; ++j) {
      const size_t at = static_cast<size_t>(i * p.ldd * e + j);
      bad += r.d[at] != r.initial[at];
    }
  return bad;
}

// Frobenius norm over the finite entries (rows x cols of a row-major matrix with stride ld).
double frobenius(const std::vector<double>& v, int64_t rows, int64_t cols, int64_t ld) {
  double s = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double x = v[static_cast<size_t>(i * ld + j)];
      if (std::isfinite(x)) s += x * x;
    }
  return std::sqrt(s);
}

// The header's bound on ||D^ - D||.
double error_bound(const bg::GemmProblem& p, double abs_norm, double c_norm, double ref_norm) {
  const double u = std::ldexp(1.0, -24), u_tc = std::ldexp(1.0, -23);
  const double u_out = p.d_type == MatrixType::kBf16 ? std::ldexp(1.0, -8) : u;
  const double steps = static_cast<double>(p.k / 16 + 4);
  return std::fabs(p.alpha) * (2 * steps * u_tc + 4 * u) * abs_norm + 2 * u * std::fabs(p.beta) * c_norm +
         1.01 * u_out * ref_norm;
}

// ---- Random data against the bound -------------------------------------------------------------

// One pair's operands and what every output variant's check needs.
struct GemmCase {
  Pair pair;
  int64_t m = 0, n = 0, k = 0;
  HostOperand a, b;
  double abs_norm = 0;     // ||abs|| over the finite entries
  double abs_max = 0;      // the largest finite entry of abs: the largest sum of |products|
  double product_rms = 0;  // rms of A B^T over the finite entries: the size C is drawn at
};

void finish_case(GemmCase* c) {
  std::vector<double> abs_ref, ref;
  blockscale::Status s = bf::reference_gemm(absolute(c->a.q), absolute(c->b.q), 1.0, 0.0, nullptr, 0, &abs_ref);
  ASSERT_TRUE(s.is_ok()) << s.message();
  s = bf::reference_gemm(c->a.q, c->b.q, 1.0, 0.0, nullptr, 0, &ref);
  ASSERT_TRUE(s.is_ok()) << s.message();
  c->abs_norm = frobenius(abs_ref, c->m, c->n, c->n);
  c->abs_max = 0;
  for (double x : abs_ref)
    if (std::isfinite(x)) c->abs_max = std::max(c->abs_max, x);
  c->product_rms = frobenius(ref, c->m, c->n, c->n) / std::sqrt(static_cast<double>(c->m * c->n)) + 1e-30;
}

// Random operands of a pair: magnitudes 2^a_log2 / 2^b_log2 (see random_operand), per-block spread.
void random_case(const Pair& pair, int64_t m, int64_t n, int64_t k, uint64_t seed, GemmCase* c, int a_log2 = 0,
                 int b_log2 = 0, int spread = 4, bool b_nvfp4_2d = false) {
  c->pair = pair, c->m = m, c->n = n, c->k = k;
  random_operand(m, k, pair.a, a_log2, spread, seed, &c->a);
  random_operand(n, k, pair.b, b_log2, spread, seed ^ 0x5bd1e995u, &c->b, b_nvfp4_2d);
  if (::testing::Test::HasFatalFailure()) return;
  finish_case(c);
}

// One output configuration: D's type, alpha, beta, C's type, row padding, C == D.
struct Variant {
  MatrixType d_type;
  float alpha, beta;
  MatrixType c_type;
  int64_t pad;  // ldd = ldc = n + pad
  bool in_place;
  const char* name;
};

const Variant kBf16Plain{MatrixType::kBf16, 1.0f, 0.0f, MatrixType::kFp32, 0, false, "bf16 D, beta 0"};
const Variant kFp32Accumulate{MatrixType::kFp32, 1.0f, 1.0f, MatrixType::kFp32, 3, false,
                              "fp32 D += fp32 C, ldd n+3"};

// Counts of outputs whose finiteness differs from the reference's.
struct Comparison {
  double err = 0, bound = 0, ref_norm = 0;
  int64_t nan_expected_finite = 0;  // got non-finite (e.g. the unwritten poison), want finite
  int64_t finite_expected_nan = 0;  // got finite, want NaN
};

Comparison compare(const bg::GemmProblem& p, const GemmRun& r, const std::vector<double>& ref, double abs_norm,
                   double c_norm) {
  Comparison out;
  double err2 = 0;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const double want = ref[static_cast<size_t>(i * p.n + j)];
      const double got = element_value(r.d, i * p.ldd + j, p.d_type);
      if (std::isfinite(want) != std::isfinite(got)) {
        ++(std::isfinite(want) ? out.nan_expected_finite : out.finite_expected_nan);
        continue;
      }
      if (std::isfinite(want)) err2 += (got - want) * (got - want);
    }
  out.err = std::sqrt(err2);
  out.ref_norm = frobenius(ref, p.m, p.n, p.n);
  out.bound = error_bound(p, abs_norm, c_norm, out.ref_norm);
  return out;
}

// Runs one variant on the case's operands (C random when beta != 0) and checks it: within the
// bound, non-finite exactly where the reference is, padding unchanged. Returns the run.
void check_variant(const GemmCase& c, const Variant& v, uint64_t seed, GemmRun* run_out = nullptr,
                   uint8_t poison = kPoison) {
  SCOPED_TRACE(pair_label(c.pair) + ", " + v.name);
  const bg::GemmProblem p = problem(c.pair, c.m, c.n, c.k, v.d_type, c.n + v.pad, v.alpha, v.beta, v.c_type);
  std::vector<double> cmat;
  if (v.beta != 0.0f) {  // C as its stored type holds it
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    cmat.resize(static_cast<size_t>(p.m * p.ldc));
    for (auto& x : cmat) x = round_to(normal(rng) * c.product_rms, p.c_type);
  }
  std::vector<double> ref;
  const blockscale::Status s =
      bf::reference_gemm(c.a.q, c.b.q, v.alpha, v.beta, cmat.empty() ? nullptr : cmat.data(), p.ldc, &ref);
  ASSERT_TRUE(s.is_ok()) << s.message();
  GemmRun r;
  run_gemm(p, c.a, c.b, cmat.empty() ? nullptr : &cmat, v.in_place, poison, &r);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(padding_changed(p, r), 0) << "bytes changed in the padding columns [n, ldd)";
  const double c_norm = cmat.empty() ? 0.0 : frobenius(cmat, p.m, p.n, p.ldc);
  const Comparison cmp = compare(p, r, ref, c.abs_norm, c_norm);
  EXPECT_EQ(cmp.nan_expected_finite, 0) << "non-finite outputs (unwritten: still the poison, or overflowed)";
  EXPECT_EQ(cmp.finite_expected_nan, 0) << "finite outputs where the reference is NaN";
  std::printf("gemm_block_scaled_test: %s m %lld n %lld k %lld, %s: rel_err %.3e bound %.3e (err/bound %.3f)\n",
              pair_label(c.pair).c_str(), static_cast<long long>(p.m), static_cast<long long>(p.n),
              static_cast<long long>(p.k), v.name, cmp.err / cmp.ref_norm, cmp.bound / cmp.ref_norm,
              cmp.err / cmp.bound);
  EXPECT_LE(cmp.err, cmp.bound) << "relative Frobenius error " << cmp.err / cmp.ref_norm
                                << " above the derived bound " << cmp.bound / cmp.ref_norm;
  if (run_out) *run_out = std::move(r);
}

class BlockScaledPair : public ::testing::TestWithParam<Pair> {};

// Every output configuration on one shape that crosses 128-row scale tiles (m 257) and ends K on
// a partial 128 chunk (416 = 3 x 128 + 32).
class GemmBlockScaledVariants : public BlockScaledPair {};
TEST_P(GemmBlockScaledVariants, WithinDerivedBound) {
  SKIP_WITHOUT_GPU();
  GemmCase c;
  random_case(GetParam(), 257, 200, 416, seed_of(GetParam(), 257, 200, 416, 1), &c);
  if (HasFatalFailure()) return;
  const MatrixType bf16 = MatrixType::kBf16, fp32 = MatrixType::kFp32;
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
    check_variant(c, {MatrixType::kFp32, 1.0f, 0.0f, MatrixType::kFp32, 1, false, "fp32 D, ldd n+1"}, 0);
    check_variant(c, {MatrixType::kBf16, 0.5f, 0.0f, MatrixType::kFp32, 0, false, "bf16 D, alpha 0.5"}, 0);
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
    op->swizzled_scales = gemm_scales(op->q);
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
    check_variant(c, {MatrixType::kFp32, 1.0f, 0.0f, MatrixType::kFp32, 2, false, "fp32 D, ldd n+2"}, 0, nullptr,
                  poison);
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
  const MatrixType bf16 = MatrixType::kBf16, fp32 = MatrixType::kFp32;
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
  out->swizzled_scales = gemm_scales(out->q);
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
  base.a.swizzled_scales = gemm_scales(base.a.q);
  base.b.swizzled_scales = gemm_scales(base.b.q);
  if (HasFatalFailure()) return;
  finish_case(&base);
  const Variant fp32_d{MatrixType::kFp32, 1.0f, 0.0f, MatrixType::kFp32, 0, false, "fp32 D"};
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
      const double want = 1024.0 * element_value(d_base.d, i, MatrixType::kFp32);
      const double got = element_value(d_scaled.d, i, MatrixType::kFp32);
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
INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledExact, ::testing::ValuesIn(supported_pairs()), pair_name);
INSTANTIATE_TEST_SUITE_P(Pairs, GemmBlockScaledNvfp4TensorScale, ::testing::ValuesIn(nvfp4_pairs()), pair_name);

// An empty problem launches nothing and succeeds, without pointers (S_dec included).
TEST(GemmBlockScaledRun, EmptyProblemIsOk) {
  const Pair pair{Format::kNvfp4, Format::kNvfp4};
  EXPECT_TRUE(bg::run(problem(pair, 0, 5, 64, MatrixType::kBf16, 5, 1.0f, 0.0f), bg::GemmArguments(), nullptr, 0,
                      nullptr)
                  .is_ok());
  EXPECT_TRUE(bg::run(problem(pair, 7, 0, 64, MatrixType::kFp32, 0, 1.0f, 0.0f), bg::GemmArguments(), nullptr, 0,
                      nullptr)
                  .is_ok());
}

// ---- No GPU needed: the premises (the argument checks and the dispatch rule:
// gemm_block_scaled_checks_test.cu) --------------------------------------------------------------

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
