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

// ---- E2M1 two at a time, for fp16 input: y = x * 2^-e as an f16 pair (lower element in the
// low half), then per half, with packed integer ops that never carry across halves:
//   E = |y|'s exponent field clamped to [one, one + 2] (one = 1.0's field), the E2M1 quantum of
//   |y|'s binade (0.5 below 2, then 1, then 2: E2M1's spacing); M = the power of two whose ulp in
//   f16 is that quantum; |y| + M in f16 (round to nearest even: E2M1's rounding) lands k quanta
//   above M, and the code is k + 2 * (E - one), at most 7 (satfinite); the sign is y's.
// The sum stays in M's binade (|y| < 8), so k = bits(|y| + M) - bits(M). tests/quant compares
// this with formats::encode_e2m1(x * 2^-e) for every fp16 x and every scale.
__device__ __forceinline__ uint32_t e2m1x2_codes_f16(uint32_t y2) {
  constexpr uint32_t kMantBits = 10;
  constexpr uint32_t kOne = 15u;                // exponent field of 1.0
  constexpr uint32_t kMagic = kMantBits - 1u;   // M = 2^(E - one - 1 + mant bits)
  constexpr uint32_t kLo = 0x00010001u;         // one in each half
  const uint32_t a = y2 & 0x7FFF7FFFu;
  uint32_t e = (a >> kMantBits) & (0x1Fu * kLo);
  e = __vmaxu2(__vminu2(e, (kOne + 2u) * kLo), kOne * kLo);
  const uint32_t m = (e + kMagic * kLo) << kMantBits;  // per half < 2^15: no carry across
  const __half2 r = __hadd2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&m));
  const uint32_t sum = *reinterpret_cast<const uint32_t*>(&r);
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

// Two fp32 values (x * 2^-e of fp16 input) -> an f16 pair, RN: exact where E2M1 can tell (|y| >=
// 2^-14; fp16 input has 11 significant bits), a tiny ±value below.
__device__ __forceinline__ uint32_t f16x2_rn(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// ---- E2M1 of bf16 input, two elements per instruction. With y = |x| * 2^-e exact (x bf16, not
// subnormal: see kPackedE2m1MinCode), the code is formats' RNE E2M1 of y, as e2m1_magnitude_biased
// computes it in fp32: min(rint(2y), rint(y) + 2, rint(y / 2) + 4, 7). Here each term is one bf16
// fma of |x| with 2^-e times 2, 1 or 1/2 (constants of the block: exact), plus 128, 130 or 132:
// the exact product plus the constant is rounded once (RNE) to bf16, whose ulp in [128, 256) is 1,
// so the result is 128 + the term's integer, ties to even (128, 130, 132 are even). Terms past 135
// only ever lose the minimum against the cap. The bits of 128 + c are 0x4300 + c: the code is the
// low 3 bits of each half. The two halves of a word may belong to two blocks (the columnwise copy:
// two columns), each with its own factors.
struct E2m1Bf16Factors {
  uint32_t twice, once, half;  // 2^-e * {2, 1, 1/2} per half (bf16 bits)
};

// The packed path needs x * 2^-e exact for subnormal x too (below this scale code a subnormal bf16
// input could scale up to |y| >= 0.25: code < 4 means e < -123), and 2^-e / 2 normal in bf16 (its
// biased exponent, 253 - code, at least 1): scale codes kPackedE2m1MinCode..kPackedE2m1MaxCode.
constexpr uint32_t kPackedE2m1MinCode = 4;
constexpr uint32_t kPackedE2m1MaxCode = 252;

__device__ __forceinline__ bool e2m1_packed_code(uint32_t code) {
  return code - kPackedE2m1MinCode <= kPackedE2m1MaxCode - kPackedE2m1MinCode;
}

// The factors of the blocks whose scale codes are the halves of `codes` (packed codes): 2^-e = 2^(127
// - code) has the bf16 bits (254 - code) << 7, so each factor is one multiply-add of the codes.
__device__ __forceinline__ E2m1Bf16Factors e2m1_bf16_factors(uint32_t codes) {
  return {255u * 0x00800080u - codes * 0x80u, 254u * 0x00800080u - codes * 0x80u, 253u * 0x00800080u - codes * 0x80u};
}

__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
  const __nv_bfloat162 r = __hfma2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b),
                                   *reinterpret_cast<const __nv_bfloat162*>(&c));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Both halves' magnitude codes of a pair x2 as 0x4300 + code per half (sign not included).
__device__ __forceinline__ uint32_t e2m1x2_biased_bf16(uint32_t x2, const E2m1Bf16Factors& k) {
  const uint32_t a = x2 & 0x7FFF7FFFu;
  const uint32_t t0 = bf16x2_fma(a, k.twice, 0x43004300u);  // 128 + rint(2y)
  const uint32_t t1 = bf16x2_fma(a, k.once, 0x43024302u);   // 128 + rint(y) + 2
  const uint32_t t2 = bf16x2_fma(a, k.half, 0x43044304u);   // 128 + rint(y / 2) + 4
  return __vminu2(__vminu2(__vminu2(t0, t1), t2), 0x43074307u);
}

