#include "train/gpu_blas.h"

#include <memory>
#include <string>
#include <type_traits>

namespace blockscale::train {
namespace {

Status lt_check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::error(std::string("cublasLt ") + what + ": status " + std::to_string(int(s)));
}

// The row-major product as a column-major one (a row-major M x N matrix is its column-major
// transpose): C (rows x cols, ld rows) = op(A) op(B).
struct ColumnMajor {
  cublasOperation_t ta, tb;
  int64_t rows, cols, inner;
  const void *a, *b;
  int64_t lda, ldb;
};

ColumnMajor column_major(Product p, const void* a, const void* b, int64_t m, int64_t n, int64_t k) {
  switch (p) {
    case Product::kXWt:  // y^T (n x m) = W (n x k) X^T
      return {CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, b, a, k, k};
    case Product::kDyW:  // dx^T (k x m) = W^T (k x n) dY^T
      return {CUBLAS_OP_N, CUBLAS_OP_N, k, m, n, b, a, k, n};
    default:  // kDytX: dW^T (k x n) = X^T (k x m) dY
      return {CUBLAS_OP_N, CUBLAS_OP_T, k, n, m, b, a, k, n};
  }
}

// Descriptors of one product shape (owned; destroyed with the object).
struct Descriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~Descriptors() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
  Status make(const ColumnMajor& g, cudaDataType type) {
    BS_RETURN_IF_ERROR(lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
    BS_RETURN_IF_ERROR(lt_check(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.ta, sizeof(g.ta)), "transa"));
    BS_RETURN_IF_ERROR(lt_check(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g.tb, sizeof(g.tb)), "transb"));
    const bool ta = g.ta == CUBLAS_OP_T, tb = g.tb == CUBLAS_OP_T;
    BS_RETURN_IF_ERROR(lt_check(cublasLtMatrixLayoutCreate(&a, type, ta ? g.inner : g.rows, ta ? g.rows : g.inner,
                                                           g.lda), "layout a"));
    BS_RETURN_IF_ERROR(lt_check(cublasLtMatrixLayoutCreate(&b, type, tb ? g.cols : g.inner, tb ? g.inner : g.cols,
                                                           g.ldb), "layout b"));
    return lt_check(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, g.rows, g.cols, g.rows), "layout c");
  }
};

}  // namespace

GpuBlas::~GpuBlas() {
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
}

Status GpuBlas::init(cudaStream_t stream) {
  stream_ = stream;
  BS_RETURN_IF_ERROR(lt_check(cublasLtCreate(&lt_), "create"));
  workspace_bytes_ = size_t{32} << 20;
  if (cudaMalloc(&workspace_, workspace_bytes_) != cudaSuccess)
    return Status::error("out of GPU memory allocating the cublasLt workspace (32 MiB)");
  return Status::ok();
}

Status GpuBlas::product(Product p, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                        float* c, float beta) {
  const ColumnMajor g = column_major(p, a, b, m, n, k);
  Descriptors d;
  BS_RETURN_IF_ERROR(d.make(g, type));
  // Power-of-two buckets of m (at least 128): each new bucket costs a heuristic query and its
  // kernel's first launch (~2.5 ms of host time, the GPU idle). With 128-row buckets the moving
  // expert sizes kept meeting new ones for dozens of steps (~200 in a 30-step run), which inflated
  // the bf16 step time; power-of-two buckets are a handful per shape, met in the first steps.
  int64_t bucket = 128;
  while (bucket < m) bucket *= 2;
  const Key key{int(p), int(type), n, k, bucket, beta != 0.0f};
  auto heuristic = [&](const ColumnMajor& shape, cublasLtMatmulAlgo_t* algo) -> Status {
    Descriptors q;
    BS_RETURN_IF_ERROR(q.make(shape, type));
    cublasLtMatmulPreference_t pref;
    BS_RETURN_IF_ERROR(lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference"));
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(&cublasLtMatmulPreferenceDestroy)>
        owned(pref, &cublasLtMatmulPreferenceDestroy);
    BS_RETURN_IF_ERROR(lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                     &workspace_bytes_, sizeof(workspace_bytes_)),
                                "preference workspace"));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    BS_RETURN_IF_ERROR(lt_check(cublasLtMatmulAlgoGetHeuristic(lt_, q.desc, q.a, q.b, q.c, q.c, pref, 1, &result,
                                                               &found), "heuristic"));
    if (found < 1) return Status::error("cublasLt: no algorithm for this product");
    *algo = result.algo;
    return Status::ok();
  };
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    ColumnMajor shape = column_major(p, a, b, bucket, n, k);  // the bucket's shape stands for its sizes
    cublasLtMatmulAlgo_t algo;
    BS_RETURN_IF_ERROR(heuristic(shape, &algo));
    it = algos_.emplace(key, algo).first;
  }
  const float alpha = 1.0f;
  cublasStatus_t s = cublasLtMatmul(lt_, d.desc, &alpha, g.a, d.a, g.b, d.b, &beta, c, d.c, c, d.c, &it->second,
                                    workspace_, workspace_bytes_, stream_);
  if (s != CUBLAS_STATUS_SUCCESS) {  // the bucket's algorithm does not take this size: one for this size
    const Key exact{int(p), int(type), n, k, -m, beta != 0.0f};  // negative: an exact size, not a bucket
    auto e = algos_.find(exact);
    if (e == algos_.end()) {
      cublasLtMatmulAlgo_t algo;
      BS_RETURN_IF_ERROR(heuristic(g, &algo));
      e = algos_.emplace(exact, algo).first;
    }
    s = cublasLtMatmul(lt_, d.desc, &alpha, g.a, d.a, g.b, d.b, &beta, c, d.c, c, d.c, &e->second, workspace_,
                       workspace_bytes_, stream_);
  }
  return lt_check(s, "matmul");
}

}  // namespace blockscale::train
