// Device helpers every quantize kernel shares: input elements (BF16, F16, F32) held as 32-bit
// words, their magnitudes and exact widening to fp32, the tensor amax / non-finite bookkeeping,
// the FP8 element encoders (hardware cvt or formats::encode_minifloat), and cp.async copies.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "formats/dtype.h"
#include "formats/recipe.h"
#include "formats/scalar_codecs.h"
#include "quant/quantize.h"

namespace blockscale::quant::detail {

using formats::DType;  // the kernels' input type: a template argument, kBf16, kF16 or kF32

// How fp32 values (already scaled into the element range) become FP8 codes.
//   kHardware: cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (sm_89+). tests/quant checks it against
//              formats::encode_minifloat on every finite fp32 pattern the kernels can hand it
//              (the kernels never convert NaN or Inf).
//   kSoftware: formats::encode_minifloat itself (integer arithmetic): what kHardware falls back to
//              below sm_89, and the scalar device tests' reference. The FP8 quantize kernels
//              run kHardware only: the software encode is instruction-bound, far below copy speed.
enum class ElementEncoder { kHardware, kSoftware };
inline constexpr ElementEncoder kDefaultEncoder = ElementEncoder::kHardware;

// ---- Input elements. A 32-bit word holds two 16-bit elements (the lower address in the low
// half) or one fp32. "Magnitude bits" are the input's bits without the sign: for every format,
// they order like |x|, NaN patterns above Inf (kInfBits).
template <DType kIn>
struct InputTraits;  // defined for the dtypes the kernels read: kBf16, kF16, kF32

template <>
struct InputTraits<DType::kBf16> {
  static constexpr int kBytes = 2;
  static constexpr uint32_t kInfBits = 0x7F80u;
  // Element h (0: low half) of a word, widened exactly (formats::bf16_bits_to_float).
  __device__ __forceinline__ static float elem(uint32_t w, int h) {
    return __uint_as_float(h ? (w & 0xFFFF0000u) : (w << 16));
  }
  // fp32 bits of the magnitude bits m.
  __device__ __forceinline__ static uint32_t widen(uint32_t m) { return m << 16; }
};

template <>
struct InputTraits<DType::kF16> {
  static constexpr int kBytes = 2;
  static constexpr uint32_t kInfBits = 0x7C00u;
  // Exact widening (the hardware conversion; formats::fp16_bits_to_float gives the same value).
  __device__ __forceinline__ static float elem(uint32_t w, int h) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h ? (w >> 16) : (w & 0xFFFFu))));
  }
  __device__ __forceinline__ static uint32_t widen(uint32_t m) {
    return __float_as_uint(__half2float(__ushort_as_half(static_cast<unsigned short>(m))));
  }
};

template <>
struct InputTraits<DType::kF32> {
  static constexpr int kBytes = 4;
  static constexpr uint32_t kInfBits = 0x7F800000u;
  __device__ __forceinline__ static float elem(uint32_t w, int) { return __uint_as_float(w); }
  __device__ __forceinline__ static uint32_t widen(uint32_t m) { return m; }
};

// Magnitude-bits max over n words, per element slot: for 16-bit input a packed pair (one max per
// half, max.u16x2), for fp32 one value.
template <DType kIn, int kN>
__device__ __forceinline__ uint32_t abs_max_words(const uint32_t* w) {
  if constexpr (InputTraits<kIn>::kBytes == 2) {
    uint32_t m = w[0] & 0x7FFF7FFFu;
#pragma unroll
    for (int i = 1; i < kN; ++i) m = __vmaxu2(m, w[i] & 0x7FFF7FFFu);
    return m;
  } else {
    uint32_t m = w[0] & 0x7FFFFFFFu;
#pragma unroll
    for (int i = 1; i < kN; ++i) m = max(m, w[i] & 0x7FFFFFFFu);
    return m;
  }
}

// The max of the slots of a word of abs_max_words (16-bit: of both halves).
template <DType kIn>
__device__ __forceinline__ uint32_t fold_slots(uint32_t m) {
  if constexpr (InputTraits<kIn>::kBytes == 2) return max(m & 0xFFFFu, m >> 16);
  else return m;
}

// Slot h of a word of abs_max_words.
template <DType kIn>
__device__ __forceinline__ uint32_t slot(uint32_t m, int h) {
  if constexpr (InputTraits<kIn>::kBytes == 2) return h ? (m >> 16) : (m & 0xFFFFu);
  else return m;
}

template <DType kIn>
__device__ __forceinline__ uint32_t shfl_max_xor(uint32_t m, int lane_mask) {
  const uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, m, lane_mask);
  if constexpr (InputTraits<kIn>::kBytes == 2) return __vmaxu2(m, o);
  else return max(m, o);
}

