// Device helpers of the NVFP4 quantize kernels (quant/nvfp4_quantize_kernel.cuh): the E2M1 encoder
// (software, the same on every architecture), the element codes of 8 / 16 values with their signs
// packed two per byte, the UE4M3 block scale code, the Philox words of 16 consecutive stored
// elements, and the tensor-scale setup. Everything host-callable here (BS_HOST_DEVICE) is checked
// on the host against formats/ by tests/quant/nvfp4_device_test.cu; the device-only pieces
// (the hardware UE4M3 conversion, the PRMT sign gathers) are checked there on the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <algorithm>
#include <cmath>
#endif

#include "formats/hadamard.h"
#include "formats/nvfp4_scalar.h"
#include "formats/philox.h"
#include "formats/scalar_codecs.h"
#if defined(__CUDACC__)
#include "quant/device_common.cuh"  // defines: prmt_sign
#endif

namespace blockscale::quant::detail::nvfp4 {

// ---- fp32 fused multiply-add, rounded once to nearest even (host: std::fmaf is correctly
// rounded).
BS_HOST_DEVICE float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}
BS_HOST_DEVICE float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
BS_HOST_DEVICE uint32_t min3_u32(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  return __vimin3_u32(a, b, c);  // one VIMNMX3 on sm_90a / sm_100a
#else
  return std::min(std::min(a, b), c);
#endif
}

// ---- E2M1 magnitude code of a = |y| (a >= 0, never NaN: the kernels never encode a NaN), RNE,
// satfinite, as formats::encode_e2m1 rounds it. Returned as the fp32 bits 2^23 + code, i.e.
// 0x4B000000 + code. The grid {0, .5, 1, 1.5, 2, 3, 4, 6} has step 0.5 below 2, 1 in [2, 4) and 2
// above 4, so
//   code = min(rint(2a), rint(a) + 2, rint(a / 2) + 4, 7)      (rint: to nearest, ties to even)
// (each term is exact in its own range and not smaller than the right one elsewhere: the terms
// are rounded values of 2a, a + 2 and a / 2 + 4, which order as the right range says, and
// rounding is monotone; adding an even integer keeps the parity that ties go to). Each term is
// one fp32 operation with a single rounding: 2a + 2^23 (FMA), a + (2^23 + 2), a / 2 + (2^23 + 4)
// (FMA) land in [2^23, 2^24) where the ulp is 1, so RN rounds the fraction to nearest even and
// the bits are 0x4B000000 + the term. Larger a (also Inf) gives larger bits: the minimum with 7
// saturates. kCap = false leaves the last minimum out: valid when a < 7 (the third term
// reaches 8 at a = 7), which the kernels check once per block. tests/quant compares this with
// formats::encode_e2m1 on every non-NaN fp32 pattern (host: the range that matters, GPU: all).
template <bool kCap>
BS_HOST_DEVICE uint32_t e2m1_magnitude_biased(float a) {
  const float t0 = fma_rn(a, 2.0f, 8388608.0f);   // 2^23 + rint(2a)
  const float t1 = add_rn(a, 8388610.0f);         // 2^23 + rint(a) + 2
  const float t2 = fma_rn(a, 0.5f, 8388612.0f);   // 2^23 + rint(a / 2) + 4
  uint32_t m = min3_u32(formats::float_bits(t0), formats::float_bits(t1), formats::float_bits(t2));
  if (kCap) m = m < 0x4B000007u ? m : 0x4B000007u;
  return m;
}
inline constexpr uint32_t kBiasedZero = 0x4B000000u;

// Eight biased magnitude codes -> one word, element i at nibble i. A pair m[2k] + 16 m[2k+1] has
// the pair's two codes in its low byte and zeros in bytes 1 and 2 (the 0x4B000000 bias of m[2k]
// and the 0xB0000000 of 16 m[2k+1] both sit in byte 3); so p + (p' << 8) has two clean low bytes
// (p' << 8 shifts the bias out), and the two halves meet by a byte pick (PRMT on the device).
BS_HOST_DEVICE uint32_t pack8(const uint32_t* m) {
  const uint32_t p0 = m[0] + (m[1] << 4), p1 = m[2] + (m[3] << 4);
  const uint32_t p2 = m[4] + (m[5] << 4), p3 = m[6] + (m[7] << 4);
  const uint32_t q0 = p0 + (p1 << 8), q1 = p2 + (p3 << 8);
#if defined(__CUDA_ARCH__)
  return __byte_perm(q0, q1, 0x5410u);
#else
  return (q0 & 0xFFFFu) | (q1 << 16);
#endif
}

