// GPU grouped (MoE) block-scaled GEMMs: the four-call protocol of gemm/gemm.h for the expert
// GEMMs of a mixture-of-experts layer, in two modes. The expert sizes are read on the device:
// nothing synchronises with the host, so the token counts may change every step without a copy
// back. Same kernels as the dense API in a grouped scheduling mode (gemm/common/grouped_schedule.h);
// sm_90 only so far (the sm_100 path is refused with a message).
//
// ---- M-grouped (GroupMode::kM: fprop and dgrad) ----
//   D[rows of expert g] = alpha * (A[rows of g] ⊗ scales_A) · (B_g ⊗ scales_B,g)^T + beta * C[rows of g]
//
// A (m x k): the tokens of all experts, sorted by expert, quantized rowwise as one dense matrix
// (quant/'s rowwise copy, grouped or not: its blocks never cross rows). Expert g owns rows
// [group_ends[g-1], group_ends[g]) (group_ends[-1] = 0); any count, 0 included. B: num_groups
// weight matrices of n x k, each quantized on its own as a dense K-major operand and stored back
// to back: codes of expert g at b_data + g * n * (row bytes), scales at b_scales + g *
// grouped_b_scale_bytes(p) (the dense scale layout of one n x k operand). C and D (m x n, row
// strides ldc / ldd) follow A's rows.
// group_ends: int32 device array of num_groups cumulative ends (not G + 1: the leading 0 is
// implied), non-decreasing, the last equal to m: what quant/'s grouped quantize takes.
// Recipes (A, B): FP8 blockwise (fp8_block128, fp8_block128x128) and every MX / NVFP4 pair of
// gemm.h. NVFP4: a_scale_dec is one device float (the tokens are one tensor), b_scale_dec an array
// of num_groups device floats (each expert's weight has its own tensor scale).
//
// ---- K-grouped (GroupMode::kK: wgrad) ----
//   D_g (m x n) = alpha * (A[:, K of g] ⊗ scales_A) · (B[:, K of g] ⊗ scales_B)^T + beta * C_g
//
// The reduction runs over each expert's tokens: dW_g = dY_g^T · X_g. A (m x k) is the columnwise
// copy of dY (m = dY's columns) and B (n x k) the columnwise copy of X (n = X's columns), both as
// quant/'s grouped quantize writes them: k = grouped_capacity() padded token columns, each expert's
// tokens padded to the recipe's block. group_ends: those padded cumulative ends (quant/'s
// padded_group_ends, num_groups int32 on the device); each a multiple of both recipes' block
// lengths (128 FP8 blockwise, 32 MX, 16 NVFP4), non-decreasing, the last <= k (columns past it are
// not read). C and D hold num_groups outputs of m x n: expert g's is rows g * m .. g * m + m - 1 of
// a (num_groups * m) x n matrix with row stride ldc / ldd. An expert without tokens gets
// beta * C_g (with beta = 1 and C = D, the accumulation into an fp32 main gradient: D unchanged).
// Recipes (A, B): FP8 blockwise (fp8_block128, fp8_block128: both quantized along the tokens) and
// the MX / NVFP4 pairs of gemm.h whose block lengths match (one padded token axis: MXFP8 / MXFP4
// with MXFP8 / MXFP4, NVFP4 with NVFP4). NVFP4: a_scale_dec and b_scale_dec are one device float
// each.
//
// ---- Sizes on the host (optional; FP8 blockwise on sm_90) ----
// args.host_group_ends: the same num_groups ends in host memory (kK: the padded ones), for callers
// that have them anyway. With them, and with workspace_size(p) bytes of workspace, FP8 blockwise
// on sm_90 runs each expert as its own cuBLASLt matmul (faster than the grouped kernel on the H100
// at the expert sizes measured, docs/performance.md): M-grouped, the tokens' scales are first
// regrouped per expert into the workspace; an expert whose rows are not a multiple of 4 is
// multiplied over its rows rounded up to 4 when beta == 0 and rows follow it (the rows past it
// are rewritten by the experts after it), by the wgmma kernel otherwise. They must equal the
// device array (not checked on the device: wrong ends give wrong sums, never an access outside
// the buffers); on the host they must satisfy the rules above (checked: an error names them).
//
// Both modes: the host cannot check device data without synchronising, so the kernels clamp each
// end to [the largest earlier end, m (kM) or k (kK)]: a malformed array yields empty experts or
// wrong sums, never an access outside the buffers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gemm/gemm.h"
#include "gemm/group_mode.h"  // defines: GroupMode

namespace blockscale::gemm {

struct GroupedGemmProblem {
  GroupMode mode = GroupMode::kM;  // kM or kK
  int num_groups = 0;  // experts, 1 .. 1024
  int64_t m = 0;       // kM: tokens of all experts (rows of A, C, D); kK: rows of each expert's D
  int64_t n = 0;       // columns of D; kM: rows of each expert's B; kK: rows of B
  int64_t k = 0;       // kM: K; kK: the token capacity. As gemm.h: a multiple of 128 (FP8
                       // blockwise) or 32 (MX, NVFP4)
  formats::Format a_recipe = formats::Format::kFp8Block1x128;
  formats::Format b_recipe = formats::Format::kFp8Block128x128;
  formats::DType c_type = formats::DType::kF32;  // kBf16 or kF32, as GemmProblem's
  formats::DType d_type = formats::DType::kBf16;
  int64_t ldc = 0;
  int64_t ldd = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
};

struct GroupedGemmArguments {
  const uint8_t* a_data = nullptr;
  const void* a_scales = nullptr;
  const uint8_t* b_data = nullptr;   // kM: num_groups x n x k codes; kK: n x k
  const void* b_scales = nullptr;    // kM: num_groups x grouped_b_scale_bytes(p); kK: one matrix's
  const float* a_scale_dec = nullptr;  // NVFP4 A: one device float
  const float* b_scale_dec = nullptr;  // NVFP4 B: kM num_groups device floats; kK one
  const int32_t* group_ends = nullptr;  // device, num_groups cumulative ends (kK: padded)
  const int32_t* host_group_ends = nullptr;  // optional: the same ends in host memory (above)
  const void* c = nullptr;
  void* d = nullptr;
};

// Bytes of one expert's B scales (kM: the stride between experts in b_scales; kK: all of them).
int64_t grouped_b_scale_bytes(const GroupedGemmProblem& p);

Status can_implement(const GroupedGemmProblem& p);
Status can_implement_for_arch(const GroupedGemmProblem& p, int sm, GemmKernel* kernel = nullptr);
Status can_implement(const GroupedGemmProblem& p, const GroupedGemmArguments& args);
// FP8 blockwise: the regrouped scales (kM) plus cuBLASLt's workspace, used only with
// host_group_ends; 0 otherwise.
size_t workspace_size(const GroupedGemmProblem& p);
Status run(const GroupedGemmProblem& p, const GroupedGemmArguments& args, void* workspace, size_t workspace_bytes,
           cudaStream_t stream);

}  // namespace blockscale::gemm
