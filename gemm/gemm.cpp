// The public GEMM API: argument checks, the one architecture/recipe dispatch, the launch.
#include "gemm/gemm.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "formats/scale_layout.h"
#include "gemm/checks.h"
#include "gemm/launchers.h"

namespace blockscale::gemm {
namespace {

using formats::DType;
using formats::Format;
using namespace detail;  // gemm/checks.h

bool empty_problem(const GemmProblem& p) { return p.m == 0 || p.n == 0; }

bool is_mx8(Format r) { return r == Format::kMxfp8E4M3 || r == Format::kMxfp8E5M2; }

// The K granularity of a pair: the FP8 blockwise block; for MX / NVFP4 the MX block of 32 (for
// NVFP4 also what keeps k / 2 packed bytes a multiple of 16, the TMA row-stride rule).
int64_t k_multiple(const GemmProblem& p) { return is_fp8_blockwise_pair(p.a_recipe, p.b_recipe) ? 128 : 32; }

Status check_recipes(const GemmProblem& p) {
  if (is_fp8_blockwise_pair(p.a_recipe, p.b_recipe) || is_block_scaled_pair(p.a_recipe, p.b_recipe))
    return Status::ok();
  return Status::error(std::string("a_recipe, b_recipe: the pair (") + formats::format_name(p.a_recipe) + ", " +
                       formats::format_name(p.b_recipe) +
                       ") is not supported; supported pairs: (fp8_block128, fp8_block128x128 | fp8_block128), "
                       "(mxfp8 | mxfp8_e5m2, mxfp8 | mxfp8_e5m2 | mxfp4 | nvfp4), (mxfp4, mxfp4), (nvfp4, nvfp4)");
}

}  // namespace

namespace detail {


Status prepare_kernel(const void* kernel, int smem_bytes, const char* name, int* sm_count) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> prepared;
  int dev = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = prepared.find({kernel, dev});
  if (it != prepared.end()) {
    *sm_count = it->second;
    return Status::ok();
  }
  cudaFuncAttributes attr;
  BS_RETURN_IF_ERROR(cuda_status(cudaFuncGetAttributes(&attr, kernel), name));
  BS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
                                 (std::string("cudaFuncSetAttribute(") + name + ", max dynamic shared memory)").c_str()));
  int sms = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                                 "cudaDeviceGetAttribute(multiprocessor count)"));
  prepared[{kernel, dev}] = sms;
  *sm_count = sms;
  return Status::ok();
}

Status check_pointers(const GemmProblem& p, const GemmArguments& args, const BufferCopies& copies,
                      const int32_t* group_ends) {
  BS_RETURN_IF_ERROR(need_pointer(args.a_data, 16, "a_data", "16-byte aligned (TMA)"));
  BS_RETURN_IF_ERROR(need_pointer(args.b_data, 16, "b_data", "16-byte aligned (TMA)"));
  BS_RETURN_IF_ERROR(need_pointer(args.a_scales, 16, "a_scales", "16-byte aligned (TMA)"));
  BS_RETURN_IF_ERROR(need_pointer(args.b_scales, 16, "b_scales", "16-byte aligned (TMA)"));
  if (group_ends != nullptr || copies.ends > 0)
    BS_RETURN_IF_ERROR(need_pointer(group_ends, 4, "group_ends", "4-byte aligned (int32)"));
  const int64_t d_elem = element_bytes(p.d_type), c_elem = element_bytes(p.c_type);
  BS_RETURN_IF_ERROR(need_pointer(args.d, static_cast<size_t>(d_elem), "d",
                                  p.d_type == DType::kBf16 ? "2-byte aligned (bf16)" : "4-byte aligned (fp32)"));
  if (p.a_recipe == Format::kNvfp4) BS_RETURN_IF_ERROR(need_scale_dec(args.a_scale_dec, "a_scale_dec"));
  if (p.b_recipe == Format::kNvfp4) BS_RETURN_IF_ERROR(need_scale_dec(args.b_scale_dec, "b_scale_dec"));
  const int64_t d_bytes = span_bytes(copies.c_d * p.m, p.n, p.ldd, d_elem);
  const struct {
    const void* ptr;
    int64_t bytes;
    const char* name;
  } inputs[] = {{args.a_data, data_bytes(p.a_recipe, p.m, p.k), "a_data"},
                {args.b_data, copies.b * data_bytes(p.b_recipe, p.n, p.k), "b_data"},
                {args.a_scales, scale_bytes(p.a_recipe, p.m, p.k), "a_scales"},
                {args.b_scales, copies.b * scale_bytes(p.b_recipe, p.n, p.k), "b_scales"},
                {group_ends, group_ends ? 4 * copies.ends : 0, "group_ends"},
                {args.a_scale_dec, p.a_recipe == Format::kNvfp4 ? 4 : 0, "a_scale_dec"},
                {args.b_scale_dec, p.b_recipe == Format::kNvfp4 ? 4 * copies.b : 0, "b_scale_dec"}};
  for (const auto& in : inputs)
    if (overlap(args.d, d_bytes, in.ptr, in.bytes)) return Status::error(std::string("d: overlaps ") + in.name);
  if (p.beta != 0.0f) {
    BS_RETURN_IF_ERROR(need_pointer(args.c, static_cast<size_t>(c_elem), "c",
                                    p.c_type == DType::kBf16 ? "2-byte aligned (bf16) when beta != 0"
                                                                  : "4-byte aligned (fp32) when beta != 0"));
    const bool in_place = args.c == args.d && p.c_type == p.d_type && p.ldc == p.ldd;
    if (!in_place && overlap(args.c, span_bytes(copies.c_d * p.m, p.n, p.ldc, c_elem), args.d, d_bytes))
      return Status::error("c: must be d itself (same pointer, type and ldc == ldd) or not overlap d");
  }
  return Status::ok();
}

