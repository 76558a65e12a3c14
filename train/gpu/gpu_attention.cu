// train/gpu/gpu_ops.h, causal multi-head attention (train/cpu/cpu_ops.cpp attention_forward / _backward).
// Per (batch, head), with Q, K, V, dO the seq x head_dim bf16 heads and P the bf16 probabilities:
//   forward : S = Q K^T (fp32)  ->  P = bf16(softmax(S * scale), causal)  ->  O = P V
//   backward: dP = dO V^T  ->  dS = bf16(P * (dP - rowsum(dP * P)))  ->  dQ = dS K * scale,
//             dK = dS^T Q * scale, dV = P^T dO
// The six products are cublasGemmStridedBatchedEx over the batch * heads pairs (bf16 in, fp32
// accumulate and out, CUBLAS_COMPUTE_32F), in row chunks that skip most of the masked half (Products
// below): S and dP are computed only where the softmax reads them, and the products with P and dS
// leave out only entries that are zero.
// Kernels here: split qkv / dout into bf16 heads, the causal softmax and dS (a warp per row, fp32
// max and sums), and the merge of the fp32 head outputs back into token rows.
//
// cuBLAS is column-major: a row-major R x C array is its C x R transpose. With X, Y row-major
// seq x head_dim heads (ld head_dim) and M a row-major seq x seq matrix (ld seq):
//   X Y^T  -> gemm(T, N, m = seq, n = seq, k = hd, A = Y, B = X), C ld seq
//   M X    -> gemm(N, N, m = hd, n = seq, k = seq, A = X, B = M), C ld hd
//   M^T X  -> gemm(N, T, m = hd, n = seq, k = seq, A = X, B = M), C ld hd
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "formats/scalar_codecs.h"  // defines: float_to_bf16_bits_rn, bf16_bits_to_float
#include "runtime/cuda_libraries.h"
#include "train/gpu/gpu_ops.h"
#include "train/gpu/gpu_ops_common.cuh"

