// Sums across data-parallel ranks. The trainer reduces its losses through it, the backends their
// gradients: the GPU step through NCCL (train/parallel/gpu_nccl.h), overlapped with its backward; the CPU
// step on host vectors. LocalGroup runs ranks as threads of one process: it is how the tests check
// data parallelism on a machine without GPUs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "formats/status.h"

namespace blockscale::train {

// The type data-parallel gradient sums travel and add in (--grad-reduce). fp32, the default: the
// ranks' sum equals one rank's gradient over their batches up to fp32 rounding in another order,
// so a run's loss does not depend on its number of GPUs beyond that. bf16: half the bytes on the
// wire, each partial sum rounded to bf16 (about 3 significant digits), then widened back to fp32
// for the optimizer.
enum class GradReduce { kFp32, kBf16 };
const char* grad_reduce_name(GradReduce r);
Status parse_grad_reduce(const std::string& name, GradReduce* out);

// How the GPU communicator moves the fp32 gradient sums and parameter gathers (--collectives).
// kCopyEngines: the GPUs' copy engines (train/parallel/gpu_copy_engines.h), which leave every SM to
// the step; only where all ranks' GPUs are on one host and reach each other's memory. kNccl: NCCL's
// kernels, anywhere. kAuto, the default: copy engines where they work, else NCCL. The host sums,
// the bf16 sums and expert parallelism's exchanges always go through NCCL.
enum class DeviceCollectives { kAuto, kNccl, kCopyEngines };
const char* device_collectives_name(DeviceCollectives c);
Status parse_device_collectives(const std::string& name, DeviceCollectives* out);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In-place sums over all ranks; every rank makes the same calls in the same order. They do not
  // wait for the device sums and gathers in flight.
  virtual Status all_reduce_host(double* data, int64_t n) = 0;
  virtual Status all_reduce_host(float* data, int64_t n) = 0;
  // Each rank sends send_bytes[r] bytes to rank r (blocks back to back in `send`, in rank order)
  // and receives recv_bytes[r] bytes from rank r (back to back in `recv`, in rank order). LocalGroup
  // only (the tests' stand-in for all_to_all_device).
  virtual Status all_to_all_host(const uint8_t* send, const int64_t* send_bytes, uint8_t* recv,
                                 const int64_t* recv_bytes) {
    (void)send, (void)send_bytes, (void)recv, (void)recv_bytes;
    return Status::error("this communicator has no host all-to-all");
  }
  // GPU communicators only (the defaults refuse: LocalGroup's members have no GPU). Sums a device
  // buffer on the communicator's own stream once the work enqueued so far on `after` (a
  // cudaStream_t) is done, and returns at once: the sum overlaps whatever is enqueued on `after`
  // next. wait_device makes `stream` wait for every sum so far.
  virtual Status all_reduce_device(float* /*data*/, int64_t /*n*/, void* /*after*/) { return no_gpu("reduce"); }
  // The same exchange as all_to_all_host for device buffers, queued like all_reduce_device.
  virtual Status all_to_all_device(const void* /*send*/, const int64_t* /*send_bytes*/, void* /*recv*/,
                                   const int64_t* /*recv_bytes*/, void* /*after*/) {
    return no_gpu("exchange");
  }
  // In-place reduce-scatter of world x count floats: this rank's chunk [rank x count, (rank + 1) x
  // count) receives that chunk's sum over the ranks; the other chunks are left undefined. Queued
  // like all_reduce_device (the sharded optimizer's gradients).
  virtual Status reduce_scatter_device(float* /*data*/, int64_t /*count*/, void* /*after*/) {
    return no_gpu("reduce");
  }
  // In-place all-gather: every rank's chunk [rank x count, (rank + 1) x count) to every rank (the
  // sharded optimizer's parameters).
  virtual Status all_gather_device(float* /*data*/, int64_t /*count*/, void* /*after*/) { return no_gpu("gather"); }
  // all_reduce_device and reduce_scatter_device on bf16 elements (their bits as uint16_t): half
  // the bytes on the wire; the sums are added in bf16, each partial sum rounded (--grad-reduce bf16).
  virtual Status all_reduce_device_bf16(uint16_t* /*data*/, int64_t /*n*/, void* /*after*/) {
    return no_gpu("reduce");
  }
  virtual Status reduce_scatter_device_bf16(uint16_t* /*data*/, int64_t /*count*/, void* /*after*/) {
    return no_gpu("reduce");
  }
  virtual Status wait_device(void* /*stream*/) { return no_gpu("reduce"); }
  // Records `event` (a cudaEvent_t) once every device sum and gather enqueued so far is done: a
  // stream that waits for it waits for those alone (the sharded optimizer's next forward waits
  // for each layer's gathered parameters this way).
  virtual Status mark_device(void* /*event*/) { return no_gpu("reduce"); }
  // Lets the fp32 sums (with `sums`) and gathers of ranges in [base, base + count) take the
  // copy engines where this communicator uses them (base: the start of a cudaMalloc allocation,
  // kept until forget_device_buffers). Collective: every rank shares its buffers of the same role
  // in the same order. Elsewhere, nothing to do.
  virtual Status share_device_buffer(float* /*base*/, int64_t /*count*/, bool /*sums*/) { return Status::ok(); }
  // Before the shared buffers are freed, with nothing in flight on them.
  virtual void forget_device_buffers() {}
  // What carries the device sums: "copy engines", "NCCL" or "NCCL (why not copy engines)"; empty
  // for a communicator without GPUs.
  virtual std::string device_collectives() const { return ""; }
  // Whether the fp32 device sums go through the copy engines (each rank then holds a staging
  // copy of the shared buffers per other rank).
  virtual bool on_copy_engines() const { return false; }

 protected:
  static Status no_gpu(const char* what) {
    return Status::error(std::string("this communicator cannot ") + what + " GPU buffers (the GPU step needs NCCL)");
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
  Status all_to_all(int rank, const uint8_t* send, const int64_t* send_bytes, uint8_t* recv, const int64_t* recv_bytes);
  void wait_for_all();  // a reusable barrier

  const int world_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  std::vector<const double*> inputs_;
  std::vector<const uint8_t*> sends_;
  std::vector<const int64_t*> send_sizes_;
  std::vector<double> sum_;
};

}  // namespace blockscale::train
