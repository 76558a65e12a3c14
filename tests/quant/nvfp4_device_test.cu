// Tests of quant/nvfp4_device.cuh, the NVFP4 kernels' device arithmetic, against formats/:
//   - host (no GPU needed): the kernels' E2M1 encoder against formats::encode_e2m1 near every
//     rounding decision point and on a stride of all fp32; the packed eight-element encode; the Philox
//     words of 16 elements at every phase; the stochastic encode; the unscaled RHT against
//     formats::hadamard16_inplace and the fold of its x 0.25 into the encode factor;
//   - GPU sweeps: the encoder on every non-NaN fp32 pattern; the hardware UE4M3 scale conversion
//     against formats::encode_ue4m3 on every fp32 in [0, +Inf]; the packed bf16 / fp16 magnitude
//     maxima (quant/nvfp4_block.cuh) on every pair of patterns; the PRMT sign gathers.
// The kernels' bytes end to end: nvfp4_quantize_test.cpp. GPU tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "formats/hadamard.h"
#include "formats/nvfp4_scalar.h"
#include "formats/philox.h"
#include "formats/quantize.h"
#include "quant/nvfp4_block.cuh"  // defines: absmax2, lane_value, fold_lanes
#include "quant/nvfp4_device.cuh"
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
namespace nv = blockscale::quant::detail::nvfp4;
using bf::DType;
using blockscale::runtime::DeviceBuffer;

// ==== Host checks of the device arithmetic ========================================================

uint32_t e2m1_code_of(float y, bool cap) {
  const float a = std::fabs(y);
  const uint32_t m = cap ? nv::e2m1_magnitude_biased<true>(a) : nv::e2m1_magnitude_biased<false>(a);
  return (m - nv::kBiasedZero) | ((bf::float_bits(y) >> 31) << 3);
}

TEST(Nvfp4Encoder, HostMatchesEncodeE2m1NearEveryDecisionPointAndOnAStride) {
  int64_t checked = 0, bad = 0;
  auto check = [&](uint32_t bits) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float y = bf::bits_float(bits | sign);
      const uint32_t want = bf::encode_e2m1(y);
      const uint32_t got = e2m1_code_of(y, true);
      ++checked;
      if (got != want && bad++ < 5) ADD_FAILURE() << "y bits 0x" << std::hex << (bits | sign) << ": got " << got << " want " << want;
      if (std::fabs(y) < 7.0f) {
        const uint32_t got_nocap = e2m1_code_of(y, false);
        if (got_nocap != want && bad++ < 5) ADD_FAILURE() << "no-cap y bits 0x" << std::hex << (bits | sign);
      }
    }
  };
  // Every pattern within 8192 ulps of each E2M1 value, tie and the no-cap limit 7, and a stride
  // over everything else (the GPU sweep below covers every pattern).
  const float points[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};
  for (float pt : points)
    for (int64_t d = -8192; d <= 8192; ++d) check(static_cast<uint32_t>(bf::float_bits(pt) + d));
  for (uint64_t b = 0; b <= 0x7F800000u; b += 4093u) check(static_cast<uint32_t>(b));
  check(0x7F800000u);  // Inf
  check(0x7F7FFFFFu);
  check(0u);
  EXPECT_EQ(bad, 0);
  std::printf("nvfp4_quantize_test: host E2M1 encoder vs formats::encode_e2m1: %lld values, mismatches %lld\n",
              static_cast<long long>(checked), static_cast<long long>(bad));
}

