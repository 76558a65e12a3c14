#include "train/parallel/gpu_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda_libraries.h"
#include "runtime/cuda_status.h"
#include "runtime/device.h"
#include "train/parallel/gpu_copy_engines.h"

namespace blockscale::train {
namespace {

// NCCL's entry point `fn` (runtime/cuda_libraries.h: opened on first use, not linked).
#define NCCL(fn) BS_CUDA_LIB(kNccl, fn)


Status nccl_check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return Status::error(std::string("NCCL ") + what + ": " + NCCL(ncclGetErrorString)(r));
}
using runtime::cuda_status;

class NcclCommunicator final : public Communicator {
 public:
  ~NcclCommunicator() override {
    engines_.reset();
    if (stream_) cudaStreamDestroy(stream_);
    if (host_stream_) cudaStreamDestroy(host_stream_);
    if (comm_) NCCL(ncclCommDestroy)(comm_);
    if (host_comm_) NCCL(ncclCommDestroy)(host_comm_);
  }
  Status init(const DistributedEnv& env, DeviceCollectives collectives) {
    rank_ = env.rank, world_ = env.world_size;
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1);
    int devices = 0;
    BS_RETURN_IF_ERROR(cuda_status(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"));
    // A launcher that gives each process one GPU (CUDA_VISIBLE_DEVICES, srun --gpus-per-task=1)
    // leaves one visible device whatever LOCAL_RANK says.
    const int device = devices == 1 ? 0 : env.local_rank;
    if (device >= devices)
      return Status::error("LOCAL_RANK=" + std::to_string(env.local_rank) + " but this process sees " +
                           std::to_string(devices) + " GPUs");
    BS_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice(LOCAL_RANK)"));
    BS_RETURN_IF_ERROR(runtime::open_cuda_library(runtime::CudaLibrary::kNccl));
    // Two communicators: one for the device sums and gathers, one for the host sums, so a host sum
    // (the step's losses) does not wait behind the gathers that overlap the next forward.
    ncclUniqueId ids[2];
    std::vector<uint8_t> blob;
    if (rank_ == 0) {
      for (ncclUniqueId& id : ids) BS_RETURN_IF_ERROR(nccl_check(NCCL(ncclGetUniqueId)(&id), "ncclGetUniqueId"));
      blob.assign(reinterpret_cast<uint8_t*>(ids), reinterpret_cast<uint8_t*>(ids) + sizeof(ids));
    }
    BS_RETURN_IF_ERROR(exchange_unique_id(env, &blob));
    if (blob.size() != sizeof(ids)) return Status::error("rendezvous: rank 0 sent ids of the wrong size");
    std::memcpy(ids, blob.data(), sizeof(ids));
    BS_RETURN_IF_ERROR(nccl_check(NCCL(ncclCommInitRank)(&comm_, world_, ids[0], rank_), "ncclCommInitRank"));
    BS_RETURN_IF_ERROR(nccl_check(NCCL(ncclCommInitRank)(&host_comm_, world_, ids[1], rank_), "ncclCommInitRank"));
    BS_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    BS_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&host_stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    path_ = "NCCL";
    if (collectives == DeviceCollectives::kNccl || world_ == 1) return Status::ok();
    std::string why;
    BS_RETURN_IF_ERROR(CopyEngineGroup::make(
        rank_, world_, stream_,
        [this](const void* mine, size_t bytes, std::vector<uint8_t>* all) { return gather_bytes(mine, bytes, all); },
        &engines_, &why));
    if (engines_) {
      path_ = "copy engines";
    } else if (collectives == DeviceCollectives::kCopyEngines) {
      return Status::error("--collectives copy-engines: " + why);
    } else {
      path_ = "NCCL (not copy engines: " + why + ")";
    }
    return Status::ok();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  Status all_reduce_host(double* data, int64_t n) override { return host_sum(data, n, ncclDouble); }
  Status all_reduce_host(float* data, int64_t n) override { return host_sum(data, n, ncclFloat); }
  // Every NCCL call goes on stream_, so all ranks run them in the order they were issued.
  Status all_reduce_device(float* data, int64_t n, void* after) override {
    if (engines_ && engines_->covers(data, n, true)) {
      BS_RETURN_IF_ERROR(join(static_cast<cudaStream_t>(after), stream_));
      std::vector<int64_t> bounds(world_ + 1);
      for (int r = 0; r <= world_; ++r) bounds[r] = n * r / world_;
      BS_RETURN_IF_ERROR(engines_->reduce_scatter(data, bounds));
      return engines_->all_gather(data, bounds);
    }
    return device_sum(data, n, ncclFloat, after);
  }
  Status all_reduce_device_bf16(uint16_t* data, int64_t n, void* after) override {
    return device_sum(data, n, ncclBfloat16, after);
  }
  Status all_to_all_device(const void* send, const int64_t* send_bytes, void* recv, const int64_t* recv_bytes,
                           void* after) override {
    BS_RETURN_IF_ERROR(join(static_cast<cudaStream_t>(after), stream_));
    const auto* s = static_cast<const uint8_t*>(send);
    auto* r = static_cast<uint8_t*>(recv);
    BS_RETURN_IF_ERROR(nccl_check(NCCL(ncclGroupStart)(), "ncclGroupStart"));
    Status status = Status::ok();
    for (int peer = 0; peer < world_ && status.is_ok(); ++peer) {
      if (send_bytes[peer] > 0)
        status = nccl_check(NCCL(ncclSend)(s, size_t(send_bytes[peer]), ncclUint8, peer, comm_, stream_), "ncclSend");
      if (status.is_ok() && recv_bytes[peer] > 0)
        status = nccl_check(NCCL(ncclRecv)(r, size_t(recv_bytes[peer]), ncclUint8, peer, comm_, stream_), "ncclRecv");
      s += send_bytes[peer];
      r += recv_bytes[peer];
    }
    const Status end = nccl_check(NCCL(ncclGroupEnd)(), "ncclGroupEnd");  // a started group is always ended
    return status.is_ok() ? end : status;
  }
  Status reduce_scatter_device(float* data, int64_t count, void* after) override {
    if (engines_ && engines_->covers(data, world_ * count, true)) {
      BS_RETURN_IF_ERROR(join(static_cast<cudaStream_t>(after), stream_));
      return engines_->reduce_scatter(data, chunks(count));
    }
    return scatter_sum(data, data + int64_t{rank_} * count, count, ncclFloat, after);
  }
  Status reduce_scatter_device_bf16(uint16_t* data, int64_t count, void* after) override {
    return scatter_sum(data, data + int64_t{rank_} * count, count, ncclBfloat16, after);
  }
  Status all_gather_device(float* data, int64_t count, void* after) override {
    BS_RETURN_IF_ERROR(join(static_cast<cudaStream_t>(after), stream_));
    if (engines_ && engines_->covers(data, world_ * count, false)) return engines_->all_gather(data, chunks(count));
    return nccl_check(NCCL(ncclAllGather)(data + int64_t{rank_} * count, data, size_t(count), ncclFloat, comm_, stream_),
                      "ncclAllGather");
  }
  Status wait_device(void* stream) override { return join(stream_, static_cast<cudaStream_t>(stream)); }
  Status mark_device(void* event) override {
    return cuda_status(cudaEventRecord(static_cast<cudaEvent_t>(event), stream_), "cudaEventRecord");
  }
  Status share_device_buffer(float* base, int64_t count, bool sums) override {
    return engines_ ? engines_->add_buffer(base, count, sums) : Status::ok();
  }
  void forget_device_buffers() override {
    if (engines_) engines_->clear_buffers();
  }
  std::string device_collectives() const override { return path_; }
  bool on_copy_engines() const override { return engines_ != nullptr; }

 private:
  // `waiter` waits for the work enqueued so far on `done`.
  static Status join(cudaStream_t done, cudaStream_t waiter) {
    cudaEvent_t e;
    BS_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
    cudaError_t r = cudaEventRecord(e, done);
    if (r == cudaSuccess) r = cudaStreamWaitEvent(waiter, e, 0);
    cudaEventDestroy(e);  // released once the wait is satisfied
    return cuda_status(r, "stream join");
  }

  Status device_sum(void* data, int64_t n, ncclDataType_t type, void* after) {
    BS_RETURN_IF_ERROR(join(static_cast<cudaStream_t>(after), stream_));
    return nccl_check(NCCL(ncclAllReduce)(data, data, size_t(n), type, ncclSum, comm_, stream_), "ncclAllReduce");
  }
  Status scatter_sum(const void* data, void* mine, int64_t count, ncclDataType_t type, void* after) {
    BS_RETURN_IF_ERROR(join(static_cast<cudaStream_t>(after), stream_));
    return nccl_check(NCCL(ncclReduceScatter)(data, mine, size_t(count), type, ncclSum, comm_, stream_),
                      "ncclReduceScatter");
  }

  std::vector<int64_t> chunks(int64_t count) const {
    std::vector<int64_t> bounds(world_ + 1);
    for (int r = 0; r <= world_; ++r) bounds[r] = count * r;
    return bounds;
  }
  // The host collectives (on host_comm_) pass through staging_, grown to the largest.
  Status grow_staging(size_t bytes) {
    return bytes > staging_.size() ? staging_.alloc(bytes, "cudaMalloc (NCCL staging)") : Status::ok();
  }
  // Every rank's `bytes` bytes, rank by rank (the copy engines' setup: where each GPU is, IPC handles).
  Status gather_bytes(const void* mine, size_t bytes, std::vector<uint8_t>* all) {
    BS_RETURN_IF_ERROR(grow_staging(bytes * (world_ + 1)));
    uint8_t* in = staging_.as<uint8_t>() + bytes * world_;
    const cudaStream_t s = host_stream_;
    BS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(in, mine, bytes, cudaMemcpyHostToDevice, s), "copy in"));
    BS_RETURN_IF_ERROR(
        nccl_check(NCCL(ncclAllGather)(in, staging_.data(), bytes, ncclUint8, host_comm_, s), "ncclAllGather"));
    all->resize(bytes * world_);
    BS_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(all->data(), staging_.data(), all->size(), cudaMemcpyDeviceToHost, s), "copy out"));
    return cuda_status(cudaStreamSynchronize(s), "gather_bytes");
  }

  Status host_sum(void* data, int64_t n, ncclDataType_t type) {
    const size_t bytes = size_t(n) * (type == ncclDouble ? 8 : 4);
    BS_RETURN_IF_ERROR(grow_staging(bytes));
    void* staging = staging_.data();
    const cudaStream_t s = host_stream_;
    BS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(staging, data, bytes, cudaMemcpyHostToDevice, s), "copy in"));
    BS_RETURN_IF_ERROR(
        nccl_check(NCCL(ncclAllReduce)(staging, staging, size_t(n), type, ncclSum, host_comm_, s), "ncclAllReduce"));
    BS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(data, staging, bytes, cudaMemcpyDeviceToHost, s), "copy out"));
    return cuda_status(cudaStreamSynchronize(s), "all_reduce_host");
  }

  int rank_ = 0, world_ = 1;
  ncclComm_t comm_ = nullptr, host_comm_ = nullptr;  // device sums and gathers; host sums
  cudaStream_t stream_ = nullptr, host_stream_ = nullptr;
  runtime::DeviceBuffer staging_;  // the host collectives' device copy (grow_staging)
  std::unique_ptr<CopyEngineGroup> engines_;  // the device sums' copy engines (null: NCCL's kernels)
  std::string path_;
};

}  // namespace

Status make_nccl_communicator(const DistributedEnv& env, DeviceCollectives collectives,
                              std::unique_ptr<Communicator>* out) {
  auto comm = std::make_unique<NcclCommunicator>();
  BS_RETURN_IF_ERROR(comm->init(env, collectives));
  *out = std::move(comm);
  return Status::ok();
}

}  // namespace blockscale::train
