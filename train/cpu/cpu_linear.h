// Linear layers on the CPU in each training recipe: the matmuls of fprop, dgrad and wgrad with
// their operands quantized through formats/ exactly as quant/ quantizes them on the GPU
// (docs/numerics.md, "Quantized operands for training"):
//   fprop  Y  = X · W^T : X rowwise (activation),  W rowwise (weight)
//   dgrad  dX = dY · W  : dY rowwise (gradient),   W columnwise (weight)
//   wgrad  dW += dY^T X : dY columnwise (gradient), X columnwise (activation), along the tokens
// Operand values are dequantized exactly to double and multiplied in double (the GPU multiplies
// exactly and accumulates in fp32); results are rounded to fp32. Recipe roles:
//   fp8_block: activations and gradients 1x128, weights 128x128.
//   mxfp8    : E4M3, 1x32, ceil scales, for every tensor.
//   nvfp4    : activations 1x16; weights 16x16 (2D); gradients with stochastic rounding keyed by
//              SrKey; both wgrad operands through the 16-point random Hadamard transform.
//   bf16     : operands rounded to bf16.   fp32: operands as they are.
// Grouped (MoE) layers: x holds the routed tokens sorted by expert (group_ends: cumulative ends),
// w stacks the experts' matrices (experts x n x k), each quantized on its own (its own NVFP4
// tensor scale), as the grouped GEMM takes them; the routed tokens are one tensor; the wgrad
// operands are padded per expert to whole blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/recipe.h"
#include "formats/status.h"
#include "train/model/model_config.h"

namespace blockscale::train {

enum class OperandRole { kActivation, kWeight, kGradient };

struct SrKey {  // NVFP4 stochastic rounding of a gradient: formats' (sr_seed, sr_offset)
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The formats:: options of a quantized recipe's operand (wgrad_operand: a wgrad input, which
// NVFP4 passes through the Hadamard transform).
formats::QuantizeOptions quantize_options(Recipe recipe, OperandRole role, bool wgrad_operand,
                                          SrKey sr);

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
