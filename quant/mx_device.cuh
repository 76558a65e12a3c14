// Device helpers of the MX kernels: the E8M0 block scale of a block amax, the E2M1 element
// encoder (software on every architecture), and the 16-element encode of every MX recipe (the
// input and FP8 helpers they share with every recipe are in quant/device_common.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "formats/recipe.h"
#include "formats/scalar_codecs.h"
#include "quant/device_common.cuh"
#include "quant/mx_quantize.h"

namespace blockscale::quant::detail {

// ---- The MX block scale of a block whose max |x| has the fp32 bits `amax` (NaN bits, which
// order above Inf, and Inf mark a non-finite block: NaN scale, element codes 0x00).
struct MxScale {
  uint32_t code;  // E8M0
  float inv;      // 2^-e, exact
  bool nonfinite;
};

// The constants of formats::mx_scale_exponent(amax, maxnorm, ceil) for one recipe and rounding:
//   emax          : maxnorm's unbiased exponent
//   mant_threshold: ceil: maxnorm's mantissa field (amax's mantissa above it adds one to e);
//                   floor: 0x7FFFFF (never exceeded)
struct MxScaleRule {
  int emax;
  uint32_t mant_threshold;
};

inline MxScaleRule mx_scale_rule(float maxnorm, bool ceil_rounding) {
  const uint32_t b = formats::float_bits(maxnorm);
  return {static_cast<int>(b >> 23) - 127, ceil_rounding ? (b & 0x7FFFFFu) : 0x7FFFFFu};
}

// formats::mx_scale_exponent + exp2i, folded into integer steps: for finite amax >= 0 with
// biased exponent E, code = e + 127 = max(0, E - emax + [mantissa > threshold]) (a subnormal or
// zero amax has E = 0 and lands below 0: clamped, as e is to -127), and 2^-e has the biased
// exponent 254 - code (always normal: code <= 254 - emax + 1). tests/quant compares this with
// formats on every finite amax pattern, both formats, both roundings.
__device__ __forceinline__ MxScale mx_block_scale(uint32_t amax, MxScaleRule rule) {
  if (amax >= 0x7F800000u) return {formats::kE8M0Nan, 0.0f, true};
  int code = static_cast<int>(amax >> 23) - rule.emax + ((amax & 0x7FFFFFu) > rule.mant_threshold ? 1 : 0);
  code = max(code, 0);
  return {static_cast<uint32_t>(code), __uint_as_float(static_cast<uint32_t>(254 - code) << 23), false};
}

// ---- E2M1 (MXFP4 elements), in software on every architecture. The E2M1 pair conversion
// (cvt.rn.satfinite.e2m1x2.f32) exists only on sm_100a/sm_103a; the sm_90a and sm_100a images run
// this same routine, so they write identical bytes by construction.
// fp32 y (finite) -> E2M1 code, RNE, satfinite, sign kept (formats::encode_e2m1 for finite y;
// tests/quant compares the two on every finite fp32 pattern):
//   |y| >= 1 : E2M1 is normal there (1 mantissa bit): round |y|'s bits to nearest even at bit 22
//              (the carry runs into the exponent), code = (exponent, mantissa bit) - 252, at most 7;
//   |y| <  1 : the grid is 0, 0.5, 1: |y| + 2^22 in fp32 (ulp 0.5, RNE) lands on 2^22 + code / 2.
__device__ __forceinline__ uint32_t e2m1_code(float y) {
  const uint32_t u = __float_as_uint(y);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t r = a + 0x1FFFFFu + ((a >> 22) & 1u);
  const uint32_t normal = (min(r, 0x40C00000u) >> 22) - 252u;  // 0x40C00000 >> 22 = 259: code 7
  const uint32_t small = __float_as_uint(__fadd_rn(__uint_as_float(a), 4194304.0f)) - 0x4A800000u;  // 2^22
  return (a >= 0x3F800000u ? normal : small) | ((u >> 28) & 8u);
}

// ---- The codes of 16 consecutive elements of a block: FP8 16 bytes (uint4), E2M1 8 bytes (uint2,
// element 2i in the low nibble of byte i).
template <formats::Format kRecipe>
struct MxCodes {
  static constexpr bool kFp4 = kRecipe == formats::Format::kMxfp4;
  static constexpr int kBytes = kFp4 ? 8 : 16;  // bytes of 16 codes
  using Vec = std::conditional_t<kFp4, uint2, uint4>;
};

// Eight values times `inv` (x * 2^-e in fp32, RN, as formats) -> eight E2M1 codes in one word.
__device__ __forceinline__ uint32_t encode8_e2m1(const float* f, float inv) {
  uint32_t w = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) w |= e2m1_code(formats::mul_rn(f[i], inv)) << (4 * i);
  return w;
}

