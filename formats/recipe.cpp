#include "formats/recipe.h"

namespace blockscale::formats {

bool is_mx(Recipe r) {
  switch (r) {
    case Recipe::kMxfp8E4M3:
    case Recipe::kMxfp8E5M2:
    case Recipe::kMxfp6E2M3:
    case Recipe::kMxfp6E3M2:
    case Recipe::kMxfp4:
      return true;
    default:
      return false;
  }
}

bool is_fp4(Recipe r) { return r == Recipe::kMxfp4 || r == Recipe::kNvfp4; }

bool is_fp8_block(Recipe r) {
  return r == Recipe::kFp8Block1x128 || r == Recipe::kFp8Block128x128;
}

const MinifloatSpec& element_spec(Recipe r) {
  switch (r) {
    case Recipe::kMxfp8E5M2: return kE5M2;
    case Recipe::kMxfp6E2M3: return kE2M3;
    case Recipe::kMxfp6E3M2: return kE3M2;
    case Recipe::kMxfp4:
    case Recipe::kNvfp4: return kE2M1;
    default: return kE4M3;  // MXFP8 E4M3 and FP8 blockwise
  }
}

float element_max(Recipe r) {
  const MinifloatSpec& s = element_spec(r);
  return decode_minifloat(s.max_code, s);
}

int default_block_rows(Recipe r, bool nvfp4_2d) {
  if (r == Recipe::kNvfp4 && nvfp4_2d) return 16;
  if (r == Recipe::kFp8Block128x128) return 128;
  return 1;
}

int default_block_cols(Recipe r) {
  if (r == Recipe::kNvfp4) return 16;
  if (is_fp8_block(r)) return 128;
  return 32;
}

int64_t QuantizedMatrix::data_row_bytes() const { return is_fp4(recipe) ? (cols + 1) / 2 : cols; }

namespace {
struct RecipeName {
  Recipe recipe;
  const char* name;
};
constexpr RecipeName kRecipeNames[] = {
    {Recipe::kMxfp8E4M3, "mxfp8"},         {Recipe::kMxfp8E5M2, "mxfp8_e5m2"},
    {Recipe::kMxfp6E2M3, "mxfp6_e2m3"},    {Recipe::kMxfp6E3M2, "mxfp6_e3m2"},
    {Recipe::kMxfp4, "mxfp4"},             {Recipe::kNvfp4, "nvfp4"},
    {Recipe::kFp8Block1x128, "fp8_block128"}, {Recipe::kFp8Block128x128, "fp8_block128x128"},
};
}  // namespace

const char* recipe_name(Recipe r) {
  for (const auto& rn : kRecipeNames)
    if (rn.recipe == r) return rn.name;
  return "unknown";
}

bool parse_recipe(const std::string& name, Recipe* out) {
  for (const auto& rn : kRecipeNames) {
    if (name == rn.name) {
      *out = rn.recipe;
      return true;
    }
  }
  return false;
}

std::vector<Recipe> all_recipes() {
  std::vector<Recipe> v;
  for (const auto& rn : kRecipeNames) v.push_back(rn.recipe);
  return v;
}

}  // namespace blockscale::formats
