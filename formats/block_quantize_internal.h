// Internal to formats/: the per-recipe rowwise kernels quantize() dispatches to. Each takes a
// contiguous row-major rows x cols matrix in its stored orientation (blocks along cols) and fills
// `out`, whose shape, block sizes and zeroed buffers quantize() has already set up.
#pragma once

#include "formats/recipe.h"

namespace blockscale::formats::detail {

void mx_quantize_rows(const float* x, const QuantizeOptions& options, QuantizedMatrix* out);
void nvfp4_quantize_rows(const float* x, const QuantizeOptions& options, QuantizedMatrix* out);
void fp8_block_quantize_rows(const float* x, const QuantizeOptions& options, QuantizedMatrix* out);

void set_element_code(QuantizedMatrix* q, int64_t r, int64_t c, uint32_t code);

// Max |v| over the finite values of rows [r0, r1) x cols [c0, c1) of x (row stride ld), and
// whether any value there is NaN or Inf.
struct BlockAmax {
  float amax = 0.0f;
  bool nonfinite = false;
};
BlockAmax block_amax(const float* x, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

}  // namespace blockscale::formats::detail