TEST(Nvfp4Encoder, EightPackedCodesMatchElementByElement) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  int64_t bad = 0;
  for (int t = 0; t < 200000; ++t) {
    float x[8];
    for (float& v : x) {
      v = u(rng);
      if (rng() % 8 == 0) v = std::ldexp(std::round(v * 4.0f), -2);  // ties
      if (rng() % 16 == 0) v = (rng() & 1) ? -0.0f : 0.0f;
    }
    const float enc = (rng() % 4 == 0) ? 1.0f : std::ldexp(1.0f + (rng() % 1000) / 1000.0f, static_cast<int>(rng() % 5) - 2);
    bool cap = false;
    uint32_t want = 0;
    for (int i = 0; i < 8; ++i) {
      const float y = x[i] * enc;
      if (!(std::fabs(y) < 7.0f)) cap = true;
      want |= static_cast<uint32_t>(bf::encode_e2m1(y)) << (4 * i);
    }
    const uint32_t got = (cap ? nv::encode8_magnitudes<true>(x, enc) : nv::encode8_magnitudes<false>(x, enc)) |
                         nv::sign_nibbles_reference(x);
    if (got != want && bad++ < 5) ADD_FAILURE() << std::hex << "got 0x" << got << " want 0x" << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Nvfp4Philox, SixteenWordsMatchPhiloxElementWordAtEveryPhase) {
  int64_t bad = 0;
  const uint64_t seeds[] = {0, 1, 0x0123456789ABCDEFull, ~0ull};
  const uint64_t offsets[] = {0, 7, 0xFFFFFFFF00000001ull};
  const uint64_t starts[] = {0, 1, 2, 3, 4, 5, 17, 1000003, (uint64_t{1} << 32) - 5, (uint64_t{1} << 40) + 3};
  for (uint64_t seed : seeds)
    for (uint64_t off : offsets)
      for (uint64_t i0 : starts) {
        uint32_t r[16];
        nv::philox_words16(seed, off, i0, r);
        for (int k = 0; k < 16; ++k)
          if (r[k] != bf::philox_element_word(seed, off, i0 + k) && bad++ < 5)
            ADD_FAILURE() << "seed " << seed << " offset " << off << " index " << i0 + k;
      }
  EXPECT_EQ(bad, 0);
}

