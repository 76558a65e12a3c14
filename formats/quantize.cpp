// quantize(): argument checks, the columnwise (transposed) direction, and dispatch to the
// per-recipe kernels; dequantize() and the QuantizedMatrix helpers.
#include "formats/quantize.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "formats/block_quantize_internal.h"

namespace blockscale::formats {
namespace detail {

void set_element_code(QuantizedMatrix* q, int64_t r, int64_t c, uint32_t code) {
  const int64_t row = r * q->data_row_bytes();
  if (is_fp4(q->recipe)) {
    uint8_t& byte = q->data[row + c / 2];
    byte = (c % 2 == 0) ? static_cast<uint8_t>((byte & 0xF0u) | (code & 0xFu))
                        : static_cast<uint8_t>((byte & 0x0Fu) | ((code & 0xFu) << 4));
  } else {
    q->data[row + c] = static_cast<uint8_t>(code);
  }
}

BlockAmax block_amax(const float* x, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  // |x| compared as integers: for non-negative floats the bit patterns are ordered like values.
  BlockAmax b;
  uint32_t amax_bits = 0;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      const uint32_t a = float_bits(x[r * ld + c]) & 0x7FFFFFFFu;
      if (a >= 0x7F800000u) b.nonfinite = true;
      if (a <= 0x7F800000u && a > amax_bits) amax_bits = a;  // NaN ignored, Inf counts
    }
  }
  b.amax = bits_float(amax_bits);
  return b;
}

}  // namespace detail

namespace {

Status check_options(const QuantizeOptions& o, int64_t block_dim_length) {
  const Format r = o.recipe;
  const std::string name = format_name(r);
  if (std::string(format_name(r)) == "unknown") return Status::error("options.recipe: unknown recipe");
  if (o.rounding != ScaleRounding::kCeil && o.rounding != ScaleRounding::kFloor)
    return Status::error("options.rounding: kCeil or kFloor (one rule per quantization)");
  if (o.rounding == ScaleRounding::kFloor && !is_mx(r))
    return Status::error("options.rounding: floor scale rounding applies to MX recipes only, not " + name);
  if (o.pow2_scales && !is_fp8_block(r))
    return Status::error("options.pow2_scales: applies to FP8 blockwise recipes only, not " + name);
  const bool nvfp4 = r == Format::kNvfp4;
  if (o.nvfp4_2d && !nvfp4) return Status::error("options.nvfp4_2d: applies to nvfp4 only, not " + name);
  if (o.stochastic_rounding && !nvfp4)
    return Status::error("options.stochastic_rounding: applies to nvfp4 only, not " + name);
  if (o.hadamard && !nvfp4) return Status::error("options.hadamard: applies to nvfp4 only, not " + name);
  if (o.hadamard && o.nvfp4_2d)
    return Status::error("options.hadamard: the Hadamard transform is for 1D (wgrad) blocks, not nvfp4_2d");
  if (o.hadamard && block_dim_length % 16 != 0)
    return Status::error("options.hadamard: the block dimension (" + std::to_string(block_dim_length) +
                         ") must be a multiple of 16");
  if (o.has_tensor_amax && !nvfp4)
    return Status::error("options.tensor_amax: applies to nvfp4 only, not " + name);
  if (o.has_tensor_amax && !(std::isfinite(o.tensor_amax) && o.tensor_amax >= 0.0f))
    return Status::error("options.tensor_amax: must be finite and >= 0");
  return Status::ok();
}

}  // namespace

