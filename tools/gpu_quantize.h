// `blockscale quantize --device gpu`: one tensor through quant/'s kernels, brought back as the
// same formats::QuantizedMatrix the CPU path makes (scales unswizzled to the linear layout), so
// both paths write identical files.
#pragma once

#include "formats/io/tensor_view.h"
#include "formats/quantize.h"
#include "formats/status.h"

namespace blockscale::tools {

// Whether this build has the GPU path and a device to run it on; the error says which is missing.
Status gpu_available();

// Quantizes the rows x cols 2D view of `t` (bf16, fp16 and fp32 go to the GPU as they are; other
// float dtypes are widened to fp32 first) with `options` into the requested copies (null: not
// wanted); rht_columnwise applies NVFP4's Hadamard transform to the columnwise copy (options'
// own `hadamard` is ignored: it is per copy on the CPU path). Every GPU recipe (not MXFP6).
Status gpu_quantize(const io::TensorView& t, int64_t rows, int64_t cols,
                    const formats::QuantizeOptions& options, bool rht_columnwise,
                    formats::QuantizedMatrix* rowwise, formats::QuantizedMatrix* columnwise);

}  // namespace blockscale::tools