TEST(Nvfp4Stochastic, EightCodesMatchFormats) {
  std::mt19937_64 rng(11);
  int64_t bad = 0;
  for (int t = 0; t < 100000; ++t) {
    float x[8];
    uint32_t r[8];
    for (int i = 0; i < 8; ++i) {
      x[i] = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 128.0f;
      r[i] = static_cast<uint32_t>(rng());
      if (rng() % 8 == 0) r[i] = rng() % 2 ? 0u : 0xFFFFFFFFu;
    }
    const float enc = std::ldexp(1.0f + (rng() % 100) / 100.0f, static_cast<int>(rng() % 4) - 2);
    uint32_t want = 0;
    for (int i = 0; i < 8; ++i) want |= static_cast<uint32_t>(bf::encode_e2m1_stochastic(x[i] * enc, r[i])) << (4 * i);
    if (nv::encode8_stochastic(x, enc, r) != want && bad++ < 5) ADD_FAILURE() << "trial " << t;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Nvfp4Scale, HostScaleCodesAreFormatsBlockScaleCode) {
  std::mt19937 rng(3);
  for (int t = 0; t < 100000; ++t) {
    const float amax = bf::bits_float(rng() % 0x7F800000u);
    const float tensor_amax = bf::bits_float(rng() % 0x7F800000u);
    const bf::Nvfp4TensorScales ts = bf::nvfp4_tensor_scales(tensor_amax);
    const uint32_t got = nv::scale_code(amax, nv::block_scale_factor(ts.s_enc));
    ASSERT_EQ(got, bf::nvfp4_block_scale_code(amax, ts.s_enc)) << amax << " " << tensor_amax;
  }
}

// The kernels' unscaled RHT (formats' butterflies without the final x 0.25) against
// formats::hadamard16_inplace, bit for bit, with its block maximum; and the fold of the x 0.25 into
// the encode factor for 16-bit inputs: fl(fl(v * 0.25) * enc) == fl(v * fl(enc * 0.25)) when
// enc >= 2^-124.
TEST(Nvfp4Hadamard, UnscaledTransformAndFoldMatchFormats) {
  std::mt19937_64 rng(19);
  int64_t bad = 0, checked = 0;
  for (int t = 0; t < 200000; ++t) {
    const DType type = t % 3 == 0 ? DType::kF16 : DType::kBf16;
    float x[16];
    for (float& v : x) {
      uint32_t bits = static_cast<uint32_t>(rng()) & 0xFFFFu;
      const uint64_t z = rng() % 16;
      if (z == 0) bits &= 0x807Fu;  // bf16 / fp16 subnormals and small values
      if (z == 1) bits = (type == DType::kBf16 ? 0x7F7Fu : 0x7BFFu) | (rng() & 1 ? 0x8000u : 0u);
      if (z == 2 && t % 7 == 0) bits = type == DType::kBf16 ? 0x7F80u : 0x7C00u;  // Inf
      if (type == DType::kBf16 && (bits & 0x7FFFu) > 0x7F80u) bits = 0x3F80u;  // no NaN input here
      if (type == DType::kF16 && (bits & 0x7FFFu) > 0x7C00u) bits = 0x3C00u;
      v = type == DType::kBf16 ? bf::bf16_bits_to_float(static_cast<uint16_t>(bits))
                                   : bf::fp16_bits_to_float(static_cast<uint16_t>(bits));
    }
    float want[16], v[16];
    std::memcpy(want, x, sizeof want);
    std::memcpy(v, x, sizeof v);
    bf::hadamard16_inplace(want);
    const float vmax = nv::rht16_unscaled(v);
    float want_max = 0.0f;
    bool want_nonfinite = false;
    for (int i = 0; i < 16; ++i) {
      const float scaled = v[i] * 0.25f;
      ++checked;
      const bool same = (std::isnan(scaled) && std::isnan(want[i])) || bf::float_bits(scaled) == bf::float_bits(want[i]);
      if (!same && bad++ < 5) ADD_FAILURE() << "trial " << t << " element " << i << ": " << scaled << " vs " << want[i];
      if (!std::isfinite(want[i])) want_nonfinite = true;
      else want_max = std::max(want_max, std::fabs(want[i]));
      if (std::isfinite(v[i]) && bf::float_bits(scaled * 4.0f) != bf::float_bits(v[i]) && bad++ < 5)
        ADD_FAILURE() << "v * 0.25 inexact: " << v[i];
    }
    const float got_max = vmax * 0.25f;
    if (want_nonfinite) {
      if (std::isfinite(got_max) && bad++ < 5) ADD_FAILURE() << "trial " << t << ": block max misses a NaN / Inf";
    } else if (bf::float_bits(got_max) != bf::float_bits(want_max) && bad++ < 5) {
      ADD_FAILURE() << "trial " << t << ": block max " << got_max << " vs " << want_max;
    }
    // The fold, for encode factors down to 2^-124.
    const float enc = std::ldexp(1.0f + static_cast<float>(rng() % 8388608) / 8388608.0f, static_cast<int>(rng() % 250) - 124);
    for (int i = 0; i < 16; ++i) {
      if (!std::isfinite(v[i])) continue;
      const float a = std::fabs(want[i]) * enc, b = std::fabs(v[i]) * (enc * 0.25f);
      if (bf::float_bits(a) != bf::float_bits(b) && bad++ < 5) ADD_FAILURE() << "fold: v " << v[i] << " enc " << enc;
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf("nvfp4_quantize_test: unscaled RHT + fold vs formats::hadamard16_inplace: %lld values, mismatches %lld\n",
              static_cast<long long>(checked), static_cast<long long>(bad));
}
// ==== GPU sweeps of the device arithmetic =========================================================

struct SweepCounts {
  unsigned long long checked, mismatches, first[4], got[4], want[4];
};

__device__ void note_mismatch(SweepCounts* c, uint32_t bits, uint32_t got, uint32_t want) {
  const unsigned long long k = atomicAdd(&c->mismatches, 1ull);
  if (k < 4) c->first[k] = bits, c->got[k] = got, c->want[k] = want;
}

__global__ void encoder_sweep_kernel(SweepCounts* c) {
  unsigned long long checked = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32); i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t bits = static_cast<uint32_t>(i);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) continue;  // NaN: never encoded
    const float y = __uint_as_float(bits), a = fabsf(y);
    const uint32_t want = blockscale::formats::encode_e2m1(y);
    const uint32_t sign = (bits >> 31) << 3;
    const uint32_t got = (nv::e2m1_magnitude_biased<true>(a) - nv::kBiasedZero) | sign;
    ++checked;
    if (got != want) note_mismatch(c, bits, got, want);
    if (a < 7.0f) {
      const uint32_t got2 = (nv::e2m1_magnitude_biased<false>(a) - nv::kBiasedZero) | sign;
      if (got2 != want) note_mismatch(c, bits, got2 | 0x100, want);
    }
  }
  atomicAdd(&c->checked, checked);
}

