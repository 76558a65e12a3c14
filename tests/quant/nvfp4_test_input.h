// The NVFP4 quantize tests' input (tests/quant/nvfp4_*quantize_test.cpp): per 16x16 region one
// kind of data, chosen at random: normal values at a random magnitude, heavy tails, signed zeros,
// NaN / Inf / -0 / subnormal / largest finite sprinkled in, subnormals, E2M1 lattice points and
// ties (a region's first element 6 x 2^j, its block amax) some one input ulp off, the largest
// finite values, and mixed huge / tiny values.
//   kMixed: all of them; kFinite: no NaN / Inf; kTies: lattice points and zeros, the tensor amax
//   pinned to 2688 (S_enc = 1 exactly: ties land exactly); kNarrow: realistic data; kZero: +-0 only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "formats/block_quantize_internal.h"  // block_amax: formats' amax rule
#include "formats/dtype.h"
#include "tests/quant/gpu_test_util.h"

namespace blockscale_test {

using blockscale::formats::DType;

enum class Nvfp4Pattern { kMixed, kFinite, kTies, kNarrow, kZero };
inline const char* name(Nvfp4Pattern p) {
  switch (p) {
    case Nvfp4Pattern::kMixed: return "mixed";
    case Nvfp4Pattern::kFinite: return "finite";
    case Nvfp4Pattern::kTies: return "ties";
    case Nvfp4Pattern::kNarrow: return "narrow";
    case Nvfp4Pattern::kZero: return "zero";
  }
  return "?";
}

inline HostInput nvfp4_input(int64_t rows, int64_t cols, int64_t ld, DType t, Nvfp4Pattern pattern, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  double lo, hi;
  blockscale_test::magnitude_range(t, &lo, &hi);
  const int64_t esize = static_cast<int64_t>(blockscale::formats::dtype_size(t));
  HostInput in;
  in.bytes.assign(static_cast<size_t>(rows * ld * esize), 0);
  in.values.assign(static_cast<size_t>(rows * ld), std::nanf(""));
  // E2M1 grid points and the midpoints between them (ties), in units of the block's 2^j.
  const double lattice[] = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 0.125, 5.5, 4.5};
  const blockscale_test::DTypeBits tb = blockscale_test::type_bits(t);
  const uint32_t smax = tb.max_finite;
  auto put = [&](int64_t r, int64_t c, uint32_t bits) {
    const size_t i = static_cast<size_t>(r * ld + c);
    std::memcpy(&in.bytes[i * esize], &bits, static_cast<size_t>(esize));
    in.values[i] = from_bits(bits, t);
  };
  for (int64_t rr = 0; rr < rows; rr += 16) {
    for (int64_t rc = 0; rc < cols; rc += 16) {
      int kind = static_cast<int>(uni(rng) * 100);
      if (pattern == Nvfp4Pattern::kTies) kind = kind < 80 ? 70 : 45;
      if (pattern == Nvfp4Pattern::kNarrow) kind = kind < 85 ? 0 : 45;
      const double mag = pattern == Nvfp4Pattern::kNarrow ? std::pow(10.0, -2.0 + 4.0 * uni(rng))
                                                     : std::pow(10.0, lo + (hi - lo) * uni(rng));
      const int j = static_cast<int>(rng() % 15) - 7;  // tie lattice scale 2^j (its scale 2^j / 1 in UE4M3)
      for (int64_t r = rr; r < std::min(rows, rr + 16); ++r) {
        for (int64_t c = rc; c < std::min(cols, rc + 16); ++c) {
          uint32_t bits;
          if (pattern == Nvfp4Pattern::kZero) {
            bits = (rng() % 5 == 0) ? tb.sign : 0u;
          } else if (kind < 30) {
            bits = to_bits(static_cast<float>(normal(rng) * mag), t);
          } else if (kind < 42) {
            const double u = std::max(uni(rng), 1e-4);
            bits = to_bits(static_cast<float>(normal(rng) / (u * u) * mag * 1e-3), t);
          } else if (kind < 50) {
            bits = (rng() & 1) ? tb.sign : 0u;
          } else if (kind < 60) {
            bits = to_bits(static_cast<float>(normal(rng) * mag), t);
            const uint64_t z = rng() % 96;
            if (z == 0) bits = tb.inf | 1u;
            if (z == 1) bits = tb.inf;
            if (z == 2) bits = tb.inf | tb.sign;
            if (z == 3) bits = tb.sign;
            if (z == 4) bits = 1u | ((rng() & 1) ? tb.sign : 0u);
            if (z == 5) bits = smax;
          } else if (kind < 68) {
            bits = static_cast<uint32_t>(rng() % tb.min_normal) | ((rng() & 1) ? tb.sign : 0u);
          } else if (kind < 82) {
            // A lattice point (r, c) == block start holds 6 * 2^j (the block amax); the rest are
            // E2M1 values and ties, some one input ulp off.
            const double v = (c == rc) ? 6.0 : lattice[rng() % (sizeof(lattice) / sizeof(lattice[0]))];
            bits = to_bits(static_cast<float>(std::ldexp(v, j)), t);
            if (c != rc && rng() % 4 == 0 && (bits & ~tb.sign) > 0) bits += (rng() & 1) ? 1u : static_cast<uint32_t>(-1);
            if (rng() & 1) bits ^= tb.sign;
          } else if (kind < 90) {
            bits = smax - static_cast<uint32_t>(rng() % 4);
            if (rng() % 4 == 0) bits ^= tb.sign;
          } else {
            bits = to_bits(static_cast<float>(normal(rng) * mag * ((r + c) % 29 == 0 ? 1e6 : 1e-6)), t);
          }
          if ((pattern == Nvfp4Pattern::kFinite || pattern == Nvfp4Pattern::kTies || pattern == Nvfp4Pattern::kNarrow) &&
              !std::isfinite(from_bits(bits, t)))
            bits = smax | (bits & tb.sign);
          put(r, c, bits);
        }
      }
    }
  }
  if (pattern == Nvfp4Pattern::kTies) put(0, 0, to_bits(2688.0f, t));  // the tensor amax: S_enc = 1
  return in;
}

// formats' amax of the input.
inline float input_amax(const HostInput& in, int64_t rows, int64_t cols, int64_t ld) {
  return blockscale::formats::detail::block_amax(in.values.data(), ld, 0, rows, 0, cols).amax;
}

}  // namespace blockscale_test