namespace blockscale::train::gpu {

using namespace detail;

namespace {

// cuBLAS's entry point `fn` (runtime/cuda_libraries.h: opened on first use, not linked; the step
// opened it before making the handle these calls take).
#define CUBLAS(fn) BS_CUDA_LIB(kCublas, fn)

struct Shape {
  int batch, seq, heads, hd;
  __host__ __device__ int64_t head_elems() const { return int64_t{batch} * heads * seq * hd; }  // Q, K, V, dO
  __host__ __device__ int64_t square_elems() const { return int64_t{batch} * heads * seq * seq; }  // S, P, dS
  __host__ __device__ int64_t rows() const { return int64_t{batch} * seq; }
};

// ---- Workspace: one layout for both directions --------------------------------------------------

struct AttentionWorkspace {
  uint16_t* qkv;      // bf16 Q | K | V, each [batch, heads, seq, hd]
  uint16_t* dout;     // bf16 dO, [batch, heads, seq, hd]
  float* scores;      // fp32 S (forward) or dP (backward), [batch, heads, seq, seq]
  uint16_t* dscores;  // bf16 dS
  float* heads_out;   // fp32 O (forward) or dQ | dK | dV (backward), [batch, heads, seq, hd] each
  size_t bytes;
};
AttentionWorkspace carve(const Shape& s, void* base) {
  WorkspaceCarver ws(base);
  AttentionWorkspace w{};
  w.qkv = ws.take<uint16_t>(3 * s.head_elems());
  w.dout = ws.take<uint16_t>(s.head_elems());
  w.scores = ws.take<float>(s.square_elems());
  w.dscores = ws.take<uint16_t>(s.square_elems());
  w.heads_out = ws.take<float>(3 * s.head_elems());
  w.bytes = ws.used();
  return w;
}

// ---- Kernels -------------------------------------------------------------------------------------

// Both layout changes walk the head segments: segment = (token row, part, head), hd contiguous
// elements on both sides. A warp per segment (grid-stride), its lanes over the hd elements: the
// index arithmetic is per segment, not per element (per element it cost more than the copy).
struct Segment {
  int64_t heads_at;  // element offset of the segment in the parts x [batch, heads, seq, hd] layout
  int64_t rows_at;   // element offset in the rows x parts*heads*hd layout
  int part;
};
__device__ Segment segment_at(const Shape& s, int parts, int64_t seg) {
  const int64_t per_row = int64_t{parts} * s.heads;
  const int64_t row = seg / per_row;
  const int ph = static_cast<int>(seg - row * per_row), part = ph / s.heads, h = ph - part * s.heads;
  const int64_t b = row / s.seq, t = row - b * s.seq;
  return {part * s.head_elems() + ((b * s.heads + h) * s.seq + t) * s.hd, seg * s.hd, part};
}
__host__ __device__ int64_t segments(const Shape& s, int parts) { return s.rows() * parts * s.heads; }
__device__ int64_t first_segment() { return (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; }
__device__ int64_t segment_stride() { return int64_t{gridDim.x} * blockDim.x / kWarp; }
unsigned segment_blocks(const Shape& s, int parts) {
  constexpr int64_t kWarpsPerBlock = kThreads / kWarp;
  return static_cast<unsigned>(std::min<int64_t>((segments(s, parts) + kWarpsPerBlock - 1) / kWarpsPerBlock, 1 << 16));
}

// src: rows x parts*heads*hd fp32 token rows -> dst: parts x [batch, heads, seq, hd] bf16.
__global__ void split_heads_kernel(const float* src, Shape s, int parts, uint16_t* dst) {
  for (int64_t seg = first_segment(); seg < segments(s, parts); seg += segment_stride()) {
    const Segment g = segment_at(s, parts, seg);
    for (int c = threadIdx.x % kWarp; c < s.hd; c += kWarp)
      dst[g.heads_at + c] = formats::float_to_bf16_bits_rn(src[g.rows_at + c]);
  }
}

// src: parts x [batch, heads, seq, hd] fp32 -> dst: rows x parts*heads*hd, part p times scale[p].
struct PartScales {
  float s[3];
};
__global__ void merge_heads_kernel(const float* src, Shape s, int parts, PartScales scales, float* dst) {
  for (int64_t seg = first_segment(); seg < segments(s, parts); seg += segment_stride()) {
    const Segment g = segment_at(s, parts, seg);
    const float f = scales.s[g.part];
    for (int c = threadIdx.x % kWarp; c < s.hd; c += kWarp) dst[g.rows_at + c] = src[g.heads_at + c] * f;
  }
}

// One warp per row i of S: P[i, j] = bf16(exp(S*scale - max) / sum) for j <= i, 0 above.
__global__ void causal_softmax_kernel(const float* scores, int64_t rows, int seq, float scale, uint16_t* probs) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; r < rows;
       r += int64_t{gridDim.x} * blockDim.x / kWarp) {
    const int i = static_cast<int>(r % seq);
    const float* srow = scores + r * seq;  // s = S * scale rounded (as the CPU), never fused into s - max
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += kWarp) mx = fmaxf(mx, __fmul_rn(srow[j], scale));
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += kWarp) sum += expf(__fmul_rn(srow[j], scale) - mx);
    sum = warp_sum(sum);
    for (int j = lane; j < seq; j += kWarp) {
      const float p = j <= i ? expf(__fmul_rn(srow[j], scale) - mx) / sum : 0.0f;
      probs[r * seq + j] = formats::float_to_bf16_bits_rn(p);
    }
  }
}

// One warp per row: dS[i, j] = bf16(P * (dP - sum_j' dP * P)) for j <= i, 0 above.
__global__ void softmax_backward_kernel(const float* dscores_in, const uint16_t* probs, int64_t rows, int seq,
                                        uint16_t* dscores) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; r < rows;
       r += int64_t{gridDim.x} * blockDim.x / kWarp) {
    const int i = static_cast<int>(r % seq);
    const float* dp = dscores_in + r * seq;
    const uint16_t* p = probs + r * seq;
    float rowdot = 0.0f;
    for (int j = lane; j <= i; j += kWarp) rowdot += dp[j] * formats::bf16_bits_to_float(p[j]);
    rowdot = warp_sum(rowdot);
    for (int j = lane; j < seq; j += kWarp) {
      const float ds = j <= i ? formats::bf16_bits_to_float(p[j]) * (dp[j] - rowdot) : 0.0f;
      dscores[r * seq + j] = formats::float_to_bf16_bits_rn(ds);
    }
  }
}

