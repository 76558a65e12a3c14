// Tests of train/gpu/gpu_ops.h's loss and optimizer ops against train/cpu/cpu_ops.h, the host formula or
// the formats codec: cross-entropy, sum / sum_of_squares and scale, AdamW (with clipping on the
// device), bf16 conversion. Poisoned outputs, tolerances and determinism as gpu_ops_test.cpp's
// header states; helpers in gpu_ops_test_util.h. GPU tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "formats/scalar_codecs.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK
#include "tests/train/gpu/gpu_ops_test_util.h"
#include "tests/train/gpu/test_inputs.h"  // normal, bf16_rounding_inputs
#include "train/cpu/cpu_ops.h"
#include "train/gpu/gpu_ops.h"
#include "train/model/optimizer.h"  // clip_factor

namespace {

using namespace blockscale_test::gpu_ops;  // gpu_ops_test_util.h
namespace cpu = blockscale::train;
namespace gpu = blockscale::train::gpu;
using blockscale::train::clip_factor;
using blockscale_test::normal;

// ---- Cross-entropy -------------------------------------------------------------------------------

struct CrossEntropyCase {
  int64_t rows;
  int vocab;
};
std::string ce_case_name(const ::testing::TestParamInfo<CrossEntropyCase>& info) {
  return "rows" + std::to_string(info.param.rows) + "_vocab" + std::to_string(info.param.vocab);
}
class CrossEntropyTest : public ::testing::TestWithParam<CrossEntropyCase> {};

TEST_P(CrossEntropyTest, LossesAndGradientMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = GetParam().rows;
  const int vocab = GetParam().vocab;
  const size_t n = size_t(rows) * vocab;
  const auto logits = normal(n, 2.0f, 91);
  const auto targets = uniform_ints(rows, 0, vocab - 1, 92);
  const float grad_scale = 1.0f / float(rows);
  std::vector<float> loss_ref(rows), dlogits_ref(n);
  for (int64_t r = 0; r < rows; ++r)  // one row at a time: the CPU returns only the sum
    loss_ref[r] = float(cpu::cross_entropy(logits.data() + r * vocab, targets.data() + r, 1, vocab, grad_scale,
                                           dlogits_ref.data() + r * vocab));
  const double total_ref = cpu::cross_entropy(logits.data(), targets.data(), rows, vocab, grad_scale, nullptr);

  // loss: the fp32 sum of exps (per-thread runs of <= 256 terms, <= 32 on the warp-per-row path,
  // then a tree) is within (256 + 8) * 2^-24 ~ 1.6e-5 of the double one at worst (~1e-6 typically), which becomes an
  // absolute error of the logsumexp; plus a few ulps of it (< 20 here): 3e-5 absolute. dlogits:
  // p = expf(z - logsumexp) inherits that as a relative error: 3e-5; the target's p - 1 cancels,
  // so plus 3e-5 of grad_scale.
  DeviceBuffer d_targets = on_device(targets);
  enum Mode { kSeparate, kInPlace, kLossOnly };
  for (Mode mode : {kSeparate, kInPlace, kLossOnly}) {
    SCOPED_TRACE(mode == kSeparate ? "separate dlogits" : mode == kInPlace ? "dlogits aliasing logits" : "no dlogits");
    DeviceBuffer d_logits = on_device(logits), losses = poisoned<float>(rows),
                 dlogits = poisoned<float>(mode == kSeparate ? n : 0);
    float* dl = mode == kSeparate ? dlogits.as<float>() : mode == kInPlace ? d_logits.as<float>() : nullptr;
    ASSERT_OK(gpu::cross_entropy(d_logits.as<float>(), d_targets.as<int32_t>(), rows, vocab, grad_scale,
                                 losses.as<float>(), dl, nullptr));
    const auto gl = host_copy<float>(losses);
    EXPECT_TRUE(all_near(gl, loss_ref, 0.0, 3e-5)) << "losses";
    if (mode == kSeparate)
      EXPECT_TRUE(all_near(host_copy<float>(dlogits), dlogits_ref, 3e-5, 3e-5 * grad_scale)) << "dlogits";
    if (mode == kInPlace)
      EXPECT_TRUE(all_near(host_copy<float>(d_logits), dlogits_ref, 3e-5, 3e-5 * grad_scale)) << "dlogits";
    if (mode == kLossOnly) EXPECT_TRUE(same_bits(host_copy<float>(d_logits), logits)) << "logits must be untouched";
    DeviceBuffer total = poisoned<float>(1);
    DeviceBuffer ws = poisoned<uint8_t>(gpu::reduction_workspace_bytes(rows));
    ASSERT_OK(gpu::sum(losses.as<float>(), rows, total.as<float>(), ws.as<uint8_t>(), ws.size(), nullptr));
    EXPECT_NEAR(host_copy<float>(total)[0], total_ref, 3e-5 * rows + 1e-5 * std::fabs(total_ref)) << "summed loss";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyTest,
                         ::testing::Values(CrossEntropyCase{1, 50}, CrossEntropyCase{7, 1000}, CrossEntropyCase{129, 50},
                                           CrossEntropyCase{5, 65536}, CrossEntropyCase{3, 50257},
                                           // a warp per row (vocab % 4 == 0, <= 1024): the step's 256, the
                                           // largest, the smallest; then the block path just past it
                                           CrossEntropyCase{4096, 256}, CrossEntropyCase{33, 1024},
                                           CrossEntropyCase{9, 4}, CrossEntropyCase{7, 1028}),
                         ce_case_name);

TEST(CrossEntropyTargetTest, OutOfRangeTargetGivesNanLossAndNoOneHot) {
  SKIP_WITHOUT_GPU();
  const int vocab = 50;
  const auto logits = normal(2 * vocab, 2.0f, 93);
  DeviceBuffer d_logits = on_device(logits), losses = poisoned<float>(2), dlogits = poisoned<float>(2 * vocab);
  DeviceBuffer targets = on_device(std::vector<int32_t>{-1, vocab});
  ASSERT_OK(gpu::cross_entropy(d_logits.as<float>(), targets.as<int32_t>(), 2, vocab, 0.5f, losses.as<float>(),
                               dlogits.as<float>(), nullptr));
  for (float l : host_copy<float>(losses)) EXPECT_TRUE(std::isnan(l));
  const auto g = host_copy<float>(dlogits);
  for (int r = 0; r < 2; ++r) {  // softmax * 0.5: positive, summing to 0.5
    double s = 0;
    for (int v = 0; v < vocab; ++v) {
      EXPECT_GT(g[r * vocab + v], 0.0f);
      s += g[r * vocab + v];
    }
    EXPECT_NEAR(s, 0.5, 1e-5);
  }
}

// ---- Sums, scale ---------------------------------------------------------------------------------

class ReductionTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ReductionTest, SumsMatchDoubleAndRepeatBitForBit) {
  SKIP_WITHOUT_GPU();
  const int64_t n = GetParam();
  const auto x = normal(size_t(n), 1.0f, 101);
  double sum_ref = 0, sq_ref = 0, abs_ref = 0;
  for (float v : x) sum_ref += v, sq_ref += double(v) * v, abs_ref += std::fabs(v);
  DeviceBuffer d_x = on_device(x);
  DeviceBuffer ws = poisoned<uint8_t>(gpu::reduction_workspace_bytes(n));
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer out = poisoned<float>(2);
    ASSERT_OK(gpu::sum(d_x.as<float>(), n, out.as<float>(), ws.as<uint8_t>(), ws.size(), nullptr));
    ASSERT_OK(gpu::sum_of_squares(d_x.as<float>(), n, out.as<float>() + 1, ws.as<uint8_t>(), ws.size(), nullptr));
    const auto o = host_copy<float>(out);
    // Per-thread runs of <= 16 (or n / 262144) terms, then trees of 256 and <= 1024: the error is
    // far below 1e-5 of the sum of |terms| (which bounds the sum's cancellation too).
    EXPECT_NEAR(o[0], sum_ref, 1e-5 * abs_ref) << "sum";
    EXPECT_NEAR(o[1], sq_ref, 1e-5 * sq_ref) << "sum_of_squares";
    if (run == 0) first = o;
    else EXPECT_TRUE(same_bits(o, first)) << "second run differs";
  }
}

