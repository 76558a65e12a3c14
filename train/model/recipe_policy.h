// What each training recipe quantizes and how: the one policy the CPU reference
// (train/cpu/cpu_linear.h, through formats/) and the GPU step (train/gpu/gpu_layers.h, through
// quant/) both follow, so the two cannot disagree on an operand's format. Operand roles of a
// linear layer (docs/numerics.md, "Quantized operands for training"):
//   fprop  Y  = X · W^T : X rowwise (activation),  W rowwise (weight)
//   dgrad  dX = dY · W  : dY rowwise (gradient),   W columnwise (weight)
//   wgrad  dW += dY^T X : dY columnwise (gradient), X columnwise (activation), along the tokens
// Recipe roles:
//   fp8_block: activations and gradients 1x128, weights 128x128.
//   mxfp8    : E4M3, 1x32, ceil scales, for every tensor.
//   nvfp4    : activations 1x16; weights 16x16 (2D); gradients with stochastic rounding keyed by
//              SrKey; both wgrad operands through the 16-point random Hadamard transform.
//   bf16     : operands rounded to bf16.   fp32: operands as they are.
// The LM head (head_recipe) and the router (fp32) stay out of the quantized recipes.
//
//   defines: OperandRole, SrKey, quantize_options, gradient_sr_key, head_recipe
#pragma once

#include <cstdint>

#include "formats/recipe.h"
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

// NVFP4 stochastic rounding key of one gradient quantization: the run's seed mixed with the
// layer and the matmul (0 wqkv, 1 wo, 2 w13, 3 w2), and the micro-step as the Philox offset.
SrKey gradient_sr_key(uint64_t run_seed, int64_t micro_step, int layer, int matmul);

// The LM head's recipe: fp32 under fp32, bf16 under every other recipe (the router's matmul is
// fp32 under every recipe).
Recipe head_recipe(Recipe r);

}  // namespace blockscale::train
