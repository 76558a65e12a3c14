// The 16-point random Hadamard transform NVFP4 applies to wgrad operands along the reduction
// dimension: y = (1/4) H16 (d ∘ x), evaluated in fp32 as the fast Walsh-Hadamard butterfly over
// strides 1, 2, 4, 8, then scaled by 0.25 (exact). H16 is Sylvester's (H[i][j] = (-1)^popcount(i&j))
// and (1/4) H16 is orthogonal and its own inverse, so x = d ∘ ((1/4) H16 y).
#pragma once

#include "formats/host_device.h"

namespace blockscale::formats {

inline constexpr int kHadamardSize = 16;

// The fixed sign vector d (bit i set: d[i] = -1). It is part of the numerics: changing it changes
// every byte the transform produces.
inline constexpr uint32_t kHadamardSignBits = 0xE59Au;

BS_HOST_DEVICE void hadamard16_inplace(float v[kHadamardSize]) {
  for (int i = 0; i < kHadamardSize; ++i)
    if ((kHadamardSignBits >> i) & 1u) v[i] = -v[i];
  for (int h = 1; h < kHadamardSize; h *= 2) {
    for (int i = 0; i < kHadamardSize; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = sub_rn(a, b);
      }
    }
  }
  for (int i = 0; i < kHadamardSize; ++i) v[i] = mul_rn(v[i], 0.25f);
}

}  // namespace blockscale::formats
