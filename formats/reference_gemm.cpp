// Reference GEMMs: exact fp64 dequantization (formats/quantize.h) + Eigen's fp64 GEMM.
#include "formats/reference_gemm.h"

#include <Eigen/Core>
#include <string>

#include "formats/quantize.h"

namespace blockscale::formats {
namespace {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMat = Eigen::Map<const RowMat>;
using MutMat = Eigen::Map<RowMat>;

std::string s(int64_t v) { return std::to_string(v); }

Status err(const char* fn, const std::string& msg) {
  return Status::error(std::string(fn) + ": " + msg);
}

// The K contract shared by every quantized GEMM: operand `name` has K = q.cols and its blocks
// must tile K exactly, so that a GEMM never multiplies a partial block.
Status check_k_blocks(const char* fn, const QuantizedMatrix& q, const std::string& name) {
  if (q.cols % q.block_cols != 0)
    return err(fn, name + ".cols (K = " + s(q.cols) + ") must be a multiple of its block length " +
                       s(q.block_cols) + " (" + format_name(q.recipe) + ")");
  return Status::ok();
}

Status check_operand(const char* fn, const QuantizedMatrix& q, const std::string& name) {
  const Status v = validate(q, name.c_str());
  if (!v) return err(fn, v.message());
  return check_k_blocks(fn, q, name);
}

Status check_same_k(const char* fn, const QuantizedMatrix& a, const QuantizedMatrix& b,
                    const std::string& b_name) {
  if (b.cols != a.cols)
    return err(fn, b_name + ".cols (K = " + s(b.cols) + ") must equal a.cols (K = " + s(a.cols) +
                       "): A (M x K) and B (N x K) are both K-major");
  return Status::ok();
}

// C is read only when beta != 0 (BLAS convention).
Status check_c(const char* fn, double beta, const double* c, int64_t ldc, int64_t n) {
  if (beta == 0.0) return Status::ok();
  if (c == nullptr) return err(fn, "c must not be null when beta != 0");
  if (ldc < n) return err(fn, "ldc (" + s(ldc) + ") must be >= N (" + s(n) + ")");
  return Status::ok();
}

// d (rows x cols, contiguous) holds the product P; turns it into alpha * P + beta * C.
void epilogue(double alpha, double beta, const double* c, int64_t ldc, int64_t rows, int64_t cols,
              double* d) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double& v = d[i * cols + j];
      v = alpha * v;
      if (beta != 0.0) v += beta * c[i * ldc + j];
    }
  }
}

}  // namespace

Status reference_gemm(const QuantizedMatrix& a, const QuantizedMatrix& b, double alpha, double beta,
                      const double* c, int64_t ldc, std::vector<double>* d) {
  const char* fn = "reference_gemm";
  if (d == nullptr) return err(fn, "d must not be null");
  BS_RETURN_IF_ERROR(check_operand(fn, a, "a"));
  BS_RETURN_IF_ERROR(check_operand(fn, b, "b"));
  BS_RETURN_IF_ERROR(check_same_k(fn, a, b, "b"));
  const int64_t m = a.rows, n = b.rows, k = a.cols;
  BS_RETURN_IF_ERROR(check_c(fn, beta, c, ldc, n));

  std::vector<double> va, vb;
  BS_RETURN_IF_ERROR(dequantize_exact(a, &va));
  BS_RETURN_IF_ERROR(dequantize_exact(b, &vb));
  std::vector<double> out(static_cast<size_t>(m * n));
  MutMat(out.data(), m, n).noalias() =
      ConstMat(va.data(), m, k) * ConstMat(vb.data(), n, k).transpose();
  epilogue(alpha, beta, c, ldc, m, n, out.data());
  *d = std::move(out);
  return Status::ok();
}

Status reference_gemm_m_grouped(const QuantizedMatrix& a, const std::vector<QuantizedMatrix>& b,
                                const std::vector<int64_t>& group_ends, double alpha, double beta,
                                const double* c, int64_t ldc, std::vector<double>* d) {
  const char* fn = "reference_gemm_m_grouped";
  if (d == nullptr) return err(fn, "d must not be null");
  if (b.empty()) return err(fn, "b must hold at least one expert");
  if (group_ends.size() != b.size())
    return err(fn, "group_ends has " + s(static_cast<int64_t>(group_ends.size())) +
                       " entries, expected one per expert (" + s(static_cast<int64_t>(b.size())) +
                       ")");
  BS_RETURN_IF_ERROR(check_operand(fn, a, "a"));
  const int64_t groups = static_cast<int64_t>(b.size());
  for (int64_t g = 0; g < groups; ++g) {
    const std::string name = "b[" + s(g) + "]";
    BS_RETURN_IF_ERROR(check_operand(fn, b[g], name));
    BS_RETURN_IF_ERROR(check_same_k(fn, a, b[g], name));
    if (b[g].rows != b[0].rows)
      return err(fn, name + ".rows (N = " + s(b[g].rows) + ") must equal b[0].rows (N = " +
                         s(b[0].rows) + "): every expert has the same N");
  }
  int64_t prev = 0;
  for (int64_t g = 0; g < groups; ++g) {
    if (group_ends[g] < prev)
      return err(
          fn, "group_ends[" + s(g) + "] (" + s(group_ends[g]) + ") must be >= " +
                  (g == 0 ? std::string("0") : "group_ends[" + s(g - 1) + "] (" + s(prev) + ")") +
                  ": cumulative ends are non-decreasing");
    prev = group_ends[g];
  }
  if (group_ends.back() != a.rows)
    return err(fn, "group_ends[" + s(groups - 1) + "] (" + s(group_ends.back()) +
                       ") must equal a.rows (" + s(a.rows) + "): the last end is the token count");
  const int64_t m = a.rows, n = b[0].rows, k = a.cols;
  BS_RETURN_IF_ERROR(check_c(fn, beta, c, ldc, n));

  std::vector<double> va;
  BS_RETURN_IF_ERROR(dequantize_exact(a, &va));
  const ConstMat am(va.data(), m, k);
  std::vector<double> out(static_cast<size_t>(m * n));
  MutMat dm(out.data(), m, n);
  int64_t begin = 0;
  std::vector<double> vb;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = group_ends[g] - begin;
    if (rows > 0) {  // empty experts have nothing to multiply
      BS_RETURN_IF_ERROR(dequantize_exact(b[g], &vb));
      dm.middleRows(begin, rows).noalias() =
          am.middleRows(begin, rows) * ConstMat(vb.data(), n, k).transpose();
    }
    begin = group_ends[g];
  }
  epilogue(alpha, beta, c, ldc, m, n, out.data());
  *d = std::move(out);
  return Status::ok();
}

