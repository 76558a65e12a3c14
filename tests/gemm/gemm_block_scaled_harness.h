// Shared by gemm_block_scaled_test's sources (gemm_block_scaled_test.cpp: random data against the
// derived bound, extreme scales, non-finite input; gemm_block_scaled_exact_test.cpp: bit-exact cases;
// gemm_block_scaled_nvfp4_test.cpp: NVFP4's tensor scale and 2D weights): the random operands, one
// GEMM run on the GPU over a poisoned (or given) D, and the check of one output variant against
// the bound that gemm_block_scaled_test.cpp's header derives.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "formats/quantize.h"
#include "formats/reference_gemm.h"
#include "formats/scale_layout.h"
#include "gemm/device_operand.h"
#include "gemm/gemm.h"
#include "tests/gemm/block_scaled_pairs.h"
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: ASSERT_CUDA, ASSERT_OK

namespace blockscale_test {
namespace block_scaled {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bf::Format;
using bf::DType;
using blockscale::runtime::DeviceBuffer;

constexpr uint8_t kPoison = 0xFF;  // NaN in bf16 and fp32

// Seeds of a case's operands and C, distinct per pair, shape and salt.
inline uint64_t seed_of(const Pair& pair, int64_t m, int64_t n, int64_t k, uint64_t salt) {
  return static_cast<uint64_t>(pair.a) * 1000003u + static_cast<uint64_t>(pair.b) * 100019u +
         static_cast<uint64_t>(m) * 10007u + static_cast<uint64_t>(n) * 101u + static_cast<uint64_t>(k) +
         salt * 0x9E3779B97F4A7C15ull;
}

// ---- Operands ----------------------------------------------------------------------------------

// A quantized operand as formats::quantize gave it; run_gemm uploads it with its scales in the
// GEMM layout (gemm::DeviceOperand: swizzled 128x4, one scale per row and block, NVFP4 2D tile
// scales repeated over the tile's rows, as quant/ writes them).
struct HostOperand {
  bf::QuantizedMatrix q;
};

// log2 of the element format's largest value, rounded down: 8 (E4M3), 15 (E5M2), 2 (E2M1).
inline int element_max_exponent(Format r) { return static_cast<int>(std::floor(std::log2(bf::element_max(r)))); }

// rows x k values quantized rowwise with formats::quantize. Each value is a normal sample times
// 2^(log2_magnitude + a per-16-element offset in [-spread, spread]); one in four is further divided
// by 2^[1, 16], so that small and subnormal codes occur in every element format. For MX recipes
// log2_magnitude is shifted by the element format's top exponent so that it is roughly the E8M0
// scale exponent the blocks get; for NVFP4 it is the tensor's magnitude (S_dec follows it).
inline void random_operand(int64_t rows, int64_t k, Format recipe, int log2_magnitude, int spread, uint64_t seed,
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
}

// ---- Running the GEMM --------------------------------------------------------------------------

struct GemmRun {
  std::vector<uint8_t> d;        // m x ldd elements of d_type, as the GPU left them
  std::vector<uint8_t> initial;  // D's bytes before the run: the poison, or C's bytes in place
};

// Uploads the operands (and C: m x ldc values when beta != 0), fills D with `poison` (or with C
// when in place), runs, and reads D back. S_dec is uploaded for NVFP4 operands only.
inline void run_gemm(const bg::GemmProblem& p, const HostOperand& a, const HostOperand& b,
                     const std::vector<double>* c, bool in_place, uint8_t poison, GemmRun* out) {
  bg::DeviceOperand a_dev, b_dev;
  ASSERT_OK(a_dev.upload(a.q));
  ASSERT_OK(b_dev.upload(b.q));
  DeviceBuffer c_buf, d_buf;
  const int64_t d_bytes = p.m * p.ldd * static_cast<int64_t>(blockscale::formats::dtype_size(p.d_type));
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
  args.a_data = a_dev.data();
  args.a_scales = a_dev.scales();
  args.b_data = b_dev.data();
  args.b_scales = b_dev.scales();
  args.a_scale_dec = p.a_recipe == Format::kNvfp4 ? a_dev.scale_dec() : nullptr;
  args.b_scale_dec = p.b_recipe == Format::kNvfp4 ? b_dev.scale_dec() : nullptr;
  args.c = c == nullptr ? nullptr : in_place ? static_cast<const void*>(d_buf.data()) : c_buf.data();
  args.d = d_buf.data();
  const blockscale::Status s = bg::run(p, args, nullptr, bg::workspace_size(p), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  out->d.resize(static_cast<size_t>(d_bytes));
  ASSERT_CUDA(cudaMemcpy(out->d.data(), d_buf.data(), out->d.size(), cudaMemcpyDeviceToHost));
}

// Bytes in the padding columns [n, ldd) that differ from what D held before the run.
inline int64_t padding_changed(const bg::GemmProblem& p, const GemmRun& r) {
  const int64_t e = static_cast<int64_t>(blockscale::formats::dtype_size(p.d_type));
  int64_t bad = 0;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = p.n * e; j < p.ldd * e; ++j) {
      const size_t at = static_cast<size_t>(i * p.ldd * e + j);
      bad += r.d[at] != r.initial[at];
    }
  return bad;
}

// Frobenius norm over the finite entries (rows x cols of a row-major matrix with stride ld).
inline double frobenius(const std::vector<double>& v, int64_t rows, int64_t cols, int64_t ld) {
  double s = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double x = v[static_cast<size_t>(i * ld + j)];
      if (std::isfinite(x)) s += x * x;
    }
  return std::sqrt(s);
}

// The header's bound on ||D^ - D||.
inline double error_bound(const bg::GemmProblem& p, double abs_norm, double c_norm, double ref_norm) {
  const double u = std::ldexp(1.0, -24), u_tc = std::ldexp(1.0, -23);
  const double u_out = p.d_type == DType::kBf16 ? std::ldexp(1.0, -8) : u;
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

inline void finish_case(GemmCase* c) {
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
inline void random_case(const Pair& pair, int64_t m, int64_t n, int64_t k, uint64_t seed, GemmCase* c,
                        int a_log2 = 0, int b_log2 = 0, int spread = 4, bool b_nvfp4_2d = false) {
  c->pair = pair, c->m = m, c->n = n, c->k = k;
  random_operand(m, k, pair.a, a_log2, spread, seed, &c->a);
  random_operand(n, k, pair.b, b_log2, spread, seed ^ 0x5bd1e995u, &c->b, b_nvfp4_2d);
  if (::testing::Test::HasFatalFailure()) return;
  finish_case(c);
}

// One output configuration: D's type, alpha, beta, C's type, row padding, C == D.
struct Variant {
  DType d_type;
  float alpha, beta;
  DType c_type;
  int64_t pad;  // ldd = ldc = n + pad
  bool in_place;
  const char* name;
};

inline const Variant kBf16Plain{DType::kBf16, 1.0f, 0.0f, DType::kF32, 0, false, "bf16 D, beta 0"};
inline const Variant kFp32Accumulate{DType::kF32, 1.0f, 1.0f, DType::kF32, 3, false,
                                     "fp32 D += fp32 C, ldd n+3"};

// Counts of outputs whose finiteness differs from the reference's.
struct Comparison {
  double err = 0, bound = 0, ref_norm = 0;
  int64_t nan_expected_finite = 0;  // got non-finite (e.g. the unwritten poison), want finite
  int64_t finite_expected_nan = 0;  // got finite, want NaN
};

inline Comparison compare(const bg::GemmProblem& p, const GemmRun& r, const std::vector<double>& ref,
                          double abs_norm, double c_norm) {
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
inline void check_variant(const GemmCase& c, const Variant& v, uint64_t seed, GemmRun* run_out = nullptr,
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

}  // namespace block_scaled
}  // namespace blockscale_test
