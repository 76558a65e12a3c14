// NVFP4 quantize, grouped (MoE) mode: run() of GroupedQuantizeProblem, 1D blocks only.
// Grouped mode with a columnwise copy: the tiles walk the padded row space (capacity rows); a tile
// is 8 segments of 16 rows, segment k reading `valid` input rows from row `src` (zeros after them:
// each lane finds segment lane % 8 by a binary search over the padded ends; the warp shares them
// by shuffles while copying; warp 0 leaves them in shared memory for the rowwise pass). The
// columnwise copy is the dense path's with the capacity as its row count (a 16-row block is one
// segment; its SR counter runs over padded_total, not the capacity). The rowwise copy of a tile
// goes to the token rows' dense positions (zero rows are not stored), its scales stored directly
// as two words per row (a row's 128-row scale chunk spans tiles of several experts); the rowwise
// scale rows past `rows` (swizzle padding, in no tile) are zeroed by a grid-stride loop. The RHT
// amax pass walks the same segments. Rowwise-only grouped runs are the dense kernel plus
// launch_grouped_offsets (the padded ends).
#include "quant/nvfp4_quantize_dispatch.cuh"  // defines: make_params, dispatch_grouped

namespace blockscale::quant::detail {

// The same workspace as the dense mode: the amax pass's partial maxima.
size_t nvfp4_grouped_workspace_size(const GroupedQuantizeProblem& p) { return nvfp4_workspace_size(p.dense); }

Status launch_nvfp4_grouped_quantize(const GroupedQuantizeProblem& gp, const GroupedQuantizeInputs& in,
                                     const GroupedQuantizeOutputs& out, void* workspace, cudaStream_t stream) {
  const QuantizeProblem& p = gp.dense;  // checked by quantize.cpp's can_implement
  const bool col = p.directions != Direction::kRowwise;
  const bool empty = p.rows == 0 || p.cols == 0;
  const QuantizeInputs dense_in{in.x, in.rowwise_tensor_amax, in.columnwise_tensor_amax};
  if (!col || empty) {  // the padded ends alone; then the dense kernel writes the rowwise copy
    BS_RETURN_IF_ERROR(launch_grouped_offsets(in.group_ends, gp.num_groups, p.rows, 16, out.padded_group_ends, stream));
    if (empty) return Status::ok();
    return launch_nvfp4_quantize(p, dense_in, out.dense, workspace, stream);
  }
  // The tiles walk the padded row space: the columnwise copy's capacity rows.
  Nvfp4Params params = make_params(p, in.x, in.rowwise_tensor_amax, in.columnwise_tensor_amax, out.dense,
                                   workspace, grouped_capacity(gp));
  params.group_ends = in.group_ends;
  params.padded_group_ends = out.padded_group_ends;
  params.num_groups = gp.num_groups;
  switch (p.input_type) {
    case DType::kBf16: return dispatch_grouped<DType::kBf16>(gp, out.dense, &params, stream);
    case DType::kF16: return dispatch_grouped<DType::kF16>(gp, out.dense, &params, stream);
    case DType::kF32: return dispatch_grouped<DType::kF32>(gp, out.dense, &params, stream);
    default: break;
  }
  return Status::error("problem.input_type: unknown value");
}

}  // namespace blockscale::quant::detail
