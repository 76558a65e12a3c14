// MoE grouped columnwise quantize: each expert's token range is padded with zero rows to a
// multiple of the block length, so that no columnwise block mixes two experts' tokens.
#include <cstring>
#include <string>

#include "formats/quantize.h"

namespace blockscale::formats {

Status quantize_grouped_columnwise(const float* x, int64_t rows, int64_t cols, int64_t ld,
                                   const std::vector<int64_t>& group_ends,
                                   const QuantizeOptions& options, QuantizedMatrix* out,
                                   std::vector<int64_t>* padded_group_ends) {
  if (x == nullptr) return Status::error("x: must not be null");
  if (out == nullptr || padded_group_ends == nullptr)
    return Status::error("out, padded_group_ends: must not be null");
  if (rows <= 0 || cols <= 0) return Status::error("rows, cols: must be > 0");
  if (ld < cols) return Status::error("ld: row stride must be >= cols");
  if (group_ends.empty()) return Status::error("group_ends: needs at least one expert");
  int64_t prev = 0;
  for (size_t g = 0; g < group_ends.size(); ++g) {
    if (group_ends[g] < prev)
      return Status::error("group_ends[" + std::to_string(g) + "]: cumulative ends must be "
                           "non-decreasing and >= 0 (got " + std::to_string(group_ends[g]) +
                           " after " + std::to_string(prev) + ")");
    prev = group_ends[g];
  }
  if (group_ends.back() != rows)
    return Status::error("group_ends: the last end (" + std::to_string(group_ends.back()) +
                         ") must equal rows (" + std::to_string(rows) + ")");

  // Block length along the token dimension, which the columnwise copy quantizes.
  const int64_t block = default_block_cols(options.recipe);
  std::vector<int64_t> padded_ends(group_ends.size());
  int64_t padded_rows = 0;
  prev = 0;
  for (size_t g = 0; g < group_ends.size(); ++g) {
    padded_rows += (group_ends[g] - prev + block - 1) / block * block;
    padded_ends[g] = padded_rows;
    prev = group_ends[g];
  }

  std::vector<float> padded(static_cast<size_t>(padded_rows * cols), 0.0f);
  prev = 0;
  int64_t dst = 0;
  for (size_t g = 0; g < group_ends.size(); ++g) {
    for (int64_t r = prev; r < group_ends[g]; ++r, ++dst)
      for (int64_t c = 0; c < cols; ++c) padded[dst * cols + c] = x[r * ld + c];
    dst = padded_ends[g];
    prev = group_ends[g];
  }
  BS_RETURN_IF_ERROR(
      quantize(padded.data(), padded_rows, cols, cols, options, Direction::kColumnwise, out));
  *padded_group_ends = std::move(padded_ends);
  return Status::ok();
}

Status pad_columns(const QuantizedMatrix& q, int64_t cols, QuantizedMatrix* out) {
  if (out == nullptr) return Status::error("out: must not be null");
  if (q.cols % q.block_cols != 0 || cols % q.block_cols != 0 || cols < q.cols)
    return Status::error("cols: must be a multiple of the block (" + std::to_string(q.block_cols) +
                         ") and >= q.cols (" + std::to_string(q.cols) + "), with q.cols a multiple too; got " +
                         std::to_string(cols));
  QuantizedMatrix w = q;
  w.cols = cols;
  const int64_t from = q.data_row_bytes(), to = w.data_row_bytes();
  w.data.assign(static_cast<size_t>(q.rows * to), 0);
  for (int64_t r = 0; r < q.rows; ++r)
    std::memcpy(&w.data[static_cast<size_t>(r * to)], &q.data[static_cast<size_t>(r * from)], static_cast<size_t>(from));
  const int64_t sc_from = q.scale_cols(), sc_to = w.scale_cols(), sr = q.scale_rows();
  const auto widen = [&](const auto& src, auto* dst) {
    dst->assign(static_cast<size_t>(sr * sc_to), 0);
    for (int64_t r = 0; r < sr; ++r)
      for (int64_t c = 0; c < sc_from; ++c) (*dst)[static_cast<size_t>(r * sc_to + c)] = src[static_cast<size_t>(r * sc_from + c)];
  };
  if (!q.scales_f32.empty()) widen(q.scales_f32, &w.scales_f32);
  if (!q.scales.empty()) widen(q.scales, &w.scales);
  *out = std::move(w);
  return Status::ok();
}

}  // namespace blockscale::formats
