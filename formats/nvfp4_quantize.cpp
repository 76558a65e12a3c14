// NVFP4 quantize: E2M1 elements, 1x16 or 16x16 blocks with UE4M3 scales, an fp32 tensor scale;
// options: stochastic rounding (Philox) and the 16-point random Hadamard transform.
// docs/numerics.md, "NVFP4".
#include <vector>

#include "formats/block_quantize_internal.h"
#include "formats/hadamard.h"
#include "formats/nvfp4_scalar.h"
#include "formats/philox.h"

namespace blockscale::formats::detail {

void nvfp4_quantize_rows(const float* x_in, const QuantizeOptions& options, QuantizedMatrix* q) {
  const int64_t n = q->rows * q->cols;
  const float* x = x_in;
  std::vector<float> transformed;
  if (options.hadamard) {  // cols is a multiple of 16 (checked by quantize())
    transformed.assign(x_in, x_in + n);
    for (int64_t i = 0; i < n; i += kHadamardSize) hadamard16_inplace(&transformed[i]);
    x = transformed.data();
  }
  const float tensor_amax =
      options.has_tensor_amax ? options.tensor_amax : block_amax(x, q->cols, 0, q->rows, 0, q->cols).amax;
  const Nvfp4TensorScales ts = nvfp4_tensor_scales(tensor_amax);
  q->global_scale_dec = ts.s_dec;

  for_each_block(x, *q, [&](const BlockSpan& b) {
    uint8_t& scale = q->scales[b.index];
    if (b.amax.nonfinite) {  // NaN scale; element codes stay 0x00
      scale = 0x7F;
      q->nonfinite_seen = true;
      return;
    }
    scale = nvfp4_block_scale_code(b.amax.amax, ts.s_enc);
    const float enc = nvfp4_block_encode_factor(scale, ts.s_dec);
    for (int64_t r = b.r0; r < b.r1; ++r) {
      for (int64_t c = b.c0; c < b.c1; ++c) {
        const int64_t i = r * q->cols + c;
        const float y = x[i] * enc;
        const uint32_t code =
            options.stochastic_rounding
                ? encode_e2m1_stochastic(y, philox_element_word(options.sr_seed, options.sr_offset,
                                                                static_cast<uint64_t>(i)))
                : encode_e2m1(y);
        set_element_code(q, r, c, code);
      }
    }
  });
}

}  // namespace blockscale::formats::detail