// Folds a group of n words whose folded magnitude max is m into the running tensor amax
// (magnitude bits; NaN ignored, Inf counts: formats' amax rule) and the non-finite flag. The
// NaN-free recount runs only for a group holding a NaN.
template <DType kIn, int kN>
__device__ __forceinline__ void note_tensor_amax(const uint32_t* w, uint32_t m, uint32_t& tensor_amax,
                                                 bool& saw_nonfinite) {
  using In = InputTraits<kIn>;
  if (m >= In::kInfBits) {
    saw_nonfinite = true;
    if (m > In::kInfBits) {
      m = 0;
#pragma unroll
      for (int i = 0; i < kN; ++i) {
#pragma unroll
        for (int h = 0; h < 4 / In::kBytes; ++h) {
          const uint32_t a = slot<kIn>(w[i] & (In::kBytes == 2 ? 0x7FFF7FFFu : 0x7FFFFFFFu), h);
          if (a <= In::kInfBits) m = max(m, a);
        }
      }
    }
  }
  tensor_amax = max(tensor_amax, m);
}

// ---- FP8 element formats.
template <formats::Format kRecipe>
struct Fp8Format;

template <>
struct Fp8Format<formats::Format::kMxfp8E4M3> {
  __device__ __forceinline__ static formats::MinifloatSpec spec() { return formats::e4m3_spec(); }
};

template <>
struct Fp8Format<formats::Format::kFp8Block1x128> : Fp8Format<formats::Format::kMxfp8E4M3> {};
template <>
struct Fp8Format<formats::Format::kFp8Block128x128> : Fp8Format<formats::Format::kMxfp8E4M3> {};

template <>
struct Fp8Format<formats::Format::kMxfp8E5M2> {
  __device__ __forceinline__ static formats::MinifloatSpec spec() { return formats::e5m2_spec(); }
};

// Two fp32 values -> two FP8 codes, a in the low byte. The kernels only pass finite values here.
template <formats::Format kRecipe, ElementEncoder kEnc>
__device__ __forceinline__ uint32_t encode2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (kEnc == ElementEncoder::kHardware) {
    unsigned short r;  // cvt d, hi, lo: the first source goes to the upper byte
    if constexpr (kRecipe != formats::Format::kMxfp8E5M2)
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
    else
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
    return r;
  }
#endif
  const formats::MinifloatSpec s = Fp8Format<kRecipe>::spec();
  return formats::encode_minifloat(a, s) | (formats::encode_minifloat(b, s) << 8);
}

// Four values times `inv` (exactly as formats: x * 2^-e in fp32, RN) -> one word of four codes.
template <formats::Format kRecipe, ElementEncoder kEnc>
__device__ __forceinline__ uint32_t encode4(const float* f, float inv) {
  return encode2<kRecipe, kEnc>(formats::mul_rn(f[0], inv), formats::mul_rn(f[1], inv)) |
         (encode2<kRecipe, kEnc>(formats::mul_rn(f[2], inv), formats::mul_rn(f[3], inv)) << 16);
}

// One 16-byte granule of input row r from column c on (zeros outside the matrix), scalar loads:
// for inputs whose pointer or stride rules out 16-byte copies, and the last granule of a row.
template <DType kIn>
__device__ __forceinline__ uint4 granule_scalar(const void* x, int64_t ld, int64_t rows, int64_t cols,
                                                int64_t r, int64_t c) {
  constexpr int kBytes = InputTraits<kIn>::kBytes;
  uint32_t w[4] = {0, 0, 0, 0};
  if (r < rows) {
    const char* src = static_cast<const char*>(x) + (r * ld + c) * kBytes;
#pragma unroll
    for (int e = 0; e < 16 / kBytes; ++e) {
      if (c + e >= cols) break;
      if constexpr (kBytes == 2)
        w[e / 2] |= static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(src)[e]) << (16 * (e % 2));
      else
        w[e] = reinterpret_cast<const uint32_t*>(src)[e];
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// prmt in its default mode: selector nibble n picks byte n & 7 of {b, a} and, when n & 8, replicates
// that byte's sign bit over the byte (0x00 / 0xFF): sign gathers of packed elements.
__device__ __forceinline__ uint32_t prmt_sign(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Raises *amax (fp32 bits of a non-negative value, reset to 0 before the kernel) to `bits`. The
// stored value only grows, so a plain read that already holds >= bits makes the atomic useless:
// with one CTA per tile thousands of warps would otherwise serialise on one address.
__device__ __forceinline__ void raise_amax(float* amax, uint32_t bits) {
  auto* target = reinterpret_cast<unsigned int*>(amax);
  if (*reinterpret_cast<volatile unsigned int*>(target) < bits) atomicMax(target, bits);
}

// ---- Asynchronous global -> shared copies (cp.async, L2 only): 16 bytes, of which the first
// src_bytes are read and the rest zero-filled.
__device__ __forceinline__ void cp_async_16B(void* smem_dst, const void* gmem_src, int src_bytes) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace blockscale::quant::detail
