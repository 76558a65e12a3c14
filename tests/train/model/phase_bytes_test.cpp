// The step's phase floors (train/model/phase_bytes.h) against a hand computation of the header's
// formulas for a small MoE model, and their recipe dependence.
#include "train/model/phase_bytes.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace blockscale::train {
namespace {

ModelConfig small_moe() {
  ModelConfig c;
  c.vocab = 100, c.d_model = 128, c.n_layers = 2, c.n_heads = 4, c.n_experts = 4, c.top_k = 2, c.d_ff = 64;
  c.seq_len = 32;
  return c;
}

std::map<std::string, double> bytes_of(Recipe r) {
  const auto v = step_phase_bytes(small_moe(), r, /*batch=*/2, /*grad_accum=*/3);
  return {v.begin(), v.end()};
}

TEST(PhaseBytes, MatchAHandComputation) {
  // M 64 tokens, R 128 routed rows, D 128, F 64, V 100, L 2, G 4 experts, 3 micro-batches.
  // Per micro-batch: activations 2 (2 M D + R D + R F) = 81920, gradients 2 (4 M D + 2 R F + R D) =
  // 131072; per step: weights 2 (4 D^2 + 3 G D F) = 327680. The LM head's bf16 copies: 6 bytes each
  // of 3 (M D + M V) + V D = 56576 elements.
  const auto fp8 = bytes_of(Recipe::kFp8Block);
  EXPECT_DOUBLE_EQ(fp8.at("quantize"), (6 + 8.0 / 128) * (3 * (81920 + 131072) + 327680) + 6 * 56576.0);
  EXPECT_DOUBLE_EQ(fp8.at("norms"), 3 * 5 * 24 * 64 * 128.0);               // 5 RMSNorms per micro-batch
  EXPECT_DOUBLE_EQ(fp8.at("embedding_loss"), 3 * (24 * 64 * 128.0 + 8 * 64 * 100.0));
  EXPECT_DOUBLE_EQ(fp8.at("optimizer"), 33.0 * double(parameter_count(small_moe())));
  // bf16: the optimizer writes the weights' bf16 copies (2 bytes a parameter), the quantize phase
  // only the activations', gradients' and the LM head's inputs' (3 (M D + M V) = 43776 elements).
  const auto bf16 = bytes_of(Recipe::kBf16);
  EXPECT_DOUBLE_EQ(bf16.at("quantize"), 6 * (3 * (81920 + 131072)) + 6 * 43776.0);
  EXPECT_DOUBLE_EQ(bf16.at("optimizer"), 35.0 * double(parameter_count(small_moe())));
}

TEST(PhaseBytes, FollowTheRecipe) {
  const double fp8 = bytes_of(Recipe::kFp8Block).at("quantize"), mx = bytes_of(Recipe::kMxfp8).at("quantize"),
               nv = bytes_of(Recipe::kNvfp4).at("quantize"), bf16 = bytes_of(Recipe::kBf16).at("quantize");
  EXPECT_LT(nv, fp8);   // 4-bit copies
  EXPECT_LT(bf16, fp8);  // one bf16 copy, no scales
  EXPECT_GT(mx, bf16);
  EXPECT_DOUBLE_EQ(bytes_of(Recipe::kFp32).at("quantize"), 0.0);  // fp32 multiplies the tensors themselves
  EXPECT_DOUBLE_EQ(bytes_of(Recipe::kFp32).at("optimizer"), bytes_of(Recipe::kNvfp4).at("optimizer"));
}

}  // namespace
}  // namespace blockscale::train
