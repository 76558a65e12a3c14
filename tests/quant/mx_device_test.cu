// Tests of quant/mx_device.cuh, the MX kernels' element encoders and block scale, on the GPU
// against formats/ over every input that matters:
//   - the hardware cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (encode2) against formats::encode_minifloat
//     on every finite fp32 pattern (x, -x pairs);
//   - the E2M1 encoder (e2m1_code) against formats::encode_e2m1 on every finite fp32 pattern, and
//     its packed 16-bit paths (bf16 rows, bf16 column pairs, fp16) for every input and scale;
//   - the block scale (mx_block_scale, integer steps) against formats::mx_scale_exponent + exp2i
//     on every finite amax (E4M3, E5M2, E2M1 maxnorms; ceil and floor).
// The kernels' bytes: mx_quantize_test.cpp. GPU tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>

#include "formats/quantize.h"
#include "formats/scalar_codecs.h"
#include "quant/mx_device.cuh"
#include "tests/quant/gpu_test_util.h"

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
using bf::Format;
using bq::detail::ElementEncoder;
using blockscale::runtime::DeviceBuffer;

// ---- The hardware conversion against formats::encode_minifloat on every finite fp32 --------

struct CvtCounts {
  unsigned long long checked, mismatches, first_bits[4], first_hw[4], first_sw[4];
};

// Runs `launch(counts)` (a sweep kernel's launch) on zeroed device counts and reads them back.
template <class Launch>
void run_sweep(const Launch& launch, CvtCounts* out) {
  DeviceBuffer buf;
  ASSERT_OK(buf.alloc(sizeof(CvtCounts), "buf"));
  ASSERT_CUDA(cudaMemset(buf.data(), 0, sizeof(CvtCounts)));
  launch(buf.as<CvtCounts>());
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaMemcpy(out, buf.data(), sizeof *out, cudaMemcpyDeviceToHost));
}

template <Format kRecipe>
__global__ void cvt_sweep_kernel(CvtCounts* counts) {
  const bf::MinifloatSpec spec = bq::detail::Fp8Format<kRecipe>::spec();
  unsigned long long checked = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32);
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t bits = static_cast<uint32_t>(i);
    if ((bits & 0x7F800000u) == 0x7F800000u) continue;  // NaN, Inf: the kernels never convert them
    const float a = __uint_as_float(bits), b = __uint_as_float(bits ^ 0x80000000u);  // x and -x
    const uint32_t hw = bq::detail::encode2<kRecipe, ElementEncoder::kHardware>(a, b);
    const uint32_t sw = bf::encode_minifloat(a, spec) | (bf::encode_minifloat(b, spec) << 8);
    ++checked;
    if (hw != sw) {
      const unsigned long long k = atomicAdd(&counts->mismatches, 1ull);
      if (k < 4) counts->first_bits[k] = bits, counts->first_hw[k] = hw, counts->first_sw[k] = sw;
    }
  }
  atomicAdd(&counts->checked, checked);
}

template <Format kRecipe>
void sweep(const char* label) {
  CvtCounts c;
  run_sweep([&](CvtCounts* counts) { cvt_sweep_kernel<kRecipe><<<4096, 256>>>(counts); }, &c);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(c.checked, (uint64_t{1} << 32) - (uint64_t{1} << 24));  // every finite pattern
  EXPECT_EQ(c.mismatches, 0u) << label;
  for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
    ADD_FAILURE() << label << " x = 0x" << std::hex << c.first_bits[k] << " (and -x): cvt 0x"
                  << c.first_hw[k] << ", encode_minifloat 0x" << c.first_sw[k];
  std::printf("mx_quantize_test: %s cvt.rn.satfinite x2 vs encode_minifloat: %llu finite fp32 "
              "patterns (x, -x pairs), mismatches %llu\n", label, c.checked, c.mismatches);
}

TEST(Mxfp8HardwareCvt, MatchesEncodeMinifloatOnEveryFiniteFp32) {
  SKIP_WITHOUT_GPU();
  sweep<Format::kMxfp8E4M3>("E4M3");
  sweep<Format::kMxfp8E5M2>("E5M2");
}

