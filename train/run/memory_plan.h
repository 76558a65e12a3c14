// What a training run will hold in memory, estimated from its configuration before anything is
// allocated, and the check against what the machine has: a run too large for it ends with one
// line naming both figures instead of an allocation failure halfway through its set-up.
//
//   defines: MemoryNeed, MemoryPlan, plan_memory, check_memory, host_memory_available,
//            gpu_memory_available, format_bytes
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "train/trainer.h"

namespace blockscale::train {

// Bytes by what they hold, e.g. {"parameters, gradients and AdamW state", 1.2e9}.
struct MemoryNeed {
  std::vector<std::pair<std::string, double>> parts;
  double total() const;
};

struct MemoryPlan {
  bool gpu = false;   // the step runs on the GPU
  MemoryNeed host;    // the process's memory
  MemoryNeed device;  // the GPU's memory (empty for a CPU run)
};

// The estimate for one rank of `c` (its --batch), on the GPU or the CPU; formulas in the .cpp.
// fused_attention: the GPU step's attention is cuDNN's fused path (train/gpu/gpu_sdpa.h), which
// keeps no probabilities. Doubles throughout: a configuration whose sizes overflow 64-bit integers
// is still estimated. copy_engine_peers: the other ranks whose gradient chunks land in this one's
// staging buffer when the sums go through the copy engines (train/parallel/gpu_copy_engines.h).
MemoryPlan plan_memory(const TrainConfig& c, bool on_gpu, bool fused_attention = false, int copy_engine_peers = 0);

// An error when the plan needs more than is available, naming both ("the run needs about 412.3
// GiB of host memory (...); this machine has 31.2 GiB available"). A negative availability is
// unknown and is not checked.
Status check_memory(const MemoryPlan& plan, double host_available, double device_available);

// Bytes this process can still allocate on the host: /proc/meminfo's MemAvailable (else
// sysconf), lowered to what the process's cgroup limit leaves; -1 when unknown.
double host_memory_available();
// Free bytes on the current GPU (cudaMemGetInfo); -1 in a build without CUDA or on an error.
double gpu_memory_available();

// "412.3 GiB", "12.0 MiB", "3.1 TiB".
std::string format_bytes(double bytes);

}  // namespace blockscale::train