// Packing. Four codes of two biased pairs a, b (inputs xa, xb) as bytes [a.lo, b.lo, a.hi, b.hi],
// each with its input's sign in bit 3 (prmt's sign replication of bytes 1 and 3 of xa, xb).
__device__ __forceinline__ uint32_t e2m1_gather4(uint32_t a, uint32_t b, uint32_t xa, uint32_t xb) {
  return __byte_perm(a, b, 0x6240) | (prmt_sign(xa, xb, 0xFBD9u) & 0x08080808u);
}

// Two words of such bytes -> one word of eight codes: byte i of lo in the low nibble of byte i,
// byte i of hi in its high nibble (the codes are below 16: no carries).
__device__ __forceinline__ uint32_t e2m1_nibbles(uint32_t lo, uint32_t hi) { return lo + (hi << 4); }

// 16 codes of bf16 input: pairs[k] holds elements 2k (low half) and 2k + 1 as bf16 bits, all of
// one block with scale s. Per 8 elements: two gathers [e0, e2, e1, e3] and [e4, e6, e5, e7], whose
// low halves hold the even elements (low nibbles) and high halves the odd ones.
__device__ __forceinline__ uint2 encode16_e2m1_bf16(const uint32_t* pairs, const MxScale& s) {
  using In = InputTraits<DType::kBf16>;
  if (!e2m1_packed_code(s.code)) {  // rare: tiny or huge blocks, where the factors do not hold
    float f[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] = In::elem(pairs[i / 2], i % 2);
    return encode16<formats::Format::kMxfp4, ElementEncoder::kSoftware>(f, s.inv);
  }
  const E2m1Bf16Factors k = e2m1_bf16_factors(s.code * 0x00010001u);
  uint32_t out[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint32_t* p = pairs + 4 * j;
    const uint32_t g0 = e2m1_gather4(e2m1x2_biased_bf16(p[0], k), e2m1x2_biased_bf16(p[1], k), p[0], p[1]);
    const uint32_t g1 = e2m1_gather4(e2m1x2_biased_bf16(p[2], k), e2m1x2_biased_bf16(p[3], k), p[2], p[3]);
    out[j] = e2m1_nibbles(__byte_perm(g0, g1, 0x5410), __byte_perm(g0, g1, 0x7632));
  }
  return make_uint2(out[0], out[1]);
}

// 16 rows of two bf16 columns: w[i] holds row i of column 0 (low half) and of column 1, the
// columns' blocks with scales s0, s1; column h's 16 codes go to out[h]. Both columns go through
// the fmas together (per-half factors). Per 8 rows: gathers of the even rows [c0 r0, c0 r2, c1 r0,
// c1 r2], [c0 r4, c0 r6, c1 r4, c1 r6] and likewise the odd rows; their low halves are column 0's.
__device__ __forceinline__ void encode16x2_e2m1_bf16(const uint32_t* w, const MxScale& s0, const MxScale& s1,
                                                     uint2* out) {
  using In = InputTraits<DType::kBf16>;
  if (!e2m1_packed_code(s0.code) || !e2m1_packed_code(s1.code)) {  // rare, as encode16_e2m1_bf16
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float f[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i], h);
      out[h] = encode16<formats::Format::kMxfp4, ElementEncoder::kSoftware>(f, h ? s1.inv : s0.inv);
    }
    return;
  }
  const E2m1Bf16Factors k = e2m1_bf16_factors(s0.code | (s1.code << 16));
  uint32_t t[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) t[i] = e2m1x2_biased_bf16(w[i], k);
  uint32_t words[2][2];  // [column][rows 8j..8j+7]
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint32_t* r = t + 8 * j;
    const uint32_t* x = w + 8 * j;
    const uint32_t e0 = e2m1_gather4(r[0], r[2], x[0], x[2]), e1 = e2m1_gather4(r[4], r[6], x[4], x[6]);
    const uint32_t o0 = e2m1_gather4(r[1], r[3], x[1], x[3]), o1 = e2m1_gather4(r[5], r[7], x[5], x[7]);
    words[0][j] = e2m1_nibbles(__byte_perm(e0, e1, 0x5410), __byte_perm(o0, o1, 0x5410));
    words[1][j] = e2m1_nibbles(__byte_perm(e0, e1, 0x7632), __byte_perm(o0, o1, 0x7632));
  }
  out[0] = make_uint2(words[0][0], words[0][1]);
  out[1] = make_uint2(words[1][0], words[1][1]);
}

// 16 codes of fp16 input (f: the 16 values, widened exactly): x * 2^-e in fp32 (as formats), as
// f16 pairs, then the packed path.
__device__ __forceinline__ uint2 encode16_e2m1_fp16(const float* f, float inv) {
  uint32_t c[8];
#pragma unroll
  for (int k = 0; k < 8; ++k)
    c[k] = e2m1x2_codes_f16(f16x2_rn(formats::mul_rn(f[2 * k], inv), formats::mul_rn(f[2 * k + 1], inv)));
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
