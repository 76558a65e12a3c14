// MX quantize straight to bf16 values: the operands of Hopper's fastest exact MX GEMM route.
//
// Hopper's tensor cores take no block scales. An MX element times its E8M0 block scale is exact
// in bf16 (docs/numerics.md: E4M3 x 2^e for e in [-124, 119], E5M2 x 2^e for e in [-117, 112]),
// and bf16 x bf16 products are exact in an fp32 accumulator, so a bf16 GEMM of those values
// computes the MX GEMM's contract (exact products, fp32 accumulation). This run() writes them: for
// an fp32 matrix x, ONE read gives
//   rowwise[r][c]    = bf16(dequantize(rowwise MX quantize of x))[r][c]       (blocks along cols)
//   columnwise[r][c] = bf16(dequantize(columnwise MX quantize of x))[c][r]    (blocks along rows)
// both rows x cols, row-major, in x's own layout (not transposed): a bf16 GEMM takes either with
// the transpose it needs. Each value equals formats::quantize() then formats::dequantize(),
// rounded to bf16 (exact in the ranges above; tinier blocks round to bf16's subnormals, as the
// block-scaled kernel's conversion does). A block holding a NaN or Inf gives NaN for the block.
//
// Modes:
//   dense  : the columnwise blocks are 32-row segments of each of `batches` stacked matrices of
//            rows / batches rows (a MoE layer's expert weights: each expert quantized on its own).
//   grouped: num_groups > 0: MoE tokens sorted by expert; expert g owns rows [group_ends[g-1],
//            group_ends[g]) (int32 device array, non-decreasing, last <= rows), and its columnwise
//            blocks are 32-row segments from its first row (the padding of
//            formats::quantize_grouped_columnwise, which does not change a block's values). Rows
//            past the last end belong to no expert and are not written. With row_index, row r is
//            x's row row_index[r] (x has input_rows rows; an index outside [0, input_rows) reads a
//            zero row): MoE permute + quantize in one pass.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::quant {

struct MxBf16Problem {
  formats::Format recipe = formats::Format::kMxfp8E4M3;  // kMxfp8E4M3 or kMxfp8E5M2
  formats::ScaleRounding rounding = formats::ScaleRounding::kCeil;
  int64_t rows = 0;  // fp32 input rows x cols, row-major, row stride cols
  int64_t cols = 0;
  int64_t batches = 1;     // dense: stacked matrices (rows % batches == 0)
  int num_groups = 0;      // > 0: grouped mode
  int64_t input_rows = 0;  // grouped with row_index: rows of x
};

struct MxBf16Inputs {
  const float* x = nullptr;
  const int32_t* group_ends = nullptr;  // grouped: num_groups entries
  const int32_t* row_index = nullptr;   // grouped, optional: the gather (ignored in dense mode)
};

// Device pointers to rows x cols bf16 bits each; either may be null (that copy is not written).
struct MxBf16Outputs {
  uint16_t* rowwise = nullptr;
  uint16_t* columnwise = nullptr;
};

// Shapes, recipe and pointers (x non-null when it has elements, group_ends when grouped, at least
// one output; no output overlapping another buffer). Messages: "mx_bf16: <argument>: <rule>".
Status can_implement(const MxBf16Problem& p, const MxBf16Inputs& in, const MxBf16Outputs& out);
// Checks, then enqueues the work on `stream` (asynchronous; empty shapes do nothing; a device
// without a kernel image for it is an error naming its sm_XY).
Status run(const MxBf16Problem& p, const MxBf16Inputs& in, const MxBf16Outputs& out, cudaStream_t stream);

}  // namespace blockscale::quant