// The kernels' E2M1 encoder (e2m1_code, and the 8-element packing) against formats::encode_e2m1.
__global__ void e2m1_sweep_kernel(CvtCounts* counts) {
  unsigned long long checked = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32);
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t bits = static_cast<uint32_t>(i);
    if ((bits & 0x7F800000u) == 0x7F800000u) continue;  // NaN, Inf: the kernels never encode them
    const uint32_t got = bq::detail::e2m1_code(__uint_as_float(bits));
    const uint32_t want = bf::encode_e2m1(__uint_as_float(bits));
    ++checked;
    if (got != want) {
      const unsigned long long k = atomicAdd(&counts->mismatches, 1ull);
      if (k < 4) counts->first_bits[k] = bits, counts->first_hw[k] = got, counts->first_sw[k] = want;
    }
  }
  // The packing: element i of 8 in nibble i (x * 1, exact), here on 8 consecutive patterns.
  if (blockIdx.x == 0 && threadIdx.x < 32) {
    float f[8];
    uint32_t want = 0;
    for (int e = 0; e < 8; ++e) {
      const uint32_t bits = 0x3E000000u + 0x00300000u * (threadIdx.x * 8 + e);  // 0.125 .. beyond 6
      f[e] = __uint_as_float((bits & 0x7F800000u) == 0x7F800000u ? 0x40C00000u : bits) * ((e & 1) ? -1.0f : 1.0f);
      want |= bf::encode_e2m1(f[e]) << (4 * e);
    }
    if (bq::detail::encode8_e2m1(f, 1.0f) != want) atomicAdd(&counts->mismatches, 1ull);
  }
  atomicAdd(&counts->checked, checked);
}

TEST(Mxfp4Encoder, MatchesEncodeE2m1OnEveryFiniteFp32) {
  SKIP_WITHOUT_GPU();
  CvtCounts c;
  run_sweep([&](CvtCounts* counts) { e2m1_sweep_kernel<<<4096, 256>>>(counts); }, &c);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(c.checked, (uint64_t{1} << 32) - (uint64_t{1} << 24));  // every finite pattern
  EXPECT_EQ(c.mismatches, 0u);
  for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
    ADD_FAILURE() << "E2M1 x = 0x" << std::hex << c.first_bits[k] << ": e2m1_code 0x" << c.first_hw[k]
                  << ", encode_e2m1 0x" << c.first_sw[k];
  std::printf("mx_quantize_test: E2M1 e2m1_code vs encode_e2m1: %llu finite fp32 patterns, mismatches %llu\n",
              c.checked, c.mismatches);
}

// The packed E2M1 paths of 16-bit input (encode16_e2m1_bf16: two bf16 products and codes per
// instruction, the scalar encoder for tiny and huge scales; encode16_e2m1_fp16: fp32 products as
// f16 pairs) against formats::encode_e2m1(x * 2^-e) for every bf16 / fp16 x (in both halves of a
// pair) and every E8M0 scale code 0..254. Non-finite inputs (never encoded: their block's codes
// are 0) are replaced by 0.
__global__ void e2m1_packed_sweep_kernel(bool bf16, CvtCounts* counts) {
  unsigned long long checked = 0;
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < 65536u * 255u; t += gridDim.x * blockDim.x) {
    const uint32_t x = t & 0xFFFFu, code = t >> 16;
    const uint32_t exp_mask = bf16 ? 0x7F80u : 0x7C00u;
    bq::detail::MxScale s{code, __uint_as_float((254u - code) << 23), false};
    uint32_t pairs[8];
    float f[16];
    for (int k = 0; k < 8; ++k) {
      uint32_t h[2] = {(x + static_cast<uint32_t>(k)) & 0xFFFFu, (x ^ 0x8000u ^ static_cast<uint32_t>(k)) & 0xFFFFu};
      for (int j = 0; j < 2; ++j) {
        if ((h[j] & exp_mask) == exp_mask) h[j] = 0;
        f[2 * k + j] = bf16 ? bf::bf16_bits_to_float(static_cast<uint16_t>(h[j]))
                            : bf::fp16_bits_to_float(static_cast<uint16_t>(h[j]));
      }
      pairs[k] = h[0] | (h[1] << 16);
    }
    const uint2 got = bf16 ? bq::detail::encode16_e2m1_bf16(pairs, s) : bq::detail::encode16_e2m1_fp16(f, s.inv);
    for (int i = 0; i < 16; ++i) {
      const uint32_t want = bf::encode_e2m1(bf::mul_rn(f[i], s.inv));
      const uint32_t g = ((i < 8 ? got.x : got.y) >> (4 * (i % 8))) & 0xFu;
      ++checked;
      if (g != want) {
        const unsigned long long k = atomicAdd(&counts->mismatches, 1ull);
        if (k < 4) counts->first_bits[k] = (uint64_t{code} << 32) | bf::float_bits(f[i]), counts->first_hw[k] = g,
                   counts->first_sw[k] = want;
      }
    }
  }
  atomicAdd(&counts->checked, checked);
}

