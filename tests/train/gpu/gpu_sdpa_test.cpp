// train/gpu/gpu_sdpa.h (cuDNN's fused attention) against the CPU reference attention
// (train/cpu/cpu_ops.h), which rounds q, k, v, the probabilities and dS to bf16 as the reference
// GPU path does. Flash attention rounds at other points (it normalises O at the end, keeps the
// unnormalised probabilities in bf16 for P V, writes O in bf16), so the outputs agree to a few bf16
// ulps of the largest values: normwise within 2e-2 (forward) and 3e-2 (backward, which also
// reads the bf16 O), while a wrong head, mask or layout is O(1). The backward runs twice and must
// give the same bits (cuDNN's deterministic algorithm). Outputs start poisoned (NaN). Skips
// without a GPU, or in a build without the cuDNN frontend (the step then runs the reference).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK
#include "tests/train/gpu/gpu_ops_test_util.h"
#include "tests/train/gpu/test_inputs.h"  // normal
#include "train/cpu/cpu_ops.h"
#include "train/gpu/gpu_sdpa.h"

namespace {

using namespace blockscale_test::gpu_ops;  // gpu_ops_test_util.h
namespace cpu = blockscale::train;
using blockscale::train::gpu::FusedAttention;
using blockscale_test::normal;

class FusedAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(FusedAttentionTest, MatchesTheReferenceAttention) {
  SKIP_WITHOUT_GPU();
  if (!FusedAttention::built()) GTEST_SKIP() << "built without the cuDNN frontend";
  const AttentionCase c = GetParam();
  const int B = c.batch, T = c.seq, H = c.heads, hd = c.head_dim;
  const size_t rows = size_t(B) * T, width = 3 * size_t(H) * hd, square = size_t(B) * H * T * T;
  const auto qkv = normal(rows * width, 1.0f, 41), dout = normal(rows * H * hd, 1.0f, 42);
  std::vector<float> probs_ref(square), out_ref(rows * H * hd), dqkv_ref(rows * width);
  cpu::attention_forward(qkv.data(), B, T, H, hd, probs_ref.data(), out_ref.data());
  cpu::attention_backward(qkv.data(), probs_ref.data(), dout.data(), B, T, H, hd, dqkv_ref.data());

  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  FusedAttention attention;
  ASSERT_OK(attention.prepare(B, T, H, hd, stream));
  DeviceBuffer ws = poisoned<uint8_t>(attention.workspace_bytes(B));
  DeviceBuffer d_qkv = on_device(qkv), d_dout = on_device(dout), out = poisoned<float>(rows * H * hd),
               stats = poisoned<float>(size_t(B) * H * T), dqkv = poisoned<float>(rows * width);
  ASSERT_OK(attention.forward(d_qkv.as<float>(), B, out.as<float>(), stats.as<float>(), ws.as<uint8_t>(), stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  EXPECT_TRUE(normwise_near(host_copy<float>(out), out_ref, 2e-2)) << "out";
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    ASSERT_CUDA(cudaMemset(dqkv.as<float>(), 0xFF, dqkv.size()));
    ASSERT_OK(attention.backward(d_qkv.as<float>(), out.as<float>(), stats.as<float>(), d_dout.as<float>(), B,
                                 dqkv.as<float>(), ws.as<uint8_t>(), stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    const auto g = host_copy<float>(dqkv);
    for (int part = 0; part < 3; ++part)
      EXPECT_TRUE(normwise_near(qkv_part(g, width, part), qkv_part(dqkv_ref, width, part), 3e-2))
          << "d" << "qkv"[part] << ", run " << run;
    if (run == 0) first = g;
    else EXPECT_TRUE(same_bits(g, first)) << "second backward differs";
  }
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

// Head widths of the models here (32, 64, 128), odd sequence lengths, several batches.
INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttentionTest,
                         ::testing::Values(AttentionCase{1, 64, 4, 32}, AttentionCase{2, 100, 2, 64},
                                           AttentionCase{3, 257, 2, 128}, AttentionCase{1, 1024, 2, 128}),
                         attention_case_name);

TEST(FusedAttention, RefusesBadShapesAndUnpreparedBatches) {
  SKIP_WITHOUT_GPU();
  if (!FusedAttention::built()) GTEST_SKIP() << "built without the cuDNN frontend";
  FusedAttention attention;
  EXPECT_FALSE(attention.prepare(0, 64, 2, 32, nullptr).is_ok());
  ASSERT_OK(attention.prepare(1, 64, 2, 32, nullptr));
  EXPECT_FALSE(attention.prepare(1, 65, 2, 32, nullptr).is_ok()) << "another seq after the first";
  float f = 0;
  EXPECT_FALSE(attention.forward(&f, 2, &f, &f, &f, nullptr).is_ok()) << "batch 2 was not prepared";
  EXPECT_EQ(attention.workspace_bytes(2), 0u);
}

}  // namespace
