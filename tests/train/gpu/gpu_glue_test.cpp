// Tests of train/gpu/gpu_glue.h: the MoE gather, bf16 rounding and the element-wise add, each against a
// host loop, bit for bit (a copy, the formats codec, one fp32 add). Every case runs twice: on
// 16-byte-aligned pointers (the float4 path and its scalar tail) and one element off (the scalar
// path). Outputs start poisoned (0xFF bytes) so an element never written fails. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/scalar_codecs.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA
#include "tests/train/gpu/test_inputs.h"  // normal, bf16_rounding_inputs
#include "train/gpu/gpu_glue.h"

namespace {

namespace gpu = blockscale::train::gpu;
using blockscale::runtime::DeviceBuffer;

using blockscale_test::normal;

// `host` on the device at element `offset` of a poisoned buffer.
template <class T>
::testing::AssertionResult upload_at(const std::vector<T>& host, size_t offset, DeviceBuffer* b) {
  blockscale::Status s = b->alloc(sizeof(T) * (host.size() + offset), "input");
  if (s) s = blockscale::runtime::cuda_status(cudaMemset(b->data(), 0xFF, b->size()), "poison");
  if (s && !host.empty()) {
    s = blockscale::runtime::cuda_status(
        cudaMemcpy(b->data() + sizeof(T) * offset, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice),
        "input");
  }
  if (!s) return ::testing::AssertionFailure() << s.message();
  return ::testing::AssertionSuccess();
}
template <class T>
std::vector<T> download_at(const DeviceBuffer& b, size_t offset, size_t n) {
  std::vector<T> h(n);
  blockscale::Status s = blockscale::runtime::cuda_status(cudaDeviceSynchronize(), "the kernel");
  if (s && n > 0) {
    s = blockscale::runtime::cuda_status(
        cudaMemcpy(h.data(), b.data() + sizeof(T) * offset, sizeof(T) * n, cudaMemcpyDeviceToHost), "output");
  }
  if (!s) ADD_FAILURE() << s.message();
  return h;
}
template <class T>
T* at(const DeviceBuffer& b, size_t offset) {
  return b.as<T>() + offset;
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0);
}

struct GatherCase {
  int64_t x_rows, rows;
  int d;
};

class GatherRowsTest : public ::testing::TestWithParam<GatherCase> {};

TEST_P(GatherRowsTest, CopiesTheIndexedRowsAndZerosTheRest) {
  SKIP_WITHOUT_GPU();
  const GatherCase c = GetParam();
  const auto x = normal(size_t(c.x_rows) * c.d, 1.0f, 7);
  std::vector<int32_t> index(c.rows);
  std::mt19937 rng(8);
  for (int64_t r = 0; r < c.rows; ++r) index[r] = int32_t(rng() % (c.x_rows + 2)) - 1;  // -1 and x_rows: zero rows
  std::vector<float> want(size_t(c.rows) * c.d, 0.0f);
  for (int64_t r = 0; r < c.rows; ++r)
    if (index[r] >= 0 && index[r] < c.x_rows)
      for (int j = 0; j < c.d; ++j) want[r * c.d + j] = x[index[r] * c.d + j];
  for (const size_t offset : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    DeviceBuffer dx, dindex, dout;
    ASSERT_TRUE(upload_at(x, offset, &dx));
    ASSERT_TRUE(upload_at(index, 0, &dindex));
    ASSERT_TRUE(upload_at(std::vector<float>(want.size()), offset, &dout));
    ASSERT_CUDA(cudaMemset(dout.data(), 0xFF, dout.size()));
    gpu::gather_rows(at<float>(dx, offset), c.x_rows, c.d, at<int32_t>(dindex, 0), c.rows, at<float>(dout, offset),
                     nullptr);
    EXPECT_TRUE(same_bits(download_at<float>(dout, offset, want.size()), want));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatherRowsTest,
                         ::testing::Values(GatherCase{5, 9, 1}, GatherCase{17, 40, 33}, GatherCase{64, 300, 128},
                                           GatherCase{1000, 2003, 68}),
                         [](const ::testing::TestParamInfo<GatherCase>& i) {
                           return "x" + std::to_string(i.param.x_rows) + "_rows" + std::to_string(i.param.rows) +
                                  "_d" + std::to_string(i.param.d);
                         });

// NaN stays a quiet NaN, infinities and -0 stay, ties round to even, FLT_MAX rounds to infinity.
TEST(RoundToBf16Test, RoundsInPlaceAndWritesTheBits) {
  SKIP_WITHOUT_GPU();
  const auto x = blockscale_test::bf16_rounding_inputs(9);
  std::vector<uint16_t> want_bits(x.size());
  std::vector<float> want_x(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want_bits[i] = blockscale::formats::float_to_bf16_bits_rn(x[i]);
    want_x[i] = blockscale::formats::bf16_bits_to_float(want_bits[i]);
  }
  for (const size_t offset : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    DeviceBuffer dx, dbits;
    ASSERT_TRUE(upload_at(x, offset, &dx));
    ASSERT_TRUE(upload_at(std::vector<uint16_t>(x.size(), 0xFFFF), offset, &dbits));
    gpu::round_to_bf16(at<float>(dx, offset), at<uint16_t>(dbits, offset), int64_t(x.size()), nullptr);
    EXPECT_TRUE(same_bits(download_at<uint16_t>(dbits, offset, x.size()), want_bits)) << "bits";
    EXPECT_TRUE(same_bits(download_at<float>(dx, offset, x.size()), want_x)) << "x";
  }
}

TEST(AddInplaceTest, AddsElementWise) {
  SKIP_WITHOUT_GPU();
  for (const size_t n : {size_t{1}, size_t{7}, size_t{4096}, size_t{100003}}) {
    const auto y = normal(n, 1.0f, 10 + n), x = normal(n, 1.0f, 11 + n);
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = y[i] + x[i];
    for (const size_t offset : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", offset " + std::to_string(offset));
      DeviceBuffer dy, dx;
      ASSERT_TRUE(upload_at(y, offset, &dy));
      ASSERT_TRUE(upload_at(x, offset, &dx));
      gpu::add_inplace(at<float>(dy, offset), at<float>(dx, offset), int64_t(n), nullptr);
      EXPECT_TRUE(same_bits(download_at<float>(dy, offset, n), want));
    }
  }
}

}  // namespace
