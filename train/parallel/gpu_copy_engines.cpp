#include "train/parallel/gpu_copy_engines.h"

#include <cuda.h>  // types and flags of the stream memory operations (entry points found at run time)
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "runtime/cuda_status.h"
#include "train/gpu/gpu_glue.h"  // add_inplace

namespace blockscale::train {
namespace {

using runtime::cuda_status;

// Where a rank's GPU is: its host (name and boot id: containers on different machines may share a
// name) and PCI address, all-gathered so every rank can check that it reaches every other's memory.
struct Place {
  char host[128];
  char boot[48];
  char bus[32];
};

using WriteValue = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WaitValue = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
WriteValue g_write_value = nullptr;
WaitValue g_wait_value = nullptr;

// The driver's stream memory operations, through the runtime (the toolkit links no libcuda).
bool find_stream_memory_operations() {
  if (g_write_value != nullptr && g_wait_value != nullptr) return true;
  void *write = nullptr, *wait = nullptr;
  cudaDriverEntryPointQueryResult q1 = cudaDriverEntryPointSymbolNotFound, q2 = q1;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &write, 12000, cudaEnableDefault, &q1) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &wait, 12000, cudaEnableDefault, &q2) != cudaSuccess ||
      q1 != cudaDriverEntryPointSuccess || q2 != cudaDriverEntryPointSuccess)
    return false;
  g_write_value = reinterpret_cast<WriteValue>(write);
  g_wait_value = reinterpret_cast<WaitValue>(wait);
  return true;
}

Status driver_status(CUresult r, const char* what) {
  return r == CUDA_SUCCESS ? Status::ok() : Status::error(std::string(what) + ": CUDA driver error " + std::to_string(int(r)));
}

}  // namespace

Status CopyEngineGroup::make(int rank, int world, cudaStream_t stream, const AllGatherBytes& all_gather,
                             std::unique_ptr<CopyEngineGroup>* out, std::string* why) {
  out->reset();
  int device = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "cudaGetDevice"));
  Place mine{};
  if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) std::strcpy(mine.host, "?");
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    if (std::fgets(mine.boot, sizeof(mine.boot), f) == nullptr) mine.boot[0] = '\0';
    std::fclose(f);
  }
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetPCIBusId(mine.bus, sizeof(mine.bus), device), "cudaDeviceGetPCIBusId"));
  std::vector<uint8_t> all;
  BS_RETURN_IF_ERROR(all_gather(&mine, sizeof(mine), &all));
  // This rank's verdict, then every rank's: all use copy engines or none does.
  std::string reason;
  if (!find_stream_memory_operations()) reason = "the driver has no stream memory operations";
  for (int r = 0; r < world && reason.empty(); ++r) {
    if (r == rank) continue;
    Place p;
    std::memcpy(&p, all.data() + r * sizeof(Place), sizeof(Place));
    p.host[sizeof(p.host) - 1] = p.boot[sizeof(p.boot) - 1] = p.bus[sizeof(p.bus) - 1] = '\0';
    if (std::strcmp(p.host, mine.host) != 0 || std::strcmp(p.boot, mine.boot) != 0) {
      reason = "rank " + std::to_string(r) + " runs on another host (" + p.host + ")";
      break;
    }
    int peer = -1, can = 0;
    if (cudaDeviceGetByPCIBusId(&peer, p.bus) != cudaSuccess) {
      cudaGetLastError();
      reason = "rank " + std::to_string(r) + "'s GPU (" + p.bus + ") is not visible to rank " + std::to_string(rank);
      break;
    }
    if (peer != device && (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || !can)) {
      cudaGetLastError();
      reason = "rank " + std::to_string(rank) + "'s GPU cannot access rank " + std::to_string(r) + "'s (no peer access)";
    }
  }
  const uint8_t ok = reason.empty() ? 1 : 0;
  BS_RETURN_IF_ERROR(all_gather(&ok, 1, &all));
  for (int r = 0; r < world && reason.empty(); ++r)
    if (all[r] == 0) reason = "rank " + std::to_string(r) + " cannot use them";
  if (!reason.empty()) {
    *why = reason;
    return Status::ok();
  }
  std::unique_ptr<CopyEngineGroup> g(new CopyEngineGroup(rank, world, stream, all_gather));
  BS_RETURN_IF_ERROR(g->flags_.alloc(world * sizeof(uint32_t), "copy-engine flags"));
  BS_RETURN_IF_ERROR(cuda_status(cudaMemset(g->flags_.data(), 0, world * sizeof(uint32_t)), "cudaMemset (flags)"));
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize (flags)"));
  // The first IPC mapping decides: where one rank cannot open another's memory (e.g. processes in
  // separate containers), every rank falls back together.
  std::vector<void*> flags;
  const Status opened = g->open_peers(g->flags_.data(), &flags, &g->opened_);
  const uint8_t mapped = opened.is_ok() ? 1 : 0;
  BS_RETURN_IF_ERROR(all_gather(&mapped, 1, &all));
  for (int r = 0; r < world; ++r)
    if (all[r] == 0) {
      *why = "rank " + std::to_string(r) + " cannot map the others' memory" +
             (r == rank ? " (" + opened.message() + ")" : std::string());
      return Status::ok();
    }
  for (void* f : flags) g->peer_flags_.push_back(static_cast<uint32_t*>(f));
  *out = std::move(g);
  return Status::ok();
}

CopyEngineGroup::~CopyEngineGroup() {
  buffers_.clear();
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
}