Status current_sm(int* sm) {
  int dev = 0, major = 0, minor = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "device: cudaGetDevice"));
  BS_RETURN_IF_ERROR(
      cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "device: compute capability"));
  BS_RETURN_IF_ERROR(
      cuda_status(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "device: compute capability"));
  *sm = major * 10 + minor;
  return Status::ok();
}

// kAuto sends dense FP8 blockwise problems of at most this many rows to cuBLASLt: there its
// blockwise kernel measured 1.08-1.19x sm90_fp8_gemm on the H200 (M 128 and 512); from M 2048 up
// the two are within a few percent either way (docs/performance.md).
constexpr int64_t kCublasLtMaxRows = 512;

bool cublaslt_fp8_shape_ok(const GemmProblem& p) {
  const auto row_aligned = [](int64_t ld, DType t) { return ld * element_bytes(t) % 16 == 0; };
  return p.m % 4 == 0 && p.n % 4 == 0 && row_aligned(p.ldd, p.d_type) &&
         (p.beta == 0.0f || (p.c_type == p.d_type && row_aligned(p.ldc, p.c_type)));
}

}  // namespace detail

namespace {
std::atomic<GemmRoute> g_route{GemmRoute::kAuto};
}  // namespace

void set_gemm_route(GemmRoute route) { g_route.store(route == GemmRoute::kBf16Values ? GemmRoute::kAuto : route); }
GemmRoute gemm_route() { return g_route.load(); }

bool is_fp8_blockwise_pair(Format a, Format b) {
  return a == Format::kFp8Block1x128 && (b == Format::kFp8Block128x128 || b == Format::kFp8Block1x128);
}

bool is_block_scaled_pair(Format a, Format b) {
  if (is_mx8(a)) return is_mx8(b) || b == Format::kMxfp4 || b == Format::kNvfp4;
  return (a == Format::kMxfp4 && b == Format::kMxfp4) || (a == Format::kNvfp4 && b == Format::kNvfp4);
}

Status can_implement(const GemmProblem& p) {
  if (p.m < 0) return Status::error("m: must be >= 0, got " + str(p.m));
  if (p.n < 0) return Status::error("n: must be >= 0, got " + str(p.n));
  if (p.m > kInt32Max) return Status::error("m: must be < 2^31, got " + str(p.m));
  if (p.n > kInt32Max) return Status::error("n: must be < 2^31, got " + str(p.n));
  BS_RETURN_IF_ERROR(check_recipes(p));
  const int64_t k_step = k_multiple(p);
  if (p.k <= 0 || p.k % k_step != 0)
    return Status::error("k: must be a positive multiple of " + str(k_step) +
                         (k_step == 128 ? " (the FP8 blockwise K block)"
                                        : " for MX / NVFP4 (the MX block; for NVFP4 also the 16-byte row alignment "
                                          "of k / 2 packed bytes)") +
                         ", got " + str(p.k));
  if (p.k > kInt32Max) return Status::error("k: must be < 2^31, got " + str(p.k));
  BS_RETURN_IF_ERROR(check_c_d_dtype("c_type", p.c_type));
  BS_RETURN_IF_ERROR(check_c_d_dtype("d_type", p.d_type));
  if (!std::isfinite(p.alpha)) return Status::error("alpha: must be finite");
  if (!std::isfinite(p.beta)) return Status::error("beta: must be finite");
  if (empty_problem(p)) return Status::ok();
  if (p.ldd < p.n) return Status::error("ldd: must be >= n (" + str(p.n) + "), got " + str(p.ldd));
  if (p.beta != 0.0f && p.ldc < p.n)
    return Status::error("ldc: must be >= n (" + str(p.n) + ") when beta != 0, got " + str(p.ldc));
  return Status::ok();
}