// ---- cuBLAS --------------------------------------------------------------------------------------

// C (fp32, column-major m x n, batched) = op(A) op(B), A and B bf16.
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const uint16_t* a, int lda, int64_t stride_a, const uint16_t* b, int ldb, int64_t stride_b,
                    float* c, int ldc, int64_t stride_c, int batch) {
  const float one = 1.0f, zero = 0.0f;
  // The C entry point (computeType a cublasComputeType_t); C++ also sees an inline overload.
  using Batched = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                     const void*, cudaDataType, int, long long, const void*, cudaDataType, int,
                                     long long, const void*, void*, cudaDataType, int, long long, int,
                                     cublasComputeType_t, cublasGemmAlgo_t);
  return BS_CUDA_LIB_AS(kCublas, cublasGemmStridedBatchedEx, Batched)(
      h, ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, stride_a, b, CUDA_R_16BF, ldb, stride_b, &zero, c, CUDA_R_32F, ldc,
      stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// The three product shapes of the banner, each skipping the masked half: the seq rows are cut into
// kCausalChunks row chunks, and chunk [r0, r1) of S = X Y^T needs only columns [0, r1), of M X
// only M's columns [0, r1) (P and dS are zero above the diagonal), and columns [c0, c1) of M^T X
// only M's rows [c0, seq). That is (chunks + 1) / (2 chunks) of the square's work (5/8 for 4); the
// entries left out are the masked zeros, so every product is the same sum. Every operand is one
// [batch*heads] stack.
constexpr int kCausalChunks = 4;
struct Products {
  cublasHandle_t h;
  Shape s;
  int64_t head() const { return int64_t{s.seq} * s.hd; }
  int64_t square() const { return int64_t{s.seq} * s.seq; }
  int count() const { return s.batch * s.heads; }
  int chunk_start(int i) const { return static_cast<int>(int64_t{s.seq} * i / kCausalChunks); }
  // Calls one(r0, r1) per non-empty row chunk; the first failure stops it.
  template <typename F>
  cublasStatus_t chunks(F one) const {
    for (int i = 0; i < kCausalChunks; ++i) {
      const int r0 = chunk_start(i), r1 = chunk_start(i + 1);
      if (r1 == r0) continue;
      const cublasStatus_t st = one(r0, r1);
      if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t x_yt(const uint16_t* x, const uint16_t* y, float* out) const {  // seq x seq, columns <= row
    return chunks([&](int r0, int r1) {
      return gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, r1, r1 - r0, s.hd, y, s.hd, head(), x + int64_t{r0} * s.hd, s.hd,
                  head(), out + int64_t{r0} * s.seq, s.seq, square(), count());
    });
  }
  cublasStatus_t m_x(const uint16_t* m, const uint16_t* x, float* out) const {  // seq x hd, m lower-triangular
    return chunks([&](int r0, int r1) {
      return gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, s.hd, r1 - r0, r1, x, s.hd, head(), m + int64_t{r0} * s.seq, s.seq,
                  square(), out + int64_t{r0} * s.hd, s.hd, head(), count());
    });
  }
  cublasStatus_t mt_x(const uint16_t* m, const uint16_t* x, float* out) const {  // seq x hd, m lower-triangular
    return chunks([&](int c0, int c1) {
      return gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, s.hd, c1 - c0, s.seq - c0, x + int64_t{c0} * s.hd, s.hd, head(),
                  m + int64_t{c0} * s.seq + c0, s.seq, square(), out + int64_t{c0} * s.hd, s.hd, head(), count());
    });
  }
};

