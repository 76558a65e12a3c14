// MoE token permutation on the GPU, around the grouped quantize of quant/quantize.h, in the same
// four-call protocol (problem, can_implement, workspace_size, run on a stream). Nothing is read
// back to the host: a whole MoE layer's routing -> quantize -> ... -> combine can sit in a graph.
//
//   1. route    : expert_ids [T x top_k] -> group_ends [G], row_source [T * top_k],
//                 slot_row [T * top_k] (formats::moe_route defines every int32 written).
//   2. quantize : quant::run(GroupedQuantizeProblem) with inputs.row_index = row_source gathers
//                 the tokens in expert order while quantizing (no permuted bf16 copy); see
//                 quantize.h for the rows past the routed total.
//   3. combine  : out[t] = sum_j gate[t, j] * y[slot_row[t * top_k + j]] (formats::
//                 moe_unpermute_combine defines every bit written).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/status.h"

namespace blockscale::quant {

// ---- Routing -----------------------------------------------------------------------------------
// T tokens, each routed to top_k experts: slot s = t * top_k + j holds expert_ids[s]. An id
// outside [0, num_experts) (e.g. -1, or a capacity-dropped choice) marks a DROPPED slot: it gets
// no sorted row (slot_row -1) and the combine skips it.
//   group_ends[g] : cumulative routed-slot counts (int32, num_experts entries); the last is the
//                   routed total R <= T * top_k.
//   row_source[r] : sorted row r -> token index (r < R); -1 for rows in [R, T * top_k).
//   slot_row[s]   : slot -> sorted row, -1 when dropped.
// Sorted rows are ordered by expert, and inside an expert by slot index (stable and deterministic:
// counting, scans and a warp-ordered placement; no atomic decides an order). All device pointers.
struct RoutingProblem {
  int64_t tokens = 0;
  int top_k = 1;
  int num_experts = 1;  // 1..4096, as the grouped quantize
};
struct RoutingInputs {
  const int32_t* expert_ids = nullptr;
};
struct RoutingOutputs {
  int32_t* group_ends = nullptr;
  int32_t* row_source = nullptr;
  int32_t* slot_row = nullptr;
};
Status can_implement(const RoutingProblem& p);
Status can_implement(const RoutingProblem& p, const RoutingInputs& in, const RoutingOutputs& out);
size_t workspace_size(const RoutingProblem& p);  // per-chunk expert counts (16-byte aligned)
Status run(const RoutingProblem& p, const RoutingInputs& in, const RoutingOutputs& out, void* workspace,
           size_t workspace_bytes, cudaStream_t stream);

// ---- Un-permute + combine ------------------------------------------------------------------------
// out[t, c] = sum over j of gates[t * top_k + j] * y[slot_row[t * top_k + j], c], for t < tokens,
// c < cols. Arithmetic (formats::moe_combine_step): fp32, acc = +0.0f, then for j = 0..top_k-1 in
// order acc = fmaf(gate, float(y), acc), skipping a slot whose row is outside [0, y_rows) (dropped:
// its gate and y are never read); then out = acc (fp32) or float_to_bf16_bits_rn(acc) (bf16, RNE).
// y: bf16, y_rows x cols, row stride ld_y; gates: fp32 [tokens x top_k]; out: tokens x cols, row
// stride ld_out. 16-byte aligned y / out with strides and cols multiples of 8 take 16-byte vectors.
enum class CombineOutputType { kBf16, kFp32 };
struct CombineProblem {
  int64_t tokens = 0;
  int top_k = 1;
  int64_t cols = 0;
  int64_t y_rows = 0;  // rows of y (e.g. T * top_k)
  int64_t ld_y = 0;
  int64_t ld_out = 0;
  CombineOutputType out_type = CombineOutputType::kBf16;
};
struct CombineInputs {
  const void* y = nullptr;        // bf16
  const float* gates = nullptr;
  const int32_t* slot_row = nullptr;
};
struct CombineOutputs {
  void* out = nullptr;
};
Status can_implement(const CombineProblem& p);
Status can_implement(const CombineProblem& p, const CombineInputs& in, const CombineOutputs& out);
size_t workspace_size(const CombineProblem& p);  // 0
Status run(const CombineProblem& p, const CombineInputs& in, const CombineOutputs& out, void* workspace,
           size_t workspace_bytes, cudaStream_t stream);

}  // namespace blockscale::quant
