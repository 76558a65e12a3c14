// Shared by the kernel files of train/gpu/gpu_ops.h: argument checks, workspace carving, launch sizes,
// warp / block reductions in a fixed order, and the deterministic column sum (per-chunk partials,
// then one ordered pass) that rmsnorm's d_gain and the router's mean probabilities use.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "formats/scalar_codecs.h"  // float_to_bf16_bits_rn
#include "formats/status.h"
#include "runtime/cuda_status.h"

namespace blockscale::train::gpu::detail {

constexpr int kWarp = 32;
constexpr int kThreads = 256;                // block size of the element-wise and row kernels
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int64_t kMaxBlocks = 1 << 20;      // grid cap; kernels loop (grid-stride) past it
constexpr size_t kAlign = 256;               // each workspace piece starts on this boundary

// ---- Host: argument checks (the message names the function, the argument and the rule) ----------

inline Status check_ptr(const char* fn, const char* name, const void* p) {
  if (p == nullptr) return Status::error(std::string(fn) + ": " + name + " must not be null");
  return Status::ok();
}
inline Status check_range(const char* fn, const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return Status::error(std::string(fn) + ": " + name + " must be in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "] (got " + std::to_string(v) + ")");
  return Status::ok();
}
// rows x cols elements whose flat indices (and 4x them) fit an int64.
inline Status check_elements(const char* fn, int64_t rows, int cols, const char* cols_name) {
  BS_RETURN_IF_ERROR(check_range(fn, "rows", rows, 0, std::numeric_limits<int64_t>::max() / 4));
  BS_RETURN_IF_ERROR(check_range(fn, cols_name, cols, 1, std::numeric_limits<int32_t>::max() / 2));
  if (rows > std::numeric_limits<int64_t>::max() / 4 / cols)
    return Status::error(std::string(fn) + ": rows * " + cols_name + " must be < 2^61");
  return Status::ok();
}
inline Status check_workspace(const char* fn, size_t need, const void* workspace, size_t bytes) {
  if (need == 0) return Status::ok();
  if (workspace == nullptr || bytes < need)
    return Status::error(std::string(fn) + ": workspace needs " + std::to_string(need) + " bytes, got " +
                         (workspace == nullptr ? std::string("null") : std::to_string(bytes)));
  if (reinterpret_cast<uintptr_t>(workspace) % kAlign != 0)
    return Status::error(std::string(fn) + ": workspace must be " + std::to_string(kAlign) + "-byte aligned");
  return Status::ok();
}
using runtime::cuda_status;
using runtime::launch_status;

inline size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Hands out consecutive kAlign-aligned pieces of one workspace; also used to size it (base null).
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <class T>
  T* take(int64_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += align_up(sizeof(T) * static_cast<size_t>(count));
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// Blocks of `threads` covering `work` items (at least 1, at most kMaxBlocks: kernels grid-stride).
inline unsigned blocks_for(int64_t work, int64_t threads) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + threads - 1) / threads, 1, kMaxBlocks));
}

// ---- Element-wise kernels: four elements per thread where the pointers allow it -----------------
// One 4-byte access per thread keeps too few bytes in flight to reach DRAM bandwidth (an H100 then
// moves ~1.4 of its ~3 TB/s), so element-wise work runs on float4s: Op::four(i) handles elements
// i..i+3 (i a multiple of 4) with 16-byte accesses, Op::one(i) a single element with the same
// arithmetic, so both paths give the same bits. `vector` (host-checked pointer alignment) picks the
// float4 path; the last n % 4 elements always go through one().

__device__ __forceinline__ int64_t thread_index() { return blockIdx.x * int64_t{blockDim.x} + threadIdx.x; }
__device__ __forceinline__ int64_t thread_stride() { return int64_t{gridDim.x} * blockDim.x; }
__device__ __forceinline__ int64_t warp_index() { return thread_index() / kWarp; }
__device__ __forceinline__ int64_t warp_stride() { return thread_stride() / kWarp; }

inline bool aligned_to(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Four floats from a 16-byte-aligned address.
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// Two floats' bf16 bits (RNE) in one word, the first in the low half (little-endian memory order).
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
  return uint32_t{formats::float_to_bf16_bits_rn(lo)} | uint32_t{formats::float_to_bf16_bits_rn(hi)} << 16;
}

