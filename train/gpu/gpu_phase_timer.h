// Where a GPU step's time goes. The step's work runs in order on one stream; an event is recorded
// there at every change of phase, and the time between two events belongs to the phase that the
// first one opened. Idle gaps (the host waiting on a copy, launches catching up) land in whatever
// phase was open, so the phases add up to the stream's wall time. The events slow the step they
// time (more where the host is behind the GPU), so the trainer times phases on a sample of steps
// (StepBackend::time_phases) and the step time on the others.
//
// BLOCKSCALE_TIMELINE=<file> appends every timed step's events to <file> as CSV (step, event, phase,
// host_ms: when the host recorded it, gpu_ms: when the GPU reached it, both from the step's first
// event). Where gpu_ms - host_ms stays large the host runs ahead and the GPU never waits for a
// launch; where it drops to ~0 the GPU was idle until the host got there (host syncs, slow launches).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/status.h"
#include "runtime/cuda_status.h"

namespace blockscale::train {

enum class Phase { kQuantize, kGemm, kAttention, kNorm, kRouting, kEmbedLoss, kOptimizer, kCommunication, kOther, kCount };

inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kQuantize: return "quantize";  // quant/ kernels; for bf16, the fp32 -> bf16 casts
    case Phase::kGemm: return "gemm";          // gemm/ and the linear layers' cuBLAS products
    case Phase::kAttention: return "attention";
    case Phase::kNorm: return "norms";                 // RMSNorm forward and backward
    case Phase::kRouting: return "moe_routing";        // router, permutes, combine, scatter
    case Phase::kEmbedLoss: return "embedding_loss";   // embeddings, cross-entropy
    case Phase::kOptimizer: return "optimizer";  // zeroing, norm, clipping, AdamW
    case Phase::kCommunication: return "communication";  // NCCL waits that backward did not hide
    default: return "other";  // SwiGLU, residual adds and copies, zeroing
  }
}

using PhaseTimes = std::array<double, size_t(Phase::kCount)>;  // milliseconds per phase

class PhaseTimer {
 public:
  ~PhaseTimer() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  void start(cudaStream_t stream) {
    stream_ = stream;
    stack_.assign(1, Phase::kOther);
    marks_.clear();
    record(Phase::kOther);
  }
  void enter(Phase p) {
    if (stream_ == nullptr || stack_.back() == p) {
      stack_.push_back(p);
      return;
    }
    stack_.push_back(p);
    record(p);
  }
  void leave() {
    const Phase was = stack_.back();
    stack_.pop_back();
    if (stream_ != nullptr && stack_.back() != was) record(stack_.back());
  }
  // The phase of what follows, until the next mark (scoped phases nest on top of it).
  void mark(Phase p) {
    if (stack_.front() == p) return;
    stack_.front() = p;
    if (stream_ != nullptr && stack_.size() == 1) record(p);
  }
  // Waits for the stream, adds each phase's time since start() to *totals. The intervals are read
  // in order, each waiting only for its own end: called right after the step's last kernels are
  // queued, the host reads the earlier phases (hundreds of events) while the GPU runs those.
  Status finish(PhaseTimes* totals) {
    if (stream_ == nullptr) return Status::ok();
    record(Phase::kOther);
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      if (cudaEventQuery(events_[i + 1]) == cudaErrorNotReady)
        BS_RETURN_IF_ERROR(runtime::cuda_status(cudaEventSynchronize(events_[i + 1]), "phase timer: cudaEventSynchronize"));
      float ms = 0;
      BS_RETURN_IF_ERROR(
          runtime::cuda_status(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "phase timer: cudaEventElapsedTime"));
      (*totals)[size_t(marks_[i])] += ms;
    }
    if (timeline_ != nullptr) write_timeline();
    stream_ = nullptr;
    return Status::ok();
  }

 private:
  void write_timeline() {
    FILE* f = std::fopen(timeline_, "a");
    if (f == nullptr) return;  // a diagnostic: never fails the run
    if (steps_++ == 0) std::fprintf(f, "step,event,phase,host_ms,gpu_ms\n");
    for (size_t i = 0; i < marks_.size(); ++i) {
      float gpu_ms = 0;
      cudaEventElapsedTime(&gpu_ms, events_[0], events_[i]);
      const double host_ms = std::chrono::duration<double, std::milli>(host_[i] - host_[0]).count();
      std::fprintf(f, "%lld,%zu,%s,%.4f,%.4f\n", steps_, i, phase_name(marks_[i]), host_ms, gpu_ms);
    }
    std::fclose(f);
  }
  void record(Phase p) {
    if (marks_.size() == events_.size()) {
      cudaEvent_t e;
      cudaEventCreate(&e);
      events_.push_back(e);
    }
    if (timeline_ != nullptr) {
      host_.resize(marks_.size() + 1);
      host_[marks_.size()] = std::chrono::steady_clock::now();
    }
    cudaEventRecord(events_[marks_.size()], stream_);
    marks_.push_back(p);
  }

  cudaStream_t stream_ = nullptr;
  std::vector<Phase> stack_{Phase::kOther};
  std::vector<Phase> marks_;
  std::vector<cudaEvent_t> events_;
  const char* timeline_ = std::getenv("BLOCKSCALE_TIMELINE");
  long long steps_ = 0;
  std::vector<std::chrono::steady_clock::time_point> host_;
};

// Opens a phase for a scope.
class PhaseScope {
 public:
  PhaseScope(PhaseTimer& t, Phase p) : t_(t) { t_.enter(p); }
  ~PhaseScope() { t_.leave(); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimer& t_;
};

}  // namespace blockscale::train
