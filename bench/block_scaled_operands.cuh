// What the block-scaled GEMM benchmarks share: random MX / NVFP4 operands written on the device in
// quant/'s layouts (E4M3 codes never NaN, E2M1 any, E8M0 scales in 2^[-4, 4], UE4M3 scales in
// [0.5, 8], NVFP4 S_dec = 1/2688), kernels that dequantize them to K-major bf16 (the
// "dequantize + cuBLAS BF16" peer), and a device comparison of two bf16 matrices.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "bench/bench_common.cuh"     // defines: CHECK_CUDA, DeviceBuffer, device_array, hash32
#include "formats/recipe.h"           // defines: Format, format_name
#include "formats/scalar_codecs.h"    // defines: decode_e8m0, decode_ue4m3
#include "formats/scale_layout.h"     // defines: swizzled_scale_offset, swizzled_scale_bytes

namespace bench {

namespace bf = blockscale::formats;
using bf::Format;

constexpr float kNvfp4ScaleDec = 1.0f / 2688.0f;  // S_dec of a tensor with amax 1 (448 * 6 / amax)

// ---- Random operands --------------------------------------------------------------------------

enum class Fill { kE4M3, kE2M1Pair, kE8M0, kUE4M3 };

// Random bytes of one kind from a hash of (seed, index).
__global__ void fill_bytes(uint8_t* x, int64_t n, Fill kind, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash32(seed + static_cast<uint64_t>(i));
    uint8_t c = static_cast<uint8_t>(h);
    switch (kind) {
      case Fill::kE4M3:  // never NaN (S.1111.111 -> S.1111.110)
        if ((c & 0x7F) == 0x7F) c ^= 1;
        break;
      case Fill::kE2M1Pair:  // two nibbles; every E2M1 code is finite
        break;
      case Fill::kE8M0:  // 2^-4 .. 2^4
        c = static_cast<uint8_t>(123 + h % 9);
        break;
      case Fill::kUE4M3:  // 0x30 .. 0x50: 0.5 .. 8, positive normal
        c = static_cast<uint8_t>(0x30 + h % 33);
        break;
    }
    x[i] = c;
  }
}

inline bool is_e2m1(Format r) { return r == Format::kMxfp4 || r == Format::kNvfp4; }
inline int scale_block(Format r) { return r == Format::kNvfp4 ? 16 : 32; }

// One quantized K-major operand (rows x k) on the device, as quant/ writes it.
struct Operand {
  Format recipe;
  int64_t rows, k;
  DeviceBuffer data;       // rows x k codes (E2M1: k / 2 bytes per row, low nibble first)
  DeviceBuffer scales;     // swizzled 128x4 over rows x (k / block)
  DeviceBuffer scale_dec;  // NVFP4's S_dec, one float (allocated for every recipe, read only for NVFP4)

  Operand(Format r, int64_t rows_, int64_t k_, uint64_t seed)
      : recipe(r),
        rows(rows_),
        k(k_),
        data(device_array<uint8_t>(data_bytes(), "operand data")),
        scales(device_array<uint8_t>(scale_bytes(), "operand scales")) {
    check(scale_dec.upload(&kNvfp4ScaleDec, sizeof(float), "operand S_dec"));
    fill_bytes<<<1024, 256>>>(data.data(), data_bytes(), is_e2m1(r) ? Fill::kE2M1Pair : Fill::kE4M3, seed);
    fill_bytes<<<256, 256>>>(scales.data(), scale_bytes(), r == Format::kNvfp4 ? Fill::kUE4M3 : Fill::kE8M0,
                             seed + (1ull << 40));
    CHECK_CUDA(cudaGetLastError());
  }
  int64_t data_bytes() const { return is_e2m1(recipe) ? rows * k / 2 : rows * k; }
  int64_t scale_bytes() const { return bf::swizzled_scale_bytes(rows, k / scale_block(recipe)); }
  const float* scale_dec_or_null() const { return recipe == Format::kNvfp4 ? scale_dec.as<float>() : nullptr; }
};

// ---- The peer's dequantize kernels ------------------------------------------------------------

