// The public GEMM API: argument checks, the one architecture/recipe dispatch, the launch.
#include "gemm/gemm.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "formats/scale_layout.h"
#include "gemm/launchers.h"

namespace blockscale::gemm {
namespace {

using formats::Recipe;

constexpr int64_t kInt32Max = 0x7FFFFFFF;  // TMA coordinates and tile indices are 32-bit

std::string str(int64_t v) { return std::to_string(v); }

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

int64_t element_bytes(MatrixType t) { return t == MatrixType::kBf16 ? 2 : 4; }

bool empty_problem(const GemmProblem& p) { return p.m == 0 || p.n == 0; }

// The recipes this slice runs, and why the others are refused.
Status check_recipes(const GemmProblem& p) {
  const auto refuse_other = [](Recipe r, const char* operand) -> Status {
    if (formats::is_mx(r) || r == Recipe::kNvfp4)
      return Status::error(std::string(operand) + ": recipe " + formats::recipe_name(r) +
                           ": MX / NVFP4 GEMMs are not implemented yet (issue 5: FP8 blockwise only so far)");
    return Status::ok();
  };
  BS_RETURN_IF_ERROR(refuse_other(p.a_recipe, "a_recipe"));
  BS_RETURN_IF_ERROR(refuse_other(p.b_recipe, "b_recipe"));
  if (p.a_recipe != Recipe::kFp8Block1x128)
    return Status::error(std::string("a_recipe: must be fp8_block128 (1x128 blocks) for FP8 blockwise GEMMs, got ") +
                         formats::recipe_name(p.a_recipe));
  if (p.b_recipe != Recipe::kFp8Block128x128 && p.b_recipe != Recipe::kFp8Block1x128)
    return Status::error(std::string("b_recipe: must be fp8_block128x128 (fprop / dgrad) or fp8_block128 (wgrad), got ") +
                         formats::recipe_name(p.b_recipe));
  return Status::ok();
}

bool overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + static_cast<uintptr_t>(b_bytes) && y < x + static_cast<uintptr_t>(a_bytes);
}

// Bytes a row-major rows x cols matrix with row stride ld spans.
int64_t span_bytes(int64_t rows, int64_t cols, int64_t ld, int64_t element) {
  return rows > 0 && cols > 0 ? ((rows - 1) * ld + cols) * element : 0;
}

}  // namespace

namespace detail {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  std::string msg = std::string(what) + ": " + cudaGetErrorString(err);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction)
    msg += " (the sm90 GEMM kernels are built for sm_90a only)";
  (void)cudaGetLastError();  // a launch error is not sticky: clear it for the caller
  return Status::error(msg);
}

}  // namespace detail

const char* matrix_type_name(MatrixType t) { return t == MatrixType::kBf16 ? "bf16" : "fp32"; }

Status can_implement(const GemmProblem& p) {
  if (p.m < 0) return Status::error("m: must be >= 0, got " + str(p.m));
  if (p.n < 0) return Status::error("n: must be >= 0, got " + str(p.n));
  if (p.m > kInt32Max) return Status::error("m: must be < 2^31, got " + str(p.m));
  if (p.n > kInt32Max) return Status::error("n: must be < 2^31, got " + str(p.n));
  BS_RETURN_IF_ERROR(check_recipes(p));
  if (p.k <= 0 || p.k % 128 != 0)
    return Status::error("k: must be a positive multiple of 128 (the FP8 blockwise K block), got " + str(p.k));
  if (p.k > kInt32Max) return Status::error("k: must be < 2^31, got " + str(p.k));
  if (p.c_type != MatrixType::kBf16 && p.c_type != MatrixType::kFp32)
    return Status::error("c_type: must be bf16 or fp32");
  if (p.d_type != MatrixType::kBf16 && p.d_type != MatrixType::kFp32)
    return Status::error("d_type: must be bf16 or fp32");
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
  switch (sm / 10) {
    case 9:
      if (kernel) *kernel = GemmKernel::kSm90Fp8Blockwise;
      return Status::ok();
    case 10:
      if (kernel) *kernel = GemmKernel::kSm100Fp8Blockwise;
      return Status::error("device: sm_" + str(sm) +
                           ": the sm100a FP8 blockwise GEMM is not implemented yet (compiled, not run on hardware); "
                           "FP8 blockwise GEMMs run on sm_90 (Hopper)");
    default:
      return Status::error("device: sm_" + str(sm) +
                           " is not supported: FP8 blockwise GEMMs need sm_90 (Hopper wgmma); sm_100 is planned");
  }
}

