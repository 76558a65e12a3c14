// Internal to quant/: the MXFP8 launchers behind quant/quantize.h, with the element encoder as a
// knob so that tests and the benchmark can run both encoders against the emulator.
#pragma once

#include <cuda_runtime_api.h>

#include "quant/device_common.cuh"  // defines: ElementEncoder
#include "quant/quantize.h"

namespace blockscale::quant::detail {

// A kernel image for the current device exists (else an error naming the device's sm_XY).
Status mxfp8_check_device(const QuantizeProblem& p, ElementEncoder encoder);

// run() with a chosen encoder: checks, resets *amax, launches.
Status run_mxfp8(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                 ElementEncoder encoder, cudaStream_t stream);

// Enqueues the quantize kernel; arguments already checked, rows and cols > 0.
Status launch_mxfp8_quantize(const QuantizeProblem& p, const void* x, const QuantizeOutputs& out,
                             ElementEncoder encoder, cudaStream_t stream);

}  // namespace blockscale::quant::detail
