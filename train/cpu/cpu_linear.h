// Linear layers on the CPU in each training recipe: the matmuls of fprop, dgrad and wgrad with
// their operands quantized through formats/ exactly as quant/ quantizes them on the GPU, each
// operand in its role's format (train/model/recipe_policy.h). Operand values are dequantized
// exactly to double and multiplied in double (the GPU multiplies exactly and accumulates in
// fp32); results are rounded to fp32.
// Grouped (MoE) layers: x holds the routed tokens sorted by expert (group_ends: cumulative ends),
// w stacks the experts' matrices (experts x n x k), each quantized on its own (its own NVFP4
// tensor scale), as the grouped GEMM takes them; the routed tokens are one tensor; the wgrad
// operands are padded per expert to whole blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/status.h"
#include "train/model/model_config.h"
#include "train/model/recipe_policy.h"  // defines: SrKey

namespace blockscale::train {

// y (m x n) = x (m x k) · w (n x k)^T.
Status linear_forward(Recipe recipe, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
                      float* y);
// dx (m x k, overwritten; may be null to skip) = dy · w; dw (n x k) += dy^T · x.
Status linear_backward(Recipe recipe, SrKey sr, const float* dy, const float* x, const float* w, int64_t m,
                       int64_t n, int64_t k, float* dx, float* dw);

// Expert g multiplies rows [group_ends[g-1], group_ends[g]) of x by w[g]; group_ends.back() == m.
Status grouped_linear_forward(Recipe recipe, const float* x, const std::vector<int64_t>& group_ends,
                              const float* w, int64_t n, int64_t k, float* y);
Status grouped_linear_backward(Recipe recipe, SrKey sr, const float* dy, const float* x,
                               const std::vector<int64_t>& group_ends, const float* w, int64_t n, int64_t k,
                               float* dx, float* dw);

}  // namespace blockscale::train
