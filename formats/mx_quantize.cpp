// MX block quantize (MXFP8 E4M3/E5M2, MXFP6 E2M3/E3M2, MXFP4): 1x32 blocks, E8M0 scales,
// ceil (default) or floor scale rounding. docs/numerics.md, "MX recipes".
#include "formats/block_quantize_internal.h"

namespace blockscale::formats::detail {

void mx_quantize_rows(const float* x, const QuantizeOptions& options, QuantizedMatrix* q) {
  const MinifloatSpec& spec = element_spec(q->recipe);
  const float maxnorm = decode_minifloat(spec.max_code, spec);
  const bool ceil_rounding = options.rounding == ScaleRounding::kCeil;
  for_each_block(x, *q, [&](const BlockSpan& b) {  // 1 x 32 blocks: r1 = r0 + 1
    if (b.amax.nonfinite) {  // NaN scale; element codes stay 0x00
      q->scales[b.index] = kE8M0Nan;
      q->nonfinite_seen = true;
      return;
    }
    const int e = mx_scale_exponent(b.amax.amax, maxnorm, ceil_rounding);
    q->scales[b.index] = static_cast<uint8_t>(e + 127);
    const float inv_scale = exp2i(-e);
    for (int64_t c = b.c0; c < b.c1; ++c)
      set_element_code(q, b.r0, c, encode_minifloat(x[b.r0 * q->cols + c] * inv_scale, spec));
  });
}

}  // namespace blockscale::formats::detail
