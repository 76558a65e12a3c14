#include "gemm/device_operand.h"

#include <string>

#include "formats/scale_layout.h"  // defines: pack_gemm_scales

namespace blockscale::gemm {

Status DeviceOperand::upload(const formats::QuantizedMatrix& q) {
  std::vector<uint8_t> scales;
  BS_RETURN_IF_ERROR(formats::pack_gemm_scales(q, &scales));
  BS_RETURN_IF_ERROR(data_.upload(q.data.data(), q.data.size(), "copy the operand's codes to the GPU"));
  BS_RETURN_IF_ERROR(scales_.upload(scales, "copy the operand's scales to the GPU"));
  return scale_dec_.upload(&q.global_scale_dec, sizeof(float), "copy the operand's tensor scale to the GPU");
}

Status DeviceOperand::upload(const std::vector<formats::QuantizedMatrix>& stack) {
  if (stack.empty()) return Status::error("stack: needs at least one matrix");
  std::vector<uint8_t> codes, scales, one;
  std::vector<float> dec;
  for (size_t i = 0; i < stack.size(); ++i) {
    const formats::QuantizedMatrix& q = stack[i];
    if (q.rows != stack[0].rows || q.cols != stack[0].cols || q.recipe != stack[0].recipe)
      return Status::error("stack[" + std::to_string(i) + "]: " + std::to_string(q.rows) + " x " +
                           std::to_string(q.cols) + " " + formats::format_name(q.recipe) + ", stack[0] is " +
                           std::to_string(stack[0].rows) + " x " + std::to_string(stack[0].cols) + " " +
                           formats::format_name(stack[0].recipe) + ": the matrices must share shape and recipe");
    BS_RETURN_IF_ERROR(formats::pack_gemm_scales(q, &one));
    codes.insert(codes.end(), q.data.begin(), q.data.end());
    scales.insert(scales.end(), one.begin(), one.end());
    dec.push_back(q.global_scale_dec);
  }
  BS_RETURN_IF_ERROR(data_.upload(codes, "copy the operands' codes to the GPU"));
  BS_RETURN_IF_ERROR(scales_.upload(scales, "copy the operands' scales to the GPU"));
  return scale_dec_.upload(dec, "copy the operands' tensor scales to the GPU");
}

}  // namespace blockscale::gemm
