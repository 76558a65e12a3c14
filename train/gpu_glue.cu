#include "train/gpu_glue.h"

#include "formats/scalar_codecs.h"

namespace blockscale::train::gpu {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void gather_rows_kernel(const float* x, int64_t x_rows, int d, const int32_t* row_index, int64_t rows,
                                   float* out) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= rows * d) return;
  const int64_t r = i / d, c = i % d;
  const int32_t src = row_index[r];
  out[i] = (src >= 0 && src < x_rows) ? x[int64_t{src} * d + c] : 0.0f;
}

__global__ void round_to_bf16_kernel(float* x, uint16_t* bits, int64_t n) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint16_t b = formats::float_to_bf16_bits_rn(x[i]);
  bits[i] = b;
  x[i] = formats::bf16_bits_to_float(b);
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

}  // namespace

void gather_rows(const float* x, int64_t x_rows, int d, const int32_t* row_index, int64_t rows, float* out,
                 cudaStream_t stream) {
  if (rows * d > 0) gather_rows_kernel<<<blocks_for(rows * d), kThreads, 0, stream>>>(x, x_rows, d, row_index, rows, out);
}

void round_to_bf16(float* x, uint16_t* bits, int64_t n, cudaStream_t stream) {
  if (n > 0) round_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, bits, n);
}

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n > 0) add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, n);
}

}  // namespace blockscale::train::gpu
