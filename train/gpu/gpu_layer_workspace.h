// What every GEMM route of the GPU step's linear layers shares (train/gpu/gpu_linear_route.h):
// the named device buffers, the phase timer, the stream, cuBLASLt, each operand's quantized copies
// kept from the forward to the backward, the weight copies made since the weights last changed,
// and the experts' group ends on the host where a route needs them. The routes call quant/ and
// gemm/ through it, so each names its buffers and times its phases the same way.
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
  // Frees the buffer `name` (a later get allocates it anew).
  void release(const std::string& name) { buffers_.erase(name); }

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

// Routed tokens gathered while they are quantized: row r of the layer's input is x's row
// index[r] (quant/moe.h's fused permute + quantize).
struct Gather {
  const int32_t* index;
  int64_t input_rows;
};

class LayerWorkspace {
 public:
  LayerWorkspace(Recipe recipe, DeviceBuffers& buffers, PhaseTimer& timer)
      : recipe_(recipe), buffers_(buffers), timer_(timer) {}
  Status init(cudaStream_t stream) {
    stream_ = stream;
    return blas_.init(stream);
  }
  Recipe recipe() const { return recipe_; }
  cudaStream_t stream() const { return stream_; }
  PhaseTimer& timer() { return timer_; }

  template <typename T>
  Status buf(const std::string& name, int64_t count, T** out) {
    return buffers_.get(name, count, out);
  }

  // ---- the recipe's quantized copies (quant::run), kept under `name` until the next call ----
  // Both copies of one operand.
  Status quantize(const std::string& name, Recipe recipe, OperandRole role, SrKey sr, const float* x, int64_t rows,
                  int64_t cols, Quantized* q);
  // Each expert's weight (experts x n x k) quantized on its own: codes and scales back to back,
  // one decode scale per expert and copy. `directions`: the copies made (a route that reads only
  // the rowwise one asks for that alone; the other's pointers are then null).
  Status quantize_experts(const std::string& name, const float* w, int experts, int64_t n, int64_t k, Quantized* q,
                          formats::Direction directions = formats::Direction::kBoth);
  // Routed tokens (rows x cols, sorted by expert): rowwise copy plus the per-expert padded
  // columnwise copy, from one pass, optionally gathered.
  Status quantize_grouped(const std::string& name, OperandRole role, SrKey sr, const float* x, int64_t rows,
                          int64_t cols, const int32_t* ends, int experts, Quantized* q, const Gather* gather = nullptr);
  const Quantized& saved(const std::string& name) { return saved_[name]; }
  // The columnwise / rowwise expert scale strides quantize_experts used for `name`.
  std::pair<int64_t, int64_t> expert_scale_bytes(const std::string& name) { return expert_scale_bytes_[name]; }
  formats::Format format_of(OperandRole role) const;
  Status run_quant(const std::string& name, const quant::QuantizeProblem& p, const quant::QuantizeInputs& in,
                   const quant::QuantizeOutputs& out);

  // ---- products ----
  template <typename Problem, typename Arguments>
  Status gemm_run(const Problem& p, const Arguments& a);  // gemm::run, timed as a GEMM
  // cuBLAS product of fp32 operands or their bf16 copies (fp32 accumulation and output).
  Status cublas_gemm(Product prod, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                     float* c, float beta, const GpuBlas::Extras& extras = {});

  // ---- weights: a copy made by make() unless it was made since the weights last changed ----
  template <typename Make>
  Status weight_copy(const std::string& name, Make make) {
    if (current_weights_.count(name) != 0) return Status::ok();
    BS_RETURN_IF_ERROR(make());
    current_weights_.insert(name);
    return Status::ok();
  }
  void weights_changed() { current_weights_.clear(); }
  // The bf16 copy of all parameters [params, params + count) the backend keeps current (the
  // optimizer writes it with the weights): a weight inside that range is read from there rather
  // than copied. bf16_mirror_of(w, count): w's bf16 copy there, or null (no mirror, or w outside).
  void set_bf16_mirror(const float* params, const uint16_t* mirror, int64_t count) {
    mirror_params_ = params, mirror_ = mirror, mirror_count_ = count;
  }
  const uint16_t* bf16_mirror_of(const float* w, int64_t count) const {
    if (mirror_ == nullptr) return nullptr;
    // As addresses: w may point into another buffer altogether.
    const uintptr_t at = reinterpret_cast<uintptr_t>(w), begin = reinterpret_cast<uintptr_t>(mirror_params_);
    if (at < begin || (at - begin) % sizeof(float) != 0) return nullptr;
    const int64_t offset = static_cast<int64_t>((at - begin) / sizeof(float));
    if (offset + count > mirror_count_) return nullptr;
    return mirror_ + offset;
  }

  // ---- the step's state ----
  // The experts' group ends on the host, for routes that size their products on the host.
  std::vector<int32_t>& host_ends() { return host_ends_; }
  // fresh: the gradients are all zero (a step's first backward), so each wgrad writes its product
  // (beta 0) instead of adding it (beta 1): the same values without reading the gradient.
  void set_fresh_gradients(bool fresh) { fresh_gradients_ = fresh; }
  bool fresh_gradients() const { return fresh_gradients_; }
  float wgrad_beta() const { return fresh_gradients_ ? 0.0f : 1.0f; }

 private:
  Recipe recipe_;
  DeviceBuffers& buffers_;
  PhaseTimer& timer_;
  cudaStream_t stream_ = nullptr;
  GpuBlas blas_;
  std::vector<int32_t> host_ends_;
  bool fresh_gradients_ = false;
  std::map<std::string, std::pair<int64_t, int64_t>> expert_scale_bytes_;  // rowwise, columnwise
  std::map<std::string, Quantized> saved_;  // each operand's latest copies, by name
  std::set<std::string> current_weights_;   // weight copies made since the weights last changed
  const float* mirror_params_ = nullptr;     // set_bf16_mirror
  const uint16_t* mirror_ = nullptr;
  int64_t mirror_count_ = 0;
};

}  // namespace blockscale::train
