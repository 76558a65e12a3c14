// FP8 blockwise quantize (the Hopper-native recipe): E4M3 elements, fp32 scales, 1x128 or 128x128
// blocks, optional power-of-two scales. docs/numerics.md, "FP8 blockwise".
#include "formats/block_quantize_internal.h"
#include "formats/nvfp4_scalar.h"  // clamp_to_flt_max

namespace blockscale::formats::detail {

void fp8_block_quantize_rows(const float* x, const QuantizeOptions& options, QuantizedMatrix* q) {
  const int64_t scale_cols = q->scale_cols();
  for (int64_t br = 0; br < q->scale_rows(); ++br) {
    const int64_t r0 = br * q->block_rows;
    const int64_t r1 = r0 + q->block_rows < q->rows ? r0 + q->block_rows : q->rows;
    for (int64_t bc = 0; bc < scale_cols; ++bc) {
      const int64_t c0 = bc * q->block_cols;
      const int64_t c1 = c0 + q->block_cols < q->cols ? c0 + q->block_cols : q->cols;
      const BlockAmax block = block_amax(x, q->cols, r0, r1, c0, c1);
      float& scale = q->scales_f32[br * scale_cols + bc];
      if (block.nonfinite) {  // NaN scale; element codes stay 0x00
        scale = bits_float(0x7FC00000u);
        q->nonfinite_seen = true;
        continue;
      }
      float r = 1.0f;  // amax == 0: r = s = 1
      scale = 1.0f;
      if (block.amax > 0.0f && options.pow2_scales) {
        const int e = mx_scale_exponent(block.amax, 448.0f, /*ceil_rounding=*/true);
        scale = exp2i(e);
        r = exp2i(-e);
      } else if (block.amax > 0.0f) {
        r = clamp_to_flt_max(448.0f / block.amax);  // a tiny subnormal amax must not give r = Inf
        scale = block.amax / 448.0f;
      }
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t c = c0; c < c1; ++c) set_element_code(q, i, c, encode_e4m3(x[i * q->cols + c] * r));
    }
  }
}

}  // namespace blockscale::formats::detail
