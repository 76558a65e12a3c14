// The sm_90a block-scaled GEMM kernels with an E2M1 operand: MXFP8 x MXFP4 / NVFP4 (FP8
// activations with FP4 weights), MXFP4 x MXFP4, NVFP4 x NVFP4.
#include "gemm/sm90/sm90_block_scaled_launch.cuh"

namespace blockscale::gemm::detail {

#define BLOCKSCALE_INSTANTIATE_PAIR(A, B)                                                         \
  template Status launch_block_scaled<A, B>(const GemmProblem&, const GemmArguments&, cudaStream_t); \
  template Status prepare_block_scaled<A, B>(int*);
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp8E4M3, sm90::Mxfp4)
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp8E5M2, sm90::Mxfp4)
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp8E4M3, sm90::Nvfp4)
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp8E5M2, sm90::Nvfp4)
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp4, sm90::Mxfp4)
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Nvfp4, sm90::Nvfp4)

}  // namespace blockscale::gemm::detail
