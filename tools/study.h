// The accuracy study: how much each recipe loses on a tensor, measured through formats/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/quantize.h"

namespace blockscale::tools {

struct NamedTensor {
  std::string name;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;  // row-major
};

struct RecipeError {
  double sqnr_db = 0;          // 10 log10(|x|^2 / |x - deq|^2)
  double rel_fro_error = 0;    // |x - deq| / |x|
  double max_abs_error = 0;
  double flushed_to_zero = 0;  // share of nonzero inputs that dequantize to 0
  double saturated = 0;        // share of elements clipped to the largest element code
};

// The built-in synthetic suite: shapes and distributions that stress block scaling (Gaussian,
// heavy tails, outlier channels, wide per-row dynamic range, tiny gradient-like values).
std::vector<NamedTensor> synthetic_tensors(uint64_t seed);

Status measure_recipe_error(const NamedTensor& t, const formats::QuantizeOptions& options,
                            RecipeError* out);

}  // namespace blockscale::tools
