// The model's non-GEMM operations on the GPU: one function per function of train/cpu/cpu_ops.h (same
// math, same argument order), with device pointers and a stream, plus the optimizer's kernels
// (AdamW, gradient norm, clipping) and bf16 conversion. Every array is row-major and contiguous;
// "+=" outputs accumulate, all others are overwritten.
//
// Determinism: every kernel gives the same bits on every run with the same inputs on the same GPU
// model (the driver promises a bit-identical resume). No floating-point atomics: sums over rows run
// in a fixed order (per-chunk partials in a workspace, then one ordered pass over the chunks);
// only integer counts use atomics. cuBLAS (attention's products) is deterministic with its default
// atomics mode, which these functions never change.
//
// Reductions are fp32; train/cpu/cpu_ops.cpp accumulates some in double, so tests compare with stated
// tolerances. Functions whose result is bit-identical to the CPU's say so.
//
// Every function checks its arguments (sizes, null pointers, workspace size) on the host and
// returns an error naming the argument and the rule before launching anything; a launch failure
// comes back as the CUDA error. Index arrays (tokens, targets, expert ids, slot rows) are read on
// the device and cannot be checked there: an out-of-range entry is skipped or poisons its row with
// NaN, as each function says, never read or written out of bounds.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/status.h"

namespace blockscale::train::gpu {

// ---- Embedding -------------------------------------------------------------------------------------
// x[t] = embed[tokens[t]] + pos_embed[t % seq_len] (bit-identical to the CPU). Unlike the CPU
// function this takes `vocab` (rows of embed): a token outside [0, vocab) gives a NaN row of x.
// Both directions move float4s where d % 4 == 0 and the float pointers are 16-byte aligned.
Status embedding_forward(const int32_t* tokens, int64_t n_tokens, int seq_len, int d, int vocab,
                         const float* embed, const float* pos_embed, float* x, cudaStream_t stream);
// d_embed[tokens[t]] += dx[t], d_pos_embed[t % seq_len] += dx[t], summed in token order exactly as
// the CPU does (bit-identical): tokens are sorted by a stable radix sort (cub), then one launch
// reads dx for both sums: a warp per (32 sorted tokens, columns) adds the rows of the runs of equal
// ids starting there in position order, a warp per (position, columns) the batch's rows in order.
// Tokens outside [0, vocab) are skipped.
Status embedding_backward_workspace_bytes(int64_t n_tokens, int vocab, size_t* bytes);  // needs a GPU (cub)
Status embedding_backward(const int32_t* tokens, int64_t n_tokens, int seq_len, int d, int vocab,
                          const float* dx, float* d_embed, float* d_pos_embed, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream);

// ---- RMSNorm ---------------------------------------------------------------------------------------
// One pass over the rows where d % 4 == 0, d <= 8192 and every pointer is 16-byte aligned (each row
// held in registers between its sum and its write): the forward reads x once, the backward dy, x
// and dx once; other shapes read the rows twice.
Status rmsnorm_forward(const float* x, const float* gain, int64_t rows, int d, float* y, float* rstd,
                       cudaStream_t stream);
// dx += ..., d_gain += sum over rows (per-chunk partials in the workspace, then summed in order).
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int d);
Status rmsnorm_backward(const float* dy, const float* x, const float* gain, const float* rstd, int64_t rows,
                        int d, float* dx, float* d_gain, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

// ---- Causal attention -----------------------------------------------------------------------------
// As train/cpu/cpu_ops.h: q, k, v, probabilities, dout and dS rounded to bf16 (RNE) before each product;
// the products run in cuBLAS (bf16 in, fp32 accumulate and out), the softmax in fp32. probs is bf16
// bits (batch x heads x seq x seq, zeros above the diagonal), caller-owned: the backward reads it.
// The products skip the masked half in row chunks (the entries left out are the masked zeros).
// The workspace serves both directions; the functions set the handle's stream and pointer mode for
// their calls and restore them before returning.
size_t attention_workspace_bytes(int batch, int seq, int heads, int head_dim);
Status attention_forward(const float* qkv, int batch, int seq, int heads, int head_dim, uint16_t* probs,
                         float* out, void* workspace, size_t workspace_bytes, cublasHandle_t cublas,
                         cudaStream_t stream);
Status attention_backward(const float* qkv, const uint16_t* probs, const float* dout, int batch, int seq,
                          int heads, int head_dim, float* dqkv, void* workspace, size_t workspace_bytes,
                          cublasHandle_t cublas, cudaStream_t stream);

// ---- SwiGLU ----------------------------------------------------------------------------------------
Status swiglu_forward(const float* u, int64_t rows, int f, float* a, cudaStream_t stream);
Status swiglu_backward(const float* u, const float* da, int64_t rows, int f, float* du, cudaStream_t stream);

// ---- Router ----------------------------------------------------------------------------------------
// experts in [1, 256], top_k in [1, experts]; one warp per token. Expert ids outside [0, experts)
// in the inputs of load_balance_loss / router_backward are skipped (not counted, no gradient).
Status router_forward(const float* logits, int64_t tokens, int experts, int top_k, float* probs,
                      int32_t* expert_ids, float* gates, cudaStream_t stream);
size_t router_workspace_bytes(int64_t tokens, int experts);  // load_balance_loss and router_backward
// *loss_device = the Switch load-balancing loss (fp32; the CPU returns it).
Status load_balance_loss(const float* probs, const int32_t* expert_ids, int64_t tokens, int experts, int top_k,
                         float* loss_device, void* workspace, size_t workspace_bytes, cudaStream_t stream);
Status router_backward(const float* probs, const int32_t* expert_ids, const float* gates, const float* d_gates,
                       int64_t tokens, int experts, int top_k, float aux_weight, float* dlogits, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream);

// ---- MoE -------------------------------------------------------------------------------------------
// As the CPU: dy rows no slot names are zeroed; dy is bit-identical to the CPU's, d_gates an fp32
// dot. Slots must name distinct rows (quant::run(RoutingProblem) makes them so).
Status moe_combine_backward(const float* dout, const float* y, const float* gates, const int32_t* slot_row,
                            int64_t tokens, int top_k, int d, int64_t y_rows, float* dy, float* d_gates,
                            cudaStream_t stream);
// The gather's backward, per TOKEN (deterministic without atomics): dx[t] += dx_sorted[slot_row[t *
// top_k + j]] for j = 0..top_k-1 in order, skipping slots whose row is outside [0, rows). The CPU
// function takes row_source instead and adds in sorted-row order: the same sum, in another order.
Status moe_scatter_add(const float* dx_sorted, const int32_t* slot_row, int64_t tokens, int top_k, int64_t rows,
                       int d, float* dx, cudaStream_t stream);

// ---- Cross-entropy ---------------------------------------------------------------------------------
// losses[r] = logsumexp(logits[r]) - logits[r, targets[r]] (fp32; a warp per row held in registers
// where vocab % 4 == 0, vocab <= 1024 and the pointers are 16-byte aligned, else a block per row;
// sum them with gpu::sum); dlogits (null: not computed; may alias logits) = (softmax - onehot) *
// grad_scale.
// A target outside [0, vocab) gives a NaN loss and dlogits without the one-hot.
Status cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int vocab, float grad_scale,
                     float* losses, float* dlogits, cudaStream_t stream);

