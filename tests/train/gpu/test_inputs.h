// Seeded inputs shared by the train GPU tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace blockscale_test {

// n values of a normal distribution (mean 0, standard deviation sd).
inline std::vector<float> normal(size_t n, float sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Inputs of the bf16 rounding tests (train/gpu/gpu_ops.h to_bf16, train/gpu/gpu_glue.h round_to_bf16):
// the special values first (zeros, infinities, NaN, FLT_MAX (rounds to infinity), subnormals,
// ties to even in both directions), then normal values of sd 100; 10019 in all, so n % 4 == 3 and
// the float4 path ends with a scalar tail.
inline std::vector<float> bf16_rounding_inputs(uint64_t seed) {
  std::vector<float> x = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3.4028235e38f, 1.0e-45f, 1.17549435e-38f,
                          1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 0x1.fffffep-127f};
  const std::vector<float> rest = normal(10007, 100.0f, seed);
  x.insert(x.end(), rest.begin(), rest.end());
  return x;
}

}  // namespace blockscale_test
