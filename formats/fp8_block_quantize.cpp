// FP8 blockwise quantize (the Hopper-native recipe): E4M3 elements, fp32 scales, 1x128 or 128x128
// blocks, optional power-of-two scales. docs/numerics.md, "FP8 blockwise".
#include "formats/block_quantize_internal.h"
#include "formats/nvfp4_scalar.h"  // clamp_to_flt_max

namespace blockscale::formats::detail {

void fp8_block_quantize_rows(const float* x, const QuantizeOptions& options, QuantizedMatrix* q) {
  for_each_block(x, *q, [&](const BlockSpan& b) {
    float& scale = q->scales_f32[b.index];
    if (b.amax.nonfinite) {  // NaN scale; element codes stay 0x00
      scale = bits_float(0x7FC00000u);
      q->nonfinite_seen = true;
      return;
    }
    const float amax = b.amax.amax;
    float r = 1.0f;  // amax == 0: r = s = 1
    scale = 1.0f;
    if (amax > 0.0f && options.pow2_scales) {
      const int e = mx_scale_exponent(amax, 448.0f, /*ceil_rounding=*/true);
      scale = exp2i(e);
      r = exp2i(-e);
    } else if (amax > 0.0f) {
      r = clamp_to_flt_max(448.0f / amax);  // a tiny subnormal amax must not give r = Inf
      scale = amax / 448.0f;
    }
    for (int64_t i = b.r0; i < b.r1; ++i)
      for (int64_t c = b.c0; c < b.c1; ++c) set_element_code(q, i, c, encode_e4m3(x[i * q->cols + c] * r));
  });
}

}  // namespace blockscale::formats::detail
