// quant/quantize.h: argument checks, output sizes, and the one dispatch from a problem to the
// recipe's launcher (MXFP8 today: quant/mxfp8_quantize.cu).
#include "quant/quantize.h"

#include <string>
#include <vector>

#include "formats/scale_layout.h"
#include "quant/mxfp8_quantize.h"

namespace blockscale::quant {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;  // as formats/: keeps every offset far from overflow

bool is_mxfp8(formats::Recipe r) {
  return r == formats::Recipe::kMxfp8E4M3 || r == formats::Recipe::kMxfp8E5M2;
}
bool wants_rowwise(const QuantizeProblem& p) { return p.directions != Directions::kColumnwise; }
bool wants_columnwise(const QuantizeProblem& p) { return p.directions != Directions::kRowwise; }
bool empty(const QuantizeProblem& p) { return p.rows == 0 || p.cols == 0; }
int64_t element_bytes(InputType t) { return t == InputType::kFp32 ? 4 : 2; }
int64_t blocks(int64_t n) { return (n + 31) / 32; }

Status check_dim(const char* name, int64_t v) {
  if (v < 0 || v > kMaxDim)
    return Status::error(std::string(name) + ": must be in [0, 2^31] (got " + std::to_string(v) + ")");
  return Status::ok();
}

struct Range {
  const char* name;
  uintptr_t begin;
  uintptr_t end;
};

Status check_no_overlap(const std::vector<Range>& ranges) {
  for (size_t a = 0; a < ranges.size(); ++a)
    for (size_t b = a + 1; b < ranges.size(); ++b)
      if (ranges[a].begin < ranges[b].end && ranges[b].begin < ranges[a].end)
        return Status::error(std::string(ranges[b].name) + ": overlaps " + ranges[a].name);
  return Status::ok();
}

Range range(const char* name, const void* p, int64_t bytes) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  return {name, b, b + static_cast<uintptr_t>(bytes)};
}

}  // namespace

int64_t rowwise_data_bytes(const QuantizeProblem& p) {
  return wants_rowwise(p) && p.rows > 0 && p.cols > 0 ? p.rows * p.cols : 0;
}
int64_t rowwise_scale_bytes(const QuantizeProblem& p) {
  return wants_rowwise(p) ? formats::swizzled_scale_bytes(p.rows, blocks(p.cols)) : 0;
}
int64_t columnwise_data_bytes(const QuantizeProblem& p) {
  return wants_columnwise(p) && p.rows > 0 && p.cols > 0 ? p.rows * p.cols : 0;
}
int64_t columnwise_scale_bytes(const QuantizeProblem& p) {
  return wants_columnwise(p) ? formats::swizzled_scale_bytes(p.cols, blocks(p.rows)) : 0;
}

Status can_implement(const QuantizeProblem& p) {
  if (!is_mxfp8(p.recipe))
    return Status::error(std::string("problem.recipe: ") + formats::recipe_name(p.recipe) +
                         " has no GPU quantize kernel yet (mxfp8, mxfp8_e5m2 only)");
  if (p.rounding != formats::ScaleRounding::kCeil && p.rounding != formats::ScaleRounding::kFloor)
    return Status::error("problem.rounding: unknown value");
  if (p.input_type != InputType::kBf16 && p.input_type != InputType::kFp16 &&
      p.input_type != InputType::kFp32)
    return Status::error("problem.input_type: unknown value");
  if (p.directions != Directions::kRowwise && p.directions != Directions::kColumnwise &&
      p.directions != Directions::kBoth)
    return Status::error("problem.directions: unknown value");
  BS_RETURN_IF_ERROR(check_dim("problem.rows", p.rows));
  BS_RETURN_IF_ERROR(check_dim("problem.cols", p.cols));
  if (p.ld < p.cols || p.ld > kMaxDim)
    return Status::error("problem.ld: row stride (" + std::to_string(p.ld) + ") must be >= cols (" +
                         std::to_string(p.cols) + ") and <= 2^31");
  return Status::ok();
}