// The fp32 multiply of the element by the block's encode factor: y = x * enc (RN), |y| taken
// without a sign (enc > 0).
BS_HOST_DEVICE float scaled_magnitude(float x, float enc) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(fabsf(x), enc);
#else
  return std::fabs(x) * enc;
#endif
}

// Eight values -> eight E2M1 codes with signs, one word (element i in nibble i). The sign bits
// come from `sign_bits` (bit 4i+3 set for a negative element), which the device gathers with
// PRMT; the host reference builds it bit by bit.
template <bool kCap>
BS_HOST_DEVICE uint32_t encode8_magnitudes(const float* x, float enc) {
  uint32_t m[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) m[i] = e2m1_magnitude_biased<kCap>(scaled_magnitude(x[i], enc));
  return pack8(m);
}

// Host / reference: bit 4i+3 = sign of x[i].
BS_HOST_DEVICE uint32_t sign_nibbles_reference(const float* x) {
  uint32_t s = 0;
  for (int i = 0; i < 8; ++i) s |= (formats::float_bits(x[i]) >> 31) << (4 * i + 3);
  return s;
}

// ---- NaN-propagating maximum (max.NaN.f32): a block holding a NaN or Inf shows it.
BS_HOST_DEVICE float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? std::nanf("") : (a > b ? a : b);
#endif
}

BS_HOST_DEVICE float abs_f(float x) {
#if defined(__CUDA_ARCH__)
  return fabsf(x);
#else
  return std::fabs(x);
#endif
}

// ---- The 16-point RHT of formats::hadamard16_inplace WITHOUT its final multiply by 0.25:
// the same sign flips and fp32 butterflies in the same order (strides 1, 2, 4, 8), so
// formats::hadamard16_inplace(x)[i] == mul_rn(v[i], 0.25f) bit for bit. Returns
// max_j RN(|a_j| + |b_j|) over the last stage's inputs (a_j, b_j) = (v[j], v[j + 8]) before it:
// for finite a, b, RN(|a| + |b|) = max(|RN(a + b)|, |RN(a - b)|) (the larger magnitude is the
// same-sign sum), and it is NaN or Inf exactly when one of the two outputs is. So it is the
// block's max |v| (NaN propagating) for 8 adds and 7 maxima instead of 15 maxima.
BS_HOST_DEVICE float rht16_unscaled(float v[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if ((formats::kHadamardSignBits >> i) & 1u) v[i] = -v[i];
#pragma unroll
  for (int h = 1; h < 8; h *= 2) {
#pragma unroll
    for (int i = 0; i < 16; i += 2 * h) {
#pragma unroll
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = add_rn(a, b);
        v[j + h] = formats::sub_rn(a, b);
      }
    }
  }
  float p[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float a = v[j], b = v[j + 8];
    v[j] = add_rn(a, b);
    v[j + 8] = formats::sub_rn(a, b);
    p[j] = add_rn(abs_f(a), abs_f(b));
  }
  return max_nan(max_nan(max_nan(p[0], p[1]), max_nan(p[2], p[3])), max_nan(max_nan(p[4], p[5]), max_nan(p[6], p[7])));
}

// ---- UE4M3 block scale of a finite block amax: formats::nvfp4_block_scale_code with the
// product precomputed per tensor: k = S_enc * fl(1/6) (both RN, as formats), code = UE4M3(amax * k).
BS_HOST_DEVICE float block_scale_factor(float s_enc) { return formats::mul_rn(s_enc, 1.0f / 6.0f); }

