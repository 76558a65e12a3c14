// cublaslt_grouped: gemm/grouped.h's FP8 blockwise GEMMs as one cuBLASLt matmul per expert, for
// callers that give the group ends on the host (GroupedGemmArguments::host_group_ends). On the H100
// cuBLASLt's blockwise kernel is faster than the grouped wgmma kernel at the training step's expert
// sizes (docs/performance.md); the price is the host knowing the sizes (a copy back per MoE layer).
//
// M-grouped (fprop, dgrad): expert g is rows [s, e) of A, C and D. Its rows of A are a row slice
// (row stride k), but the tokens' 1x128 scales are K-block-major over all m rows (vec128 layout,
// formats/scale_layout.h) and cuBLASLt takes no stride for them: one kernel copies each expert's
// scales into the workspace as its own vec128 matrix of ceil4(e - s) rows (zeros past e).
// cuBLASLt refuses row counts that are not multiples of 4; such an expert runs over its rows
// rounded up to 4 when nothing forbids it: beta == 0 (C not read) and the extra rows are rows of
// later experts (before the last end), whose own matmuls, enqueued after, rewrite them. Otherwise (the last expert,
// beta != 0) the wgmma kernel runs that expert.
// K-grouped (wgrad): expert g's tokens are columns [s, e) of both columnwise copies (row stride
// the capacity k), and its 1x128 scales a contiguous run of K blocks: plain slices, no copy. An
// expert without tokens gets D_g = beta * C_g: nothing to do in place with beta 1, a memset with
// beta 0; other cases run the whole problem on the grouped kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "formats/scale_layout.h"
#include "gemm/checks.h"
#include "gemm/launchers.h"

