// Internal to gemm/: the per-kernel launchers behind gemm/gemm.h. gemm.cpp has checked every
// argument (shapes, strides, recipes, pointers, the device) and calls these only for a non-empty
// problem. One file per kernel family implements them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm/common/grouped_schedule.h"
#include "gemm/gemm.h"
#include "gemm/grouped.h"
#include "runtime/cuda_status.h"

namespace blockscale::gemm::detail {

// Grouped (MoE) launches (gemm/grouped.h); null: a dense launch.
//   M-grouped: p describes the whole problem (m = all tokens, n and k of one expert); B holds
//     num_groups experts of n rows back to back, its scales one per-expert buffer of
//     b_scale_stride_bytes each; group_ends split m; b_scale_dec has num_groups floats.
//   K-grouped: p's m x n is one expert's output and k the token capacity of A and B (one matrix
//     each); group_ends split k; C and D hold num_groups outputs, expert g's at row g * m.
struct Grouping {
  GroupMode mode = GroupMode::kM;
  const int32_t* group_ends = nullptr;  // device, num_groups cumulative ends
  int num_groups = 0;
  int64_t b_scale_stride_bytes = 0;
  const float* b_scale_dec = nullptr;  // NVFP4 B (M-grouped: num_groups device floats)
};

// FP8 blockwise, sm_90a: gemm/sm90/sm90_fp8_gemm.cu (dense, with B multicast across a 2-CTA
// cluster; M-grouped; K-grouped). D through TMA stores where its rows, N and pointer allow and C
// is not read (or is D itself, accumulated in fp32 by TMA reduce-add), from registers otherwise.
Status launch_sm90_fp8_gemm(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream,
                           const Grouping* grouping = nullptr);
// Whether the current device can run that kernel (an sm_90a image that loads on it).
Status sm90_fp8_gemm_loadable();
// The CTA tile it runs with: 128 x 128, 128 x 192 or 256 x 128. kAuto (the default) picks per problem by a cost model
// of waves (sm90_fp8_gemm.cu). kM256Pair: 256 x 128 in 2-CTA clusters that share A (what dense
// 256 x 128 runs where N > 128; M-grouped, the automatic choice takes it for large experts only).
// Process-wide, for tests and the bench to force one tile; the arithmetic per output element is
// the same, so every tile gives the same bits.
enum class Sm90Fp8Tile { kAuto, kN128, kN192, kM256, kM256Pair };
void set_sm90_fp8_tile(Sm90Fp8Tile tile);
Sm90Fp8Tile sm90_fp8_tile();

// MX / NVFP4 exact, sm_90a: gemm/sm90/sm90_block_scaled_gemm*.cu (elements x scales converted
// to bf16 in the kernel, bf16 wgmma, fp32 accumulation).
Status launch_sm90_block_scaled_gemm(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream,
                                     const Grouping* grouping = nullptr);
// Whether the current device can run the kernel p's recipe pair selects.
Status sm90_block_scaled_gemm_loadable(const GemmProblem& p);

// cuBLASLt's block-scaled matmul (VEC32_UE8M0 / VEC16_UE4M3 / VEC128_32F / BLK128x128_32F scale
// modes): gemm/cublaslt/cublaslt_block_scaled.cu. Every recipe on sm_100 (compiled, not run on
// Blackwell hardware); FP8 blockwise on sm_90, where it is faster than the wgmma kernel above.
// strides: A's and B's row strides in elements (0: k). no_algorithm (optional): set, with ok and
// nothing launched, when cuBLASLt has no algorithm for the problem (without it: an error).
struct LtStrides {
  int64_t lda = 0, ldb = 0;
};
Status launch_cublaslt_block_scaled(const GemmProblem& p, const GemmArguments& args, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream, const LtStrides& strides = {},
                                    bool* no_algorithm = nullptr);
// The workspace run() offers cuBLASLt (workspace_size() includes it where cuBLASLt may run).
constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;
// The shapes cuBLASLt's FP8 blockwise matmul takes on the H100 (measured: it refuses M or N not a
// multiple of 4, and rows of D or C not 16-byte aligned; C's type must be D's).
bool cublaslt_fp8_shape_ok(const GemmProblem& p);

// The grouped FP8 blockwise GEMMs as one cuBLASLt matmul per expert, sizes from
// args.host_group_ends: gemm/cublaslt/cublaslt_grouped.cu. Applies: host ends given, and the
// shape, stride and (K-grouped) empty-expert rules that route meets. grouped.cpp has checked
// everything else; the launch checks host_group_ends and the workspace (M-grouped: the tokens'
// scales regrouped per expert, grouped_cublaslt_scale_bytes of it).
bool grouped_cublaslt_applies(const GroupedGemmProblem& p, const GroupedGemmArguments& args);
int64_t grouped_cublaslt_scale_bytes(const GroupedGemmProblem& p);
Status launch_grouped_cublaslt(const GroupedGemmProblem& p, const GroupedGemmArguments& args, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream);

using runtime::cuda_status;

// Checks `kernel` loads on the current device, raises its dynamic shared-memory limit to
// smem_bytes once per (kernel, device) and returns the device's SM count. `name` names the kernel
// in errors.
Status prepare_kernel(const void* kernel, int smem_bytes, const char* name, int* sm_count);

}  // namespace blockscale::gemm::detail
