// Internal to quant/: NVFP4's amax pass (TensorAmax::kMeasure), the first of its two passes. The
// quantize kernel (quant/nvfp4_quantize_kernel.cuh) reduces the per-CTA maxima it leaves in the workspace.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "quant/quantize.h"

namespace blockscale::quant::detail {

// The amax pass runs at most this many CTAs: the workspace holds 2 x kNvfp4MaxPartials words.
inline constexpr int kNvfp4MaxPartials = 1024;

// The grouped (MoE) walk (quant/grouped_offsets.cuh): the RHT columnwise copy of grouped input
// transforms each expert's tokens padded with zero rows to a multiple of 16, so its amax is taken
// over 16-row segments of the padded row space (capacity rows), not over 16-row groups of the
// input. The offsets are read on the device.
struct Nvfp4AmaxGroups {
  const int32_t* group_ends = nullptr;  // device, num_groups cumulative ends
  int num_groups = 0;
  int64_t capacity = 0;  // grouped_capacity: a multiple of 16 >= the padded total
};

// Enqueues the amax pass over p's input x (vec_load: x and its row stride allow 16-byte loads).
// Each CTA i writes the fp32 bits of its max |x| to partials[i] (when `plain`) and of its
// max |RHT(x)| over 16-row groups of each column to partials[kNvfp4MaxPartials + i] (when `rht`);
// *n_partials receives the number of CTAs. groups (optional): the 16-row groups are the padded
// segments of grouped input (max |x| is the same either way: every input row is read once).
// batches (not with groups): that many matrices of p's shape back to back in x (matrix b from
// element b * rows * ld), each with its own partials at partials + b * 2 * kNvfp4MaxPartials.
Status launch_nvfp4_amax(const QuantizeProblem& p, const void* x, bool vec_load, bool plain, bool rht,
                         uint32_t* partials, int* n_partials, cudaStream_t stream,
                         const Nvfp4AmaxGroups* groups = nullptr, int64_t batches = 1);

}  // namespace blockscale::quant::detail
