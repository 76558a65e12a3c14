// quant/quantize.h's nvfp4_block_values_bf16: NVFP4 codes times their UE4M3 block scales, as bf16.
//
// The product of an E2M1 value and a UE4M3 scale is exact (at most 6 significant bits, within
// bf16's range), so one bf16 multiply gives it with no rounding; -0 stays -0. A NaN scale (0x7F)
// gives the canonical bf16 NaN for its block. A thread takes eight codes (one 4-byte word: half a
// block) and writes 16 bytes, so a warp's loads and stores are contiguous; it keeps kRows rows in
// flight. The codes become bf16 without arithmetic: PRMT looks up each code's low and high bf16
// byte in 8-byte tables and gathers the sign bits, about 2.5 instructions a value (the arithmetic
// decode took about 12: the kernel was bound by instruction issue). Grid x over each row's groups
// of 256 values, y over rows (a grid-stride loop), z over the stacked matrices.
#include <cuda_fp16.h>

#include <algorithm>

#include "formats/scale_layout.h"   // defines: swizzled_scale_bytes
#include "formats/scalar_codecs.h"  // defines: decode_e2m1, decode_ue4m3
#include "quant/device_common.cuh"   // defines: prmt_sign
#include "quant/launchers.h"        // defines: resident_ctas, even_grid, cuda_status

namespace blockscale::quant::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 4;  // rows in flight per thread
constexpr uint16_t kBf16Nan = 0x7FC0u;

struct Params {
  const uint8_t* data;
  const uint8_t* scales;
  uint16_t* out;
  int64_t rows, cols;
  int64_t data_stride, scale_stride;  // bytes from one matrix's buffer to the next
};

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The bf16 bytes of the E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (0x0000, 0x3F00, 0x3F80,
// 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0), low bytes and high bytes, code m at byte m.
constexpr uint32_t kLo03 = 0xC0800000u, kLo47 = 0xC0804000u;
constexpr uint32_t kHi03 = 0x3F3F3F00u, kHi47 = 0x40404040u;

// Eight codes (one word, element i at nibble i, bit 3 its sign) times the block scale `scale2`
// (its bf16 in both halves): four words of bf16 pairs, element 2k in word k's low half.
__device__ __forceinline__ uint4 eight_values(uint32_t w, uint32_t scale2) {
  const uint32_t mag = w & 0x77777777u, w4 = w << 4;
  uint32_t v[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t sel = h == 0 ? mag : mag >> 16;  // PRMT reads the selector's low 16 bits
    const uint32_t lo = prmt_sign(kLo03, kLo47, sel);
    // The sign of element 2i is the top bit of byte i of w << 4, of element 2i + 1 that of byte i
    // of w: PRMT's sign-replicating selectors (bit 3 set) spread each to a whole byte.
    const uint32_t sign = prmt_sign(w4, w, h == 0 ? 0xD9C8u : 0xFBEAu);
    const uint32_t hi = prmt_sign(kHi03, kHi47, sel) | (sign & 0x80808080u);
    v[2 * h] = mul_bf16x2(prmt_sign(lo, hi, 0x5140u), scale2);
    v[2 * h + 1] = mul_bf16x2(prmt_sign(lo, hi, 0x7362u), scale2);
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// The bf16 bits of one value, for the scalar path (the fp32 product is exact: its upper half is
// the bf16).
__device__ __forceinline__ uint16_t value_bits(uint32_t code, float scale) {
  return static_cast<uint16_t>(__float_as_uint(formats::decode_e2m1(code) * scale) >> 16);
}

// Values e0 .. e0 + n - 1 of a row, one by one: partial blocks and unaligned pointers.
__device__ void values_scalar(const uint8_t* row_codes, int64_t e0, uint8_t scale_code, int64_t n, uint16_t* out) {
  const float scale = formats::decode_ue4m3(scale_code);
  for (int64_t c = 0; c < n; ++c) {
    const int64_t e = e0 + c;
    out[c] = isnan(scale) ? kBf16Nan : value_bits((row_codes[e / 2] >> (4 * (e % 2))) & 0xFu, scale);
  }
}

// A finite UE4M3 scale code's bf16 in both halves. UE4M3 and E4M3 agree on codes below 0x80, and
// every E4M3 value is an fp16 (the hardware conversion) whose fp32's upper half is its bf16.
__device__ __forceinline__ uint32_t scale_bf16x2(uint32_t code) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<unsigned short>(code)));
  const uint32_t b = __float_as_uint(__half2float(__ushort_as_half(static_cast<unsigned short>(h2)))) >> 16;
  return b | (b << 16);
}

// formats::swizzled_scale_offset's row part (r >= 0), on unsigned shifts and masks.
__device__ __forceinline__ uint64_t scale_row_offset(int64_t r, uint64_t tile_row_bytes) {
  const uint64_t u = static_cast<uint64_t>(r);
  return (u >> 7) * tile_row_bytes + ((u & 31u) << 4) + (((u >> 5) & 3u) << 2);
}

