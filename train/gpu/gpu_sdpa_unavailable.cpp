// FusedAttention in a build without the cuDNN frontend headers (train/gpu/gpu_sdpa.h): prepare()
// says so, and the step runs the reference attention.
#include "train/gpu/gpu_sdpa.h"

namespace blockscale::train::gpu {

struct FusedAttention::Impl {};

FusedAttention::FusedAttention() = default;
FusedAttention::~FusedAttention() = default;

bool FusedAttention::built() { return false; }

Status FusedAttention::prepare(int, int, int, int, cudaStream_t) {
  return Status::error("cuDNN fused attention: this build has no cuDNN frontend headers (tools/setup.sh fetches "
                       "them; BLOCKSCALE_CUDNN_FRONTEND_DIR names them)");
}
size_t FusedAttention::workspace_bytes(int) const { return 0; }
Status FusedAttention::forward(const float*, int, float*, float*, void*, cudaStream_t) {
  return Status::error("cuDNN fused attention: not built");
}
Status FusedAttention::backward(const float*, const float*, const float*, const float*, int, float*, void*,
                                cudaStream_t) {
  return Status::error("cuDNN fused attention: not built");
}

}  // namespace blockscale::train::gpu
