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

// One block of q: its scale index (block row x scale_cols + block column), its rows [r0, r1) and
// columns [c0, c1) clipped at the matrix, and their amax.
struct BlockSpan {
  int64_t index, r0, r1, c0, c1;
  BlockAmax amax;
};
// Calls fn(const BlockSpan&) for every block of q (x: its rows x cols input), block row by block row.
template <class Fn>
void for_each_block(const float* x, const QuantizedMatrix& q, Fn&& fn) {
  const int64_t scale_cols = q.scale_cols();
  for (int64_t br = 0; br < q.scale_rows(); ++br) {
    const int64_t r0 = br * q.block_rows;
    const int64_t r1 = r0 + q.block_rows < q.rows ? r0 + q.block_rows : q.rows;
    for (int64_t bc = 0; bc < scale_cols; ++bc) {
      const int64_t c0 = bc * q.block_cols;
      const int64_t c1 = c0 + q.block_cols < q.cols ? c0 + q.block_cols : q.cols;
      fn(BlockSpan{br * scale_cols + bc, r0, r1, c0, c1, block_amax(x, q.cols, r0, r1, c0, c1)});
    }
  }
}

}  // namespace blockscale::formats::detail