// Up to 4096 one block writes the sum; 4097 takes the partials and the ordered pass.
INSTANTIATE_TEST_SUITE_P(Sizes, ReductionTest, ::testing::Values(1, 1000, 4096, 4097, (1 << 20) + 3, 5000003));

// ---- AdamW ---------------------------------------------------------------------------------------

struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// The formula of gpu_ops.h written as a host loop (ISO C++: GCC does not contract into fma).
void adamw_host(std::vector<float>& p, const std::vector<float>& grads, float grad_scale, std::vector<float>& m,
                std::vector<float>& v, const AdamWHyper& h, int64_t step, const std::vector<uint8_t>* mask) {
  const float bias1 = 1.0f - float(std::pow(double(h.beta1), double(step)));
  const float bias2 = 1.0f - float(std::pow(double(h.beta2), double(step)));
  for (size_t i = 0; i < p.size(); ++i) {
    const float g = grads[i] * grad_scale;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    const float mhat = m[i] / bias1, vhat = v[i] / bias2;
    float u = mhat / (std::sqrt(vhat) + h.eps);
    if (mask == nullptr || (*mask)[i] != 0) u = u + h.weight_decay * p[i];
    p[i] = p[i] - h.lr * u;
  }
}

// Offset 0: the float4 path (and its scalar tail, n % 4 == 3); offset 1: every pointer one element
// off 16-byte alignment, the scalar path.
TEST(AdamWTest, MatchesTheHostFormulaBitForBit) {
  SKIP_WITHOUT_GPU();
  const size_t n = 4103;
  const AdamWHyper h;
  std::vector<uint8_t> mask(n);
  for (size_t i = 0; i < n; ++i) mask[i] = uint8_t(i % 3 != 0);
  for (const size_t offset : {size_t{0}, size_t{1}})
    for (const bool masked : {false, true}) {
      SCOPED_TRACE(std::string(masked ? "decay mask" : "no mask: every element decays") + ", offset " +
                   std::to_string(offset));
      std::vector<float> p = normal(n, 0.02f, 121), m(n, 0.0f), v(n, 0.0f);
      const auto at = [offset](std::vector<float> x) {
        x.insert(x.begin(), offset, 0.0f);
        return x;
      };
      std::vector<uint8_t> shifted_mask = mask;
      shifted_mask.insert(shifted_mask.begin(), offset, uint8_t{0});
      DeviceBuffer d_p = on_device(at(p)), d_m = on_device(at(m)), d_v = on_device(at(v));
      DeviceBuffer d_mask = on_device(shifted_mask);
      // The bf16 copy written with the parameters (to_bf16's bits), poisoned first.
      DeviceBuffer d_p16 = on_device(std::vector<uint16_t>(n + offset, uint16_t{0xFFFF}));
      const auto tail = [offset](const std::vector<float>& x) {
        return std::vector<float>(x.begin() + offset, x.end());
      };
      for (const int64_t step : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1000}}) {
        const auto g = normal(n, 1e-2f, 122 + uint64_t(step));
        const float grad_scale = step == 2 ? 0.37f : 1.0f;  // clipping, at one step
        DeviceBuffer d_g = on_device(at(g));
        adamw_host(p, g, grad_scale, m, v, h, step, masked ? &mask : nullptr);
        ASSERT_OK(gpu::adamw_step(d_p.as<float>() + offset, d_g.as<float>() + offset, {grad_scale},
                                  d_m.as<float>() + offset, d_v.as<float>() + offset, int64_t(n), h.lr, h.beta1,
                                  h.beta2, h.eps, h.weight_decay, step,
                                  masked ? d_mask.as<uint8_t>() + offset : nullptr, nullptr,
                                  step == 3 ? nullptr : d_p16.as<uint16_t>() + offset));
        EXPECT_TRUE(same_bits(tail(host_copy<float>(d_g)), g)) << "grads are not written, step " << step;
        EXPECT_TRUE(same_bits(tail(host_copy<float>(d_p)), p)) << "params, step " << step;
        if (step != 3) {  // step 3 asks for no copy (the update alone)
          const std::vector<uint16_t> p16 = host_copy<uint16_t>(d_p16);
          int64_t wrong = 0;
          for (size_t i = 0; i < n; ++i) wrong += p16[offset + i] != blockscale::formats::float_to_bf16_bits_rn(p[i]);
          EXPECT_EQ(wrong, 0) << "bf16 copy, step " << step;
        }
        EXPECT_TRUE(same_bits(tail(host_copy<float>(d_m)), m)) << "m, step " << step;
        EXPECT_TRUE(same_bits(tail(host_copy<float>(d_v)), v)) << "v, step " << step;
      }
    }
}

