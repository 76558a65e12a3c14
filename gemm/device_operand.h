// A formats:: quantized matrix uploaded as a GEMM operand, for callers that hold the emulator's
// bytes on the host (the CLI's `gemm`, the GEMM tests): what gemm/'s arguments point at.
//
//   defines: DeviceOperand
#pragma once

#include <cstdint>
#include <vector>

#include "formats/recipe.h"
#include "formats/status.h"
#include "runtime/device.h"

namespace blockscale::gemm {

// Device copies of a quantized matrix: its codes, its scales in its recipe's GEMM layout
// (formats::pack_gemm_scales: the bytes quant/ writes) and its NVFP4 tensor scale S_dec (one fp32;
// global_scale_dec, 1 for the other recipes). Owns the memory; move-only like DeviceBuffer.
class DeviceOperand {
 public:
  // One matrix (A, or a dense GEMM's B).
  Status upload(const formats::QuantizedMatrix& q);
  // Matrices of one shape and recipe stacked in order (an M-grouped GEMM's per-expert B): codes
  // and scales concatenated, one S_dec each.
  Status upload(const std::vector<formats::QuantizedMatrix>& stack);

  const uint8_t* data() const { return data_.data(); }
  const void* scales() const { return scales_.data(); }
  const float* scale_dec() const { return scale_dec_.as<const float>(); }

 private:
  runtime::DeviceBuffer data_, scales_, scale_dec_;
};

}  // namespace blockscale::gemm
