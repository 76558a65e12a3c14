// The model the driver trains and the precision recipe of its linear layers.
//
// A decoder-only transformer language model with MoE feed-forward layers:
//   x = embed[token] + pos_embed[position]
//   per layer:  x += Wo · attention(RMSNorm(x) · Wqkv)          (causal, bf16 matmuls)
//               x += MoE(RMSNorm(x))                              (or a dense SwiGLU FFN)
//   logits = RMSNorm(x) · lm_head^T, loss = mean cross-entropy of the next token
// MoE: router logits = h · Wr^T (fp32), softmax, top-k (ties to the lower expert), gate weights =
// the top-k probabilities renormalised to sum 1 (k > 1) or the probability itself (k = 1); each
// expert is a SwiGLU: y = W2 · (silu(W1 h) * W3 h), with W1 and W3 stacked as W13 = [W1; W3];
// a Switch-style load-balancing loss  aux = E * sum_e f_e * P_e  (f_e: fraction of routed slots,
// P_e: mean router probability) is added with weight aux_loss_coef.
// Which matmuls a recipe quantizes: Wqkv, Wo and every expert / FFN matrix (fprop, dgrad, wgrad).
// The router and the LM head stay in higher precision (fp32 / bf16), as in the published FP8 and
// NVFP4 pretraining recipes; attention's two batched matmuls are bf16.
#pragma once

#include <cstdint>
#include <string>

#include "formats/status.h"
#include "gemm/gemm_route.h"  // defines: GemmRoute (--gemm-route)

namespace blockscale::train {

enum class Recipe {
  kFp32,      // fp32 matmuls: the CPU reference's exact mode (gradient checks)
  kBf16,      // bf16 operands, fp32 accumulation (the baseline)
  kFp8Block,  // E4M3, 1x128 activations / gradients, 128x128 weights, fp32 scales (Hopper-native)
  kMxfp8,     // E4M3 for every tensor, 1x32 blocks, E8M0 ceil scales
  kNvfp4,     // E2M1 with UE4M3 scales: 16x16 weight blocks, stochastic rounding of gradients,
              // 16-point random Hadamard transform on both wgrad operands
};

const char* recipe_name(Recipe r);  // fp32, bf16, fp8_block, mxfp8, nvfp4
Status parse_recipe(const std::string& name, Recipe* out);

// How a quantized recipe's GEMMs run on the GPU: one gemm::GemmRoute per run (--gemm-route). Every
// route gives the recipe's sums of docs/numerics.md.
//   fp8_block (Hopper): kAuto, gemm::run's automatic route (gemm/'s kernels, the experts' grouped
//     kernels reading their sizes on the GPU: no host synchronisation; cuBLASLt only for dense
//     products of at most 512 rows); kKernel, every product on gemm/'s kernels; kCublasLt,
//     cuBLASLt's blockwise FP8 matmul for every product, the experts one matmul each with their
//     sizes copied to the host once per MoE layer (a synchronisation), for comparison with the peer.
//   mxfp8, nvfp4: kBf16Values, each operand's block values as bf16 (exact; mxfp8: quant/mx_bf16.h
//     from the fp32 input, nvfp4: quant::nvfp4_block_values_bf16 from its quantized copies, the
//     tensor scales in cuBLASLt's alpha), cuBLASLt multiplies them; kKernel, quant/ writes codes and
//     scales, gemm/'s block-scaled kernels multiply them; kAuto, kBf16Values on Hopper (sm_90, the
//     faster there: docs/performance.md), kKernel on other GPUs.
//   bf16, fp32: one engine each (cuBLASLt; the CPU reference): the route does not apply.
// Whether `route` names an engine of `recipe`'s GEMMs ("--gemm-route <name>: ..." if not).
Status check_gemm_route(Recipe recipe, gemm::GemmRoute route);
// Whether mxfp8's and nvfp4's GEMMs run as bf16 products of the block values under `route` on a
// GPU of compute capability `major`.
bool mx_bf16_values(gemm::GemmRoute route, int major);
bool is_quantized(Recipe r);
// The block length every quantized dimension (model width, expert width, tokens per micro-batch)
// must be a multiple of: 128 (fp8_block), 32 (mxfp8, nvfp4), 1 otherwise.
int recipe_alignment(Recipe r);

struct ModelConfig {
  int vocab = 256;
  int d_model = 128;
  int n_layers = 2;
  int n_heads = 4;
  int n_experts = 4;  // 0: a dense SwiGLU FFN instead of MoE
  int top_k = 2;
  int d_ff = 256;  // hidden width of each expert (or of the dense FFN)
  int seq_len = 128;
  float aux_loss_coef = 0.01f;

  bool moe() const { return n_experts > 0; }
  int head_dim() const { return d_model / n_heads; }
};

// Range and divisibility rules; `tokens_per_micro_batch` must be a multiple of the recipe's
// alignment (dense wgrad reduces over the tokens). Messages name the flag.
Status validate(const ModelConfig& c, Recipe recipe, int64_t tokens_per_micro_batch);

int64_t parameter_count(const ModelConfig& c);
int64_t active_parameter_count(const ModelConfig& c);  // per token: top_k experts of n_experts
// Training FLOPs per token (forward + backward = 3x forward): 6 x active matmul parameters plus
// attention's 2 x 2 x seq_len x d_model x 3 per layer (causal: half counted). For MFU.
double train_flops_per_token(const ModelConfig& c);

}  // namespace blockscale::train
