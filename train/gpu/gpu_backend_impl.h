// The GPU step's class (train/gpu/gpu_backend.h makes it): its state, the optimizer step and
// the state's reads and writes here; the forward + backward (run) in gpu_backend_step.cpp.
// Internal to train/gpu: include gpu_backend.h instead.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gemm/gemm.h"                           // the FP8 route (GemmRoute)
#include "quant/moe.h"                           // routing, unpermute-combine
#include "runtime/cuda_libraries.h"
#include "runtime/cuda_status.h"
#include "runtime/device.h"    // copy_and_wait
#include "train/gpu/gpu_glue.h"                  // gather_rows, round_to_bf16, add_inplace
#include "train/gpu/gpu_layers.h"                // GpuLayers, DeviceBuffers, Gather
#include "train/gpu/gpu_ops.h"                   // norms, attention, router, loss, AdamW
#include "train/gpu/gpu_phase_timer.h"
#include "train/gpu/gpu_sdpa.h"                 // FusedAttention
#include "train/model/recipe_policy.h"           // gradient_sr_key, head_recipe
#include "train/parallel/gpu_expert_parallel.h"  // ExpertExchange
#include "train/parallel/optimizer_shards.h"     // the sharded optimizer's shares
#include "train/step_backend.h"

namespace blockscale::train::gpu_step {

#define BS_CUDA(expr) BS_RETURN_IF_ERROR(runtime::cuda_status((expr), #expr))
#define BS_CUBLAS(expr)                                                                                    \
  do {                                                                                                     \
    const cublasStatus_t bs_st_ = (expr);                                                                  \
    if (bs_st_ != CUBLAS_STATUS_SUCCESS) return Status::error(std::string(#expr) + ": cuBLAS status " + std::to_string(int(bs_st_))); \
  } while (0)

class GpuBackend final : public StepBackend {
 public:
  GpuBackend(const ModelConfig& config, Recipe recipe, gemm::GemmRoute route)
      : config_(config), recipe_(recipe), route_(route), layout_(make_param_layout(config)) {}
  ~GpuBackend() override {
    if (awaited_ < int(gathered_.size()) && finish_gathers().is_ok()) cudaStreamSynchronize(stream_);  // none in flight
    if (shared_) comm_->forget_device_buffers();
    for (cudaEvent_t e : gathered_) cudaEventDestroy(e);
    if (host_scalars_) cudaFreeHost(host_scalars_);
    if (cublas_) BS_CUDA_LIB(kCublas, cublasDestroy)(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string gemm_route() const override {
    if (recipe_ == Recipe::kFp8Block)
      return std::string("gemm/, ") + gemm::gemm_route_name(route_) + " route";
    if (recipe_ != Recipe::kMxfp8 && recipe_ != Recipe::kNvfp4) return "";
    if (layers_.on_kernels()) return "gemm/ block-scaled kernels";
    return recipe_ == Recipe::kMxfp8 ? "MX values as bf16 + cuBLASLt" : "NVFP4 block values as bf16 + cuBLASLt";
  }

  Status init(uint64_t seed) {
    BS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BS_RETURN_IF_ERROR(runtime::open_cuda_library(runtime::CudaLibrary::kCublas));
    BS_CUBLAS(BS_CUDA_LIB(kCublas, cublasCreate)(&cublas_));
    BS_CUBLAS(BS_CUDA_LIB(kCublas, cublasSetStream)(cublas_, stream_));
    BS_RETURN_IF_ERROR(layers_.init(stream_));
    const size_t scalars = kAuxLosses + std::max(config_.n_layers, 1);
    BS_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_scalars_), scalars * sizeof(float)));
    int dev = 0, sms = 0, clock_khz = 0, major = 0;
    BS_CUDA(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    BS_CUDA(cudaGetDeviceProperties(&prop, dev));
    device_name_ = prop.name;
    BS_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    BS_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    BS_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    // Dense bf16 tensor-core FLOP per SM per clock: 4096 on sm_90 (H100 SXM: 132 SMs, 1.83 GHz ->
    // 989 TFLOP/s); other architectures report no MFU.
    peak_ = major == 9 ? double(sms) * clock_khz * 1e3 * 4096.0 : 0.0;
    // The FP8 route is process-wide in gemm/: the backend made last sets it.
    if (recipe_ == Recipe::kFp8Block) gemm::set_gemm_route(route_);
    layers_.choose_route(mx_bf16_values(route_, major),
                         recipe_ == Recipe::kFp8Block && route_ == gemm::GemmRoute::kCublasLt && major == 9);
    const int64_t n = layout_.total;
    std::vector<float> host(n);
    init_params(layout_, config_, seed, host.data());
    BS_RETURN_IF_ERROR(buffers_.get("params", n, &params_));
    BS_RETURN_IF_ERROR(buffers_.get("grads", n, &grads_));
    BS_RETURN_IF_ERROR(buffers_.get("adam_m", n, &m_));
    BS_RETURN_IF_ERROR(buffers_.get("adam_v", n, &v_));
    BS_RETURN_IF_ERROR(buffers_.get("decay", n, &decay_));
    BS_RETURN_IF_ERROR(copy(params_, host.data(), n * sizeof(float)));
    if (recipe_ == Recipe::kBf16) {
      BS_RETURN_IF_ERROR(buffers_.get("params_bf16", n, &params16_));
      layers_.set_bf16_mirror(params_, params16_, n);
      BS_RETURN_IF_ERROR(refresh_bf16_mirror());
    }
    BS_CUDA(cudaMemsetAsync(m_, 0, n * sizeof(float), stream_));
    BS_CUDA(cudaMemsetAsync(v_, 0, n * sizeof(float), stream_));
    const std::vector<uint8_t> mask = decay_mask(layout_);
    BS_RETURN_IF_ERROR(copy(decay_, mask.data(), n));
    // Attention through cuDNN where it runs this shape (graphs for one sequence now, so the run's
    // header can say which path runs; each batch size builds its own on first use).
    attention_status_ = fused_attention_.prepare(1, config_.seq_len, config_.n_heads, config_.head_dim(), stream_);
    copy_bandwidth_ = measure_copy_bandwidth();
    return Status::ok();
  }
  double copy_bandwidth() const override { return copy_bandwidth_; }

  std::string device_name() const override { return device_name_; }
  void use_reference_attention() { attention_status_ = Status::error("the reference attention was asked for"); }
  std::string attention() const override {
    return attention_status_.is_ok() ? "cuDNN fused SDPA" : "reference (" + attention_status_.message() + ")";
  }
  double peak_flops() const override { return peak_; }

  Status zero_grads() override {
    if (time_phases_) timer_.start(stream_);  // a step begins here and ends with optimizer_step
    PhaseScope phase(timer_, Phase::kOptimizer);
    BS_CUDA(cudaMemsetAsync(grads_, 0, layout_.total * sizeof(float), stream_));
    fresh_gradients_ = true;
    return Status::ok();
  }

  Status forward_backward(const int32_t* tokens, const int32_t* targets, int batch, float grad_scale,
                          uint64_t run_seed, int64_t micro_step, StepLosses* losses) override {
    const bool reduce = reduce_next_;
    reduce_next_ = false;
    layers_.set_fresh_gradients(fresh_gradients_);  // the first backward after zero_grads writes the wgrads
    fresh_gradients_ = false;
    return run(tokens, targets, batch, grad_scale, run_seed, micro_step, true, reduce, losses);
  }
  void reduce_in_next_backward() override { reduce_next_ = comm_ != nullptr; }
  bool state_needs_every_rank() const override { return expert_parallel_ || shards_.has_value(); }
  Status set_grad_reduce(GradReduce r) override {
    grad_reduce_ = r;
    return Status::ok();
  }
  int64_t optimizer_state_bytes() const override {
    return int64_t(2 * sizeof(float)) * (shards_ ? shards_->state_size() : layout_.total);
  }
  // AdamW's moments for this rank's share only (train/parallel/optimizer_shards.h): the backward
  // reduce-scatters each bucket (its tail all-reduced), the update runs on the share, the
  // parameters are all-gathered back.
  Status set_sharded_optimizer() override {
    if (comm_ == nullptr)
      return Status::error("--shard-optimizer: needs ranks from a launcher (torchrun, srun or tools/train_ranks.sh)");
    if (expert_parallel_) return Status::error("--shard-optimizer: not with --expert-parallel");
    OptimizerShards s;
    BS_RETURN_IF_ERROR(
        OptimizerShards::make(reduction_buckets(layout_), layout_.total, comm_->rank(), comm_->world_size(), &s));
    float *m, *v;
    BS_RETURN_IF_ERROR(buffers_.get("adam_m_shard", std::max<int64_t>(s.state_size(), 1), &m));
    BS_RETURN_IF_ERROR(buffers_.get("adam_v_shard", std::max<int64_t>(s.state_size(), 1), &v));
    for (const OptimizerPiece& p : s.pieces()) {
      BS_RETURN_IF_ERROR(copy(m + p.state_offset, m_ + p.offset, p.count * sizeof(float)));
      BS_RETURN_IF_ERROR(copy(v + p.state_offset, v_ + p.offset, p.count * sizeof(float)));
    }
    buffers_.release("adam_m");
    buffers_.release("adam_v");
    m_ = m, v_ = v;
    for (size_t i = 0; i < s.buckets().size(); ++i) bucket_at_[s.buckets()[i].begin] = i;
    shards_ = std::move(s);
    return Status::ok();
  }
  Status set_expert_parallel() override {
    if (comm_ == nullptr)
      return Status::error("--expert-parallel: needs ranks from a launcher (torchrun, srun or tools/train_ranks.sh)");
    if (!config_.moe()) return Status::error("--expert-parallel: needs MoE layers (--experts > 0)");
    if (config_.n_experts % comm_->world_size() != 0)
      return Status::error("--expert-parallel: --experts (" + std::to_string(config_.n_experts) +
                           ") must be a multiple of the number of ranks (" + std::to_string(comm_->world_size()) + ")");
    expert_parallel_ = true;
    layers_.weights_changed();  // the expert weights a rank copies are now its own experts'
    return Status::ok();
  }
  Status evaluate(const int32_t* tokens, const int32_t* targets, int batch, StepLosses* losses) override {
    return run(tokens, targets, batch, 0.0f, 0, 0, false, false, losses);
  }

  Status optimizer_step(const OptimizerConfig& c, float lr, int64_t step, double* grad_norm) override {
    const int64_t n = layout_.total;
    if (comm_ != nullptr) {
      PhaseScope phase(timer_, Phase::kCommunication);  // what the backward did not hide
      if (!reduce_pending_) BS_RETURN_IF_ERROR(reduce_shared_gradients());
      BS_RETURN_IF_ERROR(comm_->wait_device(stream_));
      reduce_pending_ = false;
      // bf16 sums back to fp32 (a sharded rank's chunks of the others' come back too, unused).
      for (const auto& [begin, end] : bf16_ranges_)
        BS_RETURN_IF_ERROR(gpu::from_bf16(grads16_ + begin, end - begin, grads_ + begin, stream_));
      bf16_ranges_.clear();
    }
    timer_.enter(Phase::kOptimizer);
    void* work = nullptr;
    float* scalars = nullptr;
    BS_RETURN_IF_ERROR(buffers_.get("reduce_ws", int64_t(gpu::reduction_workspace_bytes(n)), reinterpret_cast<uint8_t**>(&work)));
    BS_RETURN_IF_ERROR(buffers_.get("opt_scalars", 2, &scalars));  // the sum of squares, the clipping factor
    if (shards_) return sharded_step(c, lr, step, work, scalars, grad_norm);
    const bool ranks_own_experts = expert_parallel_ && comm_->world_size() > 1;
    gpu::GradScale scale;
    if (!ranks_own_experts) {
      // The update clips on the device, queued behind the norm: the host waits only at the end of
      // the step, then reads the norm it logs from the pinned copy.
      BS_RETURN_IF_ERROR(gpu::sum_of_squares(grads_, n, scalars, work, gpu::reduction_workspace_bytes(n), stream_));
      BS_CUDA(cudaMemcpyAsync(host_scalars_ + kSumSq, scalars, sizeof(float), cudaMemcpyDeviceToHost, stream_));
      BS_RETURN_IF_ERROR(gpu::clip_factor_on_device(scalars, c.clip_norm, scalars + 1, stream_));
      scale.device = scalars + 1;
    } else {
      // The shared gradients are the same bits on every rank, and so is their sum of squares;
      // each rank's experts' are its own, summed across ranks. (Not the whole sum minus the
      // experts': that leaves a rounding error that differs by rank, and so would the clipping.)
      auto sum_sq_of = [&](int64_t begin, int64_t end, double* out) -> Status {
        BS_RETURN_IF_ERROR(gpu::sum_of_squares(grads_ + begin, end - begin, scalars, work,
                                               gpu::reduction_workspace_bytes(n), stream_));
        BS_CUDA(cudaMemcpyAsync(host_scalars_ + kSumSq, scalars, sizeof(float), cudaMemcpyDeviceToHost, stream_));
        BS_CUDA(cudaStreamSynchronize(stream_));
        *out += host_scalars_[kSumSq];
        return Status::ok();
      };
      double shared = 0, experts = 0;
      BS_RETURN_IF_ERROR(sum_sq_of(0, layer_begin(0), &shared));
      for (int l = 0; l < config_.n_layers; ++l) {
        BS_RETURN_IF_ERROR(sum_sq_of(layer_begin(l), shared_end(l), &shared));
        BS_RETURN_IF_ERROR(sum_sq_of(shared_end(l), layer_begin(l + 1), &experts));
      }
      BS_RETURN_IF_ERROR(sum_sq_of(layer_begin(config_.n_layers), n, &shared));
      BS_RETURN_IF_ERROR(comm_->all_reduce_host(&experts, 1));
      *grad_norm = std::sqrt(shared + experts);
      scale = gpu::GradScale{clip_factor(*grad_norm, c.clip_norm)};
    }
    // Clipping is AdamW's gradient scale: one pass over the gradients, not two.
    BS_RETURN_IF_ERROR(gpu::adamw_step(params_, grads_, scale, m_, v_, n, lr, c.beta1, c.beta2, c.eps, c.weight_decay,
                                       step, decay_, stream_, params16_));
    layers_.weights_changed();
    timer_.leave();
    BS_RETURN_IF_ERROR(timer_.finish(&phase_totals_));
    BS_CUDA(cudaStreamSynchronize(stream_));  // the step's end
    if (!ranks_own_experts) *grad_norm = std::sqrt(double(host_scalars_[kSumSq]));
    return Status::ok();
  }

  std::vector<std::pair<std::string, double>> phase_ms() const override {
    std::vector<std::pair<std::string, double>> out;
    for (size_t i = 0; i < phase_totals_.size(); ++i) out.emplace_back(phase_name(Phase(i)), phase_totals_[i]);
    return out;
  }
  void reset_phase_ms() override { phase_totals_ = {}; }
  void time_phases(bool on) override { time_phases_ = on; }

  Status read_state(std::vector<float>* p, std::vector<float>* m, std::vector<float>* v) override {
    BS_RETURN_IF_ERROR(finish_gathers());
    const size_t bytes = layout_.total * sizeof(float);
    p->resize(layout_.total);
    m->resize(layout_.total);
    v->resize(layout_.total);
    BS_RETURN_IF_ERROR(copy(p->data(), params_, bytes));
    if (shards_) {
      // Each rank's share (the tails once, from rank 0) summed into the whole: exact, one
      // contributor per element.
      std::vector<float> share(shards_->state_size());
      for (auto [device, full] : {std::pair{m_, m}, std::pair{v_, v}}) {
        BS_RETURN_IF_ERROR(copy(share.data(), device, share.size() * sizeof(float)));
        std::fill(full->begin(), full->end(), 0.0f);
        shards_->unpack(share.data(), full->data(), shards_->rank() == 0);
        BS_RETURN_IF_ERROR(comm_->all_reduce_host(full->data(), int64_t(full->size())));
      }
      return Status::ok();
    }
    BS_RETURN_IF_ERROR(copy(m->data(), m_, bytes));
    BS_RETURN_IF_ERROR(copy(v->data(), v_, bytes));
    if (!expert_parallel_) return Status::ok();
    // Each rank's copy is current for its own experts only: every rank contributes those (zeros
    // elsewhere) to a sum, which gives every rank the whole state.
    const int world = comm_->world_size(), per_rank = config_.n_experts / world, me = comm_->rank();
    for (int l = 0; l < config_.n_layers; ++l) {
      for (int index : {layout_.layers[l].w13, layout_.layers[l].w2}) {
        const ParamTensor& t = layout_.at(index);
        const int64_t slice = t.size / config_.n_experts;
        for (std::vector<float>* state : {p, m, v}) {
          float* base = state->data() + t.offset;
          std::fill(base, base + me * per_rank * slice, 0.0f);
          std::fill(base + (me + 1) * per_rank * slice, base + t.size, 0.0f);
          BS_RETURN_IF_ERROR(comm_->all_reduce_host(base, t.size));
        }
      }
    }
    return Status::ok();
  }
  Status write_state(const std::vector<float>& p, const std::vector<float>& m, const std::vector<float>& v) override {
    const int64_t n = layout_.total;
    if (int64_t(p.size()) != n || int64_t(m.size()) != n || int64_t(v.size()) != n)
      return Status::error("write_state: sizes differ from the model's parameter count");
    BS_RETURN_IF_ERROR(finish_gathers());
    BS_RETURN_IF_ERROR(copy(params_, p.data(), n * sizeof(float)));
    BS_RETURN_IF_ERROR(refresh_bf16_mirror());
    layers_.weights_changed();
    if (shards_) {  // this rank's share of the moments
      std::vector<float> share(shards_->state_size());
      for (auto [full, device] : {std::pair{&m, m_}, std::pair{&v, v_}}) {
        shards_->pack(full->data(), share.data());
        BS_RETURN_IF_ERROR(copy(device, share.data(), share.size() * sizeof(float)));
      }
      return Status::ok();
    }
    BS_RETURN_IF_ERROR(copy(m_, m.data(), n * sizeof(float)));
    BS_RETURN_IF_ERROR(copy(v_, v.data(), n * sizeof(float)));
    return Status::ok();
  }

  // Test access: device gradients (host copy).
  Status read_grads(std::vector<float>* g) {
    g->resize(layout_.total);
    BS_RETURN_IF_ERROR(copy(g->data(), grads_, layout_.total * sizeof(float)));
    return Status::ok();
  }

 private:
  // The best of three 128 MiB device-to-device copies (after one to warm up), read plus written
  // bytes per second; 0 when the 256 MiB it needs are not free (the phases then show no floor).
  double measure_copy_bandwidth() {
    constexpr size_t kBytes = size_t{128} << 20;
    char* buf = nullptr;
    if (cudaMalloc(&buf, 2 * kBytes) != cudaSuccess) {
      cudaGetLastError();  // clear the failed allocation's error
      return 0.0;
    }
    cudaEvent_t begin = nullptr, end = nullptr;
    float best = 0;
    if (cudaEventCreate(&begin) == cudaSuccess && cudaEventCreate(&end) == cudaSuccess) {
      for (int i = 0; i < 4; ++i) {
        float ms = 0;
        cudaEventRecord(begin, stream_);
        cudaMemcpyAsync(buf + kBytes, buf, kBytes, cudaMemcpyDeviceToDevice, stream_);
        cudaEventRecord(end, stream_);
        if (cudaEventSynchronize(end) != cudaSuccess || cudaEventElapsedTime(&ms, begin, end) != cudaSuccess) break;
        if (i > 0 && (best == 0 || ms < best)) best = ms;
      }
    }
    if (begin) cudaEventDestroy(begin);
    if (end) cudaEventDestroy(end);
    cudaFree(buf);
    cudaGetLastError();
    return best > 0 ? 2.0 * kBytes / (best * 1e-3) : 0.0;
  }
  // A copy ordered after the step's stream work and finished on return (runtime/device.h).
  Status copy(void* dst, const void* src, size_t bytes) {
    return runtime::copy_and_wait(dst, src, bytes, stream_, "a copy on the GPU step's stream");
  }
  template <typename T>
  Status buf(const std::string& name, int64_t count, T** out) {
    return buffers_.get(name, count, out);
  }
  float* P(int index) { return params_ + layout_.at(index).offset; }
  float* G(int index) { return grads_ + layout_.at(index).offset; }

  struct ExpertRows {  // the experts a rank runs and the rows they take
    int experts;
    int64_t rows;
    const int32_t* ends;
    int64_t first;  // the first expert's index in the layer
  };

  // What the backward needs of layer l's forward, in buffers named "l<l>.*" (one place for their
  // names and sizes: the forward writes them, the backward reads them).
  struct LayerActivations {
    float *x_in, *h, *rstd1, *qkv, *att, *x_mid, *h2, *rstd2, *u, *a;
    uint16_t* probs;                      // bf16 attention probabilities (reference attention)
    float* stats;                         // softmax statistics (fused attention)
    float *rprobs, *gates, *xs, *y;       // MoE only (null for a dense FFN)
    int32_t *ids, *ends, *row_source, *slot_row;
  };
  Status layer_activations(int l, int batch, LayerActivations* s) {
    const ModelConfig& c = config_;
    const std::string n = "l" + std::to_string(l);
    const int64_t m = int64_t{batch} * c.seq_len, d = c.d_model, f = c.d_ff, e = c.n_experts, k = c.top_k;
    // MoE: every token's top_k routed rows; with expert parallelism, what this rank's experts can
    // receive (at most every rank's rows)
    const int64_t ffn_rows = c.moe() ? ffn_capacity(m * k) : m;
    *s = LayerActivations{};
    BS_RETURN_IF_ERROR(buf(n + ".x_in", m * d, &s->x_in));
    BS_RETURN_IF_ERROR(buf(n + ".h", m * d, &s->h));
    BS_RETURN_IF_ERROR(buf(n + ".rstd1", m, &s->rstd1));
    BS_RETURN_IF_ERROR(buf(n + ".qkv", m * 3 * d, &s->qkv));
    if (attention_status_.is_ok())  // the fused path keeps the softmax statistics, not the probabilities
      BS_RETURN_IF_ERROR(buf(n + ".stats", int64_t{batch} * c.n_heads * c.seq_len, &s->stats));
    else
      BS_RETURN_IF_ERROR(buf(n + ".probs", int64_t{batch} * c.n_heads * c.seq_len * c.seq_len, &s->probs));
    BS_RETURN_IF_ERROR(buf(n + ".att", m * d, &s->att));
    BS_RETURN_IF_ERROR(buf(n + ".x_mid", m * d, &s->x_mid));
    BS_RETURN_IF_ERROR(buf(n + ".h2", m * d, &s->h2));
    BS_RETURN_IF_ERROR(buf(n + ".rstd2", m, &s->rstd2));
    BS_RETURN_IF_ERROR(buf(n + ".u", ffn_rows * 2 * f, &s->u));
    BS_RETURN_IF_ERROR(buf(n + ".a", ffn_rows * f, &s->a));
    if (!c.moe()) return Status::ok();
    BS_RETURN_IF_ERROR(buf(n + ".rprobs", m * e, &s->rprobs));
    BS_RETURN_IF_ERROR(buf(n + ".gates", m * k, &s->gates));
    BS_RETURN_IF_ERROR(buf(n + ".ids", m * k, &s->ids));
    BS_RETURN_IF_ERROR(buf(n + ".ends", e, &s->ends));
    BS_RETURN_IF_ERROR(buf(n + ".row_source", m * k, &s->row_source));
    BS_RETURN_IF_ERROR(buf(n + ".slot_row", m * k, &s->slot_row));
    // The experts' inputs (expert parallelism: the rows they received; MXFP8 / FP8 blockwise
    // without it: unused, their quantized copies are kept instead), and this rank's routed outputs.
    BS_RETURN_IF_ERROR(buf(n + ".xs", ffn_rows * d, &s->xs));
    return buf(n + ".y", m * k * d, &s->y);
  }

  Status run(const int32_t* tokens_host, const int32_t* targets_host, int batch, float grad_scale, uint64_t run_seed,
             int64_t micro_step, bool backward, bool reduce, StepLosses* losses);

  // The sharded update (optimizer_step's tail, in its optimizer phase): the norm of this rank's
  // share (the tails counted by rank 0) summed across ranks on the device, AdamW on the share
  // clipped by it, each bucket's parameters all-gathered. No host wait until the step's end.
  Status sharded_step(const OptimizerConfig& c, float lr, int64_t step, void* work, float* scalars,
                      double* grad_norm) {
    int64_t counted = 0;
    for (const OptimizerPiece& p : shards_->pieces())
      if (!p.tail || shards_->rank() == 0) counted += p.count;
    float* packed;  // the gradients this rank counts, back to back
    BS_RETURN_IF_ERROR(buffers_.get("opt_norm_pack", std::max<int64_t>(counted, 1), &packed));
    int64_t at = 0;
    for (const OptimizerPiece& p : shards_->pieces()) {
      if (p.tail && shards_->rank() != 0) continue;
      BS_CUDA(cudaMemcpyAsync(packed + at, grads_ + p.offset, p.count * sizeof(float), cudaMemcpyDeviceToDevice,
                              stream_));
      at += p.count;
    }
    if (counted > 0) {
      BS_RETURN_IF_ERROR(gpu::sum_of_squares(packed, counted, scalars, work,
                                             gpu::reduction_workspace_bytes(layout_.total), stream_));
    } else {
      BS_CUDA(cudaMemsetAsync(scalars, 0, sizeof(float), stream_));
    }
    BS_RETURN_IF_ERROR(comm_->all_reduce_device(scalars, 1, stream_));
    BS_RETURN_IF_ERROR(comm_->wait_device(stream_));
    BS_CUDA(cudaMemcpyAsync(host_scalars_ + kSumSq, scalars, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    BS_RETURN_IF_ERROR(gpu::clip_factor_on_device(scalars, c.clip_norm, scalars + 1, stream_));
    const gpu::GradScale scale{1.0f, scalars + 1};
    for (const OptimizerPiece& p : shards_->pieces())
      BS_RETURN_IF_ERROR(gpu::adamw_step(params_ + p.offset, grads_ + p.offset, scale, m_ + p.state_offset,
                                         v_ + p.state_offset, p.count, lr, c.beta1, c.beta2, c.eps, c.weight_decay,
                                         step, decay_ + p.offset, stream_));
    // The gathers in the forward's order, each part's end marked: the next forward waits for a part
    // just before it reads it (await_params), so the gathers overlap it.
    const int parts = config_.n_layers + 2;
    while (int(gathered_.size()) < parts) {
      cudaEvent_t e;
      BS_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      gathered_.push_back(e);
    }
    const std::vector<ReductionBucket>& buckets = shards_->buckets();  // the backward's order: head first
    int part = 0;
    for (auto b = buckets.rbegin(); b != buckets.rend(); ++b) {
      while (b->begin >= part_end(part)) BS_RETURN_IF_ERROR(comm_->mark_device(gathered_[part++]));
      if (b->chunk > 0) BS_RETURN_IF_ERROR(comm_->all_gather_device(params_ + b->begin, b->chunk, stream_));
    }
    while (part < parts) BS_RETURN_IF_ERROR(comm_->mark_device(gathered_[part++]));
    awaited_ = 0;
    layers_.weights_changed();
    timer_.leave();
    BS_RETURN_IF_ERROR(timer_.finish(&phase_totals_));
    BS_CUDA(cudaStreamSynchronize(stream_));  // the step's end
    *grad_norm = std::sqrt(double(host_scalars_[kSumSq]));
    return Status::ok();
  }

  // The parameters' parts in the forward's order: 0 the embeddings, 1 + l layer l, L + 1 the final
  // norm and the LM head. part_end: where part `part` ends.
  int64_t part_begin(int part) const { return part == 0 ? 0 : layer_begin(part - 1); }
  int64_t part_end(int part) const { return part > config_.n_layers ? layout_.total : layer_begin(part); }
  // The forward waits for the sharded optimizer's gather of each part of the parameters before it
  // reads it (parts in order; the bf16 recipe's copy of the part made then).
  Status await_params(int part) {
    const int first = awaited_, last = std::min(part, int(gathered_.size()) - 1);
    if (first > last) return Status::ok();
    {
      PhaseScope phase(timer_, Phase::kCommunication);  // the gathers the forward did not hide
      for (int p = first; p <= last; ++p) BS_CUDA(cudaStreamWaitEvent(stream_, gathered_[p], 0));
    }
    for (int p = first; p <= last && params16_ != nullptr; ++p)
      BS_RETURN_IF_ERROR(gpu::to_bf16(params_ + part_begin(p), part_end(p) - part_begin(p), params16_ + part_begin(p),
                                      stream_));
    awaited_ = last + 1;
    return Status::ok();
  }
  // Every gather done, before anything but the forward reads or writes the parameters.
  Status finish_gathers() { return await_params(config_.n_layers + 1); }
  // The bf16 recipe's copy of every parameter (LayerWorkspace::set_bf16_mirror), rewritten where the
  // parameters change other than by the unsharded update, which writes it itself.
  Status refresh_bf16_mirror() {
    return params16_ == nullptr ? Status::ok() : gpu::to_bf16(params_, layout_.total, params16_, stream_);
  }
  bool bf16_sums() const { return grad_reduce_ == GradReduce::kBf16 && comm_ != nullptr; }
  // Sums grads_[begin, end) across ranks once the backward enqueued so far has written it (bf16:
  // rounded into grads16_ first, summed there; optimizer_step widens the sums back).
  Status reduce_gradients(int64_t begin, int64_t end) {
    BS_RETURN_IF_ERROR(share_buffers());
    reduce_pending_ = true;
    const bool bf16 = bf16_sums();
    if (bf16) {
      if (grads16_ == nullptr) BS_RETURN_IF_ERROR(buffers_.get("grads_bf16", layout_.total, &grads16_));
      BS_RETURN_IF_ERROR(gpu::to_bf16(grads_ + begin, end - begin, grads16_ + begin, stream_));
      bf16_ranges_.emplace_back(begin, end);
    }
    const auto all_reduce = [&](int64_t at, int64_t count) {
      return bf16 ? comm_->all_reduce_device_bf16(grads16_ + at, count, stream_)
                  : comm_->all_reduce_device(grads_ + at, count, stream_);
    };
    if (!shards_) return all_reduce(begin, end - begin);
    // Sharded: the bucket's chunks reduce-scattered, its tail summed everywhere.
    const auto it = bucket_at_.find(begin);
    if (it == bucket_at_.end() || shards_->buckets()[it->second].end != end)
      return Status::error("sharded optimizer: [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") is not a reduction bucket");
    const ReductionBucket& b = shards_->buckets()[it->second];
    if (b.chunk > 0)
      BS_RETURN_IF_ERROR(bf16 ? comm_->reduce_scatter_device_bf16(grads16_ + b.begin, b.chunk, stream_)
                              : comm_->reduce_scatter_device(grads_ + b.begin, b.chunk, stream_));
    return b.tail < b.end ? all_reduce(b.tail, b.end - b.tail) : Status::ok();
  }
  int64_t layer_begin(int l) const {
    return l < config_.n_layers ? layout_.at(layout_.layers[l].attn_norm).offset : layout_.at(layout_.final_norm).offset;
  }
  // The end of layer l's gradients that every rank sums: all of them, except that with expert
  // parallelism each rank's experts (w13 and w2, the layer's last tensors) are its own.
  int64_t shared_end(int l) const {
    return expert_parallel_ ? layout_.at(layout_.layers[l].w13).offset : layer_begin(l + 1);
  }
  // Sums the reduction bucket that starts at layer l's tensor `first` (train/parallel/
  // optimizer_shards.h: reduction_buckets), once the backward has written it.
  Status reduce_tensor(int l, int first) {
    if (bucket_end_.empty())
      for (const auto& [begin, end] : reduction_buckets(layout_, expert_parallel_)) bucket_end_[begin] = end;
    const int64_t begin = layout_.at(first).offset;
    const auto it = bucket_end_.find(begin);
    if (it == bucket_end_.end())
      return Status::error("gradient sums: layer " + std::to_string(l) + "'s tensor " + std::to_string(first) +
                           " starts no reduction bucket");
    return reduce_gradients(begin, it->second);
  }
  // What optimizer_step sums when no backward did: the same buckets.
  Status reduce_shared_gradients() {
    for (const auto& [begin, end] : reduction_buckets(layout_, expert_parallel_))
      BS_RETURN_IF_ERROR(reduce_gradients(begin, end));
    return Status::ok();
  }
  // The gradients and parameters opened to the communicator's copy engines (first sum of a run).
  Status share_buffers() {
    if (shared_) return Status::ok();
    shared_ = true;
    if (!bf16_sums()) BS_RETURN_IF_ERROR(comm_->share_device_buffer(grads_, layout_.total, true));
    return comm_->share_device_buffer(params_, layout_.total, false);  // the sharded optimizer's gathers
  }
  int64_t ffn_capacity(int64_t rows) const { return expert_parallel_ ? rows * comm_->world_size() : rows; }
  ExpertExchange& exchange(int l) {
    if (exchanges_.size() <= size_t(l)) exchanges_.resize(l + 1);
    if (!exchanges_[l]) exchanges_[l] = std::make_unique<ExpertExchange>();
    return *exchanges_[l];
  }

  ModelConfig config_;
  Recipe recipe_;
  gemm::GemmRoute route_;
  ParamLayout layout_;
  DeviceBuffers buffers_;
  PhaseTimer timer_;
  GpuLayers layers_{recipe_, buffers_, timer_};  // the linear layers, dense and grouped
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;  // the reference attention's batched products
  gpu::FusedAttention fused_attention_;
  Status attention_status_ = Status::ok();  // ok: attention runs fused; else why not
  double copy_bandwidth_ = 0;  // bytes / s, measure_copy_bandwidth()
  std::string device_name_;
  double peak_ = 0;
  float *params_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  // Pinned host copies of the step's scalars: the loss, the gradients' sum of squares, then one
  // load-balancing loss per layer.
  static constexpr int kLoss = 0, kSumSq = 1, kAuxLosses = 2;
  float* host_scalars_ = nullptr;
  uint8_t* decay_ = nullptr;
  std::map<int, std::vector<int32_t>> all_host_ends_;  // each MoE layer's group ends, for the backward
  bool expert_parallel_ = false;
  std::vector<std::unique_ptr<ExpertExchange>> exchanges_;  // per MoE layer, from its forward
  bool fresh_gradients_ = false;  // zero_grads ran and no backward since
  std::optional<OptimizerShards> shards_;  // the sharded optimizer: this rank's share
  std::map<int64_t, size_t> bucket_at_;    // a reduction bucket's index by its first parameter
  std::map<int64_t, int64_t> bucket_end_;  // reduction_buckets: each bucket's end by its start
  bool reduce_next_ = false;     // the next backward sums gradients across ranks
  bool reduce_pending_ = false;  // sums enqueued that optimizer_step must wait for
  bool shared_ = false;          // share_buffers has run
  std::vector<cudaEvent_t> gathered_;  // the sharded optimizer's gathers of each part (part_end) done
  int awaited_ = 0;                    // parts the compute stream has waited for since (all: none pending)
  GradReduce grad_reduce_ = GradReduce::kFp32;
  uint16_t* grads16_ = nullptr;  // bf16 gradient sums (--grad-reduce bf16)
  uint16_t* params16_ = nullptr;  // the bf16 recipe's copy of params_ (refresh_bf16_mirror)
  std::vector<std::pair<int64_t, int64_t>> bf16_ranges_;  // the ranges summed there this step
  PhaseTimes phase_totals_{};  // since reset_phase_ms()
  bool time_phases_ = true;     // whether the next step records its phases
};

}  // namespace blockscale::train::gpu_step
