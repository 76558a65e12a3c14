// Internal to quant/: the per-recipe launchers behind quant/quantize.h. quantize.cpp has checked
// every argument (shapes, options, pointers, overlaps), zeroed outputs.amax / columnwise_amax when
// given, and calls these only for a non-empty shape. One file per recipe and mode implements them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "quant/quantize.h"
#include "runtime/cuda_status.h"

namespace blockscale::quant::detail {

// MXFP8 (E4M3, E5M2) and MXFP4: quant/mx_quantize.cu.
Status launch_mx_quantize(const QuantizeProblem& p, const QuantizeInputs& in,
                          const QuantizeOutputs& out, cudaStream_t stream);
// Several matrices of one shape (whole 128-row tiles each) in one launch: quant/mx_batched_quantize.cu.
Status launch_mx_batched_quantize(const BatchedQuantizeProblem& p, const QuantizeInputs& in,
                                  const QuantizeOutputs& out, cudaStream_t stream);
// The grouped (MoE) mode of the same kernel: quant/mx_grouped_quantize.cu.
Status launch_mx_grouped_quantize(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                                  const GroupedQuantizeOutputs& out, cudaStream_t stream);

// NVFP4 (1D, 2D, SR, RHT, measured or given amax): quant/nvfp4_quantize.cu. `workspace` holds
// workspace_size(p) bytes (16-byte aligned; may be null when that is 0).
Status launch_nvfp4_quantize(const QuantizeProblem& p, const QuantizeInputs& in,
                             const QuantizeOutputs& out, void* workspace, cudaStream_t stream);
size_t nvfp4_workspace_size(const QuantizeProblem& p);

// Several stacked matrices (whole 128-row tiles each) in one amax pass and one quantize launch,
// the rowwise copy with each matrix's measured amax: quant/nvfp4_batched_quantize.cu. `workspace`
// holds workspace_size(p) bytes.
Status launch_nvfp4_batched_quantize(const BatchedQuantizeProblem& p, const QuantizeInputs& in,
                                     const QuantizeOutputs& out, void* workspace, cudaStream_t stream);

// The grouped (MoE) mode of the NVFP4 kernels (1D only): quant/nvfp4_grouped_quantize.cu.
Status launch_nvfp4_grouped_quantize(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                                     const GroupedQuantizeOutputs& out, void* workspace, cudaStream_t stream);
size_t nvfp4_grouped_workspace_size(const GroupedQuantizeProblem& p);

// FP8 blockwise (1x128, 128x128, pow2): quant/fp8_block_quantize.cu.
Status launch_fp8_block_quantize(const QuantizeProblem& p, const QuantizeInputs& in,
                                 const QuantizeOutputs& out, cudaStream_t stream);
// Several stacked matrices in one launch (128x128 only): quant/fp8_block_batched_quantize.cu.
Status launch_fp8_block_batched_quantize(const BatchedQuantizeProblem& p, const QuantizeInputs& in,
                                         const QuantizeOutputs& out, cudaStream_t stream);
// The grouped (MoE) mode of the same kernel (1x128 only): quant/fp8_block_grouped_quantize.cu.
Status launch_fp8_block_grouped_quantize(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                                         const GroupedQuantizeOutputs& out, cudaStream_t stream);

// The padded ends alone (grouped runs without a columnwise copy, or of an empty matrix): one CTA
// scans group_ends and writes padded_group_ends, each expert rounded up to `block` (16, 32 or
// 128) rows: quant/grouped_offsets.cu.
Status launch_grouped_offsets(const int32_t* group_ends, int num_groups, int64_t rows, int block,
                              int32_t* padded_group_ends, cudaStream_t stream);

// Every recipe: quant/dequantize.cu.
Status launch_dequantize(const DequantizeProblem& p, const DequantizeInputs& in, float* out,
                         cudaStream_t stream);
// NVFP4's block values as bf16: quant/nvfp4_bf16.cu.
Status launch_nvfp4_block_values_bf16(const DequantizeProblem& p, int64_t batches, const DequantizeInputs& in,
                                      uint16_t* out, cudaStream_t stream);

// A device buffer's byte range, for the overlap checks of every entry point.
struct Range {
  const char* name;
  uintptr_t begin;
  uintptr_t end;
};
Range range(const char* name, const void* p, int64_t bytes);
// "<later name>: overlaps <earlier name>" for the first two ranges that share a byte.
Status check_no_overlap(const std::vector<Range>& ranges);

// How many CTAs of `kernel` (threads per CTA, dynamic shared memory smem) fit on the current
// device at once (SMs x occupancy), after checking that the device has an image of it (else an
// error naming `what` and the device's sm_XY) and raising its shared-memory limit past 48 KB, on
// the first call, to max(smem, smem_limit): a kernel whose dynamic shared memory varies (grouped:
// 8 bytes per expert) passes the most it will ever launch with. Cached per (kernel, device, smem):
// the queries cost more host time than a small launch.
Status resident_ctas(const void* kernel, int threads, int smem, const char* what, int* resident, int smem_limit = 0);

// A grid of at most `resident` CTAs for `work` items, evened out so the last round keeps most of
// them busy (>= 1).
int64_t even_grid(int64_t work, int64_t resident);

// The grid of a kernel that walks 128x128 tiles in a grid-stride loop, given how many of its CTAs
// fit on the device at once. Up to two rounds of tiles: a persistent grid (every resident CTA
// gets work, the tiles spread evenly over the rounds). More: one CTA per tile, which the block
// scheduler refills as CTAs finish, so one CTA's loads overlap its neighbours' work (MXFP8 row+col
// on an H200: 84% -> 90% of copy bandwidth at 256 MiB; docs/performance.md).
int64_t tile_grid(int64_t tiles, int64_t resident);

using runtime::cuda_status;

}  // namespace blockscale::quant::detail
