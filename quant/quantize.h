// GPU quantize / dequantize: the four-call host protocol (describe the problem, can_implement,
// workspace_size, run on a stream). Raw device pointers and small descriptors; every call returns
// a blockscale::Status whose message names the argument and the rule it broke.
//
// Implemented today: MXFP8 (E4M3, E5M2), ceil or floor scale rounding, bf16 / fp16 / fp32 input,
// rowwise, columnwise or both copies from one read of the input. The bytes written are exactly
// those of formats::quantize() + formats::pack_swizzled_scales() (docs/numerics.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::quant {

enum class InputType { kBf16, kFp16, kFp32 };

// Which quantized copies one run writes. A columnwise copy quantizes 32-row blocks of the input
// and stores the transpose (cols x rows, the block dimension contiguous: the K-major operand that
// wgrad/dgrad take), exactly as formats::quantize(..., Direction::kColumnwise) does.
enum class Directions { kRowwise, kColumnwise, kBoth };

// The problem: an input matrix of rows x cols elements, row-major with a row stride of `ld`
// elements (ld >= cols), and what to make of it.
struct QuantizeProblem {
  formats::Recipe recipe = formats::Recipe::kMxfp8E4M3;  // kMxfp8E4M3 or kMxfp8E5M2 for now
  formats::ScaleRounding rounding = formats::ScaleRounding::kCeil;
  InputType input_type = InputType::kBf16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // input row stride in elements
  Directions directions = Directions::kRowwise;
};

struct QuantizeInputs {
  const void* x = nullptr;  // device pointer to the input, input_type elements
};

// Device pointers. Buffers of a direction that is not requested are ignored (may be null).
//   rowwise_data      : rows x cols element codes, row-major, row stride cols bytes
//   rowwise_scales    : E8M0 scales of the rows x ceil(cols/32) scale matrix in the swizzled 128x4
//                       layout (formats::swizzled_scale_offset), rowwise_scale_bytes() bytes; the
//                       padding bytes are written as 0 by the kernel
//   columnwise_data   : cols x rows element codes (the transpose), row stride rows bytes
//   columnwise_scales : the cols x ceil(rows/32) scale matrix, swizzled, padding written as 0
//   amax              : optional; run() overwrites *amax with max |x| over the whole input (NaN
//                       ignored, Inf counts: formats' amax rule)
//   nonfinite         : optional; the kernel stores 1 when the input holds a NaN or Inf and never
//                       writes anything else: the caller zeroes it once, it stays set across runs
//                       (a sticky "found non-finite" flag, as formats' QuantizedMatrix::nonfinite_seen
//                       for one tensor)
// Vector loads/stores are used where pointers and strides allow (input: 16-byte aligned x and
// ld * element size, copied with cp.async; rowwise data: 16-byte stores when 16-byte aligned with
// cols % 16 == 0, 8-byte ones when 8 / cols % 8; columnwise data: 16-byte aligned, rows % 16 == 0;
// scales: 16-byte aligned); any other alignment takes a slower path that writes the same bytes.
struct QuantizeOutputs {
  uint8_t* rowwise_data = nullptr;
  uint8_t* rowwise_scales = nullptr;
  uint8_t* columnwise_data = nullptr;
  uint8_t* columnwise_scales = nullptr;
  float* amax = nullptr;
  int* nonfinite = nullptr;
};

// Sizes in bytes of each output for a problem (0 for a direction not requested or an empty shape).
int64_t rowwise_data_bytes(const QuantizeProblem& p);
int64_t rowwise_scale_bytes(const QuantizeProblem& p);
int64_t columnwise_data_bytes(const QuantizeProblem& p);
int64_t columnwise_scale_bytes(const QuantizeProblem& p);

// Shape, stride, recipe and option checks (no device access). rows == 0 or cols == 0 is a valid
// empty problem.
Status can_implement(const QuantizeProblem& p);
// The above plus pointers (non-null where needed, amax/nonfinite 4-byte aligned, no two buffers
// overlapping, the input included) and the current device (a kernel image for its architecture).
Status can_implement(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out);

// Bytes of device workspace run() needs (0 today; the argument is kept for later recipes).
size_t workspace_size(const QuantizeProblem& p);

// Checks (can_implement), then enqueues the work on `stream`. Asynchronous: a Status of ok means
// the launch succeeded.
Status run(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
           void* workspace, size_t workspace_bytes, cudaStream_t stream);

// ---- Dequantize (tests, debugging) ---------------------------------------------------------

// A quantized matrix in its stored orientation (a columnwise copy of an R x C input is C x R):
// rows x cols element codes with row stride cols bytes, and its swizzled E8M0 scales.
struct DequantizeProblem {
  formats::Recipe recipe = formats::Recipe::kMxfp8E4M3;  // kMxfp8E4M3 or kMxfp8E5M2
  int64_t rows = 0;
  int64_t cols = 0;
};

// out: rows x cols fp32, row-major: decode(q) * 2^e, the values formats::dequantize() gives
// (a NaN scale gives NaN; NaN payload bits are the GPU's).
Status dequantize(const DequantizeProblem& p, const uint8_t* data, const uint8_t* swizzled_scales,
                  float* out, cudaStream_t stream);

}  // namespace blockscale::quant
