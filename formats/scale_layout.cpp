// Pack/unpack between the linear scale layout and the GEMM layouts of scale_layout.h.
#include "formats/scale_layout.h"

#include <cstring>
#include <string>
#include <vector>

namespace blockscale::formats {
namespace {

// Keeps every padded size and offset far from int64 overflow (2^31 x 2^31 < 2^63).
constexpr int64_t kMaxDim = int64_t{1} << 31;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

Status check_dim(const char* fn, const char* arg, int64_t v) {
  if (v < 0 || v > kMaxDim)
    return Status::error(std::string(fn) + ": " + arg + " (" + std::to_string(v) +
                         ") must be in [0, 2^31]");
  return Status::ok();
}

// Shape and pointer checks shared by every pack/unpack: `src` may be null only when the source
// holds no element; `dst` must never be null.
Status check_args(const char* fn, const char* rows_name, int64_t rows, const char* cols_name,
                  int64_t cols, const char* src_name, const void* src, const char* dst_name,
                  const void* dst) {
  BS_RETURN_IF_ERROR(check_dim(fn, rows_name, rows));
  BS_RETURN_IF_ERROR(check_dim(fn, cols_name, cols));
  if (src == nullptr && rows > 0 && cols > 0)
    return Status::error(std::string(fn) + ": " + src_name + " must not be null for a " +
                         std::to_string(rows) + " x " + std::to_string(cols) + " scale matrix");
  if (dst == nullptr) return Status::error(std::string(fn) + ": " + dst_name + " must not be null");
  return Status::ok();
}

Status check_size(const char* fn, const char* arg, size_t got, int64_t expected, const char* unit) {
  if (got != static_cast<size_t>(expected))
    return Status::error(std::string(fn) + ": " + arg + " (" + std::to_string(got) + " " + unit +
                         ") must equal the packed size " + std::to_string(expected) + " " + unit +
                         " for this shape");
  return Status::ok();
}

// The rows x cols row-major matrix `linear` placed at offset(i, j) of a zeroed buffer of `size`.
template <typename T, typename Offset>
std::vector<T> to_layout(const T* linear, int64_t rows, int64_t cols, int64_t size, Offset offset) {
  std::vector<T> out(static_cast<size_t>(size), T{0});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[offset(i, j)] = linear[i * cols + j];
  return out;
}

// The rows x cols row-major matrix read back from offset(i, j) of `packed`.
template <typename T, typename Offset>
std::vector<T> from_layout(const T* packed, int64_t rows, int64_t cols, Offset offset) {
  std::vector<T> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = packed[offset(i, j)];
  return out;
}

}  // namespace

// ---- Swizzled 128x4 ----------------------------------------------------------------------

int64_t swizzled_scale_bytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return round_up(rows, 128) * round_up(cols, 4);
}

Status pack_swizzled_scales(const uint8_t* linear, int64_t rows, int64_t cols,
                            std::vector<uint8_t>* out) {
  BS_RETURN_IF_ERROR(
      check_args("pack_swizzled_scales", "rows", rows, "cols", cols, "linear", linear, "out", out));
  *out = to_layout(linear, rows, cols, swizzled_scale_bytes(rows, cols),
                   [&](int64_t i, int64_t j) { return swizzled_scale_offset(i, j, cols); });
  return Status::ok();
}

Status unpack_swizzled_scales(const uint8_t* swizzled, size_t swizzled_bytes, int64_t rows,
                              int64_t cols, std::vector<uint8_t>* linear) {
  const char* fn = "unpack_swizzled_scales";
  BS_RETURN_IF_ERROR(
      check_args(fn, "rows", rows, "cols", cols, "swizzled", swizzled, "linear", linear));
  BS_RETURN_IF_ERROR(
      check_size(fn, "swizzled_bytes", swizzled_bytes, swizzled_scale_bytes(rows, cols), "bytes"));
  *linear = from_layout(swizzled, rows, cols,
                        [&](int64_t i, int64_t j) { return swizzled_scale_offset(i, j, cols); });
  return Status::ok();
}

// ---- VEC128_32F ----------------------------------------------------------------------------

int64_t vec128_scale_floats(int64_t rows, int64_t k_blocks) {
  if (rows <= 0 || k_blocks <= 0) return 0;
  return k_blocks * vec128_scale_ld(rows);
}

Status pack_vec128_scales(const float* linear, int64_t rows, int64_t k_blocks,
                          std::vector<float>* out) {
  BS_RETURN_IF_ERROR(check_args("pack_vec128_scales", "rows", rows, "k_blocks", k_blocks, "linear",
                                linear, "out", out));
  *out = to_layout(linear, rows, k_blocks, vec128_scale_floats(rows, k_blocks),
                   [&](int64_t r, int64_t kb) { return vec128_scale_offset(r, kb, rows); });
  return Status::ok();
}

