// Expert parallelism: each MoE layer's experts are split across the ranks (rank r holds experts
// [r * E/W, (r+1) * E/W)). Every rank routes its own tokens, sends each routed row to the rank of
// its expert, which runs it with the rows of every other rank for the same expert, and gets the
// output back: two all-to-all exchanges in the forward, two in the backward. One ExpertExchange
// per layer keeps the forward's plan (who sends which rows where) for the backward.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "runtime/device.h"
#include "train/parallel/communicator.h"

namespace blockscale::train {

class ExpertExchange {
 public:
  // Plans the exchange from this rank's routed rows: `ends` are the group ends (host copy) of all
  // `experts` experts over this rank's rows, sorted by expert. The ranks' counts are shared
  // through one small sum across ranks (so every rank calls this, in the same order).
  Status plan(Communicator& comm, const std::vector<int32_t>& ends, int experts, cudaStream_t stream);

  int first_expert() const { return first_expert_; }
  int local_experts() const { return int(local_ends_host_.size()); }
  int64_t sent_rows() const { return sent_; }
  int64_t received_rows() const { return received_; }
  // Group ends of the local experts over the received rows (expert-major), host and device.
  const std::vector<int32_t>& local_ends_host() const { return local_ends_host_; }
  const int32_t* local_ends_device() const { return local_ends_.as<int32_t>(); }

  // rows (sent_rows x cols: this rank's routed rows, sorted by expert) -> received (received_rows
  // x cols, grouped by local expert). scratch: max(sent, received) rows x cols.
  Status dispatch(Communicator& comm, const float* rows, float* received, int64_t cols, float* scratch,
                  cudaStream_t stream) const;
  // The reverse: received-layout rows back to the ranks and positions they came from.
  Status give_back(Communicator& comm, const float* received, float* rows, int64_t cols, float* scratch,
                   cudaStream_t stream) const;

 private:
  // Copies host to device, growing it first if it is too small (stream-ordered, then waited for).
  static Status upload(const std::vector<int32_t>& host, runtime::DeviceBuffer* device, cudaStream_t stream);

  int first_expert_ = 0;
  std::vector<int64_t> send_rows_, recv_rows_;  // per rank
  std::vector<int32_t> order_host_, inverse_host_, local_ends_host_;
  runtime::DeviceBuffer order_, inverse_, local_ends_;  // int32 each, the device copies of the above
  int64_t sent_ = 0, received_ = 0;
};

}  // namespace blockscale::train
