#include "tools/study.h"

#include <cmath>
#include <random>

namespace blockscale::tools {

std::vector<NamedTensor> synthetic_tensors(uint64_t seed) {
  const int64_t rows = 256, cols = 1024;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> student(3.0f);
  std::uniform_real_distribution<float> uniform(-20.0f, 20.0f);
  auto make = [&](const std::string& name, auto&& gen) {
    NamedTensor t{name, rows, cols, std::vector<float>(rows * cols)};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t.values[r * cols + c] = gen(r, c);
    return t;
  };
  std::vector<NamedTensor> suite;
  suite.push_back(make("gaussian", [&](int64_t, int64_t) { return normal(rng); }));
  suite.push_back(make("student_t3", [&](int64_t, int64_t) { return student(rng); }));
  // Activations with a few outlier channels 100x larger, as seen in LLM residual streams.
  suite.push_back(make("outlier_channels", [&](int64_t, int64_t c) {
    return normal(rng) * (c % 97 == 0 ? 100.0f : 1.0f);
  }));
  // Rows whose scales span 2^-29 .. 2^29: per-tensor scaling fails here, block scaling should not.
  std::vector<float> row_scale(rows);
  for (auto& s : row_scale) s = std::exp2(uniform(rng) * 1.45f);
  suite.push_back(make("wide_row_range", [&](int64_t r, int64_t) { return normal(rng) * row_scale[r]; }));
  suite.push_back(make("tiny_gradients", [&](int64_t, int64_t) { return normal(rng) * 1e-7f; }));
  return suite;
}

Status measure_recipe_error(const NamedTensor& t, const formats::QuantizeOptions& options,
                            RecipeError* out) {
  formats::QuantizedMatrix q;
  BS_RETURN_IF_ERROR(formats::quantize(t.values.data(), t.rows, t.cols, t.cols, options,
                                       formats::Direction::kRowwise, &q));
  std::vector<float> deq;
  BS_RETURN_IF_ERROR(formats::dequantize(q, &deq));
  const formats::MinifloatSpec& spec = formats::element_spec(options.recipe);
  const uint32_t mag_mask = (1u << (spec.exp_bits + spec.man_bits)) - 1u;
  // A max-code element saturated when |x| lay beyond the midpoint to the next (missing) value.
  const float maxnorm = formats::element_max(options.recipe);
  const int emax = static_cast<int>(formats::float_bits(maxnorm) >> 23) - 127;
  const double clip_factor = 1.0 + std::ldexp(1.0, emax - spec.man_bits - 1) / maxnorm;
  double signal = 0, noise = 0, max_abs = 0;
  int64_t nonzero = 0, flushed = 0, saturated = 0;
  for (int64_t i = 0; i < t.rows * t.cols; ++i) {
    const double x = t.values[i], d = deq[i], err = x - d;
    signal += x * x;
    noise += err * err;
    max_abs = std::fmax(max_abs, std::fabs(err));
    if (x != 0) {
      ++nonzero;
      if (d == 0) ++flushed;
    }
    const uint32_t code = formats::element_code(q, i / t.cols, i % t.cols);
    if ((code & mag_mask) == spec.max_code && std::fabs(x) > std::fabs(d) * clip_factor) ++saturated;
  }
  RecipeError e;
  e.sqnr_db = noise > 0 ? 10.0 * std::log10(signal / noise) : INFINITY;
  e.rel_fro_error = signal > 0 ? std::sqrt(noise / signal) : 0;
  e.max_abs_error = max_abs;
  e.flushed_to_zero = nonzero ? static_cast<double>(flushed) / nonzero : 0;
  e.saturated = static_cast<double>(saturated) / static_cast<double>(t.rows * t.cols);
  *out = e;
  return Status::ok();
}

}  // namespace blockscale::tools