namespace {

// Pointer checks, then the kernel for the current device.
Status check_and_select(const GemmProblem& p, const GemmArguments& args, GemmKernel* kernel) {
  *kernel = GemmKernel::kNone;
  BS_RETURN_IF_ERROR(can_implement(p));
  if (empty_problem(p)) return Status::ok();
  const auto need = [](const void* ptr, size_t align, const char* name, const char* rule) -> Status {
    if (ptr == nullptr) return Status::error(std::string(name) + ": must not be null");
    if (!aligned(ptr, align)) return Status::error(std::string(name) + ": must be " + rule);
    return Status::ok();
  };
  BS_RETURN_IF_ERROR(need(args.a_data, 16, "a_data", "16-byte aligned (TMA)"));
  BS_RETURN_IF_ERROR(need(args.b_data, 16, "b_data", "16-byte aligned (TMA)"));
  BS_RETURN_IF_ERROR(need(args.a_scales, 16, "a_scales", "16-byte aligned (TMA)"));
  BS_RETURN_IF_ERROR(need(args.b_scales, 16, "b_scales", "16-byte aligned (TMA)"));
  const int64_t d_elem = element_bytes(p.d_type), c_elem = element_bytes(p.c_type);
  BS_RETURN_IF_ERROR(need(args.d, static_cast<size_t>(d_elem), "d",
                          p.d_type == MatrixType::kBf16 ? "2-byte aligned (bf16)" : "4-byte aligned (fp32)"));
  const int64_t d_bytes = span_bytes(p.m, p.n, p.ldd, d_elem);
  const int64_t k_blocks = p.k / 128;
  const int64_t a_scale_bytes = formats::vec128_scale_floats(p.m, k_blocks) * 4;
  const int64_t b_scale_bytes = (p.b_recipe == Recipe::kFp8Block1x128
                                     ? formats::vec128_scale_floats(p.n, k_blocks)
                                     : formats::blk128_scale_floats((p.n + 127) / 128, k_blocks)) * 4;
  if (overlap(args.d, d_bytes, args.a_data, p.m * p.k)) return Status::error("d: overlaps a_data");
  if (overlap(args.d, d_bytes, args.b_data, p.n * p.k)) return Status::error("d: overlaps b_data");
  if (overlap(args.d, d_bytes, args.a_scales, a_scale_bytes)) return Status::error("d: overlaps a_scales");
  if (overlap(args.d, d_bytes, args.b_scales, b_scale_bytes)) return Status::error("d: overlaps b_scales");
  if (p.beta != 0.0f) {
    BS_RETURN_IF_ERROR(need(args.c, static_cast<size_t>(c_elem), "c",
                            p.c_type == MatrixType::kBf16 ? "2-byte aligned (bf16) when beta != 0"
                                                          : "4-byte aligned (fp32) when beta != 0"));
    const bool in_place = args.c == args.d && p.c_type == p.d_type && p.ldc == p.ldd;
    if (!in_place && overlap(args.c, span_bytes(p.m, p.n, p.ldc, c_elem), args.d, d_bytes))
      return Status::error("c: must be d itself (same pointer, type and ldc == ldd) or not overlap d");
  }
  int dev = 0, major = 0, minor = 0;
  BS_RETURN_IF_ERROR(detail::cuda_status(cudaGetDevice(&dev), "device: cudaGetDevice"));
  BS_RETURN_IF_ERROR(detail::cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
                                         "device: compute capability"));
  BS_RETURN_IF_ERROR(detail::cuda_status(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev),
                                         "device: compute capability"));
  BS_RETURN_IF_ERROR(can_implement_for_arch(p, major * 10 + minor, kernel));
  if (*kernel == GemmKernel::kSm90Fp8Blockwise) return detail::sm90_fp8_block_gemm_loadable();
  return Status::ok();
}

}  // namespace

Status can_implement(const GemmProblem& p, const GemmArguments& args) {
  GemmKernel kernel;
  return check_and_select(p, args, &kernel);
}

size_t workspace_size(const GemmProblem&) { return 0; }

Status run(const GemmProblem& p, const GemmArguments& args, void* /*workspace*/, size_t /*workspace_bytes*/,
           cudaStream_t stream) {
  GemmKernel kernel = GemmKernel::kNone;
  BS_RETURN_IF_ERROR(check_and_select(p, args, &kernel));
  if (empty_problem(p)) return Status::ok();
  switch (kernel) {
    case GemmKernel::kSm90Fp8Blockwise:
      return detail::launch_sm90_fp8_block_gemm(p, args, stream);
    case GemmKernel::kSm100Fp8Blockwise:
      return detail::launch_sm100_fp8_block_gemm(p, args, stream);
    case GemmKernel::kNone:
      break;
  }
  return Status::error("device: no GEMM kernel selected");
}

}  // namespace blockscale::gemm
