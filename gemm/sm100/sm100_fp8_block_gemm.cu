// sm100_fp8_block_gemm: the Blackwell (sm_100a) entry of the FP8 blockwise GEMM. A stub in this
// slice: compiled on every build for sm_100a so the dispatch and the build cover the path, never
// run on hardware here. Issue 5's later slices put a tcgen05 kernel (or cuBLASLt's block-scaled
// matmul) behind it.
#include "gemm/launchers.h"

namespace blockscale::gemm::detail {

Status launch_sm100_fp8_block_gemm(const GemmProblem&, const GemmArguments&, cudaStream_t) {
  return Status::error(
      "device: sm_100 FP8 blockwise GEMM is not implemented yet (the sm100a path is compiled, not run on "
      "hardware); run on an sm_90 (Hopper) GPU");
}

}  // namespace blockscale::gemm::detail