Status unpack_vec128_scales(const float* packed, size_t packed_floats, int64_t rows,
                            int64_t k_blocks, std::vector<float>* linear) {
  const char* fn = "unpack_vec128_scales";
  BS_RETURN_IF_ERROR(
      check_args(fn, "rows", rows, "k_blocks", k_blocks, "packed", packed, "linear", linear));
  BS_RETURN_IF_ERROR(check_size(fn, "packed_floats", packed_floats,
                                vec128_scale_floats(rows, k_blocks), "floats"));
  *linear = from_layout(packed, rows, k_blocks,
                        [&](int64_t r, int64_t kb) { return vec128_scale_offset(r, kb, rows); });
  return Status::ok();
}

// ---- BLK128x128_32F ------------------------------------------------------------------------

int64_t blk128_scale_floats(int64_t row_blocks, int64_t k_blocks) {
  if (row_blocks <= 0 || k_blocks <= 0) return 0;
  return row_blocks * blk128_scale_ld(k_blocks);
}

Status pack_blk128_scales(const float* linear, int64_t row_blocks, int64_t k_blocks,
                          std::vector<float>* out) {
  BS_RETURN_IF_ERROR(check_args("pack_blk128_scales", "row_blocks", row_blocks, "k_blocks",
                                k_blocks, "linear", linear, "out", out));
  *out = to_layout(linear, row_blocks, k_blocks, blk128_scale_floats(row_blocks, k_blocks),
                   [&](int64_t rb, int64_t kb) { return blk128_scale_offset(rb, kb, k_blocks); });
  return Status::ok();
}

Status unpack_blk128_scales(const float* packed, size_t packed_floats, int64_t row_blocks,
                            int64_t k_blocks, std::vector<float>* linear) {
  const char* fn = "unpack_blk128_scales";
  BS_RETURN_IF_ERROR(check_args(fn, "row_blocks", row_blocks, "k_blocks", k_blocks, "packed",
                                packed, "linear", linear));
  BS_RETURN_IF_ERROR(check_size(fn, "packed_floats", packed_floats,
                                blk128_scale_floats(row_blocks, k_blocks), "floats"));
  *linear = from_layout(packed, row_blocks, k_blocks,
                        [&](int64_t rb, int64_t kb) { return blk128_scale_offset(rb, kb, k_blocks); });
  return Status::ok();
}

// ---- The GEMM layout of a quantized operand -----------------------------------------------

Status pack_gemm_scales(const QuantizedMatrix& q, std::vector<uint8_t>* out) {
  if (out == nullptr) return Status::error("pack_gemm_scales: out must not be null");
  if (q.block_rows < 1 || q.block_cols < 1)
    return Status::error("pack_gemm_scales: q's block (" + std::to_string(q.block_rows) + " x " +
                         std::to_string(q.block_cols) + ") must be at least 1 x 1");
  const size_t held = is_fp8_block(q.recipe) ? q.scales_f32.size() : q.scales.size();
  if (q.rows < 0 || q.cols < 0 || held != static_cast<size_t>(q.scale_rows() * q.scale_cols()))
    return Status::error("pack_gemm_scales: q holds " + std::to_string(held) + " scales, its shape " +
                         std::to_string(q.rows) + " x " + std::to_string(q.cols) + " needs " +
                         std::to_string(q.scale_rows() * q.scale_cols()));
  if (is_fp8_block(q.recipe)) {
    std::vector<float> packed;
    BS_RETURN_IF_ERROR(q.recipe == Format::kFp8Block1x128
                           ? pack_vec128_scales(q.scales_f32.data(), q.scale_rows(), q.scale_cols(), &packed)
                           : pack_blk128_scales(q.scales_f32.data(), q.scale_rows(), q.scale_cols(), &packed));
    out->resize(packed.size() * sizeof(float));
    if (!packed.empty()) std::memcpy(out->data(), packed.data(), out->size());
    return Status::ok();
  }
  if (q.block_rows == 1) return pack_swizzled_scales(q.scales.data(), q.rows, q.scale_cols(), out);
  const int64_t cols = q.scale_cols();
  std::vector<uint8_t> per_row(static_cast<size_t>(q.rows * cols));
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      per_row[static_cast<size_t>(r * cols + j)] = q.scales[static_cast<size_t>((r / q.block_rows) * cols + j)];
  return pack_swizzled_scales(per_row.data(), q.rows, cols, out);
}

}  // namespace blockscale::formats
