// Internal to quant/: the FP8 blockwise block scale (docs/numerics.md, "FP8 blockwise") as one
// host-device function, so the kernel (quant/fp8_block_quantize_kernel.cuh) and its tests evaluate the
// same expression that formats::detail::fp8_block_quantize_rows (formats/fp8_block_quantize.cpp)
// writes out inline.
#pragma once

#include <cstdint>

#include "formats/host_device.h"
#include "formats/nvfp4_scalar.h"   // clamp_to_flt_max
#include "formats/scalar_codecs.h"  // mx_scale_exponent, exp2i, div_rn

namespace blockscale::quant::detail {

inline constexpr float kFp8BlockMaxnorm = 448.0f;        // E4M3's largest finite value
inline constexpr uint32_t kFp8BlockNanScale = 0x7FC00000u;  // the scale of a block holding NaN / Inf

struct Fp8BlockScale {
  float mult;      // r: the factor each element is multiplied by before the E4M3 encode
  float scale;     // s: the fp32 dequantization scale stored in the scale buffer
  bool nonfinite;  // the block holds a NaN or an Inf: scale is NaN, every element code 0x00
};

// The scale of a block whose max |x| has the fp32 bits `amax_bits` (sign cleared; NaN patterns
// order above Inf, so amax_bits >= 0x7F800000 marks a block holding a NaN or an Inf).
//   amax == 0     : r = s = 1
//   pow2          : e = mx_scale_exponent(amax, 448, ceil); s = 2^e, r = 2^-e
//   otherwise     : r = min(448 / amax, FLT_MAX), s = amax / 448 (fp32, RN)
BS_HOST_DEVICE Fp8BlockScale fp8_block_scale(uint32_t amax_bits, bool pow2) {
  if (amax_bits >= 0x7F800000u) return {0.0f, formats::bits_float(kFp8BlockNanScale), true};
  if (amax_bits == 0) return {1.0f, 1.0f, false};
  const float amax = formats::bits_float(amax_bits);
  if (pow2) {
    const int e = formats::mx_scale_exponent(amax, kFp8BlockMaxnorm, /*ceil_rounding=*/true);
    return {formats::exp2i(-e), formats::exp2i(e), false};
  }
  return {formats::clamp_to_flt_max(formats::div_rn(kFp8BlockMaxnorm, amax)),
          formats::div_rn(amax, kFp8BlockMaxnorm), false};
}

}  // namespace blockscale::quant::detail