__device__ __forceinline__ uint32_t bf16x2_bits(float2 f) {
  const __nv_bfloat162 r = __float22bfloat162_rn(f);
  return *reinterpret_cast<const uint32_t*>(&r);
}

__device__ __forceinline__ __half2 half2_from_bits(uint32_t u) {
  __half2_raw raw;
  raw.x = static_cast<unsigned short>(u), raw.y = static_cast<unsigned short>(u >> 16);
  return __half2(raw);
}

// Two E4M3 codes (low byte first) times the E8M0 scale s, as two bf16 (low half first). The hardware
// E4M3 -> f16 conversion is exact, and so is the product with a power of two in fp32 and in bf16.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t codes, float s) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3));
  const float2 f = __half22float2(h);
  return bf16x2_bits(make_float2(f.x * s, f.y * s));
}

// One byte of two E2M1 codes (low nibble first) times scale s, as two bf16. The 3 magnitude bits
// placed at f16 bits 11..9 (exponent low 2 bits, mantissa top bit) read as f16 2^-14 times the E2M1
// value (code 1, 0.5, becomes the f16 subnormal 2^-15), so one exact multiply by 2^14 decodes both.
// Half arithmetic keeps subnormals, unlike fp32 under -ftz.
__device__ __forceinline__ uint32_t e2m1x2_to_bf16x2(uint32_t byte, float s) {
  const uint32_t bits = (byte & 0x7u) << 9 | (byte & 0x8u) << 12 | (byte & 0x70u) << 21 | (byte & 0x80u) << 24;
  const __half2 h = __hmul2(half2_from_bits(bits), half2_from_bits(0x74007400u));  // 2^14 in f16
  const float2 f = __half22float2(h);
  return bf16x2_bits(make_float2(f.x * s, f.y * s));
}

// A quantized operand (rows x k, K-major) to bf16 (rows x k, K-major), in chunks of 8 values (16
// bytes of bf16 from 4 bytes of E2M1 or 8 of E4M3 codes). A thread takes kDequantChunks chunks of a
// row kDequantThreads apart, so each of its loads and 16-byte stores is one contiguous span per
// warp (fully used sectors); it issues all its loads before converting. Block x covers
// kDequantThreads * kDequantChunks chunks of a row, block y a row (grid-stride over rows).
constexpr int kDequantThreads = 128;
constexpr int kDequantChunks = 4;

template <Format kRecipe>
__global__ void __launch_bounds__(kDequantThreads)
    dequantize_bf16(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                    const float* __restrict__ scale_dec, int64_t rows, int64_t k, __nv_bfloat16* __restrict__ out) {
  constexpr bool kFp4 = kRecipe == Format::kMxfp4 || kRecipe == Format::kNvfp4;
  constexpr int kBlock = kRecipe == Format::kNvfp4 ? 16 : 32;
  using Codes = std::conditional_t<kFp4, uint32_t, uint2>;  // the 8 codes of a chunk
  const int64_t chunks = k / 8, scale_cols = k / kBlock, row_bytes = kFp4 ? k / 2 : k;
  const int64_t first = blockIdx.x * int64_t{kDequantThreads * kDequantChunks} + threadIdx.x;
  const float dec = kRecipe == Format::kNvfp4 ? __ldg(scale_dec) : 1.0f;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const Codes* src = reinterpret_cast<const Codes*>(codes + row * row_bytes);
    Codes v[kDequantChunks] = {};
    float s[kDequantChunks] = {};
    for (int i = 0; i < kDequantChunks; ++i) {
      const int64_t c = first + i * kDequantThreads;
      if (c >= chunks) break;
      v[i] = __ldg(src + c);
      const uint8_t code = __ldg(scales + bf::swizzled_scale_offset(row, c * 8 / kBlock, scale_cols));
      s[i] = kRecipe == Format::kNvfp4 ? bf::decode_ue4m3(code) * dec : bf::decode_e8m0(code);
    }
    uint4* dst = reinterpret_cast<uint4*>(out + row * k);
    for (int i = 0; i < kDequantChunks; ++i) {
      const int64_t c = first + i * kDequantThreads;
      if (c >= chunks) break;
      if constexpr (kFp4) {
        dst[c] = make_uint4(e2m1x2_to_bf16x2(v[i], s[i]), e2m1x2_to_bf16x2(v[i] >> 8, s[i]),
                            e2m1x2_to_bf16x2(v[i] >> 16, s[i]), e2m1x2_to_bf16x2(v[i] >> 24, s[i]));
      } else {
        dst[c] = make_uint4(e4m3x2_to_bf16x2(v[i].x, s[i]), e4m3x2_to_bf16x2(v[i].x >> 16, s[i]),
                            e4m3x2_to_bf16x2(v[i].y, s[i]), e4m3x2_to_bf16x2(v[i].y >> 16, s[i]));
      }
    }
  }
}