// The one dispatch rule: architecture x recipe -> kernel.
Status can_implement_for_arch(const GemmProblem& p, int sm, GemmKernel* kernel) {
  if (kernel) *kernel = GemmKernel::kNone;
  BS_RETURN_IF_ERROR(can_implement(p));
  const bool fp8_blockwise = is_fp8_blockwise_pair(p.a_recipe, p.b_recipe);
  switch (sm / 10) {
    case 9:
      if (!fp8_blockwise) {
        if (kernel) *kernel = GemmKernel::kSm90BlockScaledExact;
        return Status::ok();
      }
      if (gemm_route() == GemmRoute::kCublasLt && !cublaslt_fp8_shape_ok(p))
        return Status::error("m, n, ldd, ldc: the FP8 blockwise route is forced to cuBLASLt, which needs m and n "
                             "multiples of 4, rows of D (and C) 16-byte aligned and C's type equal to D's; got m=" +
                             str(p.m) + ", n=" + str(p.n) + ", ldd=" + str(p.ldd));
      if (kernel)
        *kernel = cublaslt_fp8_shape_ok(p) && (gemm_route() == GemmRoute::kCublasLt ||
                                               (gemm_route() == GemmRoute::kAuto && p.m <= kCublasLtMaxRows))
                      ? GemmKernel::kCublasLtBlockScaled
                      : GemmKernel::kSm90Fp8Blockwise;
      return Status::ok();
    case 10:
      if (kernel) *kernel = GemmKernel::kCublasLtBlockScaled;
      return Status::ok();
    default:
      return Status::error("device: sm_" + str(sm) +
                           " is not supported: the GEMMs need sm_90 (Hopper wgmma) or sm_100 (Blackwell)");
  }
}

namespace {

// Pointer checks, then the kernel for the current device (of compute capability *sm, optional).
Status check_and_select(const GemmProblem& p, const GemmArguments& args, GemmKernel* kernel, int* sm_out = nullptr) {
  *kernel = GemmKernel::kNone;
  BS_RETURN_IF_ERROR(can_implement(p));
  if (empty_problem(p)) return Status::ok();
  BS_RETURN_IF_ERROR(check_pointers(p, args, BufferCopies{}, nullptr));
  int sm = 0;
  BS_RETURN_IF_ERROR(detail::current_sm(&sm));
  if (sm_out) *sm_out = sm;
  BS_RETURN_IF_ERROR(can_implement_for_arch(p, sm, kernel));
  if (*kernel == GemmKernel::kSm90Fp8Blockwise) return detail::sm90_fp8_gemm_loadable();
  if (*kernel == GemmKernel::kSm90BlockScaledExact) return detail::sm90_block_scaled_gemm_loadable(p);
  return Status::ok();
}

}  // namespace

Status can_implement(const GemmProblem& p, const GemmArguments& args) {
  GemmKernel kernel;
  return check_and_select(p, args, &kernel);
}

size_t workspace_size(const GemmProblem& p) {
  return is_fp8_blockwise_pair(p.a_recipe, p.b_recipe) ? kCublasLtWorkspaceBytes : 0;
}

Status run(const GemmProblem& p, const GemmArguments& args, void* workspace, size_t workspace_bytes,
           cudaStream_t stream) {
  GemmKernel kernel = GemmKernel::kNone;
  int sm = 0;
  BS_RETURN_IF_ERROR(check_and_select(p, args, &kernel, &sm));
  if (empty_problem(p)) return Status::ok();
  switch (kernel) {
    case GemmKernel::kSm90Fp8Blockwise:
      return detail::launch_sm90_fp8_gemm(p, args, stream);
    case GemmKernel::kSm90BlockScaledExact:
      return detail::launch_sm90_block_scaled_gemm(p, args, stream);
    case GemmKernel::kCublasLtBlockScaled: {
      // sm_90 in kAuto: the wgmma kernel where cuBLASLt has no algorithm.
      const bool fallback = sm / 10 == 9 && is_fp8_blockwise_pair(p.a_recipe, p.b_recipe) &&
                            gemm_route() == GemmRoute::kAuto;
      bool no_algorithm = false;
      BS_RETURN_IF_ERROR(detail::launch_cublaslt_block_scaled(p, args, workspace, workspace_bytes, stream, {},
                                                              fallback ? &no_algorithm : nullptr));
      if (!no_algorithm) return Status::ok();
      BS_RETURN_IF_ERROR(detail::sm90_fp8_gemm_loadable());
      return detail::launch_sm90_fp8_gemm(p, args, stream);
    }
    case GemmKernel::kNone:
      break;
  }
  return Status::error("device: no GEMM kernel selected");
}

}  // namespace blockscale::gemm