template <formats::Format kRecipe, ElementEncoder kEnc>
__device__ __forceinline__ typename MxCodes<kRecipe>::Vec encode16(const float* f, float inv) {
  if constexpr (MxCodes<kRecipe>::kFp4) {
    return make_uint2(encode8_e2m1(f, inv), encode8_e2m1(f + 8, inv));
  } else {
    return make_uint4(encode4<kRecipe, kEnc>(f, inv), encode4<kRecipe, kEnc>(f + 4, inv),
                      encode4<kRecipe, kEnc>(f + 8, inv), encode4<kRecipe, kEnc>(f + 12, inv));
  }
}

// ---- E2M1 two at a time, for 16-bit input (bf16, fp16): y = x * 2^-e as a pair of 16-bit floats
// (H = bf16 or f16 bits, lower element in the low half), then per half, with packed integer ops
// that never carry across halves:
//   E = |y|'s exponent field clamped to [one, one + 2] (one = 1.0's field), the E2M1 quantum of
//   |y|'s binade (0.5 below 2, then 1, then 2: E2M1's spacing); M = the power of two whose ulp in
//   H is that quantum; |y| + M in H (round to nearest even: E2M1's rounding) lands k quanta above
//   M, and the code is k + 2 * (E - one), at most 7 (satfinite); the sign is y's.
// The sum stays in M's binade (|y| < 8), so k = bits(|y| + M) - bits(M). tests/quant compares
// this with formats::encode_e2m1(x * 2^-e) for every bf16 / fp16 x and every scale.
template <bool kBf16>
__device__ __forceinline__ uint32_t e2m1x2_codes(uint32_t y2) {
  constexpr uint32_t kMantBits = kBf16 ? 7 : 10;
  constexpr uint32_t kExpMask = kBf16 ? 0xFFu : 0x1Fu;
  constexpr uint32_t kOne = kBf16 ? 127u : 15u;        // exponent field of 1.0
  constexpr uint32_t kMagic = kMantBits - 1u;          // M = 2^(E - one - 1 + mant bits)
  constexpr uint32_t kLo = 0x00010001u;                // one in each half
  const uint32_t a = y2 & 0x7FFF7FFFu;
  uint32_t e = (a >> kMantBits) & (kExpMask * kLo);
  e = __vmaxu2(__vminu2(e, (kOne + 2u) * kLo), kOne * kLo);
  const uint32_t m = (e + kMagic * kLo) << kMantBits;  // per half < 2^15: no carry across
  uint32_t sum;
  if constexpr (kBf16) {
    const __nv_bfloat162 r = __hadd2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                     *reinterpret_cast<const __nv_bfloat162*>(&m));
    sum = *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __half2 r = __hadd2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&m));
    sum = *reinterpret_cast<const uint32_t*>(&r);
  }
  const uint32_t k = sum - m + (2u * e - 2u * kOne * kLo);  // every half's result in [0, 12]
  return __vminu2(k, 7u * kLo) | ((y2 >> 12) & 0x00080008u);
}