Status can_implement(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out) {
  BS_RETURN_IF_ERROR(can_implement(p));
  if (out.amax != nullptr && reinterpret_cast<uintptr_t>(out.amax) % 4 != 0)
    return Status::error("outputs.amax: must be 4-byte aligned");
  if (out.nonfinite != nullptr && reinterpret_cast<uintptr_t>(out.nonfinite) % 4 != 0)
    return Status::error("outputs.nonfinite: must be 4-byte aligned");
  if (empty(p)) return Status::ok();
  const int64_t esize = element_bytes(p.input_type);
  if (in.x == nullptr) return Status::error("inputs.x: must not be null");
  if (reinterpret_cast<uintptr_t>(in.x) % esize != 0)
    return Status::error("inputs.x: must be aligned to its element size (" + std::to_string(esize) +
                         " bytes)");
  std::vector<Range> ranges = {range("inputs.x", in.x, ((p.rows - 1) * p.ld + p.cols) * esize)};
  if (wants_rowwise(p)) {
    if (out.rowwise_data == nullptr) return Status::error("outputs.rowwise_data: must not be null (rowwise requested)");
    if (out.rowwise_scales == nullptr) return Status::error("outputs.rowwise_scales: must not be null (rowwise requested)");
    ranges.push_back(range("outputs.rowwise_data", out.rowwise_data, rowwise_data_bytes(p)));
    ranges.push_back(range("outputs.rowwise_scales", out.rowwise_scales, rowwise_scale_bytes(p)));
  }
  if (wants_columnwise(p)) {
    if (out.columnwise_data == nullptr) return Status::error("outputs.columnwise_data: must not be null (columnwise requested)");
    if (out.columnwise_scales == nullptr) return Status::error("outputs.columnwise_scales: must not be null (columnwise requested)");
    ranges.push_back(range("outputs.columnwise_data", out.columnwise_data, columnwise_data_bytes(p)));
    ranges.push_back(range("outputs.columnwise_scales", out.columnwise_scales, columnwise_scale_bytes(p)));
  }
  if (out.amax != nullptr) ranges.push_back(range("outputs.amax", out.amax, sizeof(float)));
  if (out.nonfinite != nullptr) ranges.push_back(range("outputs.nonfinite", out.nonfinite, sizeof(int)));
  BS_RETURN_IF_ERROR(check_no_overlap(ranges));
  return detail::mxfp8_check_device(p, detail::kDefaultEncoder);
}

size_t workspace_size(const QuantizeProblem&) { return 0; }

namespace detail {

Status run_mxfp8(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                 ElementEncoder encoder, cudaStream_t stream) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  if (!empty(p) && encoder != kDefaultEncoder) BS_RETURN_IF_ERROR(mxfp8_check_device(p, encoder));
  if (out.amax != nullptr) {
    const cudaError_t err = cudaMemsetAsync(out.amax, 0, sizeof(float), stream);
    if (err != cudaSuccess)
      return Status::error(std::string("outputs.amax: cudaMemsetAsync: ") + cudaGetErrorString(err));
  }
  if (empty(p)) return Status::ok();
  return launch_mxfp8_quantize(p, in.x, out, encoder, stream);
}

}  // namespace detail

Status run(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
           void* /*workspace*/, size_t /*workspace_bytes*/, cudaStream_t stream) {
  return detail::run_mxfp8(p, in, out, detail::kDefaultEncoder, stream);
}

Status dequantize(const DequantizeProblem& p, const uint8_t* data, const uint8_t* swizzled_scales,
                  float* out, cudaStream_t stream) {
  if (!is_mxfp8(p.recipe))
    return Status::error(std::string("problem.recipe: ") + formats::recipe_name(p.recipe) +
                         " has no GPU dequantize kernel yet (mxfp8, mxfp8_e5m2 only)");
  BS_RETURN_IF_ERROR(check_dim("problem.rows", p.rows));
  BS_RETURN_IF_ERROR(check_dim("problem.cols", p.cols));
  if (p.rows == 0 || p.cols == 0) return Status::ok();
  if (data == nullptr) return Status::error("data: must not be null");
  if (swizzled_scales == nullptr) return Status::error("swizzled_scales: must not be null");
  if (out == nullptr) return Status::error("out: must not be null");
  if (reinterpret_cast<uintptr_t>(out) % 4 != 0) return Status::error("out: must be 4-byte aligned");
  BS_RETURN_IF_ERROR(check_no_overlap(
      {range("data", data, p.rows * p.cols),
       range("swizzled_scales", swizzled_scales, formats::swizzled_scale_bytes(p.rows, blocks(p.cols))),
       range("out", out, p.rows * p.cols * 4)}));
  return detail::launch_mxfp8_dequantize(p, data, swizzled_scales, out, stream);
}

}  // namespace blockscale::quant
