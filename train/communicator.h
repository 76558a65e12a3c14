// Sums across data-parallel ranks. The trainer reduces its losses through it, the backends their
// gradients: the GPU step through NCCL (train/gpu_nccl.h), overlapped with its backward; the CPU
// step on host vectors. LocalGroup runs ranks as threads of one process: it is how the tests check
// data parallelism on a machine without GPUs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "formats/status.h"

namespace blockscale::train {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In-place sums over all ranks; every rank makes the same calls in the same order.
  virtual Status all_reduce_host(double* data, int64_t n) = 0;
  virtual Status all_reduce_host(float* data, int64_t n) = 0;
  // GPU communicators only. Sums a device buffer on the communicator's own stream once the work
  // enqueued so far on `after` (a cudaStream_t) is done, and returns at once: the sum overlaps
  // whatever is enqueued on `after` next. wait_device makes `stream` wait for every sum so far.
  virtual Status all_reduce_device(float* data, int64_t n, void* after) {
    (void)data, (void)n, (void)after;
    return Status::error("this communicator cannot reduce GPU buffers (the GPU step needs NCCL)");
  }
  virtual Status wait_device(void* stream) {
    (void)stream;
    return Status::error("this communicator cannot reduce GPU buffers (the GPU step needs NCCL)");
  }
};

// Ranks as threads sharing one LocalGroup: each sum adds the ranks' contributions in rank order,
// so every rank gets the same bits.
class LocalGroup {
 public:
  explicit LocalGroup(int world_size);
  std::unique_ptr<Communicator> member(int rank);

 private:
  friend class LocalMember;
  Status all_reduce(int rank, double* data, int64_t n);
  void wait_for_all();  // a reusable barrier

  const int world_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  std::vector<const double*> inputs_;
  std::vector<double> sum_;
};

}  // namespace blockscale::train
