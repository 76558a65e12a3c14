// Causal multi-head attention through cuDNN's fused scaled-dot-product attention (flash attention:
// the score matrix never reaches memory), the GPU step's attention wherever cuDNN supports the
// shape. The reference path (gpu_ops.h attention_forward / _backward, the CPU model's mirror)
// stays as the fallback and as the test oracle.
//
// Layouts are the step's: qkv [batch * seq, 3 * heads * head_dim] fp32 (Q | K | V, head h at
// columns h * head_dim of each part), out [batch * seq, heads * head_dim] fp32. cuDNN multiplies
// bf16 Q, K, V (rounded as the reference path rounds them), keeps the softmax in fp32 and writes
// bf16 O; the backward takes the forward's softmax statistics (stats: [batch, heads, seq] fp32,
// what the step keeps per layer instead of the bf16 probabilities) and is cuDNN's deterministic
// algorithm, so a step stays bit-reproducible. The scale is 1 / sqrt(head_dim), the mask causal.
// Built with the cuDNN frontend headers (the build's BLOCKSCALE_CUDNN_FRONTEND_DIR); cuDNN itself
// is opened on first use (runtime/cuda_libraries.h). A build without the headers compiles
// gpu_sdpa_unavailable.cpp: prepare() then says so and the step uses the reference path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "formats/status.h"

namespace blockscale::train::gpu {

class FusedAttention {
 public:
  FusedAttention();
  ~FusedAttention();
  FusedAttention(const FusedAttention&) = delete;
  FusedAttention& operator=(const FusedAttention&) = delete;

  // Whether this build has the cuDNN path at all.
  static bool built();
  // Builds (once per batch size) the forward and backward graphs for this shape: ok, or why
  // cuDNN cannot run it (not loadable, no engine for the shape, ...).
  Status prepare(int batch, int seq, int heads, int head_dim, cudaStream_t stream);
  // Workspace of forward and backward at a prepared batch size (the bf16 copies and cuDNN's own).
  size_t workspace_bytes(int batch) const;
  // out = softmax(Q K^T * scale, causal) V per head; stats for the backward.
  Status forward(const float* qkv, int batch, float* out, float* stats, void* workspace, cudaStream_t stream);
  // dqkv (Q | K | V gradients, qkv's layout, written) from dout and the forward's out and stats.
  Status backward(const float* qkv, const float* out, const float* stats, const float* dout, int batch, float* dqkv,
                  void* workspace, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace blockscale::train::gpu
