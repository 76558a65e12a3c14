// The sm_90a block-scaled GEMM kernels with two MXFP8 operands (E4M3 / E5M2 each).
#include "gemm/sm90/sm90_block_scaled_launch.cuh"

namespace blockscale::gemm::detail {

#define BLOCKSCALE_INSTANTIATE_PAIR(A, B)                                                         \
  template Status launch_block_scaled<A, B>(const GemmProblem&, const GemmArguments&, cudaStream_t); \
  template Status prepare_block_scaled<A, B>(int*);
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp8E4M3, sm90::Mxfp8E4M3)
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp8E4M3, sm90::Mxfp8E5M2)
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp8E5M2, sm90::Mxfp8E4M3)
BLOCKSCALE_INSTANTIATE_PAIR(sm90::Mxfp8E5M2, sm90::Mxfp8E5M2)

}  // namespace blockscale::gemm::detail
