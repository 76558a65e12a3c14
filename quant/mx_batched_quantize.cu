// MX quantize, batched mode (BatchedQuantizeProblem): several matrices of one shape, stacked, each
// a whole number of 128-row tiles (so no tile spans two matrices), in one launch of the dense
// kernels; each matrix's columnwise copy and scales are its own, back to back (the batch fields of
// MxParams, quant/mx_quantize_kernel.cuh).
#include "quant/mx_quantize_dispatch.cuh"  // defines: make_params, launch_mx_tiles

namespace blockscale::quant::detail {

Status launch_mx_batched_quantize(const BatchedQuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                                  cudaStream_t stream) {
  if (!is_mx_gpu_recipe(p.matrix.recipe)) return Status::error("problem.matrix.recipe: not an MX recipe");
  if (p.matrix.rows % kTile != 0) return Status::error("problem.matrix.rows: batched MX takes whole 128-row tiles");
  QuantizeProblem stack = p.matrix;
  stack.rows = p.matrix.rows * p.batches;
  MxParams params = make_params(stack, in.x, out, stack.rows);
  params.batch_tiles = static_cast<int>(p.matrix.rows / kTile);
  params.col_row_bytes = code_row_bytes(p.matrix.recipe, p.matrix.rows);
  params.col_batch_bytes = columnwise_data_bytes(p.matrix);
  params.col_batch_scale_bytes = columnwise_scale_bytes(p.matrix);
  const int vec = is_e2m1(p.matrix.recipe) ? 8 : 16;
  params.vec_col_store = params.vec_col_store && params.col_row_bytes % vec == 0 && params.col_batch_bytes % vec == 0;
  params.vec_scale_store = params.vec_scale_store && params.col_batch_scale_bytes % 16 == 0;
  return launch_mx_tiles(stack, params, stream);
}

}  // namespace blockscale::quant::detail
