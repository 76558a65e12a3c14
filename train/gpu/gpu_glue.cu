#include "train/gpu/gpu_glue.h"

#include "formats/scalar_codecs.h"
#include "train/gpu/gpu_ops_common.cuh"

namespace blockscale::train::gpu {
namespace {

using namespace detail;

struct GatherRows {  // element i of out: row i / d, column i % d (with d % 4 == 0 a float4 stays in its row)
  const float* x;
  int64_t x_rows;
  int d;
  const int32_t* row_index;
  float* out;
  __device__ const float* source(int64_t r) const {
    const int32_t src = row_index[r];
    return src >= 0 && src < x_rows ? x + int64_t{src} * d : nullptr;
  }
  __device__ void one(int64_t i) const {
    const int64_t r = i / d, c = i - r * d;
    const float* row = source(r);
    out[i] = row ? row[c] : 0.0f;
  }
  __device__ void four(int64_t i) const {
    const int64_t r = i / d, c = i - r * d;
    const float* row = source(r);
    *reinterpret_cast<float4*>(out + i) = row ? load4(row + c) : make_float4(0, 0, 0, 0);
  }
};

struct RoundToBf16 {
  float* x;
  uint16_t* bits;
  __device__ void one(int64_t i) const {
    const uint16_t b = formats::float_to_bf16_bits_rn(x[i]);
    bits[i] = b;
    x[i] = formats::bf16_bits_to_float(b);
  }
  __device__ void four(int64_t i) const {
    float4 f = load4(x + i);
    const uint2 b = make_uint2(bf16_pair(f.x, f.y), bf16_pair(f.z, f.w));
    *reinterpret_cast<uint2*>(bits + i) = b;
    using formats::bf16_bits_to_float;
    f = make_float4(bf16_bits_to_float(b.x & 0xFFFFu), bf16_bits_to_float(b.x >> 16), bf16_bits_to_float(b.y & 0xFFFFu),
                    bf16_bits_to_float(b.y >> 16));
    *reinterpret_cast<float4*>(x + i) = f;
  }
};

struct Add {
  float* y;
  const float* x;
  __device__ void one(int64_t i) const { y[i] += x[i]; }
  __device__ void four(int64_t i) const {
    float4 a = load4(y + i);
    const float4 b = load4(x + i);
    a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
    *reinterpret_cast<float4*>(y + i) = a;
  }
};

}  // namespace

void gather_rows(const float* x, int64_t x_rows, int d, const int32_t* row_index, int64_t rows, float* out,
                 cudaStream_t stream) {
  const bool vector = d % 4 == 0 && aligned_to(x, 16) && aligned_to(out, 16);
  launch_elementwise(GatherRows{x, x_rows, d, row_index, out}, rows * d, vector, stream);
}

void round_to_bf16(float* x, uint16_t* bits, int64_t n, cudaStream_t stream) {
  launch_elementwise(RoundToBf16{x, bits}, n, aligned_to(x, 16) && aligned_to(bits, 8), stream);
}

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream) {
  launch_elementwise(Add{y, x}, n, aligned_to(y, 16) && aligned_to(x, 16), stream);
}

}  // namespace blockscale::train::gpu