// Every fp32 pattern y, with r = a hash of y, 0, ~0 and the words on both sides of the rounding
// threshold ceil(frac * 2^32) (frac as formats computes it, in double).
__global__ void stochastic_sweep_kernel(SweepCounts* c) {
  unsigned long long checked = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32); i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t bits = static_cast<uint32_t>(i);
    const float y = __uint_as_float(bits);
    const double a = fabs(static_cast<double>(y));
    uint32_t r[5] = {bits * 0x9E3779B9u ^ 0x5BD1E995u, 0u, 0xFFFFFFFFu, 0u, 0u};
    int n = 3;
    if (a < 6.0) {
      const double q = a * (a < 2.0 ? 2.0 : a < 4.0 ? 1.0 : 0.5);
      const double t = ceil((q - floor(q)) * 4294967296.0);  // <= 2^32 - 256
      if (t > 0.0) r[n++] = static_cast<uint32_t>(t - 1.0);
      r[n++] = static_cast<uint32_t>(t);
    }
    for (int k = 0; k < n; ++k) {
      const uint32_t want = blockscale::formats::encode_e2m1_stochastic(y, r[k]);
      const uint32_t got = nv::e2m1_stochastic_code(y, r[k]);
      ++checked;
      if (got != want) note_mismatch(c, bits, got | (static_cast<unsigned long long>(r[k]) << 8), want);
    }
  }
  atomicAdd(&c->checked, checked);
}

__global__ void scale_sweep_kernel(SweepCounts* c) {
  unsigned long long checked = 0;
  for (uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b <= 0x7F800000u; b += gridDim.x * blockDim.x) {
    const float v = __uint_as_float(b);
    const uint32_t got = nv::scale_code(v, 1.0f);
    const uint32_t want = b < 0x7F800000u ? blockscale::formats::encode_ue4m3(v) : 0x7Fu;  // Inf: the NaN code
    ++checked;
    if (got != want) note_mismatch(c, b, got, want);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    // NaN of either sign: the NaN code; a product past FLT_MAX: 0x7E.
    const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0xFFC00000u};
    for (uint32_t n : nans) {
      ++checked;
      const uint32_t got = nv::scale_code(__uint_as_float(n), 1.0f);
      if (got != 0x7Fu) note_mismatch(c, n, got, 0x7Fu);
    }
    ++checked;
    const uint32_t got = nv::scale_code(3.0e38f, 2.0f);
    if (got != 0x7Eu) note_mismatch(c, __float_as_uint(3.0e38f), got, 0x7Eu);
  }
  atomicAdd(&c->checked, checked);
}

