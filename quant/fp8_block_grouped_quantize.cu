// FP8 blockwise quantize, grouped (MoE) mode.
// Grouped (MoE) mode (1x128; the `kGrouped` template argument, run() of GroupedQuantizeProblem):
// the tiles walk the padded row space of quant/grouped_offsets.cuh with B = 128, where a 128-row
// tile is exactly one expert's 128-token block: it reads `valid` (0..128) token rows from input row
// `src` (zeros below them, as for the matrix's bottom edge), writes their rowwise codes and scales
// at their input rows, and writes all 128 columnwise codes at its padded position in the
// cols x capacity transpose (the padding rows' codes are E4M3(0) = 0x00). Tiles past the padded
// total (valid == 0) write zero codes and 0.0f scales. Every CTA scans group_ends into shared
// memory first (quant/grouped_offsets.cuh; the grid: fp8_block_quantize_dispatch.cuh) and CTA 0 writes padded_group_ends and the rowwise
// VEC128 padding rows, which no grouped tile owns. Rowwise-only grouped runs are the dense
// kernel plus launch_grouped_offsets. Must match formats::quantize_grouped_columnwise.
// With GroupedQuantizeInputs::row_index (the fused MoE permute), row r reads input row
// row_index[r] (the kGather template argument).
#include <string>

#include "quant/fp8_block_quantize_dispatch.cuh"  // defines: make_args, pick_input
#include "quant/grouped_offsets.cuh"              // defines: kMaxGroups

namespace blockscale::quant::detail {

Status launch_fp8_block_grouped_quantize(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                                         const GroupedQuantizeOutputs& out, cudaStream_t stream) {
  if (p.dense.recipe != Format::kFp8Block1x128)
    return Status::error("problem.dense.recipe: the grouped FP8 blockwise kernel takes fp8_block128 (1x128)");
  const bool empty = p.dense.rows == 0 || p.dense.cols == 0;
  if (p.dense.directions == Direction::kRowwise || empty) {  // the padded ends, then the dense rowwise copy
    BS_RETURN_IF_ERROR(launch_grouped_offsets(in.group_ends, p.num_groups, p.dense.rows, kDim,
                                              out.padded_group_ends, stream));
    if (empty) return Status::ok();
    if (in.row_index == nullptr) return launch_fp8_block_quantize(p.dense, QuantizeInputs{in.x}, out.dense, stream);
    Fp8BlockArgs a;
    BS_RETURN_IF_ERROR(make_args(p.dense, in.x, out.dense, p.dense.rows, &a));
    a.row_index = in.row_index;
    a.input_rows = p.input_rows;
    return pick_input<false, true>(p.dense, a, stream);
  }
  if (p.num_groups < 1 || p.num_groups > kMaxGroups)
    return Status::error("problem.num_groups: must be in [1, " + std::to_string(kMaxGroups) + "]");
  Fp8BlockArgs a;
  BS_RETURN_IF_ERROR(make_args(p.dense, in.x, out.dense, grouped_capacity(p), &a));
  a.group_ends = in.group_ends;
  a.padded_group_ends = out.padded_group_ends;
  a.num_groups = p.num_groups;
  if (in.row_index == nullptr) return pick_input<true>(p.dense, a, stream);
  a.row_index = in.row_index;
  a.input_rows = p.input_rows;
  return pick_input<true, true>(p.dense, a, stream);
}

}  // namespace blockscale::quant::detail
