// The per-block arithmetic of the NVFP4 quantize kernel (quant/nvfp4_quantize_kernel.cuh, through
// nvfp4_quantize_tile.cuh): block magnitude maxima (NaN-aware, packed 16-bit), the block scale, and
// the sixteen E2M1 codes of a block with their signs. Private to that kernel: the anonymous
// namespace keeps these in the translation units that instantiate it.
#pragma once

#include <cstdint>

#include "quant/device_common.cuh"  // defines: InputTraits
#include "quant/nvfp4_device.cuh"   // defines: nvfp4::max_nan, scale_codes2, encode8_magnitudes, sign gathers

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

// Packed magnitude maximum of 16-bit words, doubled: lane 0 = 2 max|lo|, lane 1 = 2 max|hi| + a
// spare bit (w << 1 drops the high sign and moves the low sign into lane 1's lowest bit, below
// every magnitude step). Read it back with mag_of_doubled(). NaN magnitudes order above Inf.
template <int kN>
__device__ __forceinline__ uint32_t doubled_mags(const uint32_t* w) {
  static_assert(kN == 8 || kN == 16, "8 or 16 words");
  if constexpr (kN == 8) {
    return __vimax3_u16x2(__vimax3_u16x2(w[0] << 1, w[1] << 1, w[2] << 1), __vimax3_u16x2(w[3] << 1, w[4] << 1, w[5] << 1),
                          __vmaxu2(w[6] << 1, w[7] << 1));
  } else {
    const uint32_t a = __vimax3_u16x2(__vimax3_u16x2(w[0] << 1, w[1] << 1, w[2] << 1), __vimax3_u16x2(w[3] << 1, w[4] << 1, w[5] << 1),
                                      __vimax3_u16x2(w[6] << 1, w[7] << 1, w[8] << 1));
    const uint32_t b = __vimax3_u16x2(__vimax3_u16x2(w[9] << 1, w[10] << 1, w[11] << 1), __vimax3_u16x2(w[12] << 1, w[13] << 1, w[14] << 1),
                                      w[15] << 1);
    return __vmaxu2(a, b);
  }
}
__device__ __forceinline__ uint32_t mag_of_doubled(uint32_t m, int h) { return h ? m >> 17 : (m & 0xFFFFu) >> 1; }

// fp32 bits of a block's 16-bit magnitude maximum; a NaN or Inf block gets NaN bits.
template <DType kIn>
__device__ __forceinline__ uint32_t widen_mag(uint32_t m) {
  return m >= InputTraits<kIn>::kInfBits ? 0x7FFFFFFFu : InputTraits<kIn>::widen(m);
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

// The scale of one block: its UE4M3 code, the factor its values are multiplied by, whether it is
// non-finite (code 0x7F, codes 0) and whether some |y| may reach 7 (the encoder then saturates).
struct BlockScale {
  uint32_t code;
  float enc;
  bool nonfinite;
  bool cap;
};

// amax: the block amax (fp32 bits, NaN bits for a non-finite block); vmax: the largest magnitude
// the encoder multiplies by the table entry (the amax, or with the RHT fold the unscaled one).
__device__ __forceinline__ BlockScale block_scale(uint32_t amax, float vmax, float k, const float* enc_table) {
  BlockScale b;
  b.nonfinite = (amax & 0x7FFFFFFFu) >= 0x7F800000u;
  b.code = b.nonfinite ? 0x7Fu : (nvfp4::scale_codes2(__uint_as_float(amax), 0.0f, k) & 0xFFu);
  b.enc = enc_table[b.code];
  b.cap = !(__fmul_rn(vmax, b.enc) < 7.0f);
  return b;
}

// Sixteen codes (8 bytes) of sixteen values with the signs gathered from their source words.
//   kSignPairs : signs of 16-bit pairs (words sw[0..7], element 2m low half of word m)
//   else       : one element per word, the sign in byte kSignByte (3: fp32 / transformed values)
template <bool kCap, bool kSignPairs, int kSignByte>
__device__ __forceinline__ uint2 encode16(const float* f, const uint32_t* sw, float enc) {
  uint32_t lo = nvfp4::encode8_magnitudes<kCap>(f, enc);
  uint32_t hi = nvfp4::encode8_magnitudes<kCap>(f + 8, enc);
  if constexpr (kSignPairs) {
    lo |= nvfp4::signs_of_pairs(sw);
    hi |= nvfp4::signs_of_pairs(sw + 4);
  } else {
    lo |= nvfp4::signs_of_singles<kSignByte>(sw);
    hi |= nvfp4::signs_of_singles<kSignByte>(sw + 8);
  }
  return make_uint2(lo, hi);
}

// The block's codes: the saturating encoder when any lane of the warp needs it (kFull: every lane
// is here, the vote keeps the warp on one path), else the cheaper one; zeros for a NaN scale.
template <bool kFull, bool kSignPairs, int kSignByte>
__device__ __forceinline__ uint2 encode_block(const float* f, const uint32_t* sw, const BlockScale& b) {
  uint2 out;
  if (!kFull || __any_sync(0xFFFFFFFFu, b.cap))
    out = encode16<true, kSignPairs, kSignByte>(f, sw, b.enc);
  else
    out = encode16<false, kSignPairs, kSignByte>(f, sw, b.enc);
  return b.nonfinite ? make_uint2(0, 0) : out;
}

}  // namespace
}  // namespace blockscale::quant::detail
