// FusedAttention through the cuDNN frontend's graph API (train/gpu/gpu_sdpa.h). The frontend is
// built to load cuDNN dynamically (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): its entry points come
// from the handle runtime/cuda_libraries.h opened, so nothing links libcudnn.
#include "train/gpu/gpu_sdpa.h"

#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda_libraries.h"
#include "train/gpu/gpu_ops.h"  // to_bf16, from_bf16

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's entry points resolve through this handle
}  // namespace cudnn_frontend

namespace blockscale::train::gpu {
namespace {

namespace fe = cudnn_frontend;

// The graphs' tensor ids.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDo, kDq, kDk, kDv };

Status fe_status(fe::error_t e, const std::string& what) {
  if (e.is_good()) return Status::ok();
  return Status::error("cuDNN fused attention: " + what + ": " + e.get_message());
}
#define BS_FE(expr, what) BS_RETURN_IF_ERROR(fe_status((expr), (what)))

Status cudnn_status(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::ok();
  return Status::error(std::string("cuDNN fused attention: ") + what + ": cuDNN status " + std::to_string(int(s)));
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

struct FusedAttention::Impl {
  struct Graphs {
    std::shared_ptr<fe::graph::Graph> forward, backward;
    size_t cudnn_bytes = 0;  // the larger of the two graphs' workspaces
  };
  cudnnHandle_t handle = nullptr;
  int seq = 0, heads = 0, head_dim = 0;
  std::map<int, Graphs> by_batch;

  ~Impl() {
    if (handle != nullptr) fe::detail::destroy_handle(handle);
  }
  int64_t width() const { return int64_t{heads} * head_dim; }  // D: one part of a qkv row
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }
  // The bf16 copies in the workspace, then cuDNN's own.
  struct Carved {
    uint16_t *qkv, *o, *dout, *dqkv;
    void* cudnn;
  };
  Carved carve(void* base, int batch) const {
    const int64_t m = int64_t{batch} * seq, d = width();
    char* p = static_cast<char*>(base);
    Carved c{};
    c.qkv = reinterpret_cast<uint16_t*>(p), p += align256(size_t(m * 3 * d) * 2);
    c.o = reinterpret_cast<uint16_t*>(p), p += align256(size_t(m * d) * 2);
    c.dout = reinterpret_cast<uint16_t*>(p), p += align256(size_t(m * d) * 2);
    c.dqkv = reinterpret_cast<uint16_t*>(p), p += align256(size_t(m * 3 * d) * 2);
    c.cudnn = p;
    return c;
  }
  size_t copies_bytes(int batch) const {
    const int64_t m = int64_t{batch} * seq, d = width();
    return 2 * align256(size_t(m * 3 * d) * 2) + 2 * align256(size_t(m * d) * 2);
  }

  // [batch, heads, seq, head_dim] views of the step's row layouts: Q, K, V (and their gradients)
  // in qkv rows of 3D, O and dO in rows of D.
  std::vector<int64_t> dims(int batch) const { return {batch, heads, seq, head_dim}; }
  std::vector<int64_t> qkv_stride() const { return {int64_t{seq} * 3 * width(), head_dim, 3 * width(), 1}; }
  std::vector<int64_t> out_stride() const { return {int64_t{seq} * width(), head_dim, width(), 1}; }
  std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid, int batch,
                                                      std::vector<int64_t> stride) const {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims(batch)).set_stride(stride));
  }
  std::shared_ptr<fe::graph::Tensor_attributes> stats_input(fe::graph::Graph& g, int batch) const {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name("stats")
                        .set_uid(kStats)
                        .set_dim({batch, heads, seq, 1})
                        .set_stride({int64_t{heads} * seq, seq, 1, 1})
                        .set_data_type(fe::DataType_t::FLOAT));
  }
  static std::shared_ptr<fe::graph::Graph> new_graph() {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
  }
  Status build(fe::graph::Graph& g, const char* what) {
    BS_FE(g.validate(), std::string(what) + " graph: validate");
    BS_FE(g.build_operation_graph(handle), std::string(what) + " graph: build_operation_graph");
    BS_FE(g.create_execution_plans({fe::HeurMode_t::A}), std::string(what) + " graph: create_execution_plans");
    BS_FE(g.check_support(handle), std::string(what) + " graph: check_support");
    BS_FE(g.build_plans(handle), std::string(what) + " graph: build_plans");
    return Status::ok();
  }

  Status make(int batch, Graphs* out) {
    auto f = new_graph();
    auto q = input(*f, "Q", kQ, batch, qkv_stride()), k = input(*f, "K", kK, batch, qkv_stride()),
         v = input(*f, "V", kV, batch, qkv_stride());
    auto attrs = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_causal_mask(true).set_attn_scale(
        scale());
    auto [o, stats] = f->sdpa(q, k, v, attrs);
    o->set_output(true).set_uid(kO).set_dim(dims(batch)).set_stride(out_stride());
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({batch, heads, seq, 1})
        .set_stride({int64_t{heads} * seq, seq, 1, 1});
    BS_RETURN_IF_ERROR(build(*f, "forward"));

    auto b = new_graph();
    auto bq = input(*b, "Q", kQ, batch, qkv_stride()), bk = input(*b, "K", kK, batch, qkv_stride()),
         bv = input(*b, "V", kV, batch, qkv_stride()), bo = input(*b, "O", kO, batch, out_stride()),
         bdo = input(*b, "dO", kDo, batch, out_stride());
    auto bstats = stats_input(*b, batch);
    auto battrs = fe::graph::SDPA_backward_attributes()
                      .set_name("sdpa_backward")
                      .set_causal_mask(true)
                      .set_attn_scale(scale())
                      .set_deterministic_algorithm(true);
    auto [dq, dk, dv] = b->sdpa_backward(bq, bk, bv, bo, bdo, bstats, battrs);
    dq->set_output(true).set_uid(kDq).set_dim(dims(batch)).set_stride(qkv_stride());
    dk->set_output(true).set_uid(kDk).set_dim(dims(batch)).set_stride(qkv_stride());
    dv->set_output(true).set_uid(kDv).set_dim(dims(batch)).set_stride(qkv_stride());
    BS_RETURN_IF_ERROR(build(*b, "backward"));

    int64_t fw = 0, bw = 0;
    BS_FE(f->get_workspace_size(fw), "forward workspace");
    BS_FE(b->get_workspace_size(bw), "backward workspace");
    *out = Graphs{f, b, size_t(std::max<int64_t>({fw, bw, 0}))};
    return Status::ok();
  }

  // A call's start: its batch's graphs, the workspace carved, Q | K | V in bf16, the stream set.
  Status begin(const float* qkv, int batch, void* workspace, cudaStream_t stream, const Graphs** graphs,
               Carved* carved) const {
    BS_RETURN_IF_ERROR(find(batch, graphs));
    *carved = carve(workspace, batch);
    BS_RETURN_IF_ERROR(to_bf16(qkv, int64_t{batch} * seq * 3 * width(), carved->qkv, stream));
    return cudnn_status(fe::detail::set_stream(handle, stream), "cudnnSetStream");
  }
  Status find(int batch, const Graphs** out) const {
    const auto it = by_batch.find(batch);
    if (it == by_batch.end())
      return Status::error("cuDNN fused attention: batch " + std::to_string(batch) + " was not prepared");
    *out = &it->second;
    return Status::ok();
  }
};

