// MX quantize, grouped (MoE) mode: run() of GroupedQuantizeProblem.
// Grouped mode with a columnwise copy: the tiles walk the padded row space (rows 0..capacity);
// segment s of a tile (rows 32s..32s+31) reads its expert's input rows (zeros past them; each
// warp finds the four segments of a tile with a scan of group_ends in registers and ballots, or,
// past kShortScanGroups experts, a binary search of the CTA's tables in shared memory). The
// rowwise copy of those rows goes to their dense position, its 4 scale bytes per row stored
// directly (a row's 128-row scale chunk spans several tiles); the columnwise copy is the dense
// path's with the capacity as its row count (zero rows and zero scales past the
// padded total come out of the zero-filled tile). The rowwise scale rows past `rows` (swizzle
// padding) are zeroed by a grid-stride loop. Rowwise-only grouped runs are the dense kernel plus
// launch_grouped_offsets (the padded ends).
// With GroupedQuantizeInputs::row_index (the fused MoE permute), row r reads input row
// row_index[r] (the kGather template argument). run_mx_grouped: run() with a chosen grid.
#include <string>

#include "quant/grouped_offsets.cuh"       // defines: kMaxGroups, kShortScanGroups
#include "quant/mx_quantize.h"             // defines: GridPolicy, run_mx_grouped
#include "quant/mx_quantize_dispatch.cuh"  // defines: make_params, dispatch

namespace blockscale::quant::detail {
namespace {

Status launch(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in, const GroupedQuantizeOutputs& out,
              cudaStream_t stream, GridPolicy grid) {
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
    if (!gather) return launch_mx_dense(p.dense, in.x, out.dense, stream, grid);
    MxParams params = make_params(p.dense, in.x, out.dense, p.dense.rows);
    params.grid_policy = grid;
    params.row_index = in.row_index;
    params.input_rows = p.input_rows;
    return dispatch<false, true>(p.dense, Action::kLaunch, params, stream);
  }
  // The columnwise copy walks the padded row space (capacity rows).
  MxParams params = make_params(p.dense, in.x, out.dense, grouped_capacity(p));
  // Every grouped CTA first scans the group ends (quant/grouped_offsets.cuh): short scans take the
  // dense grid, long ones a persistent grid that scans once per CTA.
  params.grid_policy = grid != GridPolicy::kAuto || p.num_groups <= kShortScanGroups ? grid : GridPolicy::kPersistent;
  params.group_ends = in.group_ends;
  params.padded_group_ends = out.padded_group_ends;
  params.num_groups = p.num_groups;
  if (!gather) return dispatch<true>(p.dense, Action::kLaunch, params, stream);
  params.row_index = in.row_index;
  params.input_rows = p.input_rows;
  return dispatch<true, true>(p.dense, Action::kLaunch, params, stream);
}

}  // namespace

Status launch_mx_grouped_quantize(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                                  const GroupedQuantizeOutputs& out, cudaStream_t stream) {
  return launch(p, in, out, stream, GridPolicy::kAuto);
}

Status run_mx_grouped(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                      const GroupedQuantizeOutputs& out, cudaStream_t stream, GridPolicy grid) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  if (!is_mx_gpu_recipe(p.dense.recipe)) return Status::error("problem.dense.recipe: not an MX recipe");
  if (out.dense.amax != nullptr)
    BS_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(out.dense.amax, 0, sizeof(float), stream), "outputs.amax"));
  return launch(p, in, out, stream, grid);
}

}  // namespace blockscale::quant::detail