template <class Op>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Op op, int64_t n, bool vector) {
  const int64_t quads = vector ? n / 4 : 0;
  for (int64_t q = thread_index(); q < quads; q += thread_stride()) op.four(4 * q);
  for (int64_t i = 4 * quads + thread_index(); i < n; i += thread_stride()) op.one(i);
}

template <class Op>
void launch_elementwise(const Op& op, int64_t n, bool vector, cudaStream_t stream) {
  if (n > 0) elementwise_kernel<<<blocks_for(vector ? (n + 3) / 4 : n, kThreads), kThreads, 0, stream>>>(op, n, vector);
}

// ---- Device: reductions in a fixed order (same bits on every run, every lane gets the result) ---

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);  // a+b == b+a: lanes agree
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
// Sum / max over a block of kThreads threads; every thread gets the result. `scratch`: kWarpsPerBlock
// floats of shared memory, free again when the function returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < kWarpsPerBlock ? scratch[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < kWarpsPerBlock ? scratch[lane] : -INFINITY;
  t = warp_max(t);
  __syncthreads();
  return t;
}

// ---- Deterministic column sums: out[c] (+)= sum over r < rows of value(r, c) --------------------
// Pass 1: rows in chunks of a size fixed by `rows` alone; a 32 x 8 block sums 32 columns of one
// chunk (thread y takes rows y, y+8, ...; then the 8 partials in order) into partials[chunk][c].
// Pass 2 (column_finish, also rmsnorm's, over its own chunks): a 32 x 32 block per 32 columns,
// thread y adds chunks y, y+32, ... in order, then the 32 sums in order: up to 32 chunks that is
// chunk order, and hundreds of chunks still keep only a few loads in a row per thread.
constexpr int kColumnBlockRows = 8;
constexpr int kColumnFinishRows = kWarp;

inline int64_t column_chunk_rows(int64_t rows) {
  return std::max<int64_t>(256, (rows + 65534) / 65535);  // grid.y <= 65535
}
inline int64_t column_chunks(int64_t rows) {
  return std::max<int64_t>(1, (rows + column_chunk_rows(rows) - 1) / column_chunk_rows(rows));
}
inline size_t column_sum_workspace_bytes(int64_t rows, int cols) {
  return align_up(sizeof(float) * static_cast<size_t>(column_chunks(rows)) * static_cast<size_t>(cols));
}

template <class Value>
__global__ void column_partials_kernel(Value value, int64_t rows, int cols, int64_t chunk_rows, float* partials) {
  __shared__ float part[kColumnBlockRows][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk_rows, r1 = rows < r0 + chunk_rows ? rows : r0 + chunk_rows;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnBlockRows) acc += value(r, c);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = part[0][threadIdx.x];
    for (int i = 1; i < kColumnBlockRows; ++i) total += part[i][threadIdx.x];
    partials[blockIdx.y * int64_t{cols} + c] = total;
  }
}

__global__ void column_finish_kernel(const float* partials, int64_t chunks, int cols, bool accumulate, float* out);

// Pass 2: out[c] (+)= the sum over k < chunks of partials[k][c].
inline void column_finish(const float* partials, int64_t chunks, int cols, bool accumulate, float* out,
                          cudaStream_t stream) {
  column_finish_kernel<<<(cols + kWarp - 1) / kWarp, dim3(kWarp, kColumnFinishRows), 0, stream>>>(
      partials, chunks, cols, accumulate, out);
}

// Launches both passes; partials: column_sum_workspace_bytes(rows, cols) bytes.
template <class Value>
void column_sum(Value value, int64_t rows, int cols, bool accumulate, float* partials, float* out,
                cudaStream_t stream) {
  const int64_t chunk_rows = column_chunk_rows(rows), chunks = column_chunks(rows);
  const dim3 grid((cols + kWarp - 1) / kWarp, static_cast<unsigned>(chunks));
  column_partials_kernel<<<grid, dim3(kWarp, kColumnBlockRows), 0, stream>>>(value, rows, cols, chunk_rows,
                                                                              partials);
  column_finish(partials, chunks, cols, accumulate, out, stream);
}

}  // namespace blockscale::train::gpu::detail
