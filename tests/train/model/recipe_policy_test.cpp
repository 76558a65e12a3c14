// The recipe policy both training steps follow: each recipe's operand formats by role, NVFP4's
// stochastic rounding and Hadamard choices, the gradient rounding keys, the LM head's recipe.
#include "train/model/recipe_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace blockscale::train {
namespace {

using formats::Format;

TEST(RecipePolicy, Fp8BlockTakes128x128WeightsAnd1x128ActivationsAndGradients) {
  EXPECT_EQ(quantize_options(Recipe::kFp8Block, OperandRole::kWeight, false, {}).recipe, Format::kFp8Block128x128);
  EXPECT_EQ(quantize_options(Recipe::kFp8Block, OperandRole::kActivation, true, {}).recipe, Format::kFp8Block1x128);
  EXPECT_EQ(quantize_options(Recipe::kFp8Block, OperandRole::kGradient, false, {}).recipe, Format::kFp8Block1x128);
}

TEST(RecipePolicy, Mxfp8TakesE4M3ForEveryRole) {
  for (OperandRole role : {OperandRole::kActivation, OperandRole::kWeight, OperandRole::kGradient}) {
    const formats::QuantizeOptions o = quantize_options(Recipe::kMxfp8, role, true, {3, 4});
    EXPECT_EQ(o.recipe, Format::kMxfp8E4M3);
    EXPECT_FALSE(o.stochastic_rounding);
    EXPECT_FALSE(o.hadamard);
  }
}

TEST(RecipePolicy, Nvfp4RoundsGradientsStochasticallyAndTransformsWgradOperands) {
  const SrKey sr{11, 22};
  const formats::QuantizeOptions w = quantize_options(Recipe::kNvfp4, OperandRole::kWeight, false, sr);
  EXPECT_EQ(w.recipe, Format::kNvfp4);
  EXPECT_TRUE(w.nvfp4_2d);
  EXPECT_FALSE(w.stochastic_rounding);
  const formats::QuantizeOptions g = quantize_options(Recipe::kNvfp4, OperandRole::kGradient, true, sr);
  EXPECT_FALSE(g.nvfp4_2d);
  EXPECT_TRUE(g.stochastic_rounding);
  EXPECT_EQ(g.sr_seed, 11u);
  EXPECT_EQ(g.sr_offset, 22u);
  EXPECT_TRUE(g.hadamard);
  const formats::QuantizeOptions a = quantize_options(Recipe::kNvfp4, OperandRole::kActivation, false, sr);
  EXPECT_FALSE(a.stochastic_rounding);
  EXPECT_FALSE(a.hadamard);
}

TEST(RecipePolicy, GradientKeysDifferPerLayerAndMatmulAndCarryTheMicroStep) {
  std::set<uint64_t> seeds;
  for (int layer = 0; layer < 4; ++layer) {
    for (int matmul = 0; matmul < 4; ++matmul) {
      const SrKey k = gradient_sr_key(7, 5, layer, matmul);
      EXPECT_EQ(k.offset, 5u);
      seeds.insert(k.seed);
    }
  }
  EXPECT_EQ(seeds.size(), 16u);
  EXPECT_NE(gradient_sr_key(7, 5, 0, 0).seed, gradient_sr_key(8, 5, 0, 0).seed);
  EXPECT_EQ(gradient_sr_key(7, 5, 1, 2).seed, gradient_sr_key(7, 9, 1, 2).seed);
}

TEST(RecipePolicy, TheLmHeadStaysOutOfTheQuantizedRecipes) {
  EXPECT_EQ(head_recipe(Recipe::kFp32), Recipe::kFp32);
  for (Recipe r : {Recipe::kBf16, Recipe::kFp8Block, Recipe::kMxfp8, Recipe::kNvfp4})
    EXPECT_EQ(head_recipe(r), Recipe::kBf16);
}

}  // namespace
}  // namespace blockscale::train
