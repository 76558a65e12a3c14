// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): the
// counter-based generator behind NVFP4 stochastic rounding, shared by CPU and GPU so both draw
// identical bits for the same (seed, offset, element index).
#pragma once

#include "formats/host_device.h"

namespace blockscale::formats {

struct Philox4x32 {
  uint32_t v[4];
};

BS_HOST_DEVICE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on `counter` under `key`.
BS_HOST_DEVICE Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c0, &hi0, &lo0);
    philox_mulhilo(0xCD9E8D57u, c2, &hi1, &lo1);
    const uint32_t n0 = hi1 ^ c1 ^ key0;
    const uint32_t n2 = hi0 ^ c3 ^ key1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

// The 32-bit random word of element `index` of a stored matrix: word index % 4 of
// Philox4x32-10(counter = (index / 4, offset), key = seed). docs/numerics.md.
BS_HOST_DEVICE uint32_t philox_element_word(uint64_t seed, uint64_t offset, uint64_t index) {
  const uint64_t group = index / 4;
  const Philox4x32 out = philox4x32_10(
      Philox4x32{{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                  static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return out.v[index % 4];
}

}  // namespace blockscale::formats
