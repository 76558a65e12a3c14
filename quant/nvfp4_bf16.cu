// quant/quantize.h's nvfp4_block_values_bf16: NVFP4 codes times their UE4M3 block scales, as bf16.
//
// The product of an E2M1 value and a UE4M3 scale is exact in fp32 and has at most 6 significant
// bits, so its fp32 bits' upper half IS its bf16 (no rounding; -0 stays -0). A NaN scale (0x7F)
// gives the canonical bf16 NaN for its block. A thread takes one 16-element block (one scale):
// 8 bytes of codes in, 32 bytes of bf16 out; a warp takes 32 consecutive blocks of one row (256
// bytes of codes), a CTA 16 rows at a time; grid x over each row's groups of 32 blocks, y over rows
// (a grid-stride loop), z over the stacked matrices: no 64-bit divisions in the loop.
#include <algorithm>

#include "formats/scale_layout.h"   // defines: swizzled_scale_offset
#include "formats/scalar_codecs.h"  // defines: decode_e2m1, decode_ue4m3
#include "quant/launchers.h"        // defines: resident_ctas, even_grid, cuda_status

namespace blockscale::quant::detail {
namespace {

constexpr int kThreads = 256;
constexpr uint16_t kBf16Nan = 0x7FC0u;

struct Params {
  const uint8_t* data;
  const uint8_t* scales;
  uint16_t* out;
  int64_t rows, cols;
  int64_t data_stride, scale_stride;  // bytes from one matrix's buffer to the next
  bool vector;                        // cols % 16 == 0, out 16-byte and data 8-byte aligned
};

// The fp32 bits of an E2M1 code's value (formats::decode_e2m1): magnitudes 0, 0.5, 1, 1.5, 2, 3,
// 4, 6; mag >= 2 is normal with exponent (mag >> 1) - 1 and one mantissa bit.
__device__ __forceinline__ uint32_t e2m1_bits(uint32_t code) {
  const uint32_t mag = code & 7u;
  const uint32_t normal = (((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22);
  const uint32_t bits = mag >= 2u ? normal : (mag == 1u ? 0x3F000000u : 0u);
  return bits | ((code & 8u) << 28);
}

__device__ __forceinline__ uint32_t value_bits(uint32_t code, float scale) {
  return __float_as_uint(__uint_as_float(e2m1_bits(code)) * scale) >> 16;  // exact product
}

// Eight codes (one word, low nibble first) as four words of bf16 pairs.
__device__ __forceinline__ uint4 eight_values(uint32_t word, float scale) {
  uint32_t v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    v[i] = value_bits((word >> (8 * i)) & 0xFu, scale) | (value_bits((word >> (8 * i + 4)) & 0xFu, scale) << 16);
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// One block (16 codes of row r from column 16 j): the scalar path for a partial block, unaligned
// pointers or a NaN scale.
__device__ void block_values_scalar(const uint8_t* codes, float scale, int64_t n, uint16_t* out) {
  for (int64_t c = 0; c < n; ++c)
    out[c] = isnan(scale) ? kBf16Nan : static_cast<uint16_t>(value_bits(codes[c / 2] >> (4 * (c % 2)), scale));
}

__global__ void __launch_bounds__(kThreads) nvfp4_values_kernel(Params p) {
  constexpr int kWarps = kThreads / 32;
  const int64_t k_blocks = (p.cols + 15) / 16, row_bytes = (p.cols + 1) / 2;
  const int64_t j = blockIdx.x * int64_t{32} + threadIdx.x % 32;  // this thread's block of its rows
  if (j >= k_blocks) return;
  const uint8_t* __restrict__ data = p.data + blockIdx.z * p.data_stride + j * 8;
  const uint8_t* __restrict__ scales = p.scales + blockIdx.z * p.scale_stride;
  uint16_t* __restrict__ out = p.out + blockIdx.z * p.rows * p.cols + j * 16;
  const int64_t n = p.cols - j * 16 < 16 ? p.cols - j * 16 : 16;
  // Two rows per step (warp w: rows w and w + 8 of the CTA's 16), both loads issued before either
  // store: twice the bytes in flight.
  for (int64_t r0 = blockIdx.y * int64_t{2 * kWarps} + threadIdx.x / 32; r0 < p.rows;
       r0 += int64_t{gridDim.y} * (2 * kWarps)) {
    const int64_t r1 = r0 + kWarps;
    const bool two = r1 < p.rows;
    float scale[2];
    uint2 codes[2] = {};
    scale[0] = formats::decode_ue4m3(scales[formats::swizzled_scale_offset(r0, j, k_blocks)]);
    scale[1] = two ? formats::decode_ue4m3(scales[formats::swizzled_scale_offset(r1, j, k_blocks)]) : 0.0f;
    if (p.vector) {
      codes[0] = *reinterpret_cast<const uint2*>(data + r0 * row_bytes);
      if (two) codes[1] = *reinterpret_cast<const uint2*>(data + r1 * row_bytes);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && !two) break;
      const int64_t r = i == 0 ? r0 : r1;
      if (!p.vector || isnan(scale[i])) {
        block_values_scalar(data + r * row_bytes, scale[i], n, out + r * p.cols);
        continue;
      }
      reinterpret_cast<uint4*>(out + r * p.cols)[0] = eight_values(codes[i].x, scale[i]);
      reinterpret_cast<uint4*>(out + r * p.cols)[1] = eight_values(codes[i].y, scale[i]);
    }
  }
}

}  // namespace

Status launch_nvfp4_block_values_bf16(const DequantizeProblem& p, int64_t batches, const DequantizeInputs& in,
                                      uint16_t* out, cudaStream_t stream) {
  int resident = 0;
  BS_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(&nvfp4_values_kernel), kThreads, 0,
                                   "nvfp4_block_values_bf16", &resident));
  const int64_t k_blocks = (p.cols + 15) / 16, x_groups = (k_blocks + 31) / 32;
  if (batches > 65535) return Status::error("batches: must be <= 65535 (one grid z per matrix)");
  if (x_groups > 65535) return Status::error("problem.cols: must be <= 16 * 32 * 65535");
  Params params{};
  params.data = in.data;
  params.scales = static_cast<const uint8_t*>(in.scales);
  params.out = out;
  params.rows = p.rows, params.cols = p.cols;
  params.data_stride = p.rows * ((p.cols + 1) / 2);
  params.scale_stride = formats::swizzled_scale_bytes(p.rows, k_blocks);
  params.vector = p.cols % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(in.data) % 8 == 0;
  // Rows: enough CTAs to fill the device about twice over, each looping over its share.
  const int64_t row_groups = (p.rows + 2 * (kThreads / 32) - 1) / (2 * (kThreads / 32));
  const int64_t want = std::max<int64_t>(1, 2 * resident / std::max<int64_t>(1, x_groups * batches));
  const dim3 grid(static_cast<unsigned>(x_groups), static_cast<unsigned>(std::min({row_groups, want, int64_t{65535}})),
                  static_cast<unsigned>(batches));
  nvfp4_values_kernel<<<grid, kThreads, 0, stream>>>(params);
  return cuda_status(cudaGetLastError(), "nvfp4_block_values_bf16 launch");
}

}  // namespace blockscale::quant::detail
