// Scalar codecs of every element and scale format blockscale uses, as integer/bit arithmetic
// (never a rounded division), callable from host and device code. docs/numerics.md defines them.
//
//   element formats : E4M3, E5M2 (MXFP8, FP8 blockwise), E2M1 (MXFP4, NVFP4), E2M3, E3M2 (MXFP6)
//   scale formats   : E8M0 (MX block scale), UE4M3 (NVFP4 block scale)
//   input formats   : bf16, fp16 (decoded exactly to fp32)
//
// float -> element is round-to-nearest-even with saturation to the largest finite value
// (satfinite). NaN becomes the canonical NaN code (0x7F, sign kept) where the format has one, and
// +max where it has none (as CUDA's cuda_fp4.h does); ±Inf saturates to ±max.
#pragma once

#include "formats/host_device.h"

namespace blockscale::formats {

struct MinifloatSpec {
  int exp_bits;
  int man_bits;
  int bias;
  uint32_t max_code;  // magnitude code of the largest finite value
  int nan_code;       // magnitude code written for NaN; -1: the format has no NaN
  bool has_inf;       // IEEE-style: all-ones exponent with zero mantissa is Inf (E5M2)
  bool has_sign;      // false: unsigned (UE4M3)
};

// Device code cannot take the address of a namespace-scope constexpr object, so the specs are
// functions (for kernels) with constant copies for host code.
BS_HOST_DEVICE constexpr MinifloatSpec e4m3_spec() { return {4, 3, 7, 0x7E, 0x7F, false, true}; }
BS_HOST_DEVICE constexpr MinifloatSpec e5m2_spec() { return {5, 2, 15, 0x7B, 0x7F, true, true}; }
BS_HOST_DEVICE constexpr MinifloatSpec e2m1_spec() { return {2, 1, 1, 0x7, -1, false, true}; }
BS_HOST_DEVICE constexpr MinifloatSpec e2m3_spec() { return {2, 3, 1, 0x1F, -1, false, true}; }
BS_HOST_DEVICE constexpr MinifloatSpec e3m2_spec() { return {3, 2, 3, 0x1F, -1, false, true}; }
BS_HOST_DEVICE constexpr MinifloatSpec ue4m3_spec() { return {4, 3, 7, 0x7E, 0x7F, false, false}; }
inline constexpr MinifloatSpec kE4M3 = e4m3_spec();
inline constexpr MinifloatSpec kE5M2 = e5m2_spec();
inline constexpr MinifloatSpec kE2M1 = e2m1_spec();
inline constexpr MinifloatSpec kE2M3 = e2m3_spec();
inline constexpr MinifloatSpec kE3M2 = e3m2_spec();
inline constexpr MinifloatSpec kUE4M3 = ue4m3_spec();

BS_HOST_DEVICE uint32_t minifloat_sign_code(const MinifloatSpec& s, uint32_t sign) {
  return s.has_sign ? sign << (s.exp_bits + s.man_bits) : 0u;
}

// fp32 -> minifloat code, RNE, satfinite. Unsigned formats map negative values and -0 to 0.
BS_HOST_DEVICE uint32_t encode_minifloat(float x, const MinifloatSpec& s) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = u >> 31;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {  // NaN
    return s.nan_code >= 0 ? static_cast<uint32_t>(s.nan_code) | minifloat_sign_code(s, sign)
                           : s.max_code;
  }
  if (!s.has_sign && sign) return 0u;
  const uint32_t sign_code = minifloat_sign_code(s, sign);
  if (a == 0x7F800000u) return s.max_code | sign_code;
  // Zero and fp32 subnormals lie below half of every format's smallest subnormal.
  if (a < 0x00800000u) return sign_code;
  const int e = static_cast<int>(a >> 23) - 127;
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;  // 24-bit significand
  const int emin = 1 - s.bias;
  // Bits of the significand that fall below the target's last mantissa bit.
  const int shift = 23 - s.man_bits + (e < emin ? emin - e : 0);
  if (shift >= 25) return sign_code;  // below half of the smallest subnormal
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  // Subnormal: q is the mantissa field (a carry into 1 << man_bits is the smallest normal).
  // Normal: a carry out of the mantissa increments the exponent field.
  uint32_t code = e < emin ? q
                           : (static_cast<uint32_t>(e + s.bias) << s.man_bits) + q -
                                 (1u << s.man_bits);
  if (code > s.max_code) code = s.max_code;
  return code | sign_code;
}

// minifloat code -> fp32, exact.
BS_HOST_DEVICE float decode_minifloat(uint32_t code, const MinifloatSpec& s) {
  const int mag_bits = s.exp_bits + s.man_bits;
  const uint32_t sign = s.has_sign ? (code >> mag_bits) & 1u : 0u;
  const uint32_t mag = code & ((1u << mag_bits) - 1u);
  const uint32_t exp_field = mag >> s.man_bits;
  const uint32_t man = mag & ((1u << s.man_bits) - 1u);
  const uint32_t sign_bit = sign << 31;
  const uint32_t exp_all_ones = (1u << s.exp_bits) - 1u;
  if (s.has_inf && exp_field == exp_all_ones) {
    return bits_float(sign_bit | 0x7F800000u | (man ? 0x400000u : 0u));
  }
  if (!s.has_inf && s.nan_code >= 0 && mag == static_cast<uint32_t>(s.nan_code)) {
    return bits_float(sign_bit | 0x7FC00000u);
  }
  if (exp_field == 0) {
    const float v = static_cast<float>(man) * exp2i(1 - s.bias - s.man_bits);
    return sign ? -v : v;
  }
  return bits_float(sign_bit | ((exp_field - s.bias + 127) << 23) | (man << (23 - s.man_bits)));
}