// ---- Reductions (deterministic: fixed-size partials, then one ordered pass; one launch for n <= 4096)
size_t reduction_workspace_bytes(int64_t n);
Status sum(const float* x, int64_t n, float* out_device, void* workspace, size_t workspace_bytes,
           cudaStream_t stream);
Status sum_of_squares(const float* x, int64_t n, float* out_device, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream);

// ---- Optimizer -------------------------------------------------------------------------------------
// Decoupled AdamW in fp32, each operation rounded once (no fma contraction, IEEE sqrt and division),
// in exactly this order (a host loop written the same way gives the same bits):
//   bias1 = 1.0f - float(std::pow(double(beta1), double(step)))   (host; step is 1-based)
//   bias2 = 1.0f - float(std::pow(double(beta2), double(step)))
//   g = grads * scale                               (the clipping factor; grads are not written)
//   m = beta1 * m + (1.0f - beta1) * g
//   v = beta2 * v + (1.0f - beta2) * g * g          ((1 - beta2) * g first, then * g)
//   mhat = m / bias1;  vhat = v / bias2
//   u = mhat / (std::sqrt(vhat) + eps)
//   if decayed: u = u + weight_decay * p            (decayed: mask null, or mask[i] != 0)
//   p = p - lr * u
// scale: a value in [0, 1] from the host, or one the update reads on the device (clip_factor_on_device's
// output), so the host need not wait for the gradients' norm before it queues the update.
// params_bf16 (optional): also the updated parameters as bf16 bits (to_bf16's), in the same pass:
// the bf16 copies the step multiplies, without a second read of the weights.
struct GradScale {
  float value = 1.0f;
  const float* device = nullptr;  // when set, the scale is *device
};
// *factor = clip_factor(sqrt(double(*sum_sq)), clip_norm) of train/model/optimizer.h, on the device, the
// same bits; sum_sq is sum_of_squares' output.
Status clip_factor_on_device(const float* sum_sq, float clip_norm, float* factor, cudaStream_t stream);
Status adamw_step(float* params, const float* grads, GradScale scale, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t step,
                  const uint8_t* decay_mask_or_null, cudaStream_t stream, uint16_t* params_bf16 = nullptr);

// ---- Conversion ------------------------------------------------------------------------------------
// bf16 bits, RNE (formats::float_to_bf16_bits_rn, NaN stays NaN).
Status to_bf16(const float* x, int64_t n, uint16_t* y, cudaStream_t stream);
// y[i] = the fp32 value of bf16 bits x[i] (exact).
Status from_bf16(const uint16_t* x, int64_t n, float* y, cudaStream_t stream);
// out[i] = a[0] * b[i] (fp32, round to nearest), i < count: nvfp4's GEMM alphas on its bf16
// route, one operand's tensor decode scale times each expert's of the other (gemm/'s NVFP4 kernel
// multiplies them in this order).
Status scale_products(const float* a, const float* b, int count, float* out, cudaStream_t stream);

}  // namespace blockscale::train::gpu