CopyEngineGroup::Buffer::~Buffer() {
  for (void* p : opened) cudaIpcCloseMemHandle(p);
}

Status CopyEngineGroup::open_peers(void* mine, std::vector<void*>* peers, std::vector<void*>* opened) {
  // The all-gather happens whatever this rank's handle did (the others wait in it).
  cudaIpcMemHandle_t handle{};
  Status status = cuda_status(cudaIpcGetMemHandle(&handle, mine), "cudaIpcGetMemHandle");
  std::vector<uint8_t> all;
  BS_RETURN_IF_ERROR(all_gather_(&handle, sizeof(handle), &all));
  peers->assign(world_, nullptr);
  (*peers)[rank_] = mine;
  for (int r = 0; r < world_ && status.is_ok(); ++r) {
    if (r == rank_) continue;
    cudaIpcMemHandle_t h;
    std::memcpy(&h, all.data() + r * sizeof(h), sizeof(h));
    status = cuda_status(cudaIpcOpenMemHandle(&(*peers)[r], h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    if (status.is_ok()) opened->push_back((*peers)[r]);
  }
  return status;
}

Status CopyEngineGroup::add_buffer(float* base, int64_t count, bool sums) {
  auto b = std::make_unique<Buffer>();
  b->base = base;
  b->count = count;
  std::vector<void*> peers;
  BS_RETURN_IF_ERROR(open_peers(base, &peers, &b->opened));
  for (void* p : peers) b->peer_base.push_back(static_cast<float*>(p));
  b->peer_staging.assign(world_, nullptr);
  if (sums) {
    const std::string what = "copy-engine staging (" + std::to_string(((world_ - 1) * count * 4) >> 20) + " MiB)";
    BS_RETURN_IF_ERROR(b->staging.alloc(size_t(world_ - 1) * count * sizeof(float), what.c_str()));
    BS_RETURN_IF_ERROR(open_peers(b->staging.data(), &peers, &b->opened));
    for (int r = 0; r < world_; ++r) b->peer_staging[r] = static_cast<float*>(peers[r]);
  }
  buffers_.push_back(std::move(b));
  return Status::ok();
}

const CopyEngineGroup::Buffer* CopyEngineGroup::find(const float* data, int64_t n) const {
  for (const auto& b : buffers_)
    if (data >= b->base && n >= 0 && data - b->base <= b->count - n) return b.get();
  return nullptr;
}

bool CopyEngineGroup::covers(const float* data, int64_t n, bool sums) const {
  const Buffer* b = find(data, n);
  return b != nullptr && (!sums || b->peer_staging[rank_] != nullptr);
}

Status CopyEngineGroup::signal_and_wait() {
  ++exchanges_;
  const CUstream s = reinterpret_cast<CUstream>(stream_);
  for (int r = 0; r < world_; ++r)
    if (r != rank_)  // after the copies before it (the write fences them)
      BS_RETURN_IF_ERROR(driver_status(
          g_write_value(s, CUdeviceptr(peer_flags_[r] + rank_), exchanges_, CU_STREAM_WRITE_VALUE_DEFAULT),
          "cuStreamWriteValue32"));
  const uint32_t* flags = flags_.as<uint32_t>();
  for (int r = 0; r < world_; ++r)
    if (r != rank_)
      BS_RETURN_IF_ERROR(driver_status(g_wait_value(s, CUdeviceptr(flags + r), exchanges_, CU_STREAM_WAIT_VALUE_GEQ),
                                       "cuStreamWaitValue32"));
  return Status::ok();
}

Status CopyEngineGroup::reduce_scatter(float* data, const std::vector<int64_t>& bounds) {
  const Buffer* b = find(data, bounds.back());
  if (b == nullptr || b->peer_staging[rank_] == nullptr || int(bounds.size()) != world_ + 1)
    return Status::error("copy-engine sum: the range is not in a buffer registered for sums");
  const int64_t at = data - b->base;
  for (int r = 0; r < world_; ++r) {
    const int64_t len = bounds[r + 1] - bounds[r];
    if (r == rank_ || len == 0) continue;
    float* dst = b->peer_staging[r] + slot(rank_, r) * b->count + at + bounds[r];
    BS_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(dst, data + bounds[r], len * sizeof(float), cudaMemcpyDefault, stream_), "copy to a peer"));
  }
  BS_RETURN_IF_ERROR(signal_and_wait());
  const int64_t len = bounds[rank_ + 1] - bounds[rank_];
  if (len == 0) return Status::ok();
  // The others' chunks added in rank order: every run the same bits.
  for (int s = 0; s < world_; ++s)
    if (s != rank_)
      gpu::add_inplace(data + bounds[rank_], b->peer_staging[rank_] + slot(s, rank_) * b->count + at + bounds[rank_],
                       len, stream_);
  return cuda_status(cudaGetLastError(), "copy-engine sum (add)");
}

Status CopyEngineGroup::all_gather(float* data, const std::vector<int64_t>& bounds) {
  const Buffer* b = find(data, bounds.back());
  if (b == nullptr || int(bounds.size()) != world_ + 1)
    return Status::error("copy-engine gather: the range is not in a registered buffer");
  const int64_t at = data - b->base, len = bounds[rank_ + 1] - bounds[rank_];
  for (int r = 0; r < world_ && len > 0; ++r) {
    if (r == rank_) continue;
    BS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(b->peer_base[r] + at + bounds[rank_], data + bounds[rank_],
                                                   len * sizeof(float), cudaMemcpyDefault, stream_),
                                   "copy to a peer"));
  }
  return signal_and_wait();
}

}  // namespace blockscale::train
