// The cuBLASLt peers of gemm/'s FP8 blockwise GEMM, shared by the GEMM benches: cuBLASLt's blockwise
// FP8 matmul on quant/'s operands and scales unchanged, and a cuBLASLt BF16 matmul of the same
// shape (the training step's bf16 route). Row-major D (m x n) = A (m x k) . B (n x k)^T + beta D,
// as gemm::run computes it; cuBLASLt is column-major, so it is asked for D^T (n x m) = B . A^T: its
// "A" is our B (the scale mode of our B's recipe), its "B" our A (VEC128).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "bench/bench_common.cuh"
#include "formats/recipe.h"

namespace bench {

class LtMatmul {
 public:
  // FP8 blockwise: A 1x128 (VEC128_32F), B 1x128 or 128x128 (BLK128x128_32F) fp32 scales.
  // d_type CUDA_R_16BF or CUDA_R_32F; beta != 0 reads D as C (in place). False (and *why) when
  // cuBLASLt has no algorithm for the case.
  bool setup_fp8(int64_t m, int64_t n, int64_t k, blockscale::formats::Format b_recipe, const float* a_scales,
                 const float* b_scales, cudaDataType d_type, float beta, std::string* why) {
    if (!create(n, m, k, CUDA_R_8F_E4M3, d_type, beta, why)) return false;
    const int32_t a_mode = b_recipe == blockscale::formats::Format::kFp8Block1x128
                               ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                               : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode);
    cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode);
    cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scales, sizeof b_scales);
    cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scales, sizeof a_scales);
    return pick_algorithm(why);
  }
  // BF16 operands, fp32 accumulation.
  bool setup_bf16(int64_t m, int64_t n, int64_t k, cudaDataType d_type, float beta, std::string* why) {
    return create(n, m, k, CUDA_R_16BF, d_type, beta, why) && pick_algorithm(why);
  }
  cublasStatus_t run(const void* a_data, const void* b_data, void* d, cudaStream_t stream = nullptr) {
    const float alpha = 1.0f;
    return cublasLtMatmul(handle_, op_, &alpha, b_data, a_, a_data, b_, &beta_, d, d_, d, d_, &algo_,
                          workspace_.data(), kWorkspaceBytes, stream);
  }
  ~LtMatmul() {
    if (a_) cublasLtMatrixLayoutDestroy(a_);
    if (b_) cublasLtMatrixLayoutDestroy(b_);
    if (d_) cublasLtMatrixLayoutDestroy(d_);
    if (op_) cublasLtMatmulDescDestroy(op_);
    if (handle_) cublasLtDestroy(handle_);
  }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{64} << 20;
  // Column-major D^T (rows x cols) = op_T(A: k x rows) . B (k x cols).
  bool create(int64_t rows, int64_t cols, int64_t k, cudaDataType in, cudaDataType d_type, float beta,
              std::string* why) {
    beta_ = beta;
    if (cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS) return *why = "cublasLtCreate failed", false;
    cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n);
    cublasLtMatrixLayoutCreate(&a_, in, k, rows, k);
    cublasLtMatrixLayoutCreate(&b_, in, k, cols, k);
    cublasLtMatrixLayoutCreate(&d_, d_type, rows, cols, rows);
    return true;
  }
  bool pick_algorithm(std::string* why) {
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t bytes = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle_, op_, a_, b_, d_, d_, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0)
      return *why = std::string("no cuBLASLt algorithm (") + cublasGetStatusString(s) + ")", false;
    algo_ = result.algo;
    workspace_ = device_array<uint8_t>(kWorkspaceBytes, "cuBLASLt workspace");
    return true;
  }
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  DeviceBuffer workspace_;
  float beta_ = 0.0f;
};

}  // namespace bench
