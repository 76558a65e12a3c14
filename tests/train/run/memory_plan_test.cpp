// The memory plan: its estimate against a hand computation for a small model, on the CPU and the
// GPU, and the refusal of a model no machine holds, naming what it needs and what there is.
#include "train/run/memory_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/train/tiny_model.h"
#include "train/model/params.h"

namespace blockscale::train {
namespace {

// The tests' tiny model (tests/train/tiny_model.h), checkpointing every 10 steps.
TrainConfig small() {
  TrainConfig c = blockscale_test::tiny_model_config();
  c.checkpoint_every = 10;
  return c;
}

// The model no machine holds: every value inside its documented range.
TrainConfig huge() {
  TrainConfig c = small();
  c.model.d_model = 4096;
  c.model.d_ff = 262144;
  c.model.n_layers = 64;
  c.model.n_experts = 64;
  c.model.n_heads = 32;
  return c;
}

double part(const MemoryNeed& need, const std::string& what) {
  for (const auto& [name, bytes] : need.parts)
    if (name == what) return bytes;
  ADD_FAILURE() << "no part '" << what << "'";
  return -1;
}

bool contains(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

// P = 2 V D + T D + D + L (2 D + 4 D^2 + E (3 D F + D)) = 4096 + 1024 + 32 + (64 + 4096 + 12416)
//   = 21728 parameters; M = 64 tokens, R = 128 routed rows, B H T^2 = 4096 probabilities.
constexpr double kParams = 21728;

TEST(MemoryPlan, CpuEstimateMatchesAHandComputation) {
  const TrainConfig c = small();
  ASSERT_EQ(parameter_count(c.model), kParams);
  ASSERT_EQ(make_param_layout(c.model).total, kParams);
  const MemoryPlan plan = plan_memory(c, /*on_gpu=*/false);
  EXPECT_FALSE(plan.gpu);
  EXPECT_TRUE(plan.device.parts.empty());
  EXPECT_EQ(part(plan.host, "parameters, gradients and AdamW state"), 17 * kParams);  // 369376
  // Kept per layer: 8 M D 16384 + 2 M 128 + 4096 + MoE (M E 256 + 3 M K 384 + R 128 + R (2D + 3F) 20480)
  // = 41856; the residual stream, final norm, gradients and logits 4 M D + M V = 12288; the
  // backward's temporaries M D + max(5 M D, R (2D + 3F) + M (D + K + E)) = 2048 + 22912 = 24960.
  EXPECT_EQ(part(plan.host, "activations"), 4.0 * (41856 + 12288 + 24960));  // 316416
  // The largest fp64 working copies: w13 (n 2F = 64, k 32, 4 experts, 128 rows):
  // 8 (4 * 64 * 32 + 2 * 64 * 32 + 2 * 128 * 96) = 294912 (wqkv 204800, w2 180224, LM head 147456).
  EXPECT_EQ(part(plan.host, "matmul workspace"), 294912.0);
  EXPECT_EQ(part(plan.host, "checkpoint copies"), 12 * kParams);  // 260736
  EXPECT_EQ(plan.host.total(), 369376.0 + 316416 + 294912 + 260736);

  TrainConfig no_checkpoints = c;
  no_checkpoints.checkpoint_every = -1;
  EXPECT_EQ(part(plan_memory(no_checkpoints, false).host, "checkpoint copies"), 0.0);
  no_checkpoints.resume = "runs/old";  // a resume loads one
  EXPECT_EQ(part(plan_memory(no_checkpoints, false).host, "checkpoint copies"), 12 * kParams);
}

TEST(MemoryPlan, GpuEstimateMatchesAHandComputation) {
  TrainConfig c = small();
  const MemoryPlan plan = plan_memory(c, /*on_gpu=*/true);
  EXPECT_TRUE(plan.gpu);
  EXPECT_EQ(part(plan.device, "parameters, gradients and AdamW state"), 17 * kParams);
  // bf16: the optimizer's bf16 copy of every parameter, 2 P.
  EXPECT_EQ(part(plan.device, "weight copies"), 2.0 * kParams);
  // Per layer: 8 M D 16384 + 2 M 128 + B H T^2 / 2 2048 + 3 R F 12288 + MoE (M E 256 + 4 M K 512 + E 4
  // + R D 4096 + M K D 4096) = 39812; the step's buffers 12 M D 24576 + M V 4096 + MoE (2 M E 512 +
  // M K 128 + 2.5 R D 10240 + 3 R F 12288) = 51840; copies of the operands kept for the backward
  // 2 L (2 M D + R D + R F) = 2 * 12288 and of the LM head's input 2 M D = 4096.
  EXPECT_EQ(part(plan.device, "activations"), 4.0 * (39812 + 51840) + 2.0 * 12288 + 4096);
  EXPECT_EQ(part(plan.device, "attention workspace"), 20.0 * 2048 + 6.0 * 4096);
  EXPECT_EQ(plan.host.total(), 12 * kParams);  // the checkpoint's host copies (above 5 P at start-up)

  // cuDNN's fused attention: B H T = 128 statistics per layer instead of the probabilities' 2048,
  // and 16 M D of bf16 copies as its workspace.
  const MemoryPlan fused = plan_memory(c, true, /*fused_attention=*/true);
  EXPECT_EQ(part(fused.device, "activations"), 4.0 * (39812 - 2048 + 128 + 51840) + 2.0 * 12288 + 4096);
  EXPECT_EQ(part(fused.device, "attention workspace"), 16.0 * 2048);

  // --grad-reduce bf16: the gradients' bf16 copy the ranks sum, 2 bytes a parameter.
  EXPECT_EQ(part(plan.device, "bf16 gradient sums"), 0.0);
  TrainConfig bf16_sums = c;
  bf16_sums.grad_reduce = GradReduce::kBf16;
  EXPECT_EQ(part(plan_memory(bf16_sums, true).device, "bf16 gradient sums"), 2 * kParams);
  // fp32 sums through the copy engines: a staging copy of the gradients per other rank.
  EXPECT_EQ(part(plan.device, "copy-engine staging"), 0.0);
  EXPECT_EQ(part(plan_memory(c, true, false, 3).device, "copy-engine staging"), 3 * 4 * kParams);
  EXPECT_EQ(part(plan_memory(bf16_sums, true, false, 3).device, "copy-engine staging"), 0.0);  // bf16: NCCL

  c.recipe = Recipe::kFp8Block;  // 2 bytes a matmul weight, L (4 D^2 + 3 E D F) = 4096 + 12288, and the LM head's V D
  EXPECT_EQ(part(plan_memory(c, true).device, "weight copies"), 2.0 * (4096 + 12288) + 2.0 * 2048);
  c.recipe = Recipe::kFp32;  // multiplies the fp32 tensors themselves
  EXPECT_EQ(part(plan_memory(c, true).device, "weight copies"), 0.0);
  c.recipe = Recipe::kMxfp8;
  c.gemm_route = gemm::GemmRoute::kKernel;
  const double kernel = part(plan_memory(c, true).device, "weight copies");
  c.gemm_route = gemm::GemmRoute::kBf16Values;
  EXPECT_EQ(part(plan_memory(c, true).device, "weight copies") - kernel, 2.0 * (4096 + 12288));
}

// Refused with one line naming both figures (before: std::bad_alloc, an abort).
TEST(MemoryPlan, AModelNoMachineHoldsIsRefusedNamingBothFigures) {
  const MemoryPlan plan = plan_memory(huge(), false);
  const double available = 31.2 * (1ull << 30);
  const Status s = check_memory(plan, available, -1);
  ASSERT_FALSE(s.is_ok());
  const std::string& m = s.message();
  EXPECT_TRUE(contains(m, "the run needs about " + format_bytes(plan.host.total()) + " of host memory (")) << m;
  EXPECT_TRUE(contains(m, "parameters, gradients and AdamW state " +
                              format_bytes(part(plan.host, "parameters, gradients and AdamW state"))))
      << m;
  EXPECT_TRUE(contains(m, "; this machine has 31.2 GiB available")) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);

  const MemoryPlan gpu = plan_memory(huge(), true);
  const Status g = check_memory(gpu, 1e30, 80.0 * (1ull << 30));
  EXPECT_TRUE(contains(g.message(), "the run needs about " + format_bytes(gpu.device.total()) + " of GPU memory"))
      << g.message();
  EXPECT_TRUE(contains(g.message(), "; the GPU has 80.0 GiB free")) << g.message();
}

TEST(MemoryPlan, ASmallModelFitsAndAnUnknownMachineIsNotChecked) {
  const MemoryPlan plan = plan_memory(small(), false);
  EXPECT_TRUE(check_memory(plan, 1ull << 30, -1));
  EXPECT_FALSE(check_memory(plan, plan.host.total() - 1, -1));
  EXPECT_TRUE(check_memory(plan_memory(huge(), false), -1, -1));
  EXPECT_GT(host_memory_available(), 0.0);  // Linux: MemAvailable
}

TEST(MemoryPlan, FormatBytes) {
  EXPECT_EQ(format_bytes(512), "512 bytes");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(412.3 * (1ull << 30)), "412.3 GiB");
  EXPECT_EQ(format_bytes(3.0 * (1ull << 40)), "3.0 TiB");
}

}  // namespace
}  // namespace blockscale::train