BS_HOST_DEVICE uint8_t encode_e4m3(float x) { return static_cast<uint8_t>(encode_minifloat(x, e4m3_spec())); }
BS_HOST_DEVICE uint8_t encode_e5m2(float x) { return static_cast<uint8_t>(encode_minifloat(x, e5m2_spec())); }
BS_HOST_DEVICE uint8_t encode_e2m1(float x) { return static_cast<uint8_t>(encode_minifloat(x, e2m1_spec())); }
BS_HOST_DEVICE uint8_t encode_e2m3(float x) { return static_cast<uint8_t>(encode_minifloat(x, e2m3_spec())); }
BS_HOST_DEVICE uint8_t encode_e3m2(float x) { return static_cast<uint8_t>(encode_minifloat(x, e3m2_spec())); }
BS_HOST_DEVICE uint8_t encode_ue4m3(float x) { return static_cast<uint8_t>(encode_minifloat(x, ue4m3_spec())); }
BS_HOST_DEVICE float decode_e4m3(uint32_t c) { return decode_minifloat(c, e4m3_spec()); }
BS_HOST_DEVICE float decode_e5m2(uint32_t c) { return decode_minifloat(c, e5m2_spec()); }
BS_HOST_DEVICE float decode_e2m1(uint32_t c) { return decode_minifloat(c, e2m1_spec()); }
BS_HOST_DEVICE float decode_e2m3(uint32_t c) { return decode_minifloat(c, e2m3_spec()); }
BS_HOST_DEVICE float decode_e3m2(uint32_t c) { return decode_minifloat(c, e3m2_spec()); }
BS_HOST_DEVICE float decode_ue4m3(uint32_t c) { return decode_minifloat(c, ue4m3_spec()); }

// ---- E8M0: 2^(code - 127); 0x00 is 2^-127, 0xFF is NaN; no zero, no sign.
inline constexpr uint8_t kE8M0Nan = 0xFF;

BS_HOST_DEVICE float decode_e8m0(uint32_t code) {
  return code == 0xFFu ? bits_float(0x7FC00000u) : exp2i(static_cast<int>(code) - 127);
}

// |x| -> E8M0 rounding toward zero (round_up=false) or toward +Inf (round_up=true), with
// saturation of ±Inf and overflow to 0xFE and NaN to 0xFF: the semantics of CUDA's
// __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero / cudaRoundPosInf).
BS_HOST_DEVICE uint8_t encode_e8m0(float x, bool round_up) {
  const uint32_t a = float_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE8M0Nan;
  if (a == 0x7F800000u) return 0xFE;
  uint32_t code = a >> 23;  // biased exponent; 0 for zero and fp32 subnormals
  const bool exact_pow2 = code != 0 && (a & 0x7FFFFFu) == 0;
  if (round_up && !exact_pow2 && a > 0x00400000u) ++code;  // 0x00400000 is 2^-127
  return static_cast<uint8_t>(code > 0xFEu ? 0xFEu : code);
}

// ---- MX block scale exponent. amax >= 0 and finite. Returns e in [-127, 127] with:
//   ceil : the smallest e with amax <= maxnorm * 2^e (so |x / 2^e| <= maxnorm, nothing saturates)
//   floor: floor(log2(amax)) - emax(maxnorm)  (OCP MX v1.0)
// decided from amax's bits. amax == 0 gives -127 (E8M0 code 0x00).
BS_HOST_DEVICE int leading_bit_index(uint32_t v) {  // v != 0
#if defined(__CUDA_ARCH__)
  return 31 - __clz(v);
#else
  return 31 - __builtin_clz(v);
#endif
}

BS_HOST_DEVICE int mx_scale_exponent(float amax, float maxnorm, bool ceil_rounding) {
  const uint32_t a = float_bits(amax) & 0x7FFFFFFFu;
  if (a == 0) return -127;
  int e_amax;
  uint32_t m_amax;  // amax = 1.m_amax * 2^e_amax
  if (a >= 0x00800000u) {
    e_amax = static_cast<int>(a >> 23) - 127;
    m_amax = a & 0x7FFFFFu;
  } else {
    const int p = leading_bit_index(a);
    e_amax = p - 149;
    m_amax = (a << (23 - p)) & 0x7FFFFFu;
  }
  const uint32_t mb = float_bits(maxnorm);
  int e = e_amax - (static_cast<int>(mb >> 23) - 127);
  if (ceil_rounding && m_amax > (mb & 0x7FFFFFu)) ++e;
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// ---- bf16 / fp16 inputs, decoded exactly.
BS_HOST_DEVICE float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

BS_HOST_DEVICE uint16_t float_to_bf16_bits_rn(float f) {  // RNE; NaN stays a quiet NaN
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

BS_HOST_DEVICE float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exp_field = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp_field == 0x1Fu) return bits_float(sign | 0x7F800000u | (man << 13));
  if (exp_field == 0) {
    const float v = static_cast<float>(man) * exp2i(-24);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp_field + 112) << 23) | (man << 13));
}

}  // namespace blockscale::formats
