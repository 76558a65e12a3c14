// TMA tensor-map encoding through the driver entry point the CUDA runtime hands out.
#include "gemm/common/tensor_map.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include <string>

namespace blockscale::gemm::detail {
namespace {

// The driver function, looked up once (thread-safe static initialisation).
PFN_cuTensorMapEncodeTiled_v12000 encode_function(std::string* why) {
  static std::string error;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || ptr == nullptr) {
      error = std::string("cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled): ") +
              (err != cudaSuccess ? cudaGetErrorString(err) : "symbol not found in the driver");
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  if (!fn) *why = error;
  return fn;
}

}  // namespace

Status encode_tensor_map(const TensorMap2d& t, const char* what, CUtensorMap* out) {
  std::string why;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function(&why);
  if (!encode) return Status::error(std::string(what) + ": " + why);
  const cuuint64_t dims[2] = {t.cols, t.rows};  // innermost first
  const cuuint64_t strides[1] = {t.row_stride_bytes};
  const cuuint32_t box[2] = {t.box_cols, t.box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(out, t.type, 2, const_cast<void*>(t.base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, t.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::error(std::string(what) + ": cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
                         ", " + std::to_string(t.rows) + " x " + std::to_string(t.cols) + " elements, box " +
                         std::to_string(t.box_rows) + " x " + std::to_string(t.box_cols) + ")");
  return Status::ok();
}

Status encode_tensor_map(const TensorMap3d& t, const char* what, CUtensorMap* out) {
  std::string why;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function(&why);
  if (!encode) return Status::error(std::string(what) + ": " + why);
  const cuuint64_t dims[3] = {t.dims[0], t.dims[1], t.dims[2]};
  const cuuint64_t strides[2] = {t.strides[0], t.strides[1]};
  const cuuint32_t box[3] = {t.box[0], t.box[1], t.box[2]};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(out, t.type, 3, const_cast<void*>(t.base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, t.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::error(std::string(what) + ": cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
                         ", 3-D " + std::to_string(t.dims[0]) + " x " + std::to_string(t.dims[1]) + " x " +
                         std::to_string(t.dims[2]) + ")");
  return Status::ok();
}

}  // namespace blockscale::gemm::detail