namespace blockscale::gemm::detail {
namespace {

int64_t round4(int64_t v) { return (v + 3) / 4 * 4; }

// Expert g (blockIdx.y) gets rows [s, e) of src's k_blocks x m vec128 scales as its own vec128
// matrix of ceil4(e - s) rows, at dst + k_blocks * (the rounded rows of the experts before g).
// Ends are clamped as the grouped kernels clamp them, so any array stays inside both buffers.
__global__ void regroup_vec128_scales(const float* src, int64_t src_ld, int64_t m, int64_t k_blocks,
                                      const int32_t* ends, float* dst) {
  const int g = blockIdx.y;
  int64_t before = 0, start = 0;  // rounded rows of the experts before g; g's first row
  for (int h = 0; h < g; ++h) {
    const int64_t end = min(max(static_cast<int64_t>(ends[h]), start), m);
    before += (end - start + 3) / 4 * 4;
    start = end;
  }
  const int64_t end = min(max(static_cast<int64_t>(ends[g]), start), m);
  const int64_t rows = end - start, ld = (rows + 3) / 4 * 4;
  float* out = dst + before * k_blocks;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < ld * k_blocks;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t kb = i / ld, r = i % ld;
    out[i] = r < rows ? src[kb * src_ld + start + r] : 0.0f;
  }
}

Status check_host_ends(const GroupedGemmProblem& p, const int32_t* ends) {
  const bool k_mode = p.mode == GroupMode::kK;
  int64_t prev = 0;
  for (int g = 0; g < p.num_groups; ++g) {
    const int64_t e = ends[g];
    if (e < prev)
      return Status::error("host_group_ends: must be non-decreasing, got " + str(e) + " after " + str(prev) +
                           " at expert " + std::to_string(g));
    if (k_mode && e % 128 != 0)
      return Status::error("host_group_ends: the K-grouped ends are padded to the 128-token block, got " + str(e) +
                           " at expert " + std::to_string(g));
    prev = e;
  }
  const int64_t limit = k_mode ? p.k : p.m;
  if (prev > limit)
    return Status::error("host_group_ends: the last end must be <= " + std::string(k_mode ? "k" : "m") + " (" +
                         str(limit) + "), got " + str(prev));
  return Status::ok();
}

GemmProblem expert_problem(const GroupedGemmProblem& p, int64_t m, int64_t k) {
  GemmProblem e;
  e.m = m, e.n = p.n, e.k = k;
  e.a_recipe = p.a_recipe, e.b_recipe = p.b_recipe;
  e.c_type = p.c_type, e.d_type = p.d_type;
  e.ldc = p.ldc, e.ldd = p.ldd;
  e.alpha = p.alpha, e.beta = p.beta;
  return e;
}

const void* rows_at(const void* base, int64_t row, int64_t ld, formats::DType t) {
  return base ? static_cast<const char*>(base) + row * ld * element_bytes(t) : nullptr;
}

// One expert's product on cuBLASLt; on the wgmma kernel where cuBLASLt has no algorithm (kAuto).
Status expert_product(const GemmProblem& e, const GemmArguments& a, void* ws, size_t ws_bytes, cudaStream_t stream,
                      const LtStrides& strides, const GemmProblem* kernel_problem) {
  bool no_algorithm = false;
  const bool forced = gemm_route() == GemmRoute::kCublasLt;
  BS_RETURN_IF_ERROR(
      launch_cublaslt_block_scaled(e, a, ws, ws_bytes, stream, strides, forced ? nullptr : &no_algorithm));
  if (!no_algorithm) return Status::ok();
  if (kernel_problem == nullptr)  // strided operands: the dense kernel takes rows of k bytes only
    return Status::error("a_recipe, b_recipe: cuBLASLt found no algorithm for an expert's wgrad (m=" + str(e.m) +
                         ", n=" + str(e.n) + ", k=" + str(e.k) + ")");
  return launch_sm90_fp8_gemm(*kernel_problem, a, stream);
}

Status run_m_grouped(const GroupedGemmProblem& p, const GroupedGemmArguments& args, uint8_t* ws, size_t ws_bytes,
                     cudaStream_t stream) {
  const int64_t scale_bytes = grouped_cublaslt_scale_bytes(p);
  if (ws == nullptr || static_cast<int64_t>(ws_bytes) < scale_bytes)
    return Status::error("workspace_bytes: the per-expert cuBLASLt route (host_group_ends given) needs at least " +
                         str(scale_bytes) + " bytes for the regrouped scales (workspace_size(p) = " +
                         str(static_cast<int64_t>(workspace_size(p))) + "), got " +
                         str(ws == nullptr ? 0 : static_cast<int64_t>(ws_bytes)));
  const int64_t k_blocks = p.k / 128;
  float* scales = reinterpret_cast<float*>(ws);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((round4(p.m) * k_blocks + 255) / 256, 64)),
                  static_cast<unsigned>(p.num_groups));
  regroup_vec128_scales<<<grid, 256, 0, stream>>>(static_cast<const float*>(args.a_scales),
                                                  formats::vec128_scale_ld(p.m), p.m, k_blocks, args.group_ends,
                                                  scales);
  BS_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "device: regroup_vec128_scales launch"));
  void* lt_ws = ws + scale_bytes;
  const size_t lt_bytes = ws_bytes - static_cast<size_t>(scale_bytes);
  const int64_t b_stride = grouped_b_scale_bytes(p);
  const int64_t last_end = args.host_group_ends[p.num_groups - 1];
  int64_t start = 0, before = 0;
  for (int g = 0; g < p.num_groups; ++g) {
    const int64_t rows = args.host_group_ends[g] - start, rounded = round4(rows);
    GemmArguments a;
    a.a_data = args.a_data + start * p.k;
    a.a_scales = scales + before * k_blocks;
    a.b_data = args.b_data + g * p.n * p.k;
    a.b_scales = static_cast<const uint8_t*>(args.b_scales) + g * b_stride;
    a.c = rows_at(args.c, start, p.ldc, p.c_type);
    a.d = const_cast<void*>(rows_at(args.d, start, p.ldd, p.d_type));
    const GemmProblem exact = expert_problem(p, rows, p.k);
    if (rows > 0) {
      if (rounded == rows || (p.beta == 0.0f && start + rounded <= last_end))
        BS_RETURN_IF_ERROR(expert_product(expert_problem(p, rounded, p.k), a, lt_ws, lt_bytes, stream, {}, &exact));
      else
        BS_RETURN_IF_ERROR(launch_sm90_fp8_gemm(exact, a, stream));
    }
    start += rows;
    before += rounded;
  }
  return Status::ok();
}

