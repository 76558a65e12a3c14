// MX block quantize (MXFP8 E4M3/E5M2, MXFP6 E2M3/E3M2, MXFP4): 1x32 blocks, E8M0 scales,
// ceil (default) or floor scale rounding. docs/numerics.md, "MX recipes".
#include "formats/block_quantize_internal.h"

namespace blockscale::formats::detail {

void mx_quantize_rows(const float* x, const QuantizeOptions& options, QuantizedMatrix* q) {
  const MinifloatSpec& spec = element_spec(q->recipe);
  const float maxnorm = decode_minifloat(spec.max_code, spec);
  const bool ceil_rounding = options.rounding == ScaleRounding::kCeil;
  const int64_t n_blocks = q->scale_cols();
  for (int64_t r = 0; r < q->rows; ++r) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t c0 = b * q->block_cols;
      const int64_t c1 = c0 + q->block_cols < q->cols ? c0 + q->block_cols : q->cols;
      const BlockAmax block = block_amax(x, q->cols, r, r + 1, c0, c1);
      if (block.nonfinite) {  // NaN scale; element codes stay 0x00
        q->scales[r * n_blocks + b] = kE8M0Nan;
        q->nonfinite_seen = true;
        continue;
      }
      const int e = mx_scale_exponent(block.amax, maxnorm, ceil_rounding);
      q->scales[r * n_blocks + b] = static_cast<uint8_t>(e + 127);
      const float inv_scale = exp2i(-e);
      for (int64_t c = c0; c < c1; ++c)
        set_element_code(q, r, c, encode_minifloat(x[r * q->cols + c] * inv_scale, spec));
    }
  }
}

}  // namespace blockscale::formats::detail