Status cublas_status(const char* fn, const char* what, cublasStatus_t st) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::error(std::string(fn) + ": " + what + ": " + CUBLAS(cublasGetStatusString)(st));
}

// Sets the handle's stream and host pointer mode for the scope, restoring the caller's on exit.
class HandleScope {
 public:
  HandleScope(cublasHandle_t h, cudaStream_t stream) : h_(h) {
    ok_ = CUBLAS(cublasGetStream)(h, &saved_stream_) == CUBLAS_STATUS_SUCCESS &&
          CUBLAS(cublasGetPointerMode)(h, &saved_mode_) == CUBLAS_STATUS_SUCCESS &&
          CUBLAS(cublasSetStream)(h, stream) == CUBLAS_STATUS_SUCCESS &&
          CUBLAS(cublasSetPointerMode)(h, CUBLAS_POINTER_MODE_HOST) == CUBLAS_STATUS_SUCCESS;
  }
  ~HandleScope() {
    CUBLAS(cublasSetStream)(h_, saved_stream_);
    CUBLAS(cublasSetPointerMode)(h_, saved_mode_);
  }
  bool ok() const { return ok_; }

 private:
  cublasHandle_t h_;
  cudaStream_t saved_stream_ = nullptr;
  cublasPointerMode_t saved_mode_ = CUBLAS_POINTER_MODE_HOST;
  bool ok_ = false;
};

// Element counts within 2^40 (in double: the int64 products could overflow for absurd arguments).
bool sizes_fit(const Shape& s) {
  const double b = s.batch, t = s.seq, h = s.heads, hd = s.hd;
  return b * t * 3 * h * hd <= 0x1p40 && b * h * t * t <= 0x1p40;
}

Status check_attention(const char* fn, const Shape& s, const void* workspace, size_t workspace_bytes,
                       cublasHandle_t cublas) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  BS_RETURN_IF_ERROR(check_range(fn, "batch", s.batch, 1, kMax));
  BS_RETURN_IF_ERROR(check_range(fn, "seq", s.seq, 1, kMax));
  BS_RETURN_IF_ERROR(check_range(fn, "heads", s.heads, 1, kMax));
  BS_RETURN_IF_ERROR(check_range(fn, "head_dim", s.hd, 1, kMax));
  BS_RETURN_IF_ERROR(check_range(fn, "batch * heads", int64_t{s.batch} * s.heads, 1, kMax));
  if (!sizes_fit(s))
    return Status::error(std::string(fn) + ": batch * seq * 3 * heads * head_dim and batch * heads * seq^2 must "
                                           "be <= 2^40");
  BS_RETURN_IF_ERROR(check_ptr(fn, "cublas", cublas));
  return check_workspace(fn, carve(s, nullptr).bytes, workspace, workspace_bytes);
}

}  // namespace

size_t attention_workspace_bytes(int batch, int seq, int heads, int head_dim) {
  const Shape s{batch, seq, heads, head_dim};
  if (batch < 1 || seq < 1 || heads < 1 || head_dim < 1 || !sizes_fit(s)) return 0;
  return carve(s, nullptr).bytes;
}

