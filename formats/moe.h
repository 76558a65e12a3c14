// MoE token routing on the CPU: the reference of quant/moe.h's GPU kernels (routing to a stable
// expert-sorted permutation, the gather that feeds the grouped quantize, and the gate-weighted
// un-permute + combine). Host-only; the GPU kernels write the same int32s and the same output bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "formats/host_device.h"
#include "formats/scalar_codecs.h"  // float_to_bf16_bits_rn: the combine's bf16 rounding
#include "formats/status.h"

namespace blockscale::formats {

// The permutation of T tokens routed to top_k experts each (T * top_k slots; slot s = t * top_k + j
// is token t's j-th choice, expert_ids[s]). An id outside [0, num_experts) marks a DROPPED slot:
// it is routed nowhere, takes no sorted row and contributes nothing to the combine.
//   group_ends[g] : cumulative count of routed slots of experts 0..g (num_experts entries); the last
//                   one is R, the number of routed slots (<= T * top_k).
//   row_source[r] : sorted row r -> its token index, for r < R; -1 for r in [R, T * top_k).
//   slot_row[s]   : slot s -> its sorted row, -1 when dropped.
// Order: by expert, and inside an expert by slot index ascending (stable: one routing, one answer).
struct MoeRouting {
  std::vector<int32_t> group_ends;
  std::vector<int32_t> row_source;
  std::vector<int32_t> slot_row;
};

// tokens >= 0, top_k >= 1, num_experts >= 1, tokens * top_k < 2^31 (rows are int32).
Status moe_route(const int32_t* expert_ids, int64_t tokens, int top_k, int num_experts, MoeRouting* out);

// out (rows x cols, row stride cols) row r = x's row row_index[r]; an index outside
// [0, x_rows) gives a row of +0.0f (the GPU's fused gather + quantize reads such a row as zeros).
Status moe_gather(const float* x, int64_t x_rows, int64_t cols, int64_t ld, const int32_t* row_index, int64_t rows,
                  std::vector<float>* out);

// The combine's arithmetic, shared with the GPU kernel: fp32, the slots in j order, one fused
// multiply-add each, starting from +0.0f; a dropped slot is skipped (a NaN gate or y does not reach
// the token through it). bf16 output: float_to_bf16_bits_rn (RNE, NaN stays a quiet NaN).
BS_HOST_DEVICE float moe_combine_step(float acc, float gate, float y) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(gate, y, acc);
#else
  return std::fma(gate, y, acc);  // correctly rounded, as the GPU's FFMA
#endif
}

// out[t, c] = sum_j gate[t * top_k + j] * y[slot_row[t * top_k + j], c] (moe_combine_step, j
// ascending), t < tokens, c < cols; out is tokens x cols fp32, row stride cols. y: y_rows x cols,
// row stride ld_y (the values of the bf16 expert outputs). A slot_row outside [0, y_rows) is
// dropped.
Status moe_unpermute_combine(const float* y, int64_t y_rows, int64_t cols, int64_t ld_y, const float* gates,
                             const int32_t* slot_row, int64_t tokens, int top_k, std::vector<float>* out);

}  // namespace blockscale::formats