// The scale code of one block: UE4M3(min(amax * k, FLT_MAX)) for a finite amax >= 0 (the product
// may overflow to +Inf; UE4M3 saturates it to 0x7E), the NaN code 0x7F for a NaN or Inf amax. The
// product is fma(amax, k, amax - amax): amax * k rounded once for a finite amax (the addend is
// +0), NaN otherwise, and the minimum with FLT_MAX keeps the NaN (min.NaN). Device: the hardware
// cvt.rn.satfinite.e4m3x2.f32 (sm_89+) with a zero upper lane, so the result is the code alone
// (E4M3 and UE4M3 agree on every value >= 0, and the canonical NaN converts to 0x7F: tests/quant
// checks it against formats::encode_ue4m3 on every fp32 pattern in [0, +Inf] and on NaN); host:
// formats::encode_ue4m3.
BS_HOST_DEVICE uint32_t scale_code(float amax, float k) {
  float p = fma_rn(amax, k, formats::sub_rn(amax, amax));
#if defined(__CUDA_ARCH__)
  asm("min.NaN.f32 %0, %0, 0f7F7FFFFF;" : "+f"(p));
  uint32_t r;  // mov with a zero half: the compiler then knows the upper bits are 0
  asm("{.reg .b16 c, z;\n cvt.rn.satfinite.e4m3x2.f32 c, %1, %2;\n mov.b16 z, 0;\n mov.b32 %0, {c, z};}" : "=r"(r) : "f"(0.0f), "f"(p));
  return r;
#else
  if (p != p) return 0x7F;
  return formats::encode_ue4m3(p < formats::kFltMax ? p : formats::kFltMax);
#endif
}

