// Row-major products of the GPU step's unquantized layers (bf16 copies or fp32), through cublasLt
// with the algorithm cached per shape. MoE experts see a new token count nearly every call; a
// plain cublasGemmEx runs cuBLAS's heuristic for each new shape, which on an H100 cost more host
// time than the products themselves (bf16 MoE steps ran at ~12 TFLOP/s). Here the heuristic runs
// once per (product, operand type, n, k, token count rounded up to 128) and is reused.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "formats/status.h"
#include "runtime/device.h"

namespace blockscale::train {

enum class Product {
  kXWt,   // y[m,n]  = x[m,k] · w[n,k]^T
  kDyW,   // dx[m,k] = dy[m,n] · w[n,k]
  kDytX,  // dw[n,k] = dy[m,n]^T · x[m,k]
};

class GpuBlas {
 public:
  GpuBlas() = default;
  GpuBlas(const GpuBlas&) = delete;
  GpuBlas& operator=(const GpuBlas&) = delete;
  ~GpuBlas();
  Status init(cudaStream_t stream);
  // c (fp32) = product + beta * c; a and b are `type` (CUDA_R_16BF or CUDA_R_32F), fp32 accumulation.
  Status product(Product p, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                 float* c, float beta) {
    return product(p, type, a, b, m, n, k, c, beta, Extras{});
  }
  // The same with a and b's row strides (elements; 0: their row length) and alpha read from the
  // device (nvfp4's tensor scales S_dec_a * S_dec_b; null: alpha 1): c = alpha * product + beta * c,
  // beta 0 or 1 when alpha is on the device.
  // bucket_k: k is a token count that changes from call to call (an expert's wgrad with tokens as
  // the inner dimension): the algorithm is picked for its power-of-two bucket, as for m.
  struct Extras {
    int64_t lda = 0, ldb = 0;
    const float* device_alpha = nullptr;
    bool bucket_k = false;
  };
  Status product(Product p, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                 float* c, float beta, const Extras& extras);

 private:
  // product, type, n, k (or its bucket), m bucket, beta != 0, lda, ldb, alpha on the device, k bucketed
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, bool, int64_t, int64_t, bool, bool>;
  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_ = nullptr;
  runtime::DeviceBuffer workspace_;
  runtime::DeviceBuffer device_betas_;  // {0, 1} as floats: beta's pointer when alpha is on the device
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace blockscale::train