// Four pairs of codes (bits 0-3 and 16-19 of each word) -> one word of eight nibbles, pair i in
// byte i (its lower element in the low nibble).
__device__ __forceinline__ uint32_t pack_e2m1x8(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  const uint32_t t01 = __byte_perm(c0 | (c0 >> 12), c1 | (c1 >> 12), 0x0040);
  const uint32_t t23 = __byte_perm(c2 | (c2 >> 12), c3 | (c3 >> 12), 0x0040);
  return __byte_perm(t01, t23, 0x5410);
}

// y = x * 2^-e for a pair of bf16 values, exactly (a product of a bf16 and a power of two is a
// bf16 unless it is below bf16's normal range, where E2M1 rounds it to ±0 anyway; the caller
// keeps the subnormal inputs, which the product could scale up into range, off this path). inv2:
// 2^-e as bf16 in both halves.
__device__ __forceinline__ uint32_t scale_bf16x2(uint32_t x2, uint32_t inv2) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&x2),
                                   *reinterpret_cast<const __nv_bfloat162*>(&inv2));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Two fp32 values (x * 2^-e of fp16 input) -> an f16 pair, RN: exact where E2M1 can tell (|y| >=
// 2^-14; fp16 input has 11 significant bits), a tiny ±value below.
__device__ __forceinline__ uint32_t f16x2_rn(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The smallest block scale code for which bf16 products may take the packed path: below it a
// subnormal bf16 input (< 2^-126) could scale up to |y| >= 0.25 (code < 4 means e < -123).
constexpr uint32_t kPackedE2m1MinCode = 4;

// 16 codes of bf16 input: pairs[k] holds elements 2k (low half) and 2k + 1 as bf16 bits, all of
// one block with scale s. The packed path (e2m1x2_codes) where it is exact, else the scalar encoder.
__device__ __forceinline__ uint2 encode16_e2m1_bf16(const uint32_t* pairs, const MxScale& s) {
  using In = InputTraits<DType::kBf16>;
  if (s.code < kPackedE2m1MinCode) {  // rare: tiny blocks, where subnormal inputs matter
    float f[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] = In::elem(pairs[i / 2], i % 2);
    return encode16<formats::Format::kMxfp4, ElementEncoder::kSoftware>(f, s.inv);
  }
  const uint32_t inv2 = (__float_as_uint(s.inv) >> 16) * 0x00010001u;  // 2^-e is a bf16 exactly
  uint32_t c[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) c[k] = e2m1x2_codes<true>(scale_bf16x2(pairs[k], inv2));
  return make_uint2(pack_e2m1x8(c[0], c[1], c[2], c[3]), pack_e2m1x8(c[4], c[5], c[6], c[7]));
}

// 16 codes of fp16 input (f: the 16 values, widened exactly): x * 2^-e in fp32 (as formats), as
// f16 pairs, then the packed path.
__device__ __forceinline__ uint2 encode16_e2m1_fp16(const float* f, float inv) {
  uint32_t c[8];
#pragma unroll
  for (int k = 0; k < 8; ++k)
    c[k] = e2m1x2_codes<false>(f16x2_rn(formats::mul_rn(f[2 * k], inv), formats::mul_rn(f[2 * k + 1], inv)));
  return make_uint2(pack_e2m1x8(c[0], c[1], c[2], c[3]), pack_e2m1x8(c[4], c[5], c[6], c[7]));
}

__device__ __forceinline__ uint4 zero_vec(uint4) { return make_uint4(0, 0, 0, 0); }
__device__ __forceinline__ uint2 zero_vec(uint2) { return make_uint2(0, 0); }

// Byte i (< 16 or < 8) of a vector of codes.
__device__ __forceinline__ uint8_t vec_byte(const uint4& v, int i) {
  const uint32_t w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
  return static_cast<uint8_t>(w >> (8 * (i % 4)));
}
__device__ __forceinline__ uint8_t vec_byte(const uint2& v, int i) {
  return static_cast<uint8_t>((i < 4 ? v.x : v.y) >> (8 * (i % 4)));
}

}  // namespace blockscale::quant::detail