TEST(Mxfp4Encoder, PackedPathsMatchEncodeE2m1ForEvery16BitInputAndScale) {
  SKIP_WITHOUT_GPU();
  for (bool bf16 : {true, false}) {
    CvtCounts c;
    run_sweep([&](CvtCounts* counts) { e2m1_packed_sweep_kernel<<<2048, 256>>>(bf16, counts); }, &c);
    if (::testing::Test::HasFatalFailure()) return;
    const char* label = bf16 ? "bf16" : "fp16";
    EXPECT_EQ(c.checked, 65536ull * 255ull * 16ull);
    EXPECT_EQ(c.mismatches, 0u) << label;
    for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
      ADD_FAILURE() << label << " scale code " << (c.first_bits[k] >> 32) << ", x = 0x" << std::hex
                    << (c.first_bits[k] & 0xFFFFFFFFu) << " (fp32): packed 0x" << c.first_hw[k]
                    << ", encode_e2m1 0x" << c.first_sw[k];
    std::printf("mx_quantize_test: E2M1 packed %s path vs encode_e2m1: %llu (x, scale) pairs, mismatches %llu\n",
                label, c.checked, c.mismatches);
  }
}

// The columnwise bf16 path (encode16x2_e2m1_bf16: two columns per word, each with its own scale,
// through the same fmas) against formats::encode_e2m1(x * 2^-e), for every bf16 x in both columns
// and every scale code 0..254 of column 0; column 1 takes another code (fast-path and scalar
// codes meet in one call). Non-finite inputs are replaced by 0, as above.
__global__ void e2m1_bf16_columns_sweep_kernel(CvtCounts* counts) {
  unsigned long long checked = 0;
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < 65536u * 255u; t += gridDim.x * blockDim.x) {
    const uint32_t x = t & 0xFFFFu, code0 = t >> 16, code1 = (code0 * 37u + 11u) % 255u;
    const bq::detail::MxScale s0{code0, __uint_as_float((254u - code0) << 23), false};
    const bq::detail::MxScale s1{code1, __uint_as_float((254u - code1) << 23), false};
    uint32_t w[16];
    for (int i = 0; i < 16; ++i) {
      const uint32_t r = static_cast<uint32_t>(i);
      uint32_t h[2] = {(x + r) & 0xFFFFu, (x ^ 0x8000u ^ (r << 9)) & 0xFFFFu};
      for (int j = 0; j < 2; ++j)
        if ((h[j] & 0x7F80u) == 0x7F80u) h[j] = 0;
      w[i] = h[0] | (h[1] << 16);
    }
    uint2 got[2];
    bq::detail::encode16x2_e2m1_bf16(w, s0, s1, got);
    for (int c = 0; c < 2; ++c) {
      for (int i = 0; i < 16; ++i) {
        const float f = bf::bf16_bits_to_float(static_cast<uint16_t>(c ? w[i] >> 16 : w[i] & 0xFFFFu));
        const uint32_t want = bf::encode_e2m1(bf::mul_rn(f, c ? s1.inv : s0.inv));
        const uint32_t g = ((i < 8 ? got[c].x : got[c].y) >> (4 * (i % 8))) & 0xFu;
        ++checked;
        if (g != want) {
          const unsigned long long k = atomicAdd(&counts->mismatches, 1ull);
          if (k < 4) counts->first_bits[k] = (uint64_t{c ? code1 : code0} << 32) | bf::float_bits(f),
                     counts->first_hw[k] = g, counts->first_sw[k] = want;
        }
      }
    }
  }
  atomicAdd(&counts->checked, checked);
}