// kVector: Params::vector (whole blocks, aligned), one instantiation each so that the scalar path's
// registers do not weigh on the vector one.
template <bool kVector>
__global__ void __launch_bounds__(kThreads) nvfp4_values_kernel(Params p) {
  const int64_t k_blocks = (p.cols + 15) / 16, row_bytes = (p.cols + 1) / 2;
  const int64_t c8 = blockIdx.x * int64_t{32} + threadIdx.x % 32;  // this thread's 8 values of its rows
  const int64_t e0 = c8 * 8, j = c8 / 2;                           // first value, block
  if (e0 >= p.cols) return;
  const uint8_t* __restrict__ data = p.data + blockIdx.z * p.data_stride;
  // formats::swizzled_scale_offset(r, j, k_blocks), its column part once.
  const uint8_t* __restrict__ scales = p.scales + blockIdx.z * p.scale_stride + (j / 4) * 512 + j % 4;
  const uint64_t tile_row_bytes = static_cast<uint64_t>((k_blocks + 3) / 4) * 512;
  uint16_t* __restrict__ out = p.out + blockIdx.z * p.rows * p.cols;
  const int64_t n = p.cols - e0 < 8 ? p.cols - e0 : 8;
  const int64_t step = int64_t{gridDim.y} * (kRows * kWarps);
  for (int64_t r0 = blockIdx.y * int64_t{kRows * kWarps} + threadIdx.x / 32; r0 < p.rows; r0 += step) {
    const uint8_t* codes_at = data + r0 * row_bytes;  // row r0; row r0 + i kWarps is i row_step on
    uint16_t* out_at = out + r0 * p.cols;
    const int64_t code_step = kWarps * row_bytes, out_step = kWarps * p.cols;
    // Every load of the kRows rows issued before any store: the bytes in flight hide the latency.
    uint32_t codes[kRows] = {};
    uint32_t scale_code[kRows] = {};
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t r = r0 + i * kWarps;
      if (r < p.rows) {
        scale_code[i] = scales[scale_row_offset(r, tile_row_bytes)];
        if (kVector) codes[i] = *reinterpret_cast<const uint32_t*>(codes_at + i * code_step + e0 / 2);
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (r0 + i * kWarps >= p.rows) continue;
      if (!kVector) {
        values_scalar(codes_at + i * code_step, e0, static_cast<uint8_t>(scale_code[i]), n,
                      out_at + i * out_step + e0);
        continue;
      }
      const uint4 v = eight_values(codes[i], scale_bf16x2(scale_code[i]));
      const uint32_t nan2 = uint32_t{kBf16Nan} * 0x10001u;
      const bool nan = scale_code[i] == 0x7Fu;  // UE4M3's NaN: the canonical bf16 NaN for the block
      *reinterpret_cast<uint4*>(out_at + i * out_step + e0) =
          nan ? make_uint4(nan2, nan2, nan2, nan2) : v;
    }
  }
}

}  // namespace

Status launch_nvfp4_block_values_bf16(const DequantizeProblem& p, int64_t batches, const DequantizeInputs& in,
                                      uint16_t* out, cudaStream_t stream) {
  int resident = 0;
  const bool vector = p.cols % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(in.data) % 4 == 0;
  auto* kernel = vector ? nvfp4_values_kernel<true> : nvfp4_values_kernel<false>;
  BS_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, 0, "nvfp4_block_values_bf16",
                                   &resident));
  const int64_t x_groups = (p.cols + 255) / 256;
  if (batches > 65535) return Status::error("batches: must be <= 65535 (one grid z per matrix)");
  if (x_groups > 65535) return Status::error("problem.cols: must be <= 256 * 65535");
  Params params{};
  params.data = in.data;
  params.scales = static_cast<const uint8_t*>(in.scales);
  params.out = out;
  params.rows = p.rows, params.cols = p.cols;
  params.data_stride = p.rows * ((p.cols + 1) / 2);
  params.scale_stride = formats::swizzled_scale_bytes(p.rows, (p.cols + 15) / 16);
  // Rows: enough CTAs to fill the device about twice over, each looping over its share.
  const int64_t row_groups = (p.rows + kRows * kWarps - 1) / (kRows * kWarps);
  const int64_t want = std::max<int64_t>(1, 2 * resident / std::max<int64_t>(1, x_groups * batches));
  const dim3 grid(static_cast<unsigned>(x_groups), static_cast<unsigned>(std::min({row_groups, want, int64_t{65535}})),
                  static_cast<unsigned>(batches));
  kernel<<<grid, kThreads, 0, stream>>>(params);
  return cuda_status(cudaGetLastError(), "nvfp4_block_values_bf16 launch");
}

}  // namespace blockscale::quant::detail
