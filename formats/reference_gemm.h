// Reference GEMMs on quantized operands: every operand dequantized exactly to fp64
// (dequantize_exact: element x scale products, NVFP4 tensor scale included, are exact in fp64),
// products accumulated in fp64. GPU GEMMs are compared to these with a relative-error bound.
//
//   D = alpha * A · B^T + beta * C
//
// A (M x K) and B (N x K) are both K-major QuantizedMatrix operands in their stored orientation
// (blocks along cols = K). Recipes may differ between A and B (e.g. MXFP8 A, NVFP4 B). Shapes:
// a.cols == b.cols == K, and K a multiple of each operand's block_cols (the GEMM contract).
// D is fp64, row-major, contiguous; it is resized and fully overwritten.
// C follows BLAS: with beta == 0 it is not read (may be null; NaN in C does not propagate);
// otherwise it must be non-null, row-major, with row stride ldc >= N.
// Every function validates its arguments (both operands pass validate()) and returns a Status
// naming the argument and the rule; on error `d` is left unchanged.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::formats {

// Dense: d (M x N) = alpha * a · b^T + beta * c.
Status reference_gemm(const QuantizedMatrix& a, const QuantizedMatrix& b, double alpha, double beta,
                      const double* c, int64_t ldc, std::vector<double>* d);

// M-grouped (MoE fprop / dgrad): a holds Mtotal tokens sorted by expert; expert g owns rows
// [group_ends[g-1], group_ends[g]) (group_ends[-1] = 0) and multiplies them by b[g] (N x K).
// group_ends has G = b.size() >= 1 non-decreasing entries, the last == a.rows; empty experts are
// allowed. All b[g] share N and K. d, c: Mtotal x N (c row stride ldc).
Status reference_gemm_m_grouped(const QuantizedMatrix& a, const std::vector<QuantizedMatrix>& b,
                                const std::vector<int64_t>& group_ends, double alpha, double beta,
                                const double* c, int64_t ldc, std::vector<double>* d);

// K-grouped (MoE wgrad): a (N x Kpad) is the columnwise copy of dY, b (Kout x Kpad) the
// columnwise copy of X; the reduction dimension is the padded token axis. Expert g owns columns
// [padded_group_ends[g-1], padded_group_ends[g]); each end is a multiple of both operands'
// block_cols (no block crosses experts) and the last == Kpad. Empty experts are allowed (their
// dW is beta * C_g).
//   d[g] (N x Kout) = alpha * sum_{k in g} a[:, k] b[:, k]^T + beta * c[g]
// c and d are G x N x Kout, contiguous; c may be null when beta == 0.
Status reference_gemm_k_grouped(const QuantizedMatrix& a, const QuantizedMatrix& b,
                                const std::vector<int64_t>& padded_group_ends, double alpha,
                                double beta, const double* c, std::vector<double>* d);

// Plain fp64 GEMM on unquantized values, same semantics: a (M x K) and b (N x K) row-major and
// contiguous; for tests and accuracy studies (e.g. the unquantized product of the inputs).
Status reference_gemm_f64(const double* a, const double* b, int64_t m, int64_t n, int64_t k,
                          double alpha, double beta, const double* c, int64_t ldc,
                          std::vector<double>* d);

}  // namespace blockscale::formats
