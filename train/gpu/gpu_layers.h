// The GPU step's linear layers in one recipe, dense and grouped (the MoE experts), forward and
// backward:
//   bf16 (and the LM head of every recipe): cuBLASLt (train/gpu/gpu_blas.h), fp32 accumulation and
//   output, on bf16 copies made once per operand (the forward's copies of x and w serve the
//   backward too). The MoE experts run one product per expert, with the group sizes on the host
//   (host_ends(), set by the step once per layer, as Megatron's grouped linear layers take their
//   splits).
//   mxfp8 on its bf16-values route (GemmRoute::kBf16Values, train/model/model_config.h; Hopper's default): each operand's
//   rowwise and columnwise MX values as bf16 (quant/mx_bf16.h, one pass), then the bf16 recipe's
//   cuBLASLt products on them: fprop X.row x W.row, dgrad dY.row x W.col, wgrad dY.col x X.col.
//   nvfp4 on its bf16-values route (the same route): quant::run's copies as for the kernels, then
//   their block values as bf16 (quant::nvfp4_block_values_bf16, each copy in its stored
//   orientation), multiplied by cuBLASLt with alpha = S_dec_a * S_dec_b on the device: fprop
//   X.row x W.row, dgrad dY.row x W.col (= W.row's values: 2D blocks), wgrad dY.col x X.col (the
//   experts' over each one's padded token columns of the grouped columnwise copies).
//   fp8_block / mxfp8 / nvfp4: quant::run writes each operand's rowwise and columnwise copies in
//   one pass (train/model/recipe_policy.h gives the roles and options), gemm::run multiplies: fprop
//   X.row x W.row, dgrad dY.row x W.col, wgrad dY.col x X.col accumulated (beta = 1) into the fp32
//   gradient, or written (beta = 0) in a step's first backward (set_fresh_gradients). MoE experts
//   use the grouped forms: M-grouped fprop / dgrad over the routed tokens, K-grouped wgrad over
//   each expert's padded tokens; each expert's weight is its own operand.
// A layer's operand copies are kept under its name from the forward to the backward. A weight's
// copies (quantized or bf16) are made by the first forward after the weights change and reused by
// every forward until the next change (gradient accumulation's micro-batches, evaluation).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "quant/quantize.h"
#include "runtime/device.h"  // defines: DeviceBuffer
#include "train/gpu/gpu_blas.h"
#include "train/gpu/gpu_phase_timer.h"
#include "train/model/model_config.h"
#include "train/model/recipe_policy.h"  // defines: OperandRole, SrKey, quantize_options

namespace blockscale::train {

// Device buffers by name, allocated on first use (grown if a later use needs more: the old
// contents are freed first, so a buffer never holds two allocations at once).
class DeviceBuffers {
 public:
  template <typename T>
  Status get(const std::string& name, int64_t count, T** out) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T);
    runtime::DeviceBuffer& b = buffers_[name];
    if (b.size() < bytes) {
      const std::string what = "allocating " + name + " (" + std::to_string(bytes >> 20) + " MiB) on the GPU";
      BS_RETURN_IF_ERROR(b.alloc(bytes, what.c_str()));
    }
    *out = b.as<T>();
    return Status::ok();
  }

 private:
  std::map<std::string, runtime::DeviceBuffer> buffers_;
};

// One tensor's quantized copies (device pointers into named buffers).
struct Quantized {
  uint8_t* row_data = nullptr;
  void* row_scales = nullptr;
  float* row_dec = nullptr;
  uint8_t* col_data = nullptr;
  void* col_scales = nullptr;
  float* col_dec = nullptr;
  int32_t* padded_ends = nullptr;  // grouped columnwise copies
  int64_t capacity = 0;            // grouped: padded token columns the columnwise copy holds
};

class GpuLayers {
 public:
  GpuLayers(Recipe recipe, DeviceBuffers& buffers, PhaseTimer& timer)
      : recipe_(recipe), buffers_(buffers), timer_(timer) {}
  Status init(cudaStream_t stream) {
    stream_ = stream;
    return blas_.init(stream);
  }
  // mxfp8's and nvfp4's GEMM route: bf16 values through cuBLASLt, or gemm/'s block-scaled kernels
  // (kAuto resolved by the caller).
  void set_bf16_values(bool on) { bf16_values_ = on; }
  // Whether the experts run one cuBLAS product each, with the group ends on the host.
  bool cublas_experts() const { return !is_quantized(recipe_) || mx_bf16(recipe_) || nvfp4_bf16(recipe_); }
  // fp8_block on Hopper's cuBLASLt route: gemm/ runs the experts one matmul each, given the group
  // ends on the host (grouped.h's host_group_ends).
  void set_host_sized_experts(bool on) { host_sized_experts_ = on; }
  bool experts_need_host_ends() const { return cublas_experts() || host_sized_experts_; }

