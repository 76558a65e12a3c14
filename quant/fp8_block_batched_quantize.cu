// FP8 blockwise quantize, batched mode (BatchedQuantizeProblem, 128x128 only): a MoE layer's
// stacked expert weights in one launch of the dense kernels, each matrix's rowwise and columnwise
// copies back to back (the batch fields of Fp8BlockArgs, quant/fp8_block_quantize_kernel.cuh).
#include <string>

#include "quant/fp8_block_quantize_dispatch.cuh"  // defines: make_args, launch_fp8_block_tiles

namespace blockscale::quant::detail {

Status launch_fp8_block_batched_quantize(const BatchedQuantizeProblem& p, const QuantizeInputs& in,
                                         const QuantizeOutputs& out, cudaStream_t stream) {
  const QuantizeProblem& m = p.matrix;
  if (m.recipe != Format::kFp8Block128x128)
    return Status::error("problem.matrix.recipe: the batched FP8 blockwise kernel takes fp8_block128x128");
  Fp8BlockArgs a;
  BS_RETURN_IF_ERROR(make_args(m, in.x, out, m.rows, &a));
  if (int64_t{a.tiles_r} * a.tiles_c * p.batches > (int64_t{1} << 30))
    return Status::error("problem: " + std::to_string(p.batches) + " matrices of " + std::to_string(m.rows) + " x " +
                         std::to_string(m.cols) +
                         " have more 128x128 tiles than the FP8 blockwise kernel indexes (2^30)");
  a.tiles_r = static_cast<int>(a.tiles_r * p.batches);
  a.col_batch_bytes = columnwise_data_bytes(m);
  a.col_batch_scales = columnwise_scale_bytes(m) / 4;
  return launch_fp8_block_tiles(m, a, stream);
}

}  // namespace blockscale::quant::detail