TEST(Mxfp4Encoder, Bf16ColumnPairsMatchEncodeE2m1ForEveryInputAndScale) {
  SKIP_WITHOUT_GPU();
  CvtCounts c;
  run_sweep([&](CvtCounts* counts) { e2m1_bf16_columns_sweep_kernel<<<2048, 256>>>(counts); }, &c);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(c.checked, 65536ull * 255ull * 32ull);
  EXPECT_EQ(c.mismatches, 0u);
  for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
    ADD_FAILURE() << "scale code " << (c.first_bits[k] >> 32) << ", x = 0x" << std::hex
                  << (c.first_bits[k] & 0xFFFFFFFFu) << " (fp32): packed 0x" << c.first_hw[k] << ", encode_e2m1 0x"
                  << c.first_sw[k];
  std::printf("mx_quantize_test: E2M1 bf16 column pairs vs encode_e2m1: %llu (x, scale) pairs, mismatches %llu\n",
              c.checked, c.mismatches);
}

// ---- The kernels' block scale (integer steps) against formats::mx_scale_exponent + exp2i on
// every finite amax >= 0, both formats, both roundings ----------------------------------------

__global__ void scale_sweep_kernel(bq::detail::MxScaleRule rule, float maxnorm, bool ceil_rounding,
                                   CvtCounts* counts) {
  unsigned long long checked = 0;
  for (uint32_t a = blockIdx.x * blockDim.x + threadIdx.x; a < 0x7F800000u; a += gridDim.x * blockDim.x) {
    const bq::detail::MxScale s = bq::detail::mx_block_scale(a, rule);
    const int e = bf::mx_scale_exponent(__uint_as_float(a), maxnorm, ceil_rounding);
    const uint32_t want_code = static_cast<uint32_t>(e + 127);
    const uint32_t want_inv = bf::float_bits(bf::exp2i(-e));
    ++checked;
    if (s.nonfinite || s.code != want_code || __float_as_uint(s.inv) != want_inv) {
      const unsigned long long k = atomicAdd(&counts->mismatches, 1ull);
      if (k < 4) counts->first_bits[k] = a, counts->first_hw[k] = s.code, counts->first_sw[k] = want_code;
    }
  }
  atomicAdd(&counts->checked, checked);
}

TEST(MxBlockScale, MatchesMxScaleExponentOnEveryFiniteAmax) {
  SKIP_WITHOUT_GPU();
  for (Format recipe : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp4}) {
    for (bool ceil_rounding : {true, false}) {
      const float maxnorm = bf::element_max(recipe);
      CvtCounts c;
      const bq::detail::MxScaleRule rule = bq::detail::mx_scale_rule(maxnorm, ceil_rounding);
      run_sweep([&](CvtCounts* counts) { scale_sweep_kernel<<<4096, 256>>>(rule, maxnorm, ceil_rounding, counts); }, &c);
      if (::testing::Test::HasFatalFailure()) return;
      const char* label = ceil_rounding ? "ceil" : "floor";
      EXPECT_EQ(c.checked, 0x7F800000ull);
      EXPECT_EQ(c.mismatches, 0u) << bf::format_name(recipe) << " " << label;
      for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
        ADD_FAILURE() << bf::format_name(recipe) << " " << label << " amax bits 0x" << std::hex
                      << c.first_bits[k] << ": code 0x" << c.first_hw[k] << ", formats 0x" << c.first_sw[k];
      std::printf("mx_quantize_test: block scale %s %s vs mx_scale_exponent + exp2i: %llu finite amax "
                  "patterns, mismatches %llu\n", bf::format_name(recipe), label, c.checked, c.mismatches);
    }
  }
}
}  // namespace
