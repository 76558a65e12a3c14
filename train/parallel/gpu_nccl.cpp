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
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) NCCL(ncclCommDestroy)(comm_);
  }
  Status init(const DistributedEnv& env) {
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
    ncclUniqueId id;
    std::vector<uint8_t> blob;
    if (rank_ == 0) {
      BS_RETURN_IF_ERROR(nccl_check(NCCL(ncclGetUniqueId)(&id), "ncclGetUniqueId"));
      blob.assign(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id));
    }
    BS_RETURN_IF_ERROR(exchange_unique_id(env, &blob));
    if (blob.size() != sizeof(id)) return Status::error("rendezvous: rank 0 sent an id of the wrong size");
    std::memcpy(&id, blob.data(), sizeof(id));
    BS_RETURN_IF_ERROR(nccl_check(NCCL(ncclCommInitRank)(&comm_, world_, id, rank_), "ncclCommInitRank"));
    BS_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    return Status::ok();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  Status all_reduce_host(double* data, int64_t n) override { return host_sum(data, n, ncclDouble); }
  Status all_reduce_host(float* data, int64_t n) override { return host_sum(data, n, ncclFloat); }
  // Every NCCL call goes on stream_, so all ranks run them in the order they were issued.
  Status all_reduce_device(float* data, int64_t n, void* after) override {
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
    return scatter_sum(data, data + int64_t{rank_} * count, count, ncclFloat, after);
  }
  Status reduce_scatter_device_bf16(uint16_t* data, int64_t count, void* after) override {
    return scatter_sum(data, data + int64_t{rank_} * count, count, ncclBfloat16, after);
  }
  Status all_gather_device(float* data, int64_t count, void* after) override {
    BS_RETURN_IF_ERROR(join(static_cast<cudaStream_t>(after), stream_));
    return nccl_check(NCCL(ncclAllGather)(data + int64_t{rank_} * count, data, size_t(count), ncclFloat, comm_, stream_),
                      "ncclAllGather");
  }
  Status wait_device(void* stream) override { return join(stream_, static_cast<cudaStream_t>(stream)); }

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

  Status host_sum(void* data, int64_t n, ncclDataType_t type) {
    const size_t bytes = size_t(n) * (type == ncclDouble ? 8 : 4);
    if (bytes > staging_.size()) BS_RETURN_IF_ERROR(staging_.alloc(bytes, "cudaMalloc (NCCL staging)"));
    void* staging = staging_.data();
    BS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(staging, data, bytes, cudaMemcpyHostToDevice, stream_), "copy in"));
    BS_RETURN_IF_ERROR(nccl_check(NCCL(ncclAllReduce)(staging, staging, size_t(n), type, ncclSum, comm_, stream_),
                                  "ncclAllReduce"));
    BS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(data, staging, bytes, cudaMemcpyDeviceToHost, stream_), "copy out"));
    return cuda_status(cudaStreamSynchronize(stream_), "all_reduce_host");
  }

  int rank_ = 0, world_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  runtime::DeviceBuffer staging_;  // host sums pass through it (grown to the largest)
};

}  // namespace

Status make_nccl_communicator(const DistributedEnv& env, std::unique_ptr<Communicator>* out) {
  auto comm = std::make_unique<NcclCommunicator>();
  BS_RETURN_IF_ERROR(comm->init(env));
  *out = std::move(comm);
  return Status::ok();
}

}  // namespace blockscale::train
