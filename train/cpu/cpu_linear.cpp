#include "train/cpu/cpu_linear.h"

#include <Eigen/Core>

#include "formats/quantize.h"
#include "train/cpu/cpu_ops.h"

namespace blockscale::train {
namespace {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using formats::Direction;

// The values a GEMM operand holds after the recipe's rounding, in its stored orientation
// (a columnwise copy of rows x cols is cols x rows).
Status operand_values(Recipe recipe, OperandRole role, bool wgrad_operand, SrKey sr, const float* x,
                      int64_t rows, int64_t cols, Direction direction, MatrixD* out) {
  const bool columnwise = direction == Direction::kColumnwise;
  if (!is_quantized(recipe)) {
    out->resize(columnwise ? cols : rows, columnwise ? rows : cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = recipe == Recipe::kBf16 ? round_to_bf16(x[r * cols + c]) : x[r * cols + c];
        (columnwise ? (*out)(c, r) : (*out)(r, c)) = v;
      }
    }
    return Status::ok();
  }
  formats::QuantizedMatrix q;
  BS_RETURN_IF_ERROR(formats::quantize(x, rows, cols, cols, quantize_options(recipe, role, wgrad_operand, sr),
                                       direction, &q));
  std::vector<double> values;
  BS_RETURN_IF_ERROR(formats::dequantize_exact(q, &values));
  *out = Eigen::Map<const MatrixD>(values.data(), q.rows, q.cols);
  return Status::ok();
}

// The experts' stacked weights (experts x n x k), each expert quantized on its own (its own NVFP4
// tensor scale, as the grouped GEMM takes them): rowwise gives (experts*n) x k, columnwise
// k x (experts*n) with expert g's W_g^T in columns g*n ...
Status expert_weight_values(Recipe recipe, const float* w, int64_t experts, int64_t n, int64_t k,
                            Direction direction, MatrixD* out) {
  const bool columnwise = direction == Direction::kColumnwise;
  out->resize(columnwise ? k : experts * n, columnwise ? experts * n : k);
  for (int64_t g = 0; g < experts; ++g) {
    MatrixD one;
    BS_RETURN_IF_ERROR(operand_values(recipe, OperandRole::kWeight, false, {}, w + g * n * k, n, k, direction, &one));
    if (columnwise) {
      out->middleCols(g * n, n) = one;
    } else {
      out->middleRows(g * n, n) = one;
    }
  }
  return Status::ok();
}

// The wgrad operand: x (rows x cols, tokens sorted by expert) quantized columnwise with each
// expert's tokens padded to whole blocks; returns cols x padded_rows and the padded ends.
Status wgrad_operand_values(Recipe recipe, OperandRole role, SrKey sr, const float* x, int64_t rows,
                            int64_t cols, const std::vector<int64_t>& group_ends, MatrixD* out,
                            std::vector<int64_t>* padded_ends) {
  if (!is_quantized(recipe)) {
    *padded_ends = group_ends;
    return operand_values(recipe, role, true, sr, x, rows, cols, Direction::kColumnwise, out);
  }
  formats::QuantizedMatrix q;
  BS_RETURN_IF_ERROR(formats::quantize_grouped_columnwise(x, rows, cols, cols, group_ends,
                                                          quantize_options(recipe, role, true, sr), &q,
                                                          padded_ends));
  std::vector<double> values;
  BS_RETURN_IF_ERROR(formats::dequantize_exact(q, &values));
  *out = Eigen::Map<const MatrixD>(values.data(), q.rows, q.cols);
  return Status::ok();
}

void store(const MatrixD& m, float* out) {
  for (int64_t i = 0; i < m.size(); ++i) out[i] = static_cast<float>(m.data()[i]);
}

void accumulate(const MatrixD& m, float* out) {
  for (int64_t i = 0; i < m.size(); ++i) out[i] = static_cast<float>(out[i] + m.data()[i]);
}

Status check_ends(const std::vector<int64_t>& group_ends, int64_t rows) {
  if (group_ends.empty() || group_ends.back() != rows)
    return Status::error("group_ends: needs one end per expert, the last equal to the rows of x");
  return Status::ok();
}

int64_t rows_of(const std::vector<int64_t>& group_ends) { return group_ends.empty() ? 0 : group_ends.back(); }

}  // namespace

