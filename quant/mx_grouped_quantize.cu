// MX quantize, grouped (MoE) mode: run() of GroupedQuantizeProblem.
// Grouped mode with a columnwise copy: the tiles walk the padded row space (rows 0..capacity);
// segment s of a tile (rows 32s..32s+31) reads its expert's input rows (zeros past them; each
// warp finds the four segments of a tile with ballots over the padded ends, or a binary search
// past 32 experts). The rowwise copy of those rows goes to their dense position, its 4 scale
// bytes per row stored directly (a row's 128-row scale chunk spans several tiles); the columnwise
// copy is the dense path's with the capacity as its row count (zero rows and zero scales past the
// padded total come out of the zero-filled tile). The rowwise scale rows past `rows` (swizzle
// padding) are zeroed by a grid-stride loop. Rowwise-only grouped runs are the dense kernel plus
// launch_grouped_offsets (the padded ends).
// With GroupedQuantizeInputs::row_index (the fused MoE permute), row r reads input row
// row_index[r] (the kGather template argument).
#include <string>

#include "quant/grouped_offsets.cuh"       // defines: kMaxGroups
#include "quant/mx_quantize_dispatch.cuh"  // defines: make_params, dispatch

namespace blockscale::quant::detail {

Status launch_mx_grouped_quantize(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                                  const GroupedQuantizeOutputs& out, cudaStream_t stream) {
  if (!is_mx_gpu_recipe(p.dense.recipe)) return Status::error("problem.dense.recipe: not an MX recipe");
  if (p.num_groups < 1 || p.num_groups > kMaxGroups)
    return Status::error("problem.num_groups: must be in [1, " + std::to_string(kMaxGroups) + "]");
  const bool col = p.dense.directions != Direction::kRowwise;
  const bool empty = p.dense.rows == 0 || p.dense.cols == 0;
  const bool gather = in.row_index != nullptr;
  if (!col || empty) {  // the padded ends alone; then the dense kernel writes the rowwise copy
    BS_RETURN_IF_ERROR(launch_grouped_offsets(in.group_ends, p.num_groups, p.dense.rows, 32,
                                              out.padded_group_ends, stream));
    if (empty) return Status::ok();
    if (!gather) return launch_mx_dense(p.dense, in.x, out.dense, stream);
    MxParams params = make_params(p.dense, in.x, out.dense, p.dense.rows);
    params.row_index = in.row_index;
    params.input_rows = p.input_rows;
    return dispatch<false, true>(p.dense, Action::kLaunch, params, stream);
  }
  // The columnwise copy walks the padded row space (capacity rows).
  MxParams params = make_params(p.dense, in.x, out.dense, grouped_capacity(p));
  // Every grouped CTA first scans the group ends: a persistent grid pays that once per CTA, not
  // once per tile (one CTA per tile measured slower here: 8 experts col-only 87% -> 79% of copy).
  params.grid_policy = GridPolicy::kPersistent;
  params.group_ends = in.group_ends;
  params.padded_group_ends = out.padded_group_ends;
  params.num_groups = p.num_groups;
  if (!gather) return dispatch<true>(p.dense, Action::kLaunch, params, stream);
  params.row_index = in.row_index;
  params.input_rows = p.input_rows;
  return dispatch<true, true>(p.dense, Action::kLaunch, params, stream);
}

}  // namespace blockscale::quant::detail