  // Routed tokens (rows x cols, sorted by expert): rowwise copy plus the per-expert padded
  // columnwise copy, from one pass. With `gather` (row r is x's row gather->index[r]), the tokens
  // are permuted while they are quantized (quant/moe.h's fused permute + quantize).
  struct Gather {
    const int32_t* index;
    int64_t input_rows;
  };

  // ---- linear layers ----
  // y (m x n) = x · w^T; the forward keeps x's quantized copies (or bf16 bits) under `name`.
  Status linear_forward(const std::string& name, Recipe recipe, const float* x, const float* w, int64_t m,
                        int64_t n, int64_t k, float* y);
  // dx (m x k) = dy · w (skipped when dx is null); dw += dy^T · x. x's copies come from the forward.
  Status linear_backward(const std::string& name, Recipe recipe, SrKey sr, const float* dy, const float* x,
                         const float* w, int64_t m, int64_t n, int64_t k, float* dx, float* dw);
  // cuBLAS product of fp32 operands or their bf16 copies (fp32 accumulation and output).
  Status cublas_gemm(Product prod, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                     float* c, float beta, const GpuBlas::Extras& extras = {});
  // ---- grouped (MoE expert) layers: x holds `rows` routed rows sorted by expert (tokens * top_k,
  // or with expert parallelism the rows this rank's experts received); `e` experts, host_ends_
  // their group ends on the host (cublas_experts() only) ----
  Status grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends, int e,
                         const float* w, int64_t n, int64_t k, float* y, const Gather* gather = nullptr);
  Status grouped_backward(const std::string& name, SrKey sr, const float* dy, const float* x, int64_t rows,
                          const int32_t* ends, int e, const float* w, int64_t n, int64_t k, float* dx, float* dw);
  // cublas_experts(): the group ends on the host, set before grouped_forward / _backward.
  std::vector<int32_t>& host_ends() { return host_ends_; }
  // fresh: the gradients are all zero (a step's first backward), so each wgrad writes its product
  // (beta 0) instead of adding it (beta 1): the same values without reading the gradient. An
  // expert with no tokens is skipped by the cuBLAS loop and written as zeros by the grouped GEMM.
  void set_fresh_gradients(bool fresh) { fresh_gradients_ = fresh; }
  float wgrad_beta() const { return fresh_gradients_ ? 0.0f : 1.0f; }
  // The master weights changed (an optimizer step, a loaded state): the next forward copies them
  // again.
  void weights_changed() { current_weights_.clear(); }

 private:
  template <typename T>
  Status buf(const std::string& name, int64_t count, T** out) {
    return buffers_.get(name, count, out);
  }
  // The operands of a linear layer that cuBLASLt multiplies, per product: fprop x · w^T, dgrad
  // dy · w, wgrad dy^T · x. fp32: the tensors themselves; bf16: one rounded copy of each; mxfp8 on
  // its bf16-values route: the rowwise MX values for fprop and dgrad's dy, columnwise for the rest.
  struct CublasOperands {
    cudaDataType type = CUDA_R_32F;
    size_t elem_bytes = 4;
    const void *x = nullptr, *w = nullptr;               // fprop
    const void *dy = nullptr, *w_dgrad = nullptr;        // dgrad
    const void *dy_wgrad = nullptr, *x_wgrad = nullptr;  // wgrad
    const void* at(const void* p, int64_t elems) const { return static_cast<const char*>(p) + elems * elem_bytes; }
  };
  // The rows of x and dy by expert (device ends, optionally gathered): mxfp8's columnwise blocks
  // start at each expert's first row. bf16 / fp32 take the rows as they are (no gather).
  struct RowGroups {
    const int32_t* ends = nullptr;
    int groups = 0;
    const Gather* gather = nullptr;
  };
  // ---- quantization of one operand (both copies) ----
  Status quantize(const std::string& name, Recipe recipe, OperandRole role, SrKey sr, const float* x,
                  int64_t rows, int64_t cols, Quantized* q);
  Status run_quant(const std::string& name, const quant::QuantizeProblem& p, const quant::QuantizeInputs& in,
                   const quant::QuantizeOutputs& out);
  template <typename Problem, typename Arguments>
  Status gemm_run(const Problem& p, const Arguments& a);
  // Makes the weight copy `name` with make() unless it was made since the weights last changed.
  template <typename Make>
  Status weight_copy(const std::string& name, Make make) {
    if (current_weights_.count(name) != 0) return Status::ok();
    BS_RETURN_IF_ERROR(make());
    current_weights_.insert(name);
    return Status::ok();
  }
  // Each expert's weight (experts x n x k) quantized on its own: codes and scales back to back,
  // one decode scale per expert and copy (FP8 blockwise: one batched launch).
  Status quantize_experts(const std::string& name, const float* w, int experts, int64_t n, int64_t k, Quantized* q);
  Status quantize_grouped(const std::string& name, OperandRole role, SrKey sr, const float* x, int64_t rows,
                          int64_t cols, const int32_t* ends, int experts, Quantized* q, const Gather* gather = nullptr);
  formats::Format format_of(OperandRole role) const;
  // The bf16 recipe's "quantization": a rounded copy in the named buffer, made once per operand
  // (the forward's copies of x and w are the backward's too, as the quantized recipes reuse theirs).
  Status bf16_copy(const std::string& name, const float* x, int64_t count, const void** out);
  // The forward's bf16 copy of an operand (buffers keep their contents between uses).
  Status saved_bf16(const std::string& name, int64_t count, const void** out);
  // mxfp8 / nvfp4 on the bf16-values route.
  bool mx_bf16(Recipe recipe) const { return bf16_values_ && recipe == Recipe::kMxfp8; }
  bool nvfp4_bf16(Recipe recipe) const { return bf16_values_ && recipe == Recipe::kNvfp4; }
  // An operand's MX values as bf16, rowwise and columnwise (rows x cols each, x's layout), in the
  // buffers name.r16 / name.c16: dense (`batches` stacked matrices) or grouped (ends on the device,
  // optionally gathered). saved_mx_bf16: the copies an earlier call made (buffers keep them).
  struct MxBf16Copies {
    uint16_t* row = nullptr;
    uint16_t* col = nullptr;
  };
  Status mx_bf16_copies(const std::string& name, const float* x, int64_t rows, int64_t cols, int64_t batches,
                        const int32_t* ends, int groups, const Gather* gather, MxBf16Copies* out);
  Status saved_mx_bf16(const std::string& name, int64_t count, MxBf16Copies* out);
  // nvfp4 on the bf16-values route: the block values of an operand's quantized copies `q` (made
  // under `name`) as bf16 in name.r16 (batches x rows x cols) and name.c16 (batches x cols x
  // col_rows: rows, or the grouped copy's capacity), each made only when asked for; and the
  // copies' tensor decode scales (one per batch).
  struct Nvfp4Values {
    const uint16_t* row = nullptr;
    const uint16_t* col = nullptr;
    const float* row_dec = nullptr;
    const float* col_dec = nullptr;
    int64_t col_rows = 0;
  };
  Status nvfp4_values(const std::string& name, const Quantized& q, int64_t rows, int64_t cols, int64_t col_rows,
                      int batches, bool row, bool col, Nvfp4Values* out);
  // alphas[i] = a_dec[0] * b_dec[i] (i < count) in the buffer `name`.
  Status nvfp4_alphas(const std::string& name, const float* a_dec, const float* b_dec, int count, float** alphas);
  // The nvfp4 route's layers (linear_* and grouped_* call them).
  Status nvfp4_linear_forward(const std::string& name, const float* x, const float* w, int64_t m, int64_t n,
                              int64_t k, float* y);
  Status nvfp4_linear_backward(const std::string& name, SrKey sr, const float* dy, int64_t m, int64_t n, int64_t k,
                               float* dx, float* dw);
  Status nvfp4_grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends, int e,
                               const float* w, int64_t n, int64_t k, float* y);
  Status nvfp4_grouped_backward(const std::string& name, SrKey sr, const float* dy, int64_t rows,
                                const int32_t* ends, int e, int64_t n, int64_t k, float* dx, float* dw);
  // The weight's quantized copies and their bf16 values (W.col's only without 2D blocks), made once
  // per weight change; dgrad's product with them.
  bool nvfp4_weight_2d() const;
  Status nvfp4_weight(const std::string& name, const float* w, int experts, int64_t n, int64_t k);
  Status nvfp4_dgrad(const uint16_t* dy, const Nvfp4Values& w, int64_t w_offset, int64_t rows, int64_t n, int64_t k,
                     float* dx, const float* alpha);
  // x (rows x k) and w (experts stacked n x k matrices); the forward's copies of x and w serve the
  // backward, which makes a new one of dy (rows x n).
  Status cublas_forward_operands(const std::string& name, Recipe recipe, const float* x, const float* w,
                                 int64_t rows, int64_t n, int64_t k, int experts, const RowGroups& groups,
                                 CublasOperands* o);
  Status cublas_backward_operands(const std::string& name, Recipe recipe, const float* dy, const float* x,
                                  const float* w, int64_t rows, int64_t n, int64_t k, int experts,
                                  const RowGroups& groups, CublasOperands* o);

  Recipe recipe_;
  DeviceBuffers& buffers_;
  PhaseTimer& timer_;
  cudaStream_t stream_ = nullptr;
  GpuBlas blas_;
  std::vector<int32_t> host_ends_;
  bool fresh_gradients_ = false;
  bool bf16_values_ = false;
  bool host_sized_experts_ = false;
  std::vector<int32_t> host_padded_ends_;  // host_ends_ with each expert padded to 128 tokens (wgrad)
  std::map<std::string, std::pair<int64_t, int64_t>> expert_scale_bytes_;  // rowwise, columnwise
  std::map<std::string, Quantized> saved_;  // each operand's latest copies, by name
  std::map<std::string, Nvfp4Values> saved_values_;  // nvfp4's bf16 values of them, by name
  std::set<std::string> current_weights_;   // weight copies made since the weights last changed
};

}  // namespace blockscale::train
