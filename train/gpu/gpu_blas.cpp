#include "train/gpu/gpu_blas.h"

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>

#include "runtime/cuda_libraries.h"

namespace blockscale::train {
namespace {

// cuBLASLt's entry point `fn` (runtime/cuda_libraries.h: opened on first use, not linked).
#define LT(fn) BS_CUDA_LIB(kCublasLt, fn)

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

// lda / ldb: the row-major operands' row strides (0: tight). The column-major A is always the
// row-major b, and B the row-major a.
ColumnMajor column_major(Product p, const void* a, const void* b, int64_t m, int64_t n, int64_t k, int64_t lda,
                         int64_t ldb) {
  ColumnMajor g;
  switch (p) {
    case Product::kXWt:  // y^T (n x m) = W (n x k) X^T
      g = {CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, b, a, k, k};
      break;
    case Product::kDyW:  // dx^T (k x m) = W^T (k x n) dY^T
      g = {CUBLAS_OP_N, CUBLAS_OP_N, k, m, n, b, a, k, n};
      break;
    default:  // kDytX: dW^T (k x n) = X^T (k x m) dY
      g = {CUBLAS_OP_N, CUBLAS_OP_T, k, n, m, b, a, k, n};
  }
  if (ldb > 0) g.lda = ldb;
  if (lda > 0) g.ldb = lda;
  return g;
}

// Descriptors of one product shape (owned; destroyed with the object).
struct Descriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~Descriptors() {
    if (c) LT(cublasLtMatrixLayoutDestroy)(c);
    if (b) LT(cublasLtMatrixLayoutDestroy)(b);
    if (a) LT(cublasLtMatrixLayoutDestroy)(a);
    if (desc) LT(cublasLtMatmulDescDestroy)(desc);
  }
  Status make(const ColumnMajor& g, cudaDataType type, bool device_scalars) {
    BS_RETURN_IF_ERROR(lt_check(LT(cublasLtMatmulDescCreate)(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
    if (device_scalars) {
      const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
      BS_RETURN_IF_ERROR(lt_check(LT(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode,
                                                                 sizeof(mode)), "pointer mode"));
    }
    BS_RETURN_IF_ERROR(lt_check(
        LT(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.ta, sizeof(g.ta)), "transa"));
    BS_RETURN_IF_ERROR(lt_check(
        LT(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g.tb, sizeof(g.tb)), "transb"));
    const bool ta = g.ta == CUBLAS_OP_T, tb = g.tb == CUBLAS_OP_T;
    BS_RETURN_IF_ERROR(lt_check(LT(cublasLtMatrixLayoutCreate)(&a, type, ta ? g.inner : g.rows, ta ? g.rows : g.inner,
                                                           g.lda), "layout a"));
    BS_RETURN_IF_ERROR(lt_check(LT(cublasLtMatrixLayoutCreate)(&b, type, tb ? g.cols : g.inner, tb ? g.inner : g.cols,
                                                           g.ldb), "layout b"));
    return lt_check(LT(cublasLtMatrixLayoutCreate)(&c, CUDA_R_32F, g.rows, g.cols, g.rows), "layout c");
  }
};

}  // namespace

GpuBlas::~GpuBlas() {
  if (lt_) LT(cublasLtDestroy)(lt_);
}

Status GpuBlas::init(cudaStream_t stream) {
  stream_ = stream;
  BS_RETURN_IF_ERROR(runtime::open_cuda_library(runtime::CudaLibrary::kCublasLt));
  BS_RETURN_IF_ERROR(lt_check(LT(cublasLtCreate)(&lt_), "create"));
  BS_RETURN_IF_ERROR(workspace_.alloc(size_t{32} << 20, "allocating the cublasLt workspace (32 MiB) on the GPU"));
  const float betas[2] = {0.0f, 1.0f};
  return device_betas_.upload(betas, sizeof(betas), "GpuBlas: placing beta's values on the device");
}

Status GpuBlas::product(Product p, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                        float* c, float beta, const Extras& extras) {
  const bool device_alpha = extras.device_alpha != nullptr;
  if (device_alpha && beta != 0.0f && beta != 1.0f)
    return Status::error("GpuBlas::product: beta must be 0 or 1 when alpha is on the device");
  const ColumnMajor g = column_major(p, a, b, m, n, k, extras.lda, extras.ldb);
  Descriptors d;
  BS_RETURN_IF_ERROR(d.make(g, type, device_alpha));
  // Power-of-two buckets of m (at least 128): each new bucket costs a heuristic query and its
  // kernel's first launch (~2.5 ms of host time, the GPU idle). With 128-row buckets the moving
  // expert sizes kept meeting new ones for dozens of steps (~200 in a 30-step run), which inflated
  // the bf16 step time; power-of-two buckets are a handful per shape, met in the first steps.
  auto bucket_of = [](int64_t v) {
    int64_t b = 128;
    while (b < v) b *= 2;
    return b;
  };
  const int64_t bucket = bucket_of(m), k_key = extras.bucket_k ? bucket_of(k) : k;
  const Key key{int(p), int(type), n, k_key, bucket, beta != 0.0f,
                extras.lda, extras.ldb, device_alpha, extras.bucket_k};
  auto heuristic = [&](const ColumnMajor& shape, cublasLtMatmulAlgo_t* algo) -> Status {
    Descriptors q;
    BS_RETURN_IF_ERROR(q.make(shape, type, device_alpha));
    cublasLtMatmulPreference_t pref;
    BS_RETURN_IF_ERROR(lt_check(LT(cublasLtMatmulPreferenceCreate)(&pref), "preference"));
    struct DestroyPreference {
      void operator()(cublasLtMatmulPreference_t p) const { LT(cublasLtMatmulPreferenceDestroy)(p); }
    };
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, DestroyPreference> owned(pref);
    const size_t workspace_bytes = workspace_.size();
    BS_RETURN_IF_ERROR(lt_check(LT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                     &workspace_bytes, sizeof(workspace_bytes)),
                                "preference workspace"));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    BS_RETURN_IF_ERROR(lt_check(LT(cublasLtMatmulAlgoGetHeuristic)(lt_, q.desc, q.a, q.b, q.c, q.c, pref, 1, &result,
                                                               &found), "heuristic"));
    if (found < 1) return Status::error("cublasLt: no algorithm for this product");
    *algo = result.algo;
    return Status::ok();
  };
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    // The bucket's shape stands for its sizes (strides at least k's bucket: valid layouts).
    const ColumnMajor shape = column_major(p, a, b, bucket, n, k_key, extras.lda ? std::max(extras.lda, k_key) : 0,
                                           extras.ldb ? std::max(extras.ldb, k_key) : 0);
    cublasLtMatmulAlgo_t algo;
    BS_RETURN_IF_ERROR(heuristic(shape, &algo));
    it = algos_.emplace(key, algo).first;
  }
  const float host_alpha = 1.0f;
  const float* alpha = device_alpha ? extras.device_alpha : &host_alpha;
  const float* beta_ptr = device_alpha ? device_betas_.as<float>() + (beta != 0.0f) : &beta;
  cublasStatus_t s = LT(cublasLtMatmul)(lt_, d.desc, alpha, g.a, d.a, g.b, d.b, beta_ptr, c, d.c, c, d.c, &it->second,
                                    workspace_.data(), workspace_.size(), stream_);
  if (s != CUBLAS_STATUS_SUCCESS) {  // the bucket's algorithm does not take this size: one for this size
    // negative: an exact size, not a bucket
    const Key exact{int(p), int(type), n, k, -m, beta != 0.0f, extras.lda, extras.ldb, device_alpha, false};
    auto e = algos_.find(exact);
    if (e == algos_.end()) {
      cublasLtMatmulAlgo_t algo;
      BS_RETURN_IF_ERROR(heuristic(g, &algo));
      e = algos_.emplace(exact, algo).first;
    }
    s = LT(cublasLtMatmul)(lt_, d.desc, alpha, g.a, d.a, g.b, d.b, beta_ptr, c, d.c, c, d.c, &e->second,
                       workspace_.data(), workspace_.size(), stream_);
  }
  return lt_check(s, "matmul");
}

}  // namespace blockscale::train
