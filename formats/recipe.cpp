#include "formats/recipe.h"

namespace blockscale::formats {

bool is_mx(Format r) {
  switch (r) {
    case Format::kMxfp8E4M3:
    case Format::kMxfp8E5M2:
    case Format::kMxfp6E2M3:
    case Format::kMxfp6E3M2:
    case Format::kMxfp4:
      return true;
    default:
      return false;
  }
}

bool is_fp4(Format r) { return r == Format::kMxfp4 || r == Format::kNvfp4; }

bool is_fp8_block(Format r) {
  return r == Format::kFp8Block1x128 || r == Format::kFp8Block128x128;
}

const MinifloatSpec& element_spec(Format r) {
  switch (r) {
    case Format::kMxfp8E5M2: return kE5M2;
    case Format::kMxfp6E2M3: return kE2M3;
    case Format::kMxfp6E3M2: return kE3M2;
    case Format::kMxfp4:
    case Format::kNvfp4: return kE2M1;
    default: return kE4M3;  // MXFP8 E4M3 and FP8 blockwise
  }
}

float element_max(Format r) {
  const MinifloatSpec& s = element_spec(r);
  return decode_minifloat(s.max_code, s);
}

int default_block_rows(Format r, bool nvfp4_2d) {
  if (r == Format::kNvfp4 && nvfp4_2d) return 16;
  if (r == Format::kFp8Block128x128) return 128;
  return 1;
}

int default_block_cols(Format r) {
  if (r == Format::kNvfp4) return 16;
  if (is_fp8_block(r)) return 128;
  return 32;
}

int64_t QuantizedMatrix::data_row_bytes() const { return is_fp4(recipe) ? (cols + 1) / 2 : cols; }

namespace {
struct RecipeName {
  Format recipe;
  const char* name;
};
constexpr RecipeName kRecipeNames[] = {
    {Format::kMxfp8E4M3, "mxfp8"},         {Format::kMxfp8E5M2, "mxfp8_e5m2"},
    {Format::kMxfp6E2M3, "mxfp6_e2m3"},    {Format::kMxfp6E3M2, "mxfp6_e3m2"},
    {Format::kMxfp4, "mxfp4"},             {Format::kNvfp4, "nvfp4"},
    {Format::kFp8Block1x128, "fp8_block128"}, {Format::kFp8Block128x128, "fp8_block128x128"},
};
}  // namespace

const char* format_name(Format r) {
  for (const auto& rn : kRecipeNames)
    if (rn.recipe == r) return rn.name;
  return "unknown";
}

bool parse_format(const std::string& name, Format* out) {
  for (const auto& rn : kRecipeNames) {
    if (name == rn.name) {
      *out = rn.recipe;
      return true;
    }
  }
  return false;
}

std::vector<Format> all_formats() {
  std::vector<Format> v;
  for (const auto& rn : kRecipeNames) v.push_back(rn.recipe);
  return v;
}

}  // namespace blockscale::formats
