// Data-parallel sums and gathers of device buffers through the GPUs' copy engines, for ranks whose
// GPUs see each other (one host, NVLink or PCIe peer access). NCCL's kernels hold SMs for as long
// as a sum runs, and the backward's kernels wait for those SMs; copies take none. A sum of a
// buffer's range cut into one chunk per rank: every rank copies chunk j into rank j's staging
// buffer (CUDA IPC), rank j adds what it received into its own chunk (one memory-bound kernel),
// then copies the summed chunk into every other rank's buffer. Ranks tell each other a copy has
// landed by writing a counter into the receiver's flags (stream memory operations, ordered after
// the copies), so no host waits.
//
// Collective: every rank makes the same calls in the same order, all on one stream per rank.
//
//   defines: CopyEngineGroup
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/status.h"
#include "runtime/device.h"

namespace blockscale::train {

class CopyEngineGroup {
 public:
  // Every rank's `bytes` bytes at `mine`, rank by rank, into *all (world x bytes), on every rank.
  using AllGatherBytes = std::function<Status(const void* mine, size_t bytes, std::vector<uint8_t>* all)>;

  // Joins the group of this process's GPU (the current device) with the other ranks'. *out stays
  // empty, and *why says why, where some rank's GPU is on another host or cannot reach another's
  // memory; an error is a CUDA failure. `stream` carries every copy, add and signal.
  static Status make(int rank, int world, cudaStream_t stream, const AllGatherBytes& all_gather,
                     std::unique_ptr<CopyEngineGroup>* out, std::string* why);
  ~CopyEngineGroup();

  // Opens [base, base + count) to the other ranks (base: the start of a cudaMalloc allocation).
  // With `sums`, also a staging buffer of (world - 1) x count floats that the others' chunks land
  // in. Every rank registers its buffers of the same role in the same order.
  Status add_buffer(float* base, int64_t count, bool sums);
  // Whether [data, data + n) lies in one registered buffer (with staging where `sums`).
  bool covers(const float* data, int64_t n, bool sums) const;
  // Drops every registered buffer (their owner frees them next; no copy may be in flight).
  void clear_buffers() { buffers_.clear(); }

  // `bounds` (world + 1 offsets from data, ascending, bounds[0] = 0) cut [data, data + n) into
  // chunks, chunk j rank j's. reduce_scatter: this rank's chunk receives the sum over the ranks
  // (the others are left as they were). all_gather: every rank's chunk to every rank.
  Status reduce_scatter(float* data, const std::vector<int64_t>& bounds);
  Status all_gather(float* data, const std::vector<int64_t>& bounds);

 private:
  struct Buffer {
    ~Buffer();
    float* base = nullptr;
    int64_t count = 0;
    runtime::DeviceBuffer staging;    // (world - 1) x count: slot s holds the s-th other rank's chunks
    std::vector<float*> peer_base;    // each rank's buffer, opened here (this rank's: base)
    std::vector<float*> peer_staging; // each rank's staging, opened here (null without sums)
    std::vector<void*> opened;        // the IPC mappings to close
  };
  CopyEngineGroup(int rank, int world, cudaStream_t stream, AllGatherBytes all_gather)
      : rank_(rank), world_(world), stream_(stream), all_gather_(std::move(all_gather)) {}
  const Buffer* find(const float* data, int64_t n) const;
  // The slot of `sender`'s chunks in `receiver`'s staging.
  int slot(int sender, int receiver) const { return sender < receiver ? sender : sender - 1; }
  // Every rank's allocation of this role: IPC handles all-gathered and opened (appended to *opened).
  Status open_peers(void* mine, std::vector<void*>* peers, std::vector<void*>* opened);
  // Counts one exchange: tells every other rank this rank's copies so far have landed, then makes
  // the stream wait until every other rank has said the same.
  Status signal_and_wait();

  int rank_ = 0, world_ = 1;
  cudaStream_t stream_ = nullptr;
  AllGatherBytes all_gather_;
  runtime::DeviceBuffer flags_;   // world x uint32: flags_[s] = the exchanges rank s has finished
  std::vector<uint32_t*> peer_flags_;
  uint32_t exchanges_ = 0;
  std::vector<void*> opened_;     // the flags' IPC mappings to close
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

}  // namespace blockscale::train
