// NVFP4 scale arithmetic and E2M1 stochastic rounding, shared by the emulator and GPU kernels.
// Every operation is one fp32 operation rounded to nearest, in the order docs/numerics.md gives.
#pragma once

#include "formats/scalar_codecs.h"

namespace blockscale::formats {

inline constexpr float kFltMax = 3.40282346638528859811704183484516925e+38f;

struct Nvfp4TensorScales {
  float s_enc;  // encode scale: 2688 / amax_t
  float s_dec;  // decode scale: 1 / s_enc
};

// Clamps a non-negative value (or +Inf) to FLT_MAX. Written on the bits: GCC 13.3's floating-point
// range analysis at -O3 was seen to miscompile the equivalent `v > FLT_MAX ? FLT_MAX : v` chain
// in nvfp4_tensor_scales (S_enc came out 1 for amax_t = 2^-140).
BS_HOST_DEVICE float clamp_to_flt_max(float v) {
  return (float_bits(v) & 0x7FFFFFFFu) >= 0x7F800000u ? kFltMax : v;
}

BS_HOST_DEVICE Nvfp4TensorScales nvfp4_tensor_scales(float tensor_amax) {
  const uint32_t amax_bits = float_bits(tensor_amax) & 0x7FFFFFFFu;
  // amax_t == 0 gives S_enc = 1; so does amax_t = Inf, whose 2688 / amax_t is 0.
  const float s_enc = (amax_bits == 0 || amax_bits >= 0x7F800000u)
                          ? 1.0f
                          : clamp_to_flt_max(div_rn(448.0f * 6.0f, tensor_amax));
  return Nvfp4TensorScales{s_enc, div_rn(1.0f, s_enc)};
}

// UE4M3 code of the block scale: amax_b * (S_enc * fl(1/6)).
BS_HOST_DEVICE uint8_t nvfp4_block_scale_code(float block_amax, float s_enc) {
  const float one_sixth = 1.0f / 6.0f;  // fl(1/6), a compile-time fp32 constant
  return encode_ue4m3(mul_rn(block_amax, mul_rn(s_enc, one_sixth)));
}

// The factor that maps a block's values onto the E2M1 grid: min(1 / (float(s_b) * S_dec), FLT_MAX).
BS_HOST_DEVICE float nvfp4_block_encode_factor(uint8_t scale_code, float s_dec) {
  return clamp_to_flt_max(div_rn(1.0f, mul_rn(decode_ue4m3(scale_code), s_dec)));
}

// E2M1 with stochastic rounding: |y| rounds up to the next grid value iff
// r < frac * 2^32, frac = the position of |y| between its two neighbours (exact in fp32).
// |y| >= 6 saturates; NaN gives +6 as in RNE; the sign (also of zero) is kept.
BS_HOST_DEVICE uint8_t encode_e2m1_stochastic(float y, uint32_t r) {
  const uint32_t u = float_bits(y);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7;
  const uint32_t sign = (u >> 31) << 3;
  const float a = bits_float(u & 0x7FFFFFFFu);
  if (a >= 6.0f) return static_cast<uint8_t>(sign | 0x7u);
  // Grid {0, .5, 1, 1.5, 2, 3, 4, 6}: code i has value decode_e2m1(i).
  uint32_t lo_code;
  float lo, inv_spacing;
  if (a < 2.0f) {
    lo_code = static_cast<uint32_t>(mul_rn(a, 2.0f));  // a < 2: exact, truncates to the half-step
    lo = mul_rn(static_cast<float>(lo_code), 0.5f);
    inv_spacing = 2.0f;
  } else if (a < 4.0f) {
    lo = a < 3.0f ? 2.0f : 3.0f;
    lo_code = a < 3.0f ? 4u : 5u;
    inv_spacing = 1.0f;
  } else {
    lo = 4.0f;
    lo_code = 6u;
    inv_spacing = 0.5f;
  }
  // lo <= a < 2 lo (or lo = 0), so a - lo is exact; the spacing is a power of two.
  const float frac = mul_rn(sub_rn(a, lo), inv_spacing);
  const bool up = static_cast<double>(r) < static_cast<double>(frac) * 4294967296.0;
  return static_cast<uint8_t>(sign | (lo_code + (up ? 1u : 0u)));
}

}  // namespace blockscale::formats
