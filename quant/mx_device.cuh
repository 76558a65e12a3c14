// Device helpers of the MX kernels: the E8M0 block scale of a block amax (the input and FP8
// helpers they share with every recipe are in quant/device_common.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace blockscale::quant::detail
