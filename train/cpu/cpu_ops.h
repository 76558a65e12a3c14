// The model's non-GEMM operations on the CPU, in fp32: the reference the GPU kernels of the
// training step (train/gpu/gpu_ops.h) are tested against, operation by operation. Every array is
// row-major and contiguous. Outputs named "+=" accumulate (residual and parameter gradients);
// all others are overwritten.
//
// Attention keeps its matmuls in bf16 as the GPU does with cuBLAS: q, k, v, the probabilities,
// the output gradient and the score gradient are rounded to bf16 (RNE) before each product;
// products and softmax are fp32 (here accumulated in double, a tighter sum than the GPU's).
#pragma once

#include <cstdint>

namespace blockscale::train {

inline constexpr float kRmsNormEps = 1e-5f;

float round_to_bf16(float x);  // RNE, NaN stays NaN

// x[t] = embed[tokens[t]] + pos_embed[t % seq_len], t < n_tokens; x is n_tokens x d.
void embedding_forward(const int32_t* tokens, int64_t n_tokens, int seq_len, int d, const float* embed,
                       const float* pos_embed, float* x);
// d_embed[tokens[t]] += dx[t], d_pos_embed[t % seq_len] += dx[t].
void embedding_backward(const int32_t* tokens, int64_t n_tokens, int seq_len, int d, const float* dx,
                        float* d_embed, float* d_pos_embed);

// y = x * rstd * gain, rstd[r] = 1 / sqrt(mean(x[r]^2) + kRmsNormEps).
void rmsnorm_forward(const float* x, const float* gain, int64_t rows, int d, float* y, float* rstd);
// dx += d(y)/dx · dy, d_gain += sum_r dy * x * rstd.
void rmsnorm_backward(const float* dy, const float* x, const float* gain, const float* rstd, int64_t rows,
                      int d, float* dx, float* d_gain);

// Causal multi-head attention. qkv: (batch*seq) x 3*heads*head_dim, q | k | v, head h at columns
// h*head_dim of each part. probs: batch x heads x seq x seq, the bf16-rounded softmax (zeros above
// the diagonal), saved for the backward. out: (batch*seq) x heads*head_dim. Scale 1/sqrt(head_dim).
// bf16 = false skips the bf16 roundings (the fp32 recipe: exact gradient checks); the GPU is
// always bf16.
void attention_forward(const float* qkv, int batch, int seq, int heads, int head_dim, float* probs,
                       float* out, bool bf16 = true);
// dqkv (overwritten) from dout, the saved probs and qkv.
void attention_backward(const float* qkv, const float* probs, const float* dout, int batch, int seq,
                        int heads, int head_dim, float* dqkv, bool bf16 = true);

// u: rows x 2f (gate | up) -> a: rows x f, a = silu(gate) * up.
void swiglu_forward(const float* u, int64_t rows, int f, float* a);
void swiglu_backward(const float* u, const float* da, int64_t rows, int f, float* du);

// Router: probs = softmax(logits) (tokens x experts); expert_ids / gates: tokens x top_k, the
// top-k experts by probability (ties: lower index first) and their gates (renormalised to sum 1
// when top_k > 1, the probability itself when top_k == 1).
void router_forward(const float* logits, int64_t tokens, int experts, int top_k, float* probs,
                    int32_t* expert_ids, float* gates);
// Switch load-balancing loss: experts * sum_e f_e * P_e, f_e = share of the routed slots that went
// to e (no gradient), P_e = mean over tokens of probs[:, e].
float load_balance_loss(const float* probs, const int32_t* expert_ids, int64_t tokens, int experts, int top_k);
// dlogits (overwritten) from the gates' gradient and the load-balancing loss's weight aux_weight
// (its coefficient times the loss scale).
void router_backward(const float* probs, const int32_t* expert_ids, const float* gates, const float* d_gates,
                     int64_t tokens, int experts, int top_k, float aux_weight, float* dlogits);

// The MoE combine's backward (forward: formats::moe_unpermute_combine). For each token t and
// choice j with sorted row r = slot_row[t*top_k+j] >= 0: dy[r] = gate * dout[t] (rows of dy no slot
// names are zeroed), d_gates[t*top_k+j] = dot(dout[t], y[r]); a dropped slot gets d_gate 0.
void moe_combine_backward(const float* dout, const float* y, const float* gates, const int32_t* slot_row,
                          int64_t tokens, int top_k, int d, int64_t y_rows, float* dy, float* d_gates);
// dx[row_source[r]] += dx_sorted[r] for r < rows (the gather's backward); rows whose source is
// negative (routing's rows past the routed total) are skipped.
void moe_scatter_add(const float* dx_sorted, const int32_t* row_source, int64_t rows, int d, float* dx);

// Cross-entropy of rows x vocab logits against targets: returns the summed loss (nats, double);
// dlogits (may be null) = (softmax - onehot(target)) * grad_scale.
double cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int vocab, float grad_scale,
                     float* dlogits);

}  // namespace blockscale::train
