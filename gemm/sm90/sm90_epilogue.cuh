// The register-to-global epilogue shared by the sm90 GEMM kernels: D = alpha * acc + beta * C for
// a thread's part of a wgmma accumulator fragment (pairs of adjacent columns), bf16 or fp32 C
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
  e.c_bf16 = p.c_type == formats::DType::kBf16;
  e.c_pairs = args.c != nullptr && p.ldc % 2 == 0 && aligned(args.c, e.c_bf16 ? 4 : 8);
  e.d = args.d;
  e.ldd = p.ldd;
  e.d_bf16 = p.d_type == formats::DType::kBf16;
  e.d_pairs = p.ldd % 2 == 0 && aligned(args.d, e.d_bf16 ? 4 : 8);
  return e;
}

__device__ __forceinline__ float load_c(const EpilogueParams& e, int64_t offset) {
  return e.c_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(e.c)[offset])
                  : static_cast<const float*>(e.c)[offset];
}

// v = alpha * acc + beta * C for columns col and col + 1 (when second_valid) of one row.
// alpha is passed in (the block-scaled kernel folds NVFP4's tensor scales into it).
__device__ __forceinline__ void combine_pair(const EpilogueParams& e, float alpha, int64_t row, int32_t col,
                                             bool second_valid, float& v0, float& v1) {
  v0 = alpha * v0, v1 = alpha * v1;
  if (e.beta == 0.0f) return;  // BLAS: C is not read when beta == 0
  const int64_t c_at = row * e.ldc + col;
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

// Writes v0 (and v1 when second_valid) to D at (row, col), (row, col + 1).
__device__ __forceinline__ void write_pair(const EpilogueParams& e, int64_t row, int32_t col, bool second_valid,
                                           float v0, float v1) {
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

// Writes alpha * frag + beta * C for this thread's part of a wgmma m64 accumulator fragment:
// D rows `row` (frag[4j], frag[4j + 1]) and row + 8 (frag[4j + 2], frag[4j + 3]), the first
// `rows` of those two (0, 1 or 2) written, columns col + 8j and col + 8j + 1, j < kGroups, those
// at or past n skipped. frag is overwritten. C may be D: each element is read and written by this
// thread only. For a whole fragment of fp32 C (wgrad accumulating into the main gradient), all of
// C's row is loaded before any of it is used, so its loads are in flight together: one memory
// latency per row, where a load followed by its use costs one per column group (what made
// accumulating slow).
template <int kGroups>
__device__ __forceinline__ void store_fragment(const EpilogueParams& e, float alpha, float* frag, int64_t row,
                                               int rows, int32_t col, int32_t n) {
  const bool whole = rows == 2 && col + 8 * (kGroups - 1) + 1 < n;
  if (e.beta != 0.0f && whole && !e.c_bf16 && e.c_pairs) {
    const float* c = static_cast<const float*>(e.c);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // a row at a time: kGroups pairs of registers for C, not twice that
      float2 c2[kGroups];
#pragma unroll
      for (int j = 0; j < kGroups; ++j)
        c2[j] = *reinterpret_cast<const float2*>(c + (row + 8 * h) * e.ldc + col + 8 * j);
#pragma unroll
      for (int j = 0; j < kGroups; ++j) {
        float& v0 = frag[4 * j + 2 * h];
        float& v1 = frag[4 * j + 2 * h + 1];
        v0 = fmaf(e.beta, c2[j].x, alpha * v0), v1 = fmaf(e.beta, c2[j].y, alpha * v1);
      }
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < kGroups; ++j) {
        const int32_t c = col + 8 * j;
        if (h < rows && c < n)
          combine_pair(e, alpha, row + 8 * h, c, c + 1 < n, frag[4 * j + 2 * h], frag[4 * j + 2 * h + 1]);
      }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      const int32_t c = col + 8 * j;
      if (h < rows && c < n) write_pair(e, row + 8 * h, c, c + 1 < n, frag[4 * j + 2 * h], frag[4 * j + 2 * h + 1]);
    }
}

}  // namespace blockscale::gemm::sm90
