// TMA tensor maps (CUtensorMap) for the GEMM kernels' operands, encoded on the host. The driver's
// cuTensorMapEncodeTiled is looked up at run time through the CUDA runtime
// (cudaGetDriverEntryPointByVersion), so nothing links libcuda and the library still loads on a
// machine without a driver (where run() reports the missing device instead).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only; no driver symbol is linked)

#include <cstdint>

#include "formats/status.h"

namespace blockscale::gemm::detail {

// A 2-D row-major tensor of `rows` rows of `cols` elements (row stride row_stride_bytes, a
// multiple of 16; base 16-byte aligned), read in boxes of box_rows x box_cols elements. Elements
// outside the tensor read as zero. `what` names the operand in error messages.
struct TensorMap2d {
  const void* base = nullptr;
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  uint64_t rows = 0, cols = 0, row_stride_bytes = 0;
  uint32_t box_rows = 0, box_cols = 0;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
};
Status encode_tensor_map(const TensorMap2d& t, const char* what, CUtensorMap* out);

// A 3-D tensor, dimensions and boxes innermost first; strides[i] is the byte stride of dimension
// i + 1 (multiples of 16). Elements outside the tensor read as zero (and are not written by a
// store).
struct TensorMap3d {
  const void* base = nullptr;
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  uint64_t dims[3] = {0, 0, 0};
  uint64_t strides[2] = {0, 0};
  uint32_t box[3] = {0, 0, 0};
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
};
Status encode_tensor_map(const TensorMap3d& t, const char* what, CUtensorMap* out);

}  // namespace blockscale::gemm::detail