template <Format kRecipe>
void launch_dequantize(const Operand& op, __nv_bfloat16* out) {
  const int64_t per_block = kDequantThreads * kDequantChunks;
  const dim3 grid(static_cast<unsigned>((op.k / 8 + per_block - 1) / per_block),
                  static_cast<unsigned>(std::min<int64_t>(op.rows, 65535)));
  dequantize_bf16<kRecipe>
      <<<grid, kDequantThreads>>>(op.data.data(), op.scales.data(), op.scale_dec.as<float>(), op.rows, op.k, out);
}

// Launches only (asynchronous, default stream); launch errors surface at the caller's check.
inline void dequantize(const Operand& op, __nv_bfloat16* out) {
  switch (op.recipe) {
    case Format::kMxfp8E4M3:
      return launch_dequantize<Format::kMxfp8E4M3>(op, out);
    case Format::kMxfp4:
      return launch_dequantize<Format::kMxfp4>(op, out);
    case Format::kNvfp4:
      return launch_dequantize<Format::kNvfp4>(op, out);
    default:
      std::fprintf(stderr, "dequantize: recipe %s not supported by this benchmark\n", bf::format_name(op.recipe));
      std::exit(1);
  }
}

// ---- Cross-check ---------------------------------------------------------------------------------

// acc[0] = max |x - y|, acc[1] = max |y|, acc[2] = sum (x - y)^2, acc[3] = sum y^2 (acc zeroed by
// the caller). Maxima go through atomicMax on the bits: non-negative doubles order as integers. A
// non-finite x or y counts as an infinite difference (an unwritten, NaN-poisoned output shows).
__global__ void compare_bf16(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, double* acc) {
  double max_diff = 0, max_y = 0, diff2 = 0, y2 = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);
    const double d = isfinite(a) && isfinite(b) ? fabs(a - b) : INFINITY;
    max_diff = fmax(max_diff, d), max_y = isfinite(b) ? fmax(max_y, fabs(b)) : max_y;
    diff2 += d * d, y2 += isfinite(b) ? b * b : 0.0;
  }
  for (int off = 16; off > 0; off /= 2) {
    max_diff = fmax(max_diff, __shfl_down_sync(0xFFFFFFFFu, max_diff, off));
    max_y = fmax(max_y, __shfl_down_sync(0xFFFFFFFFu, max_y, off));
    diff2 += __shfl_down_sync(0xFFFFFFFFu, diff2, off);
    y2 += __shfl_down_sync(0xFFFFFFFFu, y2, off);
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(reinterpret_cast<unsigned long long*>(&acc[0]), static_cast<unsigned long long>(__double_as_longlong(max_diff)));
    atomicMax(reinterpret_cast<unsigned long long*>(&acc[1]), static_cast<unsigned long long>(__double_as_longlong(max_y)));
    atomicAdd(&acc[2], diff2);
    atomicAdd(&acc[3], y2);
  }
}

// max |x - y| / max |y| and ||x - y|| / ||y|| over two device bf16 matrices of n elements.
inline void compare(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, double* max_rel, double* frob_rel) {
  const DeviceBuffer acc = device_array<double>(4, "comparison sums");
  CHECK_CUDA(cudaMemset(acc.data(), 0, acc.size()));
  compare_bf16<<<1024, 256>>>(x, y, n, acc.as<double>());
  CHECK_CUDA(cudaGetLastError());
  double h[4];
  check(acc.download(h, sizeof h, "comparison sums"));
  *max_rel = h[0] / h[1];
  *frob_rel = std::sqrt(h[2] / h[3]);
}


}  // namespace bench
