// The GPU step against the CPU model (its reference) on tiny configurations: the loss and every
// parameter's gradient, for each recipe, MoE and dense. Skips without a GPU.
#include "train/gpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "train/cpu_model.h"

namespace blockscale::train {
namespace {

struct Case {
  TrainRecipe recipe;
  bool moe;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(recipe_name(info.param.recipe)) + (info.param.moe ? "_moe" : "_dense");
}

class GpuBackendTest : public testing::TestWithParam<Case> {};

// Bounds, from the measured spread of the two implementations (printed by the test; on an H100:
// bf16 2.7e-3, fp8_block 4.7e-2, mxfp8 2.5e-3, nvfp4 5.1e-7 worst per-tensor gradient error; the
// FP8 blockwise kernel accumulates each 128-long partial sum in the tensor core's reduced-precision
// accumulator, the MX / NVFP4 kernel is exact in fp32 like the CPU's double): both use
// the same quantized bytes for the same inputs, but fp32 sums in another order change a few
// activations by an ulp, and an ulp can move a value across a rounding boundary of the next
// quantization: one element step of a 4- or 8-bit format. Loss: relative; gradients: per tensor,
// ||g_gpu - g_cpu||_F / ||g_cpu||_F.
double loss_bound(TrainRecipe r) { return r == TrainRecipe::kBf16 ? 1e-3 : 5e-3; }
double grad_bound(TrainRecipe r) { return r == TrainRecipe::kNvfp4 ? 0.1 : (r == TrainRecipe::kBf16 ? 0.02 : 0.05); }

TEST_P(GpuBackendTest, MatchesCpuModel) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device";
  const Case tc = GetParam();
  ModelConfig c;
  c.vocab = 96;
  c.d_model = 128;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_experts = tc.moe ? 4 : 0;
  c.top_k = 2;
  c.d_ff = 128;
  c.seq_len = 64;
  const int batch = 2;
  ASSERT_TRUE(validate(c, tc.recipe, batch * c.seq_len).is_ok());
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(batch * c.seq_len), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t(rng() % c.vocab);
    targets[i] = int32_t(rng() % c.vocab);
  }
  std::unique_ptr<StepBackend> gpu;
  ASSERT_TRUE(make_gpu_backend(c, tc.recipe, 3, &gpu).is_ok());
  std::vector<float> params, m, v;
  ASSERT_TRUE(gpu->read_state(&params, &m, &v).is_ok());
  // The initialisation as it is. With weights scaled up 2-4x the two sides drift apart in the
  // quantized recipes (measured on an H100: mxfp8 gradients 2.5e-2 apart at 2x, 0.2 at 4x): an
  // fp32 sum in another order moves a value across a rounding boundary of the next quantization,
  // and large activations amplify each such flip; bf16 stays within 7e-3.

  CpuModel cpu(c, tc.recipe);
  std::vector<float> g_cpu(params.size(), 0.0f), g_gpu;
  StepLosses l_cpu, l_gpu;
  ASSERT_TRUE(cpu.forward_backward(params.data(), tokens.data(), targets.data(), batch, 1.0f, 7, 3, g_cpu.data(), &l_cpu)
                  .is_ok());
  ASSERT_TRUE(gpu->zero_grads().is_ok());
  const Status s = gpu->forward_backward(tokens.data(), targets.data(), batch, 1.0f, 7, 3, &l_gpu);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_TRUE(gpu_backend_gradients(*gpu, &g_gpu).is_ok());
  std::printf("%s %s: loss cpu %.6f gpu %.6f, aux cpu %.6f gpu %.6f\n", recipe_name(tc.recipe), tc.moe ? "moe" : "dense",
              l_cpu.loss, l_gpu.loss, l_cpu.aux_loss, l_gpu.aux_loss);
  EXPECT_NEAR(l_gpu.loss, l_cpu.loss, loss_bound(tc.recipe) * l_cpu.loss);
  EXPECT_NEAR(l_gpu.aux_loss, l_cpu.aux_loss, 1e-3 * (1 + l_cpu.aux_loss));
  double worst = 0;
  for (const ParamTensor& t : cpu.layout().tensors) {
    double diff = 0, ref = 0;
    for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
      diff += double(g_gpu[i] - g_cpu[i]) * (g_gpu[i] - g_cpu[i]);
      ref += double(g_cpu[i]) * g_cpu[i];
    }
    const double rel = std::sqrt(diff / std::max(ref, 1e-30));
    worst = std::max(worst, rel);
    EXPECT_LE(rel, grad_bound(tc.recipe)) << t.name;
    EXPECT_GT(ref, 0.0) << t.name << ": a zero gradient proves nothing";
  }
  std::printf("  worst per-tensor gradient error %.2e (bound %.2e)\n", worst, grad_bound(tc.recipe));
}

INSTANTIATE_TEST_SUITE_P(Recipes, GpuBackendTest,
                         testing::Values(Case{TrainRecipe::kBf16, true}, Case{TrainRecipe::kBf16, false},
                                         Case{TrainRecipe::kFp8Block, true}, Case{TrainRecipe::kFp8Block, false},
                                         Case{TrainRecipe::kMxfp8, true}, Case{TrainRecipe::kMxfp8, false},
                                         Case{TrainRecipe::kNvfp4, true}, Case{TrainRecipe::kNvfp4, false}),
                         case_name);

}  // namespace
}  // namespace blockscale::train
