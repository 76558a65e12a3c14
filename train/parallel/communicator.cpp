#include "train/parallel/communicator.h"

#include <algorithm>
#include <string>

namespace blockscale::train {

const char* grad_reduce_name(GradReduce r) { return r == GradReduce::kBf16 ? "bf16" : "fp32"; }

Status parse_grad_reduce(const std::string& name, GradReduce* out) {
  for (GradReduce r : {GradReduce::kFp32, GradReduce::kBf16}) {
    if (name == grad_reduce_name(r)) {
      *out = r;
      return Status::ok();
    }
  }
  return Status::error("--grad-reduce: expected fp32 or bf16 (got '" + name + "')");
}

const char* device_collectives_name(DeviceCollectives c) {
  switch (c) {
    case DeviceCollectives::kNccl: return "nccl";
    case DeviceCollectives::kCopyEngines: return "copy-engines";
    default: return "auto";
  }
}

Status parse_device_collectives(const std::string& name, DeviceCollectives* out) {
  for (DeviceCollectives c : {DeviceCollectives::kAuto, DeviceCollectives::kNccl, DeviceCollectives::kCopyEngines}) {
    if (name == device_collectives_name(c)) {
      *out = c;
      return Status::ok();
    }
  }
  return Status::error("--collectives: expected auto, nccl or copy-engines (got '" + name + "')");
}

class LocalMember final : public Communicator {
 public:
  LocalMember(LocalGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_.world_; }
  Status all_reduce_host(double* data, int64_t n) override { return group_.all_reduce(rank_, data, n); }
  Status all_reduce_host(float* data, int64_t n) override {
    std::vector<double> wide(data, data + n);
    BS_RETURN_IF_ERROR(group_.all_reduce(rank_, wide.data(), n));
    for (int64_t i = 0; i < n; ++i) data[i] = float(wide[i]);
    return Status::ok();
  }
  Status all_to_all_host(const uint8_t* send, const int64_t* send_bytes, uint8_t* recv,
                         const int64_t* recv_bytes) override {
    return group_.all_to_all(rank_, send, send_bytes, recv, recv_bytes);
  }

 private:
  LocalGroup& group_;
  const int rank_;
};

LocalGroup::LocalGroup(int world_size)
    : world_(world_size), inputs_(world_size, nullptr), sends_(world_size, nullptr), send_sizes_(world_size, nullptr) {}

std::unique_ptr<Communicator> LocalGroup::member(int rank) { return std::make_unique<LocalMember>(*this, rank); }

void LocalGroup::wait_for_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t generation = generation_;
  if (++arrived_ == world_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
}

Status LocalGroup::all_reduce(int rank, double* data, int64_t n) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inputs_[rank] = data;
  }
  wait_for_all();  // every rank's input is posted
  if (rank == 0) {
    sum_.assign(n, 0.0);
    for (int r = 0; r < world_; ++r)
      for (int64_t i = 0; i < n; ++i) sum_[i] += inputs_[r][i];
  }
  wait_for_all();  // the sum is ready; nobody has overwritten its input yet
  std::copy(sum_.begin(), sum_.begin() + n, data);
  wait_for_all();  // everyone has its copy before the next call reuses sum_
  return Status::ok();
}

Status LocalGroup::all_to_all(int rank, const uint8_t* send, const int64_t* send_bytes, uint8_t* recv,
                              const int64_t* recv_bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sends_[rank] = send;
    send_sizes_[rank] = send_bytes;
  }
  wait_for_all();  // every rank's send buffer is posted
  Status status = Status::ok();
  int64_t at = 0;
  for (int src = 0; src < world_; ++src) {
    int64_t offset = 0;  // where src's block for this rank starts
    for (int d = 0; d < rank; ++d) offset += send_sizes_[src][d];
    if (send_sizes_[src][rank] != recv_bytes[src]) {
      status = Status::error("all_to_all: rank " + std::to_string(src) + " sends " +
                             std::to_string(send_sizes_[src][rank]) + " bytes to rank " + std::to_string(rank) +
                             ", which expects " + std::to_string(recv_bytes[src]));
      break;
    }
    std::copy(sends_[src] + offset, sends_[src] + offset + recv_bytes[src], recv + at);
    at += recv_bytes[src];
  }
  wait_for_all();  // nobody reuses its send buffer before everyone has read it
  return status;
}

}  // namespace blockscale::train