// The clipping factor read on the device from a sum of squares: the host's clip_factor, bit for bit.
TEST(AdamWTest, ClipsOnTheDeviceAsTheHostDoes) {
  SKIP_WITHOUT_GPU();
  const size_t n = 1031;
  const AdamWHyper h;
  struct Case {
    float sum_sq, clip_norm;
  };
  // Clipped (two norms, one not a square), not clipped, exactly at the limit, clipping off.
  const Case cases[] = {{2.5f, 1.0f}, {1234.567f, 0.3f}, {0.25f, 1.0f}, {4.0f, 2.0f}, {9.0f, 0.0f}};
  for (const Case k : cases) {
    const float factor = clip_factor(std::sqrt(double(k.sum_sq)), k.clip_norm);
    SCOPED_TRACE("sum of squares " + std::to_string(k.sum_sq) + ", clip_norm " + std::to_string(k.clip_norm) +
                 ", factor " + std::to_string(factor));
    std::vector<float> p = normal(n, 0.02f, 141), m = normal(n, 1e-3f, 142), v(n, 1e-6f);
    const auto g = normal(n, 1e-1f, 143);
    DeviceBuffer d_p = on_device(p), d_m = on_device(m), d_v = on_device(v), d_g = on_device(g),
                 d_sum_sq = on_device(std::vector<float>{k.sum_sq}), d_factor = poisoned<float>(1);
    adamw_host(p, g, factor, m, v, h, 7, nullptr);
    ASSERT_OK(gpu::clip_factor_on_device(d_sum_sq.as<float>(), k.clip_norm, d_factor.as<float>(), nullptr));
    EXPECT_TRUE(same_bits(host_copy<float>(d_factor), std::vector<float>{factor})) << "the factor";
    ASSERT_OK(gpu::adamw_step(d_p.as<float>(), d_g.as<float>(), {1.0f, d_factor.as<float>()}, d_m.as<float>(),
                              d_v.as<float>(), int64_t(n), h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, 7, nullptr,
                              nullptr));
    EXPECT_TRUE(same_bits(host_copy<float>(d_p), p)) << "params";
    EXPECT_TRUE(same_bits(host_copy<float>(d_m), m)) << "m";
    EXPECT_TRUE(same_bits(host_copy<float>(d_v), v)) << "v";
  }
  // The cases above must clip: a factor of 1 everywhere would not test the device's formula.
  EXPECT_LT(clip_factor(std::sqrt(2.5), 1.0f), 1.0f);
  EXPECT_LT(clip_factor(std::sqrt(double(1234.567f)), 0.3f), 1.0f);
}

// ---- bf16 conversion -----------------------------------------------------------------------------

// From element 0: the float4 path with a 3-element tail; from element 1 on, the scalar path.
TEST(ToBf16Test, MatchesTheFormatsCodecBitForBit) {
  SKIP_WITHOUT_GPU();
  const auto x = blockscale_test::bf16_rounding_inputs(131);
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = blockscale::formats::float_to_bf16_bits_rn(x[i]);
  DeviceBuffer d_x = on_device(x);
  for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    DeviceBuffer y = poisoned<uint16_t>(x.size());
    ASSERT_OK(gpu::to_bf16(d_x.as<float>() + offset, int64_t(x.size()) - offset, y.as<uint16_t>() + offset, nullptr));
    auto got = host_copy<uint16_t>(y);
    if (offset) got[0] = want[0];  // not written
    EXPECT_TRUE(same_bits(got, want));
  }
}

}  // namespace