Status quantize(const float* x, int64_t rows, int64_t cols, int64_t ld,
                const QuantizeOptions& options, Direction direction, QuantizedMatrix* out) {
  if (x == nullptr) return Status::error("x: must not be null");
  if (out == nullptr) return Status::error("out: must not be null");
  if (rows <= 0 || cols <= 0)
    return Status::error("rows, cols: must be > 0 (got " + std::to_string(rows) + " x " +
                         std::to_string(cols) + ")");
  if (ld < cols)
    return Status::error("ld: row stride (" + std::to_string(ld) + ") must be >= cols (" +
                         std::to_string(cols) + ")");
  if (direction != Direction::kRowwise && direction != Direction::kColumnwise)
    return Status::error("direction: kRowwise or kColumnwise (one call writes one copy)");
  const bool columnwise = direction == Direction::kColumnwise;
  const int64_t stored_rows = columnwise ? cols : rows;
  const int64_t stored_cols = columnwise ? rows : cols;
  BS_RETURN_IF_ERROR(check_options(options, stored_cols));

  // The kernels work on the stored orientation, contiguous.
  std::vector<float> stored(static_cast<size_t>(stored_rows * stored_cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      stored[columnwise ? c * rows + r : r * cols + c] = x[r * ld + c];

  QuantizedMatrix q;
  q.recipe = options.recipe;
  q.rows = stored_rows;
  q.cols = stored_cols;
  q.block_rows = default_block_rows(options.recipe, options.nvfp4_2d);
  q.block_cols = default_block_cols(options.recipe);
  q.data.assign(static_cast<size_t>(q.rows * q.data_row_bytes()), 0);
  const size_t n_scales = static_cast<size_t>(q.scale_rows() * q.scale_cols());
  if (is_fp8_block(options.recipe))
    q.scales_f32.assign(n_scales, 0.0f);
  else
    q.scales.assign(n_scales, 0);

  if (is_mx(options.recipe))
    detail::mx_quantize_rows(stored.data(), options, &q);
  else if (options.recipe == Format::kNvfp4)
    detail::nvfp4_quantize_rows(stored.data(), options, &q);
  else
    detail::fp8_block_quantize_rows(stored.data(), options, &q);
  *out = std::move(q);
  return Status::ok();
}

uint32_t element_code(const QuantizedMatrix& q, int64_t r, int64_t c) {
  const int64_t row = r * q.data_row_bytes();
  if (is_fp4(q.recipe)) {
    const uint8_t byte = q.data[row + c / 2];
    return (c % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
  }
  return q.data[row + c];
}

Status validate(const QuantizedMatrix& q, const char* name) {
  const std::string n = name;
  if (q.rows <= 0 || q.cols <= 0) return Status::error(n + ": rows and cols must be > 0");
  if (q.block_rows != default_block_rows(q.recipe, q.block_rows == 16) ||
      q.block_cols != default_block_cols(q.recipe))
    return Status::error(n + ": block shape " + std::to_string(q.block_rows) + "x" +
                         std::to_string(q.block_cols) + " does not belong to recipe " +
                         format_name(q.recipe));
  if (static_cast<int64_t>(q.data.size()) != q.rows * q.data_row_bytes())
    return Status::error(n + ".data: holds " + std::to_string(q.data.size()) + " bytes, expected " +
                         std::to_string(q.rows * q.data_row_bytes()));
  const int64_t n_scales = q.scale_rows() * q.scale_cols();
  if (is_fp8_block(q.recipe)) {
    if (static_cast<int64_t>(q.scales_f32.size()) != n_scales)
      return Status::error(n + ".scales_f32: holds " + std::to_string(q.scales_f32.size()) +
                           " scales, expected " + std::to_string(n_scales));
  } else if (static_cast<int64_t>(q.scales.size()) != n_scales) {
    return Status::error(n + ".scales: holds " + std::to_string(q.scales.size()) +
                         " scales, expected " + std::to_string(n_scales));
  }
  return Status::ok();
}

Status check_scales(const QuantizedMatrix& q, const std::string& name) {
  const bool fp8_block = is_fp8_block(q.recipe), nvfp4 = q.recipe == Format::kNvfp4;
  if (!fp8_block && !nvfp4) return Status::ok();  // E8M0: every code is a scale
  const int64_t scale_cols = q.scale_cols(), n = q.scale_rows() * scale_cols;
  for (int64_t i = 0; i < n; ++i) {
    char value[48];
    const char* rule = nullptr;
    if (fp8_block) {
      const uint32_t bits = float_bits(q.scales_f32[i]);
      if ((bits >> 31) == 0 && bits != 0x7F800000u) continue;  // >= +0, finite or NaN
      std::snprintf(value, sizeof value, "%.9g", static_cast<double>(q.scales_f32[i]));
      rule = "scales are finite values >= 0 (or NaN, for a block that held NaN or Inf)";
    } else {
      if (q.scales[i] <= 0x7Fu) continue;
      std::snprintf(value, sizeof value, "code 0x%02X", static_cast<unsigned>(q.scales[i]));
      rule = "scales are UE4M3 codes 0x00-0x7F (7 bits, no sign bit; 0x7F is NaN)";
    }
    return Status::error(name + ": scale (" + std::to_string(i / scale_cols) + ", " +
                         std::to_string(i % scale_cols) + ") is " + value + ", but " +
                         format_name(q.recipe) + " " + rule);
  }
  return Status::ok();
}

namespace {

// Element value (exact) and its block's scale factor, for either precision.
template <typename T>
Status dequantize_as(const QuantizedMatrix& q, std::vector<T>* out) {
  if (out == nullptr) return Status::error("out: must not be null");
  BS_RETURN_IF_ERROR(validate(q, "q"));
  const MinifloatSpec& spec = element_spec(q.recipe);
  std::vector<T> v(static_cast<size_t>(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const int64_t s = (r / q.block_rows) * q.scale_cols() + c / q.block_cols;
      const float elem = decode_minifloat(element_code(q, r, c), spec);
      T value;
      if (is_mx(q.recipe)) {
        value = static_cast<T>(elem) * static_cast<T>(decode_e8m0(q.scales[s]));
      } else if (q.recipe == Format::kNvfp4) {
        value = static_cast<T>(elem) * static_cast<T>(decode_ue4m3(q.scales[s])) *
                static_cast<T>(q.global_scale_dec);
      } else {
        value = static_cast<T>(elem) * static_cast<T>(q.scales_f32[s]);
      }
      v[r * q.cols + c] = value;
    }
  }
  *out = std::move(v);
  return Status::ok();
}

}  // namespace

Status dequantize(const QuantizedMatrix& q, std::vector<float>* out) { return dequantize_as(q, out); }

Status dequantize_exact(const QuantizedMatrix& q, std::vector<double>* out) {
  return dequantize_as(q, out);
}

}  // namespace blockscale::formats
