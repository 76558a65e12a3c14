#include "tools/gpu_quantize.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "formats/scale_layout.h"  // defines: unpack_swizzled_scales
#include "quant/quantize.h"        // defines: the four-call quantize API

namespace blockscale::tools {
namespace {

Status cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status::error(std::string("--device gpu: ") + what + ": " + cudaGetErrorString(e));
}

// Device buffers freed on every return path.
struct DeviceBuffer {
  void* p = nullptr;
  ~DeviceBuffer() { cudaFree(p); }
  Status alloc(size_t n, const char* what) { return cuda_check(cudaMalloc(&p, n ? n : 1), what); }
};

// Copies a quantized copy back from the device into `out` (linear scales, as formats/ keeps them).
Status fetch(const formats::QuantizeOptions& o, int64_t rows, int64_t cols, const DeviceBuffer& data,
             const DeviceBuffer& scales, size_t scale_bytes, formats::QuantizedMatrix* out) {
  formats::QuantizedMatrix q;
  q.recipe = o.recipe;
  q.rows = rows;
  q.cols = cols;
  q.block_rows = formats::default_block_rows(o.recipe, false);
  q.block_cols = formats::default_block_cols(o.recipe);
  q.data.resize(static_cast<size_t>(rows * cols));
  BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(q.data.data(), data.p, q.data.size(), cudaMemcpyDeviceToHost), "copy data back"));
  std::vector<uint8_t> swizzled(scale_bytes);
  BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(swizzled.data(), scales.p, scale_bytes, cudaMemcpyDeviceToHost), "copy scales back"));
  BS_RETURN_IF_ERROR(formats::unpack_swizzled_scales(swizzled.data(), swizzled.size(), q.scale_rows(),
                                                     q.scale_cols(), &q.scales));
  *out = std::move(q);
  return Status::ok();
}

}  // namespace

Status gpu_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
    return Status::error("--device gpu: no CUDA device is visible to this process");
  return Status::ok();
}

Status gpu_quantize(const io::TensorView& t, int64_t rows, int64_t cols, const formats::QuantizeOptions& options,
                    formats::QuantizedMatrix* rowwise, formats::QuantizedMatrix* columnwise) {
  if (options.recipe != formats::Recipe::kMxfp8E4M3 && options.recipe != formats::Recipe::kMxfp8E5M2)
    return Status::error(std::string("--device gpu: the GPU kernels implement mxfp8 and mxfp8_e5m2 so far, not ") +
                         formats::recipe_name(options.recipe) + " (use --device cpu)");
  quant::QuantizeProblem p;
  p.recipe = options.recipe;
  p.rounding = options.rounding;
  p.rows = rows;
  p.cols = cols;
  p.ld = cols;
  p.directions = rowwise && columnwise ? quant::Directions::kBoth
                 : rowwise             ? quant::Directions::kRowwise
                                       : quant::Directions::kColumnwise;
  // bf16 / fp16 / fp32 go as they are; the others (f64, fp8) are widened exactly as the CPU path does.
  std::vector<float> widened;
  const void* host = t.data;
  size_t host_bytes = t.nbytes;
  switch (t.dtype) {
    case io::DType::BF16: p.input_type = quant::InputType::kBf16; break;
    case io::DType::F16: p.input_type = quant::InputType::kFp16; break;
    case io::DType::F32: p.input_type = quant::InputType::kFp32; break;
    default:
      BS_RETURN_IF_ERROR(io::to_float(t, &widened));
      p.input_type = quant::InputType::kFp32;
      host = widened.data();
      host_bytes = widened.size() * sizeof(float);
  }
  BS_RETURN_IF_ERROR(quant::can_implement(p));
  DeviceBuffer x, row_data, row_scales, col_data, col_scales, flag;
  BS_RETURN_IF_ERROR(x.alloc(host_bytes, "allocate the input"));
  BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(x.p, host, host_bytes, cudaMemcpyHostToDevice), "copy the input"));
  BS_RETURN_IF_ERROR(row_data.alloc(quant::rowwise_data_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(row_scales.alloc(quant::rowwise_scale_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(col_data.alloc(quant::columnwise_data_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(col_scales.alloc(quant::columnwise_scale_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(flag.alloc(sizeof(int), "allocate"));
  BS_RETURN_IF_ERROR(cuda_check(cudaMemset(flag.p, 0, sizeof(int)), "clear the flag"));
  quant::QuantizeOutputs out;
  out.rowwise_data = static_cast<uint8_t*>(row_data.p);
  out.rowwise_scales = static_cast<uint8_t*>(row_scales.p);
  out.columnwise_data = static_cast<uint8_t*>(col_data.p);
  out.columnwise_scales = static_cast<uint8_t*>(col_scales.p);
  out.nonfinite = static_cast<int*>(flag.p);
  BS_RETURN_IF_ERROR(quant::run(p, quant::QuantizeInputs{x.p}, out, nullptr, 0, nullptr));
  BS_RETURN_IF_ERROR(cuda_check(cudaDeviceSynchronize(), "quantize kernel"));
  int nonfinite = 0;
  BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(&nonfinite, flag.p, sizeof(int), cudaMemcpyDeviceToHost), "copy the flag"));
  if (rowwise) {
    BS_RETURN_IF_ERROR(fetch(options, rows, cols, row_data, row_scales, quant::rowwise_scale_bytes(p), rowwise));
    rowwise->nonfinite_seen = nonfinite != 0;
  }
  if (columnwise) {
    BS_RETURN_IF_ERROR(fetch(options, cols, rows, col_data, col_scales, quant::columnwise_scale_bytes(p), columnwise));
    columnwise->nonfinite_seen = nonfinite != 0;
  }
  return Status::ok();
}

}  // namespace blockscale::tools
