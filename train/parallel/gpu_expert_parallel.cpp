#include "train/parallel/gpu_expert_parallel.h"

#include <algorithm>
#include <string>

#include "runtime/cuda_status.h"
#include "train/gpu/gpu_glue.h"

namespace blockscale::train {

Status ExpertExchange::upload(const std::vector<int32_t>& host, runtime::DeviceBuffer* device, cudaStream_t stream) {
  const size_t bytes = std::max<size_t>(host.size(), 1) * sizeof(int32_t);
  if (device->size() < bytes)
    BS_RETURN_IF_ERROR(device->alloc(bytes, "expert parallelism: allocating the exchange plan on the GPU"));
  if (host.empty()) return Status::ok();
  // Synchronous: the host vectors change at the next plan().
  const char* what = "expert parallelism: copying the exchange plan to the GPU";
  BS_RETURN_IF_ERROR(runtime::cuda_status(
      cudaMemcpyAsync(device->data(), host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
      what));
  return runtime::cuda_status(cudaStreamSynchronize(stream), what);
}

Status ExpertExchange::plan(Communicator& comm, const std::vector<int32_t>& ends, int experts, cudaStream_t stream) {
  const int world = comm.world_size(), me = comm.rank();
  if (experts % world != 0)
    return Status::error("expert parallelism: " + std::to_string(experts) + " experts do not split over " +
                         std::to_string(world) + " ranks");
  const int per_rank = experts / world;
  first_expert_ = me * per_rank;
  // counts[s * experts + e]: rows rank s routes to expert e (each rank fills its row; the sum
  // gives every rank the table).
  std::vector<double> counts(size_t(world) * experts, 0.0);
  for (int e = 0; e < experts; ++e) counts[size_t(me) * experts + e] = ends[e] - (e ? ends[e - 1] : 0);
  BS_RETURN_IF_ERROR(comm.all_reduce_host(counts.data(), int64_t(counts.size())));
  auto count = [&](int s, int e) { return int64_t(counts[size_t(s) * experts + e]); };

  send_rows_.assign(world, 0);
  recv_rows_.assign(world, 0);
  for (int d = 0; d < world; ++d)
    for (int e = d * per_rank; e < (d + 1) * per_rank; ++e) send_rows_[d] += count(me, e);
  for (int s = 0; s < world; ++s)
    for (int e = first_expert_; e < first_expert_ + per_rank; ++e) recv_rows_[s] += count(s, e);
  sent_ = ends.empty() ? 0 : ends.back();
  received_ = 0;
  std::vector<int64_t> recv_start(world, 0);  // where source s's block starts in the received buffer
  for (int s = 0; s < world; ++s) recv_start[s] = received_, received_ += recv_rows_[s];

  // The received buffer holds source 0's rows for the local experts (in expert order), then
  // source 1's, ...; the experts want them grouped by expert: order[i] is the received row that
  // becomes row i, inverse its inverse.
  order_host_.clear();
  local_ends_host_.assign(per_rank, 0);
  std::vector<int64_t> cursor = recv_start;
  for (int j = 0; j < per_rank; ++j) {
    const int e = first_expert_ + j;
    for (int s = 0; s < world; ++s) {
      for (int64_t i = 0; i < count(s, e); ++i) order_host_.push_back(int32_t(cursor[s] + i));
      cursor[s] += count(s, e);
    }
    local_ends_host_[j] = int32_t(order_host_.size());
  }
  inverse_host_.assign(order_host_.size(), 0);
  for (size_t i = 0; i < order_host_.size(); ++i) inverse_host_[order_host_[i]] = int32_t(i);
  BS_RETURN_IF_ERROR(upload(order_host_, &order_, stream));
  BS_RETURN_IF_ERROR(upload(inverse_host_, &inverse_, stream));
  return upload(local_ends_host_, &local_ends_, stream);
}

namespace {
std::vector<int64_t> bytes_of(const std::vector<int64_t>& rows, int64_t cols) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * cols * int64_t(sizeof(float));
  return out;
}
}  // namespace

Status ExpertExchange::dispatch(Communicator& comm, const float* rows, float* received, int64_t cols, float* scratch,
                                cudaStream_t stream) const {
  const std::vector<int64_t> send = bytes_of(send_rows_, cols), recv = bytes_of(recv_rows_, cols);
  BS_RETURN_IF_ERROR(comm.all_to_all_device(rows, send.data(), scratch, recv.data(), stream));
  BS_RETURN_IF_ERROR(comm.wait_device(stream));
  gpu::gather_rows(scratch, received_, int(cols), order_.as<int32_t>(), received_, received, stream);
  return Status::ok();
}

Status ExpertExchange::give_back(Communicator& comm, const float* received, float* rows, int64_t cols, float* scratch,
                                 cudaStream_t stream) const {
  const std::vector<int64_t> send = bytes_of(send_rows_, cols), recv = bytes_of(recv_rows_, cols);
  gpu::gather_rows(received, received_, int(cols), inverse_.as<int32_t>(), received_, scratch, stream);
  BS_RETURN_IF_ERROR(comm.all_to_all_device(scratch, recv.data(), rows, send.data(), stream));
  return comm.wait_device(stream);
}

}  // namespace blockscale::train
