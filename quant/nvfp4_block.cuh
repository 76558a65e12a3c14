// The per-block arithmetic of the NVFP4 quantize kernel (quant/nvfp4_quantize_kernel.cuh, through
// nvfp4_quantize_tile.cuh): block magnitude maxima (NaN-aware, packed 16-bit), the block scale, and
// the sixteen E2M1 codes of a block with their signs. Private to that kernel: the anonymous
// namespace keeps these in the translation units that instantiate it.
#pragma once

#include <cstdint>

#include "quant/device_common.cuh"  // defines: InputTraits
#include "quant/nvfp4_device.cuh"   // defines: nvfp4::max_nan, scale_code, encode8_magnitudes, sign gathers

namespace blockscale::quant::detail {
namespace {

// max.NaN of |v[0..15]| as a tree (depth 4).
__device__ __forceinline__ float absmax16_nan(const float* v) {
  float m[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) m[i] = nvfp4::max_nan(fabsf(v[2 * i]), fabsf(v[2 * i + 1]));
#pragma unroll
  for (int i = 0; i < 4; ++i) m[i] = nvfp4::max_nan(m[2 * i], m[2 * i + 1]);
  return nvfp4::max_nan(nvfp4::max_nan(m[0], m[1]), nvfp4::max_nan(m[2], m[3]));
}

// Packed magnitude maximum of 16-bit pairs: lane h of the result is max |half h| over the words,
// NaN when one of them is NaN (max.NaN.xorsign.abs: HMNMX2 with |.| operands); the lanes' sign bits
// are meaningless. Exact: the maximum of bf16 / fp16 values is one of them, and Inf stays Inf.
template <DType kIn>
__device__ __forceinline__ uint32_t absmax2(uint32_t a, uint32_t b) {
  static_assert(kIn == DType::kBf16 || kIn == DType::kF16, "16-bit input");
  uint32_t d;
  if constexpr (kIn == DType::kBf16) asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  else asm("max.NaN.xorsign.abs.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
template <DType kIn, int kN>
__device__ __forceinline__ uint32_t pair_absmax(const uint32_t* w) {
  static_assert(kN == 8 || kN == 16, "8 or 16 words");
  uint32_t m[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) m[i] = absmax2<kIn>(w[2 * i], w[2 * i + 1]);
#pragma unroll
  for (int n = kN / 4; n >= 1; n /= 2)
#pragma unroll
    for (int i = 0; i < n; ++i) m[i] = absmax2<kIn>(m[i], m[i + n]);
  return m[0];
}

// Lane h of a pair_absmax word as fp32 (exact widening); its sign is meaningless.
template <DType kIn>
__device__ __forceinline__ float lane_value(uint32_t m, int h) {
  if constexpr (kIn == DType::kBf16) return __uint_as_float(h ? (m & 0xFFFF0000u) : (m << 16));
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(h ? (m >> 16) : (m & 0xFFFFu))));
}

// The larger magnitude of a pair_absmax word's two lanes as fp32 (NaN-propagating), sign meaningless.
template <DType kIn>
__device__ __forceinline__ float fold_lanes(uint32_t m) {
  uint32_t r;  // the maximum in lane 1 (bf16: then r is its fp32 bits) or lane 0 (fp16), zeros beside
  if constexpr (kIn == DType::kBf16) {
    asm("{.reg .b16 l, h, r, z;\n mov.b32 {l, h}, %1;\n max.NaN.xorsign.abs.bf16 r, l, h;\n mov.b16 z, 0;\n"
        " mov.b32 %0, {z, r};}" : "=r"(r) : "r"(m));
    return __uint_as_float(r);
  } else {
    asm("{.reg .b16 l, h, r, z;\n mov.b32 {l, h}, %1;\n max.NaN.xorsign.abs.f16 r, l, h;\n mov.b16 z, 0;\n"
        " mov.b32 %0, {r, z};}" : "=r"(r) : "r"(m));
    return lane_value<kIn>(r, 0);
  }
}

// NaN-free magnitude maximum (fp32 bits) of 16 values times `scale` (RN): formats' amax rule for a
// block that holds a NaN or Inf (rare: out of line).
__device__ __noinline__ uint32_t finite_max_of(float4 a, float4 b, float4 c, float4 d, float scale) {
  const float v[16] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t u = __float_as_uint(__fmul_rn(v[i], scale)) & 0x7FFFFFFFu;
    if (u <= 0x7F800000u) m = max(m, u);
  }
  return m;
}
__device__ __forceinline__ uint32_t finite_max_bits(const float* v, float scale = 1.0f) {
  return finite_max_of(make_float4(v[0], v[1], v[2], v[3]), make_float4(v[4], v[5], v[6], v[7]),
                       make_float4(v[8], v[9], v[10], v[11]), make_float4(v[12], v[13], v[14], v[15]), scale);
}

// The scale of one block: its UE4M3 code (0x7F: non-finite, codes 0), the factor its values are
// multiplied by, and whether some |y| may reach 7 (the encoder then saturates). A NaN scale's
// table entry is 0, so its vmax * enc is NaN and `cap` is set for it too.
struct BlockScale {
  uint32_t code;
  float enc;
  bool cap;
  __device__ __forceinline__ bool nonfinite() const { return code == 0x7Fu; }
};

// amax: the block amax (its sign ignored; NaN or Inf for a non-finite block); vmax: the largest
// magnitude the encoder multiplies by the table entry (the amax, or with the RHT fold the unscaled
// one; sign ignored). `table`: the shared address of the copy's encode-factor table.
__device__ __forceinline__ BlockScale block_scale(float amax, float vmax, float k, uint32_t table) {
  BlockScale b;
  b.code = nvfp4::scale_code(fabsf(amax), k);
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(b.enc) : "r"(table + 4u * b.code));
  b.cap = !(__fmul_rn(fabsf(vmax), b.enc) < 7.0f);
  return b;
}

// Sixteen codes (8 bytes) of sixteen values with their signs.
template <bool kCap>
__device__ __forceinline__ uint2 encode16(const float* f, const nvfp4::BlockSigns& s, float enc) {
  return make_uint2(nvfp4::with_signs(nvfp4::encode8_magnitudes<kCap>(f, enc), s.lo),
                    nvfp4::with_signs(nvfp4::encode8_magnitudes<kCap>(f + 8, enc), s.hi));
}

// The block's codes: the cheaper encoder unless a lane of the warp has a block that needs the
// saturating one (kFull: every lane is here, the vote keeps the warp on one path); zeros for a
// NaN scale. note(nonfinite) does the block's amax bookkeeping: on the cheap path no lane of the
// warp has a NaN scale (it sets `cap`), so the test is left to the other one.
template <bool kFull, class Note>
__device__ __forceinline__ uint2 encode_block(const float* f, const nvfp4::BlockSigns& s, const BlockScale& b, Note note) {
  if (kFull && !__any_sync(0xFFFFFFFFu, b.cap)) {
    note(false);
    return encode16<false>(f, s, b.enc);
  }
  const uint2 out = encode16<true>(f, s, b.enc);
  note(b.nonfinite());
  return b.nonfinite() ? make_uint2(0, 0) : out;
}

}  // namespace
}  // namespace blockscale::quant::detail