// Whether every expert without tokens can be left to a memset (beta 0) or to nothing (in place,
// beta 1).
bool empty_experts_simple(const GroupedGemmProblem& p, const GroupedGemmArguments& args) {
  if (p.beta == 0.0f) return true;
  const bool in_place = args.c == args.d && p.c_type == p.d_type && p.ldc == p.ldd;
  if (p.beta == 1.0f && in_place) return true;
  int64_t prev = 0;
  for (int g = 0; g < p.num_groups; ++g) {
    if (args.host_group_ends[g] == prev) return false;
    prev = args.host_group_ends[g];
  }
  return true;
}

Status run_k_grouped(const GroupedGemmProblem& p, const GroupedGemmArguments& args, void* ws, size_t ws_bytes,
                     cudaStream_t stream) {
  const int64_t a_ld = formats::vec128_scale_ld(p.m), b_ld = formats::vec128_scale_ld(p.n);
  int64_t start = 0;
  for (int g = 0; g < p.num_groups; ++g) {
    const int64_t end = args.host_group_ends[g], tokens = end - start;
    void* d = const_cast<void*>(rows_at(args.d, g * p.m, p.ldd, p.d_type));
    if (tokens == 0 && p.beta == 0.0f) {
      const size_t elem = static_cast<size_t>(element_bytes(p.d_type));
      BS_RETURN_IF_ERROR(cuda_status(cudaMemset2DAsync(d, p.ldd * elem, 0, p.n * elem, p.m, stream),
                                     "device: cudaMemset2DAsync (an expert without tokens)"));
    } else if (tokens > 0) {
      GemmArguments a;
      a.a_data = args.a_data + start;
      a.a_scales = static_cast<const float*>(args.a_scales) + start / 128 * a_ld;
      a.b_data = args.b_data + start;
      a.b_scales = static_cast<const float*>(args.b_scales) + start / 128 * b_ld;
      a.c = rows_at(args.c, g * p.m, p.ldc, p.c_type);
      a.d = d;
      BS_RETURN_IF_ERROR(
          expert_product(expert_problem(p, p.m, tokens), a, ws, ws_bytes, stream, {p.k, p.k}, nullptr));
    }
    start = end;
  }
  return Status::ok();
}

}  // namespace

int64_t grouped_cublaslt_scale_bytes(const GroupedGemmProblem& p) {
  if (p.mode != GroupMode::kM || !is_fp8_blockwise_pair(p.a_recipe, p.b_recipe)) return 0;
  const int64_t bytes = (p.m + 3 * int64_t{p.num_groups}) * (p.k / 128) * 4;
  return (bytes + 255) / 256 * 256;  // cuBLASLt's workspace after it stays 256-byte aligned
}

bool grouped_cublaslt_applies(const GroupedGemmProblem& p, const GroupedGemmArguments& args) {
  if (args.host_group_ends == nullptr || !is_fp8_blockwise_pair(p.a_recipe, p.b_recipe)) return false;
  const bool k_mode = p.mode == GroupMode::kK;
  // An expert's problem with m a multiple of 4 (M-grouped: the rounded rows) meets the other rules.
  if (!cublaslt_fp8_shape_ok(expert_problem(p, k_mode ? p.m : 4, p.k))) return false;
  return !k_mode || empty_experts_simple(p, args);
}

Status launch_grouped_cublaslt(const GroupedGemmProblem& p, const GroupedGemmArguments& args, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  BS_RETURN_IF_ERROR(check_host_ends(p, args.host_group_ends));
  if (p.mode == GroupMode::kM)
    return run_m_grouped(p, args, static_cast<uint8_t*>(workspace), workspace_bytes, stream);
  return run_k_grouped(p, args, workspace, workspace_bytes, stream);
}

}  // namespace blockscale::gemm::detail