Status attention_forward(const float* qkv, int batch, int seq, int heads, int head_dim, uint16_t* probs,
                         float* out, void* workspace, size_t workspace_bytes, cublasHandle_t cublas,
                         cudaStream_t stream) {
  constexpr const char* fn = "attention_forward";
  const Shape s{batch, seq, heads, head_dim};
  BS_RETURN_IF_ERROR(check_attention(fn, s, workspace, workspace_bytes, cublas));
  BS_RETURN_IF_ERROR(check_ptr(fn, "qkv", qkv));
  BS_RETURN_IF_ERROR(check_ptr(fn, "probs", probs));
  BS_RETURN_IF_ERROR(check_ptr(fn, "out", out));
  const AttentionWorkspace w = carve(s, workspace);
  const uint16_t *q = w.qkv, *k = w.qkv + s.head_elems(), *v = w.qkv + 2 * s.head_elems();
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  HandleScope scope(cublas, stream);
  if (!scope.ok()) return Status::error(std::string(fn) + ": cublas: cannot set the handle's stream");

  split_heads_kernel<<<segment_blocks(s, 3), kThreads, 0, stream>>>(qkv, s, 3, w.qkv);
  BS_RETURN_IF_ERROR(launch_status(fn));
  const Products mm{cublas, s};
  BS_RETURN_IF_ERROR(cublas_status(fn, "S = Q K^T", mm.x_yt(q, k, w.scores)));
  const int64_t rows = int64_t{batch} * heads * seq;
  causal_softmax_kernel<<<blocks_for(rows * kWarp, kThreads), kThreads, 0, stream>>>(w.scores, rows, seq, scale,
                                                                                   probs);
  BS_RETURN_IF_ERROR(launch_status(fn));
  BS_RETURN_IF_ERROR(cublas_status(fn, "O = P V", mm.m_x(probs, v, w.heads_out)));
  merge_heads_kernel<<<segment_blocks(s, 1), kThreads, 0, stream>>>(w.heads_out, s, 1,
                                                                         PartScales{{1.0f, 1.0f, 1.0f}}, out);
  return launch_status(fn);
}

Status attention_backward(const float* qkv, const uint16_t* probs, const float* dout, int batch, int seq,
                          int heads, int head_dim, float* dqkv, void* workspace, size_t workspace_bytes,
                          cublasHandle_t cublas, cudaStream_t stream) {
  constexpr const char* fn = "attention_backward";
  const Shape s{batch, seq, heads, head_dim};
  BS_RETURN_IF_ERROR(check_attention(fn, s, workspace, workspace_bytes, cublas));
  BS_RETURN_IF_ERROR(check_ptr(fn, "qkv", qkv));
  BS_RETURN_IF_ERROR(check_ptr(fn, "probs", probs));
  BS_RETURN_IF_ERROR(check_ptr(fn, "dout", dout));
  BS_RETURN_IF_ERROR(check_ptr(fn, "dqkv", dqkv));
  const AttentionWorkspace w = carve(s, workspace);
  const int64_t n = s.head_elems();
  const uint16_t *q = w.qkv, *k = w.qkv + n, *v = w.qkv + 2 * n;
  float *dq = w.heads_out, *dk = w.heads_out + n, *dv = w.heads_out + 2 * n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  HandleScope scope(cublas, stream);
  if (!scope.ok()) return Status::error(std::string(fn) + ": cublas: cannot set the handle's stream");

  split_heads_kernel<<<segment_blocks(s, 3), kThreads, 0, stream>>>(qkv, s, 3, w.qkv);
  split_heads_kernel<<<segment_blocks(s, 1), kThreads, 0, stream>>>(dout, s, 1, w.dout);
  BS_RETURN_IF_ERROR(launch_status(fn));
  const Products mm{cublas, s};
  BS_RETURN_IF_ERROR(cublas_status(fn, "dP = dO V^T", mm.x_yt(w.dout, v, w.scores)));
  const int64_t rows = int64_t{batch} * heads * seq;
  softmax_backward_kernel<<<blocks_for(rows * kWarp, kThreads), kThreads, 0, stream>>>(w.scores, probs, rows, seq,
                                                                                     w.dscores);
  BS_RETURN_IF_ERROR(launch_status(fn));
  BS_RETURN_IF_ERROR(cublas_status(fn, "dQ = dS K", mm.m_x(w.dscores, k, dq)));
  BS_RETURN_IF_ERROR(cublas_status(fn, "dK = dS^T Q", mm.mt_x(w.dscores, q, dk)));
  BS_RETURN_IF_ERROR(cublas_status(fn, "dV = P^T dO", mm.mt_x(probs, w.dout, dv)));
  merge_heads_kernel<<<segment_blocks(s, 3), kThreads, 0, stream>>>(w.heads_out, s, 3,
                                                                         PartScales{{scale, scale, 1.0f}}, dqkv);
  return launch_status(fn);
}

}  // namespace blockscale::train::gpu
