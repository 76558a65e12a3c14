// The register-to-global epilogue shared by the sm90 GEMM kernels: D = alpha * acc + beta * C for
// two adjacent columns of one row (the unit of the wgmma accumulator fragment), bf16 or fp32 C
// and D with row strides, vector accesses where alignment allows, BLAS's "C is not read when
// beta == 0". make_epilogue fills the parameters from the public problem on the host.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "gemm/gemm.h"

namespace blockscale::gemm::sm90 {

struct EpilogueParams {
  float alpha = 1.0f, beta = 0.0f;
  const void* c = nullptr;
  int64_t ldc = 0;
  bool c_bf16 = false;
  bool c_pairs = false;  // two adjacent C elements can be read as one aligned vector
  void* d = nullptr;
  int64_t ldd = 0;
  bool d_bf16 = false;
  bool d_pairs = false;
};

inline EpilogueParams make_epilogue(const GemmProblem& p, const GemmArguments& args) {
  const auto aligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  EpilogueParams e;
  e.alpha = p.alpha;
  e.beta = p.beta;
  e.c = args.c;
  e.ldc = p.ldc;
  e.c_bf16 = p.c_type == MatrixType::kBf16;
  e.c_pairs = args.c != nullptr && p.ldc % 2 == 0 && aligned(args.c, e.c_bf16 ? 4 : 8);
  e.d = args.d;
  e.ldd = p.ldd;
  e.d_bf16 = p.d_type == MatrixType::kBf16;
  e.d_pairs = p.ldd % 2 == 0 && aligned(args.d, e.d_bf16 ? 4 : 8);
  return e;
}

__device__ __forceinline__ float load_c(const EpilogueParams& e, int64_t offset) {
  return e.c_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(e.c)[offset])
                  : static_cast<const float*>(e.c)[offset];
}

// Writes alpha * acc + beta * C for columns col and col + 1 (when second_valid) of one row.
// alpha is passed in (the block-scaled kernel folds NVFP4's tensor scales into it).
__device__ __forceinline__ void store_pair(const EpilogueParams& e, float alpha, int64_t row, int32_t col,
                                           float acc0, float acc1, bool second_valid) {
  float v0 = alpha * acc0, v1 = alpha * acc1;
  const int64_t c_at = row * e.ldc + col;
  if (e.beta != 0.0f) {  // BLAS: C is not read when beta == 0
    if (second_valid && e.c_pairs) {
      if (e.c_bf16) {
        const __nv_bfloat162 c2 = *reinterpret_cast<const __nv_bfloat162*>(static_cast<const __nv_bfloat16*>(e.c) + c_at);
        v0 = fmaf(e.beta, __low2float(c2), v0), v1 = fmaf(e.beta, __high2float(c2), v1);
      } else {
        const float2 c2 = *reinterpret_cast<const float2*>(static_cast<const float*>(e.c) + c_at);
        v0 = fmaf(e.beta, c2.x, v0), v1 = fmaf(e.beta, c2.y, v1);
      }
    } else {
      v0 = fmaf(e.beta, load_c(e, c_at), v0);
      if (second_valid) v1 = fmaf(e.beta, load_c(e, c_at + 1), v1);
    }
  }
  const int64_t d_at = row * e.ldd + col;
  if (e.d_bf16) {
    __nv_bfloat16* d = static_cast<__nv_bfloat16*>(e.d) + d_at;
    if (second_valid && e.d_pairs) {
      *reinterpret_cast<__nv_bfloat162*>(d) = __floats2bfloat162_rn(v0, v1);
    } else {
      d[0] = __float2bfloat16_rn(v0);
      if (second_valid) d[1] = __float2bfloat16_rn(v1);
    }
  } else {
    float* d = static_cast<float*>(e.d) + d_at;
    if (second_valid && e.d_pairs) {
      *reinterpret_cast<float2*>(d) = make_float2(v0, v1);
    } else {
      d[0] = v0;
      if (second_valid) d[1] = v1;
    }
  }
}

}  // namespace blockscale::gemm::sm90
