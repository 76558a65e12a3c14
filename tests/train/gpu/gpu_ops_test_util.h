// Shared by train_gpu_ops_test's sources (gpu_ops_test.cpp, gpu_ops_moe_test.cpp,
// gpu_ops_loss_optimizer_test.cpp): device copies poisoned on allocation, seeded integer inputs, and
// the comparisons whose tolerances gpu_ops_test.cpp's header states.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/scalar_codecs.h"
#include "tests/gpu_test.h"  // defines: EXPECT_OK

namespace blockscale_test {
namespace gpu_ops {

using blockscale::runtime::DeviceBuffer;

// ---- Device copies, poisoned on allocation (a failure fails the test) -----------------------------

template <class T>
DeviceBuffer poisoned(size_t n) {
  DeviceBuffer b;
  blockscale::Status s = b.alloc(sizeof(T) * n, "output");
  if (s) s = blockscale::runtime::cuda_status(cudaMemset(b.data(), 0xFF, b.size()), "poison");
  EXPECT_OK(s);
  return b;
}
template <class T>
DeviceBuffer on_device(const std::vector<T>& h) {
  DeviceBuffer b;
  EXPECT_OK(b.upload(h, "input"));
  return b;
}
// The contents after the device finished.
template <class T>
std::vector<T> host_copy(const DeviceBuffer& b) {
  std::vector<T> h(b.size() / sizeof(T));
  blockscale::Status s = blockscale::runtime::cuda_status(cudaDeviceSynchronize(), "the kernels");
  if (s) s = b.download(h.data(), b.size(), "output");
  EXPECT_OK(s);
  return h;
}

// ---- Inputs --------------------------------------------------------------------------------------

inline std::vector<int32_t> uniform_ints(size_t n, int32_t lo, int32_t hi, uint64_t seed) {  // [lo, hi]
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ---- Comparisons ---------------------------------------------------------------------------------

template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (bad++ < 4) first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ:" << first;
}

// |got - want| <= rtol * |want| + atol[i] for every i (atol: one bound per element); NaN fails.
inline ::testing::AssertionResult all_near(const std::vector<float>& got, const std::vector<float>& want,
                                           double rtol, const std::vector<double>& atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  int64_t bad = 0;
  double worst = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]), tol = rtol * std::fabs(want[i]) + atol[i];
    if (err <= tol) continue;
    worst = std::isnan(err) ? err : std::max(worst, err / std::max(tol, 1e-300));
    if (bad++ < 4)
      first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements out of tolerance (worst "
                                       << worst << " x tol):" << first;
}
inline ::testing::AssertionResult all_near(const std::vector<float>& got, const std::vector<float>& want,
                                           double rtol, double atol) {
  return all_near(got, want, rtol, std::vector<double>(want.size(), atol));
}
inline uint32_t bits(float f) { return blockscale::formats::float_bits(f); }
inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double(x)));
  return m;
}
// max |got - want| <= tol * max |want| (a norm-wise bound for outputs of long bf16 products).
inline ::testing::AssertionResult normwise_near(const std::vector<float>& got, const std::vector<float>& want,
                                                double tol) {
  return all_near(got, want, 0.0, tol * max_abs(want));
}

// ---- Attention: a shape, its test name, the q / k / v columns of qkv-layout rows ------------------
struct AttentionCase {
  int batch, seq, heads, head_dim;
};
inline std::string attention_case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const auto& c = info.param;
  return "b" + std::to_string(c.batch) + "_t" + std::to_string(c.seq) + "_h" + std::to_string(c.heads) + "_hd" +
         std::to_string(c.head_dim);
}
// The columns of part `part` (0 q, 1 k, 2 v) of rows `width` wide (3 parts).
inline std::vector<float> qkv_part(const std::vector<float>& rows, size_t width, int part) {
  std::vector<float> out;
  for (size_t r = 0; r < rows.size() / width; ++r)
    for (size_t c = part * width / 3; c < (part + 1) * width / 3; ++c) out.push_back(rows[r * width + c]);
  return out;
}

}  // namespace gpu_ops
}  // namespace blockscale_test