// ---- Philox words of 16 consecutive stored elements i0 .. i0+15 (formats::philox_element_word:
// word index % 4 of Philox4x32-10(counter = (index / 4, offset), key = seed)). One generator call
// per group of four; when i0 is not a multiple of 4 the 16 elements touch 5 groups and the words
// are picked by selects (the phase s = i0 % 4 is not known at compile time; constant indexing
// keeps the words in registers).
BS_HOST_DEVICE formats::Philox4x32 philox_group(uint64_t seed, uint64_t offset, uint64_t group) {
  return formats::philox4x32_10(
      formats::Philox4x32{{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                           static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

BS_HOST_DEVICE void philox_words16(uint64_t seed, uint64_t offset, uint64_t i0, uint32_t r[16]) {
  const uint64_t g0 = i0 / 4;
  const uint32_t s = static_cast<uint32_t>(i0 % 4);
  uint32_t w[20];
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const formats::Philox4x32 o = philox_group(seed, offset, g0 + g);
#pragma unroll
    for (int j = 0; j < 4; ++j) w[4 * g + j] = o.v[j];
  }
  if (s == 0) {
#pragma unroll
    for (int k = 0; k < 16; ++k) r[k] = w[k];
    return;
  }
  const formats::Philox4x32 o = philox_group(seed, offset, g0 + 4);
#pragma unroll
  for (int j = 0; j < 4; ++j) w[16 + j] = o.v[j];
#pragma unroll
  for (int k = 0; k < 16; ++k) r[k] = s == 1 ? w[k + 1] : s == 2 ? w[k + 2] : w[k + 3];
}

#if defined(__CUDACC__)
// ---- formats::encode_e2m1_stochastic(y, r), bit for bit, without its double arithmetic and
// branches (device). With a = |y| < 6 and q = a * inv_spacing (exact: inv_spacing = 2, 1, 0.5 for
// a in [0, 2), [2, 4), [4, 6)), formats' lo_code = floor(q) + {0, 2, 4} and its frac = q - floor(q)
// (exact). floor(q) comes from RD(q + 2^23) (q < 4, ulp 1 there); F = frac * 2^32 is exact in fp32
// (F < 2^32, a power-of-two scaling). Rounding up is formats' r < F (double, exact); for an integer
// r and a float F that is RZ(r) < F: RZ(r) <= r < succ(RZ(r)), so RZ(r) >= F implies r >= F, and
// RZ(r) < F implies F >= succ(RZ(r)) > r. a >= 6 (Inf included) gives sign | 7, NaN gives 7.
// tests/quant compares it with formats on the GPU around every decision point.
__device__ __forceinline__ uint32_t e2m1_stochastic_code(float y, uint32_t r) {
  const uint32_t u = __float_as_uint(y);
  const float a = fabsf(y);
  const bool lt2 = a < 2.0f, lt4 = a < 4.0f;
  const float q = __fmul_rn(a, lt2 ? 2.0f : (lt4 ? 1.0f : 0.5f));
  const float t = __fadd_rd(q, 8388608.0f);  // 2^23 + floor(q)
  const float frac = __fsub_rn(q, __fsub_rn(t, 8388608.0f));
  const bool up = __uint2float_rz(r) < __fmul_rn(frac, 4294967296.0f);
  uint32_t code = (__float_as_uint(t) - 0x4B000000u) + (lt2 ? 0u : (lt4 ? 2u : 4u)) + (up ? 1u : 0u);
  code = a < 6.0f ? code : 7u;
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? 7u : (code | ((u >> 28) & 8u));
}
#endif

// Eight stochastically rounded codes (formats::encode_e2m1_stochastic on y = x * enc, sign kept).
BS_HOST_DEVICE uint32_t encode8_stochastic(const float* x, float enc, const uint32_t* r) {
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#if defined(__CUDA_ARCH__)
    word |= e2m1_stochastic_code(__fmul_rn(x[i], enc), r[i]) << (4 * i);
#else
    word |= static_cast<uint32_t>(formats::encode_e2m1_stochastic(formats::mul_rn(x[i], enc), r[i])) << (4 * i);
#endif
  }
  return word;
}

#if defined(__CUDACC__)
// ---- Sign gathers (device), from the input's own bits (prmt_sign: quant/device_common.cuh). The
// signs of eight elements as bytes 0x00 / 0xFF: byte k of `even` is the sign of element 2k, byte k
// of `odd` that of element 2k + 1; with_signs() puts them at bit 4i+3 of a word of eight codes
// (two LOP3s; the magnitude codes' bit 3 is 0).
struct SignBytes {
  uint32_t even, odd;
};
// A block's sixteen: elements 0..7 and 8..15.
struct BlockSigns {
  SignBytes lo, hi;
};

__device__ __forceinline__ uint32_t with_signs(uint32_t codes, SignBytes s) {
  // Two LOP3s on the codes (asm: kept from being regrouped into a sign word and a third OR).
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, 0x08080808, 0xF8;" : "=r"(r) : "r"(codes), "r"(s.even));
  asm("lop3.b32 %0, %1, %2, 0x80808080, 0xF8;" : "=r"(r) : "r"(r), "r"(s.odd));
  return r;
}

// Eight 16-bit elements in four words (element 2m in the low half of word m): the signs are the
// top bits of bytes 1 and 3.
__device__ __forceinline__ SignBytes signs_of_pairs(const uint32_t* w) {
  const uint32_t p01 = prmt_sign(w[0], w[1], 0xFBD9u);  // signs of elements 0, 2, 1, 3
  const uint32_t p23 = prmt_sign(w[2], w[3], 0xFBD9u);  // 4, 6, 5, 7
  return SignBytes{__byte_perm(p01, p23, 0x5410u), __byte_perm(p01, p23, 0x7632u)};
}

// Two interleaved groups of eight 16-bit elements: element e of group h is half h of word e (two
// columns of eight rows). Four gathers serve both groups.
__device__ __forceinline__ void signs_of_halves(const uint32_t* w, SignBytes& g0, SignBytes& g1) {
  const uint32_t a = prmt_sign(w[0], w[2], 0xFBD9u);  // group 0 elements 0, 2; group 1 elements 0, 2
  const uint32_t b = prmt_sign(w[4], w[6], 0xFBD9u);  // 4, 6; 4, 6
  const uint32_t c = prmt_sign(w[1], w[3], 0xFBD9u);  // 1, 3; 1, 3
  const uint32_t d = prmt_sign(w[5], w[7], 0xFBD9u);  // 5, 7; 5, 7
  g0 = SignBytes{__byte_perm(a, b, 0x5410u), __byte_perm(c, d, 0x5410u)};
  g1 = SignBytes{__byte_perm(a, b, 0x7632u), __byte_perm(c, d, 0x7632u)};
}

// Eight elements, one per word, the sign in the top bit of byte `kByte` (3: fp32, 1 / 3: the low /
// high half of a 16-bit pair).
template <int kByte>
__device__ __forceinline__ SignBytes signs_of_singles(const uint32_t* w) {
  constexpr uint32_t kSel = (kByte | 8u) | ((kByte + 4u) | 8u) << 4;  // bytes 0, 1: a's, b's sign
  const uint32_t e02 = prmt_sign(w[0], w[2], kSel), e46 = prmt_sign(w[4], w[6], kSel);
  const uint32_t e13 = prmt_sign(w[1], w[3], kSel), e57 = prmt_sign(w[5], w[7], kSel);
  return SignBytes{__byte_perm(e02, e46, 0x5410u), __byte_perm(e13, e57, 0x5410u)};
}
#endif

}  // namespace blockscale::quant::detail::nvfp4
