// Seeded test inputs shared by the block-quantize tests: never all zeros, several shapes of tail.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace blockscale_test {

enum class Dist { kNormal, kCubed, kStudentT, kOutlier };

// n values of the distribution scaled by `magnitude` (Student-t: 2 degrees of freedom; outliers:
// every 97th value 1e6 times larger).
inline std::vector<float> make_data(int64_t n, uint64_t seed, Dist dist, double magnitude) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(1e-12, 1.0);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double v = nd(rng);
    if (dist == Dist::kCubed) v = v * v * v;
    if (dist == Dist::kStudentT) v = v / std::sqrt(-std::log(ud(rng)));
    if (dist == Dist::kOutlier && i % 97 == 13) v *= 1e6;
    x[i] = static_cast<float>(v * magnitude);
  }
  return x;
}

}  // namespace blockscale_test
