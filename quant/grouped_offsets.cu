// The padded expert ends of a grouped (MoE) quantize without tiles of the padded row space
// (rowwise-only runs and empty matrices): one CTA scans group_ends (quant/grouped_offsets.cuh)
// and writes padded_group_ends. Runs with a columnwise copy write them from their own kernel.
#include <string>

#include "quant/grouped_offsets.cuh"
#include "quant/launchers.h"

namespace blockscale::quant::detail {
namespace {

constexpr int kThreads = 256;

// Dynamic shared memory: 8 * num_groups bytes (the clamped ends, then the padded ends).
template <uint32_t kBlock>
__global__ void __launch_bounds__(kThreads) grouped_offsets_kernel(const int32_t* group_ends, int num_groups,
                                                                  int64_t rows, int32_t* padded_group_ends) {
  extern __shared__ uint32_t offsets[];
  __shared__ uint32_t warp_totals[32];
  grouped_offsets<kThreads, kBlock>(group_ends, num_groups, rows, offsets, offsets + num_groups, warp_totals);
  for (int g = static_cast<int>(threadIdx.x); g < num_groups; g += kThreads)
    padded_group_ends[g] = static_cast<int32_t>(offsets[num_groups + g]);
}

template <uint32_t kBlock>
Status launch(const int32_t* group_ends, int num_groups, int64_t rows, int32_t* padded_group_ends,
              cudaStream_t stream) {
  const int smem = 8 * num_groups;
  if (smem > 48 * 1024)
    BS_RETURN_IF_ERROR(cuda_status(
        cudaFuncSetAttribute(grouped_offsets_kernel<kBlock>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "grouped_offsets_kernel: cudaFuncSetAttribute"));
  grouped_offsets_kernel<kBlock><<<1, kThreads, smem, stream>>>(group_ends, num_groups, rows, padded_group_ends);
  return cuda_status(cudaGetLastError(), "grouped_offsets_kernel launch");
}

}  // namespace

Status launch_grouped_offsets(const int32_t* group_ends, int num_groups, int64_t rows, int block,
                              int32_t* padded_group_ends, cudaStream_t stream) {
  if (num_groups < 1 || num_groups > kMaxGroups)
    return Status::error("problem.num_groups: must be in [1, " + std::to_string(kMaxGroups) + "]");
  switch (block) {
    case 16: return launch<16>(group_ends, num_groups, rows, padded_group_ends, stream);
    case 32: return launch<32>(group_ends, num_groups, rows, padded_group_ends, stream);
    case 128: return launch<128>(group_ends, num_groups, rows, padded_group_ends, stream);
  }
  return Status::error("grouped block length: must be 16, 32 or 128 (got " + std::to_string(block) + ")");
}

}  // namespace blockscale::quant::detail
