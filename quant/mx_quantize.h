// Internal to quant/: the MX launchers behind quant/quantize.h (MXFP8 E4M3 / E5M2 and MXFP4, dense
// and grouped), with the grid policy as a knob for tests and the benchmark.
#pragma once

#include <cuda_runtime_api.h>

#include "quant/quantize.h"

namespace blockscale::quant::detail {

// How many CTAs a launch asks for. kAuto (what run() uses): detail::tile_grid (quant/launchers.h).
// kPersistent: as many as fit on the device at once, each walking tiles in a grid-stride loop.
// kOneTilePerCta: one CTA per 128x128 tile. The last two are for the benchmark's comparison.
enum class GridPolicy { kAuto, kPersistent, kOneTilePerCta };

// A kernel image for the current device exists (else an error naming the device's sm_XY).
Status mx_check_device(const QuantizeProblem& p);

// run() with a chosen grid: checks, resets *amax, launches. Any MX recipe with a GPU kernel
// (mxfp8, mxfp8_e5m2, mxfp4).
Status run_mx(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out, cudaStream_t stream,
              GridPolicy grid = GridPolicy::kAuto);

// The grouped run() with a chosen grid: checks, resets *amax, launches. kAuto: tile_grid up to
// kShortScanGroups experts (quant/grouped_offsets.cuh), persistent beyond.
Status run_mx_grouped(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                      const GroupedQuantizeOutputs& out, cudaStream_t stream, GridPolicy grid = GridPolicy::kAuto);

// Enqueues the dense quantize kernel; arguments already checked, rows and cols > 0.
Status launch_mx_dense(const QuantizeProblem& p, const void* x, const QuantizeOutputs& out, cudaStream_t stream,
                       GridPolicy grid = GridPolicy::kAuto);

}  // namespace blockscale::quant::detail
