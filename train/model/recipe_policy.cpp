#include "train/model/recipe_policy.h"

namespace blockscale::train {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

}  // namespace

formats::QuantizeOptions quantize_options(Recipe recipe, OperandRole role, bool wgrad_operand,
                                          SrKey sr) {
  using formats::Format;
  formats::QuantizeOptions o;
  switch (recipe) {
    case Recipe::kFp8Block:
      o.recipe = role == OperandRole::kWeight ? Format::kFp8Block128x128 : Format::kFp8Block1x128;
      break;
    case Recipe::kMxfp8:
      o.recipe = Format::kMxfp8E4M3;
      break;
    case Recipe::kNvfp4:
      o.recipe = Format::kNvfp4;
      o.nvfp4_2d = role == OperandRole::kWeight;
      o.stochastic_rounding = role == OperandRole::kGradient;
      o.sr_seed = sr.seed;
      o.sr_offset = sr.offset;
      o.hadamard = wgrad_operand;
      break;
    default:
      break;
  }
  return o;
}

SrKey gradient_sr_key(uint64_t run_seed, int64_t micro_step, int layer, int matmul) {
  SrKey k;
  k.seed = mix(mix(run_seed, static_cast<uint64_t>(layer) + 1), static_cast<uint64_t>(matmul) + 1);
  k.offset = static_cast<uint64_t>(micro_step);
  return k;
}

Recipe head_recipe(Recipe r) { return r == Recipe::kFp32 ? Recipe::kFp32 : Recipe::kBf16; }

}  // namespace blockscale::train