// Every pair (a, b) of 16-bit patterns: the packed magnitude maximum (both lanes), its fold and
// lane widening against formats' decoding: max(|a|, |b|) exactly, NaN when either is NaN.
template <DType kIn>
__global__ void absmax_sweep_kernel(SweepCounts* c) {
  namespace qd = blockscale::quant::detail;
  unsigned long long checked = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32); i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t a = static_cast<uint32_t>(i) & 0xFFFFu, b = static_cast<uint32_t>(i >> 16);
    auto widen = [](uint32_t h) {
      return kIn == DType::kBf16 ? bf::bf16_bits_to_float(static_cast<uint16_t>(h)) : bf::fp16_bits_to_float(static_cast<uint16_t>(h));
    };
    const float fa = widen(a), fb = widen(b);
    const bool nan = fa != fa || fb != fb;
    const float want = nan ? 0.0f : fmaxf(fabsf(fa), fabsf(fb));
    const uint32_t m = qd::absmax2<kIn>(a | (b << 16), b | (a << 16));
    const float got[3] = {qd::lane_value<kIn>(m, 0), qd::lane_value<kIn>(m, 1), qd::fold_lanes<kIn>(a | (b << 16))};
    for (int k = 0; k < 3; ++k) {
      ++checked;
      const bool ok = nan ? got[k] != got[k] : __float_as_uint(fabsf(got[k])) == __float_as_uint(want);
      if (!ok) note_mismatch(c, static_cast<uint32_t>(i), __float_as_uint(got[k]) | (k << 30), __float_as_uint(want));
    }
  }
  atomicAdd(&c->checked, checked);
}

__global__ void sign_gather_kernel(const uint32_t* words, uint32_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t* w = words + 8 * i;
  nv::SignBytes h0, h1;
  nv::signs_of_halves(w, h0, h1);
  out[6 * i] = nv::with_signs(0, nv::signs_of_pairs(w));
  out[6 * i + 1] = nv::with_signs(0, nv::signs_of_singles<1>(w));
  out[6 * i + 2] = nv::with_signs(0, nv::signs_of_singles<3>(w));
  out[6 * i + 3] = nv::with_signs(0, nv::signs_of_singles<2>(w));
  out[6 * i + 4] = nv::with_signs(0, h0);
  out[6 * i + 5] = nv::with_signs(0, h1);
}

SweepCounts run_sweep(void (*kernel)(SweepCounts*)) {
  SweepCounts c{};
  DeviceBuffer buf;
  EXPECT_OK(buf.alloc(sizeof c, "buf"));
  EXPECT_CUDA(cudaMemset(buf.data(), 0, sizeof c));
  kernel<<<4096, 256>>>(buf.as<SweepCounts>());
  EXPECT_CUDA(cudaGetLastError());
  EXPECT_CUDA(cudaDeviceSynchronize());
  EXPECT_CUDA(cudaMemcpy(&c, buf.data(), sizeof c, cudaMemcpyDeviceToHost));
  return c;
}

TEST(Nvfp4DeviceArithmetic, EncoderMatchesEncodeE2m1OnEveryNonNanFp32) {
  SKIP_WITHOUT_GPU();
  const SweepCounts c = run_sweep(encoder_sweep_kernel);
  EXPECT_EQ(c.checked, (uint64_t{1} << 32) - 2 * ((uint64_t{1} << 23) - 1));
  EXPECT_EQ(c.mismatches, 0u);
  for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
    ADD_FAILURE() << std::hex << "y bits 0x" << c.first[k] << ": got 0x" << c.got[k] << " want 0x" << c.want[k];
  std::printf("nvfp4_quantize_test: device E2M1 encoder vs encode_e2m1: %llu fp32 patterns, mismatches %llu\n", c.checked,
              c.mismatches);
}

TEST(Nvfp4DeviceArithmetic, StochasticEncoderMatchesEncodeE2m1StochasticAroundEveryThreshold) {
  SKIP_WITHOUT_GPU();
  const SweepCounts c = run_sweep(stochastic_sweep_kernel);
  EXPECT_GT(c.checked, 3 * (uint64_t{1} << 32));
  EXPECT_EQ(c.mismatches, 0u);
  for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
    ADD_FAILURE() << std::hex << "y bits 0x" << c.first[k] << ": got 0x" << c.got[k] << " (r << 8) want 0x" << c.want[k];
  std::printf("nvfp4_quantize_test: device SR encoder vs encode_e2m1_stochastic: %llu (y, r) pairs, mismatches %llu\n",
              c.checked, c.mismatches);
}