Status reference_gemm_k_grouped(const QuantizedMatrix& a, const QuantizedMatrix& b,
                                const std::vector<int64_t>& padded_group_ends, double alpha,
                                double beta, const double* c, std::vector<double>* d) {
  const char* fn = "reference_gemm_k_grouped";
  if (d == nullptr) return err(fn, "d must not be null");
  BS_RETURN_IF_ERROR(check_operand(fn, a, "a"));
  BS_RETURN_IF_ERROR(check_operand(fn, b, "b"));
  BS_RETURN_IF_ERROR(check_same_k(fn, a, b, "b"));
  if (padded_group_ends.empty()) return err(fn, "padded_group_ends must hold at least one expert");
  const int64_t groups = static_cast<int64_t>(padded_group_ends.size());
  int64_t prev = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t e = padded_group_ends[g];
    const std::string name = "padded_group_ends[" + s(g) + "] (" + s(e) + ")";
    if (e < prev)
      return err(fn, name + " must be >= " +
                         (g == 0 ? std::string("0")
                                 : "padded_group_ends[" + s(g - 1) + "] (" + s(prev) + ")") +
                         ": cumulative ends are non-decreasing");
    if (e % a.block_cols != 0 || e % b.block_cols != 0)
      return err(
          fn, name + " must be a multiple of both operands' block lengths (a: " + s(a.block_cols) +
                  ", b: " + s(b.block_cols) + ") so that no block crosses experts");
    prev = e;
  }
  if (padded_group_ends.back() != a.cols)
    return err(fn, "padded_group_ends[" + s(groups - 1) + "] (" + s(padded_group_ends.back()) +
                       ") must equal a.cols (Kpad = " + s(a.cols) + ")");
  const int64_t n = a.rows, kout = b.rows, kpad = a.cols;
  if (beta != 0.0 && c == nullptr) return err(fn, "c must not be null when beta != 0");

  std::vector<double> va, vb;
  BS_RETURN_IF_ERROR(dequantize_exact(a, &va));
  BS_RETURN_IF_ERROR(dequantize_exact(b, &vb));
  const ConstMat am(va.data(), n, kpad), bm(vb.data(), kout, kpad);
  const int64_t per_group = n * kout;
  std::vector<double> out(static_cast<size_t>(groups * per_group), 0.0);
  int64_t begin = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t len = padded_group_ends[g] - begin;
    double* dg = out.data() + g * per_group;
    if (len > 0)
      MutMat(dg, n, kout).noalias() =
          am.middleCols(begin, len) * bm.middleCols(begin, len).transpose();
    epilogue(alpha, beta, beta != 0.0 ? c + g * per_group : nullptr, kout, n, kout, dg);
    begin = padded_group_ends[g];
  }
  *d = std::move(out);
  return Status::ok();
}

Status reference_gemm_f64(const double* a, const double* b, int64_t m, int64_t n, int64_t k,
                          double alpha, double beta, const double* c, int64_t ldc,
                          std::vector<double>* d) {
  const char* fn = "reference_gemm_f64";
  if (d == nullptr) return err(fn, "d must not be null");
  if (m < 0 || n < 0 || k < 0)
    return err(fn, "m, n, k (" + s(m) + ", " + s(n) + ", " + s(k) + ") must be >= 0");
  if (a == nullptr && m > 0 && k > 0) return err(fn, "a must not be null");
  if (b == nullptr && n > 0 && k > 0) return err(fn, "b must not be null");
  BS_RETURN_IF_ERROR(check_c(fn, beta, c, ldc, n));
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  if (m > 0 && n > 0 && k > 0)
    MutMat(out.data(), m, n).noalias() = ConstMat(a, m, k) * ConstMat(b, n, k).transpose();
  epilogue(alpha, beta, c, ldc, m, n, out.data());
  *d = std::move(out);
  return Status::ok();
}

}  // namespace blockscale::formats