Status linear_forward(Recipe recipe, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
                      float* y) {
  return grouped_linear_forward(recipe, x, {m}, w, n, k, y);
}

Status linear_backward(Recipe recipe, SrKey sr, const float* dy, const float* x, const float* w, int64_t m,
                       int64_t n, int64_t k, float* dx, float* dw) {
  return grouped_linear_backward(recipe, sr, dy, x, {m}, w, n, k, dx, dw);
}

Status grouped_linear_forward(Recipe recipe, const float* x, const std::vector<int64_t>& group_ends,
                              const float* w, int64_t n, int64_t k, float* y) {
  const int64_t m = rows_of(group_ends), experts = static_cast<int64_t>(group_ends.size());
  BS_RETURN_IF_ERROR(check_ends(group_ends, m));
  if (m == 0) return Status::ok();
  MatrixD xv, wv;
  BS_RETURN_IF_ERROR(operand_values(recipe, OperandRole::kActivation, false, {}, x, m, k, Direction::kRowwise, &xv));
  BS_RETURN_IF_ERROR(expert_weight_values(recipe, w, experts, n, k, Direction::kRowwise, &wv));
  MatrixD yv(m, n);
  int64_t begin = 0;
  for (int64_t g = 0; g < experts; ++g) {
    const int64_t rows = group_ends[g] - begin;
    if (rows > 0) yv.middleRows(begin, rows).noalias() = xv.middleRows(begin, rows) * wv.middleRows(g * n, n).transpose();
    begin = group_ends[g];
  }
  store(yv, y);
  return Status::ok();
}

Status grouped_linear_backward(Recipe recipe, SrKey sr, const float* dy, const float* x,
                               const std::vector<int64_t>& group_ends, const float* w, int64_t n, int64_t k,
                               float* dx, float* dw) {
  const int64_t m = rows_of(group_ends), experts = static_cast<int64_t>(group_ends.size());
  BS_RETURN_IF_ERROR(check_ends(group_ends, m));
  if (m == 0) return Status::ok();
  if (dx != nullptr) {  // dgrad: dY rowwise x W columnwise (k x experts*n: W_g^T in columns g*n..)
    MatrixD dyv, wt;
    BS_RETURN_IF_ERROR(operand_values(recipe, OperandRole::kGradient, false, sr, dy, m, n, Direction::kRowwise, &dyv));
    BS_RETURN_IF_ERROR(expert_weight_values(recipe, w, experts, n, k, Direction::kColumnwise, &wt));
    MatrixD dxv(m, k);
    int64_t begin = 0;
    for (int64_t g = 0; g < experts; ++g) {
      const int64_t rows = group_ends[g] - begin;
      if (rows > 0) dxv.middleRows(begin, rows).noalias() = dyv.middleRows(begin, rows) * wt.middleCols(g * n, n).transpose();
      begin = group_ends[g];
    }
    store(dxv, dx);
  }
  // wgrad: dY columnwise (n x padded tokens) x X columnwise (k x padded tokens), per expert.
  MatrixD dyc, xc;
  std::vector<int64_t> ends_dy, ends_x;
  BS_RETURN_IF_ERROR(wgrad_operand_values(recipe, OperandRole::kGradient, sr, dy, m, n, group_ends, &dyc, &ends_dy));
  BS_RETURN_IF_ERROR(wgrad_operand_values(recipe, OperandRole::kActivation, {}, x, m, k, group_ends, &xc, &ends_x));
  if (ends_dy != ends_x) return Status::error("internal: wgrad operands padded differently");
  int64_t begin = 0;
  for (int64_t g = 0; g < experts; ++g) {
    const int64_t cols = ends_dy[g] - begin;
    if (cols > 0) {
      MatrixD dwg = dyc.middleCols(begin, cols) * xc.middleCols(begin, cols).transpose();
      accumulate(dwg, dw + g * n * k);
    }
    begin = ends_dy[g];
  }
  return Status::ok();
}

}  // namespace blockscale::train