TEST(Nvfp4DeviceArithmetic, HardwareScaleCodeMatchesEncodeUe4m3FromZeroToInf) {
  SKIP_WITHOUT_GPU();
  const SweepCounts c = run_sweep(scale_sweep_kernel);
  EXPECT_EQ(c.checked, 0x7F800001ull + 5);
  EXPECT_EQ(c.mismatches, 0u);
  for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
    ADD_FAILURE() << std::hex << "value bits 0x" << c.first[k] << ": cvt 0x" << c.got[k] << " encode_ue4m3 0x" << c.want[k];
  std::printf("nvfp4_quantize_test: cvt e4m3x2 scale code vs encode_ue4m3: %llu values in [0, +Inf] and NaN, mismatches %llu\n",
              c.checked, c.mismatches);
}

TEST(Nvfp4DeviceArithmetic, PackedMagnitudeMaximaMatchFormatsOnEveryPair) {
  SKIP_WITHOUT_GPU();
  for (const auto& [name, kernel] : {std::pair{"bf16", &absmax_sweep_kernel<DType::kBf16>},
                                      std::pair{"fp16", &absmax_sweep_kernel<DType::kF16>}}) {
    const SweepCounts c = run_sweep(kernel);
    EXPECT_EQ(c.checked, 3 * (uint64_t{1} << 32)) << name;
    EXPECT_EQ(c.mismatches, 0u) << name;
    for (unsigned long long k = 0; k < std::min(c.mismatches, 4ull); ++k)
      ADD_FAILURE() << name << std::hex << " pair 0x" << c.first[k] << ": got 0x" << c.got[k] << " want 0x" << c.want[k];
    std::printf("nvfp4_quantize_test: packed %s magnitude maxima vs formats: %llu values, mismatches %llu\n", name,
                c.checked, c.mismatches);
  }
}

TEST(Nvfp4DeviceArithmetic, SignGathers) {
  SKIP_WITHOUT_GPU();
  const int n = 1 << 16;
  std::vector<uint32_t> words(8 * n);
  std::mt19937 rng(5);
  for (auto& w : words) w = rng();
  DeviceBuffer dw, dout;
  ASSERT_OK(dw.alloc(words.size() * 4, "dw"));
  ASSERT_OK(dout.alloc(6 * n * 4, "dout"));
  ASSERT_CUDA(cudaMemcpy(dw.data(), words.data(), words.size() * 4, cudaMemcpyHostToDevice));
  sign_gather_kernel<<<n / 256, 256>>>(dw.as<uint32_t>(), dout.as<uint32_t>(), n);
  ASSERT_CUDA(cudaGetLastError());
  std::vector<uint32_t> got(6 * n);
  ASSERT_CUDA(cudaMemcpy(got.data(), dout.data(), got.size() * 4, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t* w = &words[8 * i];
    uint32_t pairs = 0, s1 = 0, s3 = 0, s2 = 0;
    for (int e = 0; e < 8; ++e) {
      pairs |= ((w[e / 2] >> (e % 2 ? 31 : 15)) & 1u) << (4 * e + 3);
      s1 |= ((w[e] >> 15) & 1u) << (4 * e + 3);
      s3 |= ((w[e] >> 31) & 1u) << (4 * e + 3);
      s2 |= ((w[e] >> 23) & 1u) << (4 * e + 3);
    }
    if ((got[6 * i] != pairs || got[6 * i + 1] != s1 || got[6 * i + 2] != s3 || got[6 * i + 3] != s2 ||
         got[6 * i + 4] != s1 || got[6 * i + 5] != s3) && bad++ < 4)
      ADD_FAILURE() << "word group " << i;
  }
  EXPECT_EQ(bad, 0);
}
}  // namespace
