// The grouped (MoE) GEMM API (gemm/grouped.h): checks, the architecture dispatch, the launch of
// the dense kernels in their M- or K-grouped scheduling mode.
#include "gemm/grouped.h"

#include <string>

#include "gemm/checks.h"
#include "gemm/common/grouped_schedule.h"
#include "gemm/launchers.h"

namespace blockscale::gemm {
namespace {

using formats::Format;
using namespace detail;  // gemm/checks.h

// The whole problem seen as one dense GEMM (m tokens, one expert's n and k): its shape, type and
// scalar rules are the dense ones.
GemmProblem dense_view(const GroupedGemmProblem& p) {
  GemmProblem d;
  d.m = p.m, d.n = p.n, d.k = p.k;
  d.a_recipe = p.a_recipe, d.b_recipe = p.b_recipe;
  d.c_type = p.c_type, d.d_type = p.d_type;
  d.ldc = p.ldc, d.ldd = p.ldd;
  d.alpha = p.alpha, d.beta = p.beta;
  return d;
}

// The operand and output pointers in the dense API's struct (B, its scales and S_dec then hold
// every expert; group_ends travels separately).
GemmArguments dense_arguments(const GroupedGemmArguments& args) {
  GemmArguments d;
  d.a_data = args.a_data, d.a_scales = args.a_scales, d.a_scale_dec = args.a_scale_dec;
  d.b_data = args.b_data, d.b_scales = args.b_scales, d.b_scale_dec = args.b_scale_dec;
  d.c = args.c, d.d = args.d;
  return d;
}

bool empty_problem(const GroupedGemmProblem& p) { return p.m == 0 || p.n == 0; }

bool k_grouped(const GroupedGemmProblem& p) { return p.mode == GroupMode::kK; }

BufferCopies buffer_copies(const GroupedGemmProblem& p) {
  BufferCopies copies;
  (k_grouped(p) ? copies.c_d : copies.b) = p.num_groups;
  copies.ends = p.num_groups;
  return copies;
}

}  // namespace

int64_t grouped_b_scale_bytes(const GroupedGemmProblem& p) { return scale_bytes(p.b_recipe, p.n, p.k); }

Status can_implement(const GroupedGemmProblem& p) {
  if (p.mode != GroupMode::kM && p.mode != GroupMode::kK)
    return Status::error("mode: must be GroupMode::kM (fprop, dgrad) or kK (wgrad)");
  if (p.num_groups < 1 || p.num_groups > kMaxGroups)
    return Status::error("num_groups: must be in [1, " + str(kMaxGroups) + "], got " + str(p.num_groups));
  const bool fp8 = is_fp8_blockwise_pair(p.a_recipe, p.b_recipe);
  if (fp8 && !k_grouped(p) && p.b_recipe != Format::kFp8Block128x128)
    return Status::error(
        "b_recipe: the M-grouped FP8 blockwise GEMM takes 128x128-block weights (fp8_block128x128), got " +
        std::string(formats::format_name(p.b_recipe)));
  if (fp8 && k_grouped(p) && p.b_recipe != Format::kFp8Block1x128)
    return Status::error(
        "b_recipe: the K-grouped (wgrad) FP8 blockwise GEMM takes X quantized along the tokens (fp8_block128), got " +
        std::string(formats::format_name(p.b_recipe)));
  BS_RETURN_IF_ERROR(can_implement(dense_view(p)));
  if (k_grouped(p) && formats::default_block_cols(p.a_recipe) != formats::default_block_cols(p.b_recipe))
    return Status::error("b_recipe: the K-grouped GEMM's operands share one padded token axis, so their block lengths "
                         "must match (MX with MX, NVFP4 with NVFP4), got " +
                         std::string(formats::format_name(p.a_recipe)) + " x " + formats::format_name(p.b_recipe));
  if (!k_grouped(p) && p.n * p.num_groups > kInt32Max)
    return Status::error("n * num_groups: the experts' B rows must be < 2^31, got " + str(p.n * p.num_groups));
  if (k_grouped(p) && p.num_groups * ((p.m + 127) / 128) * ((p.n + 127) / 128) > kInt32Max)
    return Status::error("num_groups * ceil(m / 128) * ceil(n / 128): the output tiles must be < 2^31");
  return Status::ok();
}

Status can_implement_for_arch(const GroupedGemmProblem& p, int sm, GemmKernel* kernel) {
  if (kernel) *kernel = GemmKernel::kNone;
  BS_RETURN_IF_ERROR(can_implement(p));
  if (sm / 10 != 9)
    return Status::error("device: sm_" + str(sm) +
                         ": the grouped GEMM runs on sm_90 (Hopper) only so far (no sm_100 grouped path yet)");
  if (kernel)
    *kernel = is_fp8_blockwise_pair(p.a_recipe, p.b_recipe) ? GemmKernel::kSm90Fp8Blockwise
                                                            : GemmKernel::kSm90BlockScaledExact;
  return Status::ok();
}

namespace {

Status check_and_select(const GroupedGemmProblem& p, const GroupedGemmArguments& args, GemmKernel* kernel) {
  *kernel = GemmKernel::kNone;
  BS_RETURN_IF_ERROR(can_implement(p));
  if (empty_problem(p)) return Status::ok();
  BS_RETURN_IF_ERROR(check_pointers(dense_view(p), dense_arguments(args), buffer_copies(p), args.group_ends));
  int sm = 0;
  BS_RETURN_IF_ERROR(current_sm(&sm));
  BS_RETURN_IF_ERROR(can_implement_for_arch(p, sm, kernel));
  if (*kernel == GemmKernel::kSm90Fp8Blockwise) return sm90_fp8_gemm_loadable();
  return sm90_block_scaled_gemm_loadable(dense_view(p));
}

}  // namespace

Status can_implement(const GroupedGemmProblem& p, const GroupedGemmArguments& args) {
  GemmKernel kernel;
  return check_and_select(p, args, &kernel);
}

size_t workspace_size(const GroupedGemmProblem& p) {
  if (!is_fp8_blockwise_pair(p.a_recipe, p.b_recipe)) return 0;
  return static_cast<size_t>(grouped_cublaslt_scale_bytes(p)) + kCublasLtWorkspaceBytes;
}

Status run(const GroupedGemmProblem& p, const GroupedGemmArguments& args, void* workspace, size_t workspace_bytes,
           cudaStream_t stream) {
  GemmKernel kernel = GemmKernel::kNone;
  BS_RETURN_IF_ERROR(check_and_select(p, args, &kernel));
  if (empty_problem(p)) return Status::ok();
  if (kernel == GemmKernel::kSm90Fp8Blockwise && gemm_route() != GemmRoute::kKernel) {
    if (grouped_cublaslt_applies(p, args)) return launch_grouped_cublaslt(p, args, workspace, workspace_bytes, stream);
    if (gemm_route() == GemmRoute::kCublasLt)
      return Status::error("host_group_ends, n, ldd, ldc, beta: the FP8 blockwise route is forced to cuBLASLt, which "
                           "needs the group ends on the host, n (and K-grouped m) multiples of 4, rows of D and C "
                           "16-byte aligned, C's type D's, and (K-grouped) experts without tokens only with beta 0 "
                           "or in place with beta 1");
  }
  GemmArguments dense = dense_arguments(args);
  if (!k_grouped(p)) dense.b_scale_dec = nullptr;  // per expert: passed through `grouping`
  Grouping grouping;
  grouping.mode = p.mode;
  grouping.group_ends = args.group_ends;
  grouping.num_groups = p.num_groups;
  grouping.b_scale_stride_bytes = grouped_b_scale_bytes(p);
  grouping.b_scale_dec = args.b_scale_dec;
  if (kernel == GemmKernel::kSm90Fp8Blockwise) return launch_sm90_fp8_gemm(dense_view(p), dense, stream, &grouping);
  return launch_sm90_block_scaled_gemm(dense_view(p), dense, stream, &grouping);
}

}  // namespace blockscale::gemm