FusedAttention::FusedAttention() : impl_(std::make_unique<Impl>()) {}
FusedAttention::~FusedAttention() = default;

bool FusedAttention::built() { return true; }

Status FusedAttention::prepare(int batch, int seq, int heads, int head_dim, cudaStream_t stream) {
  Impl& s = *impl_;
  if (batch < 1 || seq < 1 || heads < 1 || head_dim < 1)
    return Status::error("cuDNN fused attention: batch, seq, heads and head_dim must be >= 1");
  if (s.handle != nullptr && (seq != s.seq || heads != s.heads || head_dim != s.head_dim))
    return Status::error("cuDNN fused attention: prepared for another seq / heads / head_dim");
  if (s.by_batch.count(batch) != 0) return Status::ok();
  if (s.handle == nullptr) {
    BS_RETURN_IF_ERROR(runtime::open_cuda_library(runtime::CudaLibrary::kCudnn));
    fe::cudnn_dlhandle = runtime::cuda_library_handle(runtime::CudaLibrary::kCudnn);
    BS_RETURN_IF_ERROR(cudnn_status(fe::detail::create_handle(&s.handle), "cudnnCreate"));
    s.seq = seq, s.heads = heads, s.head_dim = head_dim;
  }
  BS_RETURN_IF_ERROR(cudnn_status(fe::detail::set_stream(s.handle, stream), "cudnnSetStream"));
  Impl::Graphs g;
  BS_RETURN_IF_ERROR(s.make(batch, &g));
  s.by_batch.emplace(batch, std::move(g));
  return Status::ok();
}

size_t FusedAttention::workspace_bytes(int batch) const {
  const auto it = impl_->by_batch.find(batch);
  if (it == impl_->by_batch.end()) return 0;
  return impl_->copies_bytes(batch) + it->second.cudnn_bytes;
}

Status FusedAttention::forward(const float* qkv, int batch, float* out, float* stats, void* workspace,
                               cudaStream_t stream) {
  const Impl& s = *impl_;
  const Impl::Graphs* g = nullptr;
  Impl::Carved w{};
  BS_RETURN_IF_ERROR(s.begin(qkv, batch, workspace, stream, &g, &w));
  const int64_t m = int64_t{batch} * s.seq, d = s.width();
  std::unordered_map<int64_t, void*> pack{{kQ, w.qkv}, {kK, w.qkv + d}, {kV, w.qkv + 2 * d}, {kO, w.o}, {kStats, stats}};
  BS_FE(g->forward->execute(s.handle, pack, w.cudnn), "forward: execute");
  return from_bf16(w.o, m * d, out, stream);
}

Status FusedAttention::backward(const float* qkv, const float* out, const float* stats, const float* dout, int batch,
                                float* dqkv, void* workspace, cudaStream_t stream) {
  const Impl& s = *impl_;
  const Impl::Graphs* g = nullptr;
  Impl::Carved w{};
  BS_RETURN_IF_ERROR(s.begin(qkv, batch, workspace, stream, &g, &w));
  const int64_t m = int64_t{batch} * s.seq, d = s.width();
  // The forward's bf16 O again (out holds its values exactly: from_bf16 of them), and dO.
  BS_RETURN_IF_ERROR(to_bf16(out, m * d, w.o, stream));
  BS_RETURN_IF_ERROR(to_bf16(dout, m * d, w.dout, stream));
  std::unordered_map<int64_t, void*> pack{{kQ, w.qkv},          {kK, w.qkv + d},      {kV, w.qkv + 2 * d},
                                          {kO, w.o},            {kDo, w.dout},        {kStats, const_cast<float*>(stats)},
                                          {kDq, w.dqkv},        {kDk, w.dqkv + d},    {kDv, w.dqkv + 2 * d}};
  BS_FE(g->backward->execute(s.handle, pack, w.cudnn), "backward: execute");
  return from_bf16(w.dqkv, m * 3 * d, dqkv, stream);
}

}  // namespace blockscale::train::gpu
