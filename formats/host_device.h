// Lets the scalar codecs compile both as ordinary host C++ and inside CUDA kernels.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

#if defined(__CUDACC__)
#define BS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define BS_HOST_DEVICE inline
#endif

namespace blockscale::formats {

BS_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

BS_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// 2^e exactly, for e in [-149, 127] (fp32 subnormals included).
BS_HOST_DEVICE float exp2i(int e) {
  if (e >= -126) return bits_float(static_cast<uint32_t>(e + 127) << 23);
  return bits_float(1u << (e + 149));
}

// fp32 multiply, add and divide rounded to nearest even, never contracted into an FMA (nvcc fuses
// a*b+c by default, which would change the bytes the emulator defines).
BS_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
BS_HOST_DEVICE float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
BS_HOST_DEVICE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

BS_HOST_DEVICE bool is_finite_bits(uint32_t u) { return (u & 0x7F800000u) != 0x7F800000u; }

}  // namespace blockscale::formats
