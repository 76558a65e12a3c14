#include "tools/gpu_quantize.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "formats/scale_layout.h"  // defines: unpack_swizzled_scales
#include "quant/quantize.h"        // defines: the four-call quantize API
#include "runtime/cuda_status.h"
#include "runtime/device.h"

namespace blockscale::tools {
namespace {

using runtime::DeviceBuffer;

// This path's CUDA errors name the option that chose it.
Status device_status(cudaError_t e, const char* what) {
  const Status s = runtime::cuda_status(e, what);
  return s ? s : Status::error("--device gpu: " + s.message());
}


// Copies one quantized copy back from the device into `out` as formats/ keeps it: linear scales
// (NVFP4 2D: the GPU writes the tile's scale on each of its 16 rows; the file keeps one per tile),
// fp32 scales for FP8 blockwise, the NVFP4 tensor decode scale.
Status fetch(const formats::QuantizeOptions& o, int64_t rows, int64_t cols, const DeviceBuffer& data,
             const DeviceBuffer& scales, size_t scale_bytes, const DeviceBuffer& scale_dec,
             formats::QuantizedMatrix* out) {
  formats::QuantizedMatrix q;
  q.recipe = o.recipe;
  q.rows = rows;
  q.cols = cols;
  q.block_rows = formats::default_block_rows(o.recipe, o.nvfp4_2d);
  q.block_cols = formats::default_block_cols(o.recipe);
  q.data.resize(static_cast<size_t>(rows * q.data_row_bytes()));
  BS_RETURN_IF_ERROR(device_status(cudaMemcpy(q.data.data(), data.data(), q.data.size(), cudaMemcpyDeviceToHost), "copy data back"));
  std::vector<uint8_t> packed(scale_bytes);
  BS_RETURN_IF_ERROR(device_status(cudaMemcpy(packed.data(), scales.data(), scale_bytes, cudaMemcpyDeviceToHost), "copy scales back"));
  const auto* packed_f32 = reinterpret_cast<const float*>(packed.data());
  if (o.recipe == formats::Format::kFp8Block1x128) {
    BS_RETURN_IF_ERROR(formats::unpack_vec128_scales(packed_f32, scale_bytes / 4, q.scale_rows(), q.scale_cols(), &q.scales_f32));
  } else if (o.recipe == formats::Format::kFp8Block128x128) {
    BS_RETURN_IF_ERROR(formats::unpack_blk128_scales(packed_f32, scale_bytes / 4, q.scale_rows(), q.scale_cols(), &q.scales_f32));
  } else {
    std::vector<uint8_t> per_row;
    BS_RETURN_IF_ERROR(formats::unpack_swizzled_scales(packed.data(), packed.size(), rows, q.scale_cols(), &per_row));
    q.scales.resize(static_cast<size_t>(q.scale_rows() * q.scale_cols()));
    for (int64_t i = 0; i < q.scale_rows(); ++i)  // row i * block_rows holds tile row i's scales
      std::copy_n(per_row.begin() + i * q.block_rows * q.scale_cols(), q.scale_cols(), q.scales.begin() + i * q.scale_cols());
  }
  if (o.recipe == formats::Format::kNvfp4)
    BS_RETURN_IF_ERROR(device_status(cudaMemcpy(&q.global_scale_dec, scale_dec.data(), sizeof(float), cudaMemcpyDeviceToHost),
                                  "copy the tensor scale back"));
  *out = std::move(q);
  return Status::ok();
}

}  // namespace

Status gpu_available() {
  const Status s = runtime::gpu_available();
  return s ? s : Status::error("--device gpu: " + s.message());
}

Status gpu_quantize(const io::TensorView& t, int64_t rows, int64_t cols, const formats::QuantizeOptions& options,
                    bool rht_columnwise, formats::QuantizedMatrix* rowwise, formats::QuantizedMatrix* columnwise) {
  quant::QuantizeProblem p = quant::problem_from_options(options, t.dtype, rows, cols,
                                                         rowwise && columnwise ? formats::Direction::kBoth
                                                         : rowwise             ? formats::Direction::kRowwise
                                                                               : formats::Direction::kColumnwise);
  p.hadamard_columnwise = rht_columnwise;
  // bf16 / fp16 / fp32 go as they are; the others (f64, fp8) are widened exactly as the CPU path does.
  std::vector<float> widened;
  const void* host = t.data;
  size_t host_bytes = t.nbytes;
  if (t.dtype != formats::DType::kBf16 && t.dtype != formats::DType::kF16 && t.dtype != formats::DType::kF32) {
    BS_RETURN_IF_ERROR(io::to_float(t, &widened));
    p.input_type = formats::DType::kF32;
    host = widened.data();
    host_bytes = widened.size() * sizeof(float);
  }
  BS_RETURN_IF_ERROR(quant::can_implement(p));
  DeviceBuffer x, row_data, row_scales, row_dec, col_data, col_scales, col_dec, flag, workspace;
  BS_RETURN_IF_ERROR(x.alloc(host_bytes, "allocate the input"));
  BS_RETURN_IF_ERROR(device_status(cudaMemcpy(x.data(), host, host_bytes, cudaMemcpyHostToDevice), "copy the input"));
  BS_RETURN_IF_ERROR(row_data.alloc(quant::rowwise_data_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(row_scales.alloc(quant::rowwise_scale_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(row_dec.alloc(sizeof(float), "allocate"));
  BS_RETURN_IF_ERROR(col_data.alloc(quant::columnwise_data_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(col_scales.alloc(quant::columnwise_scale_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(col_dec.alloc(sizeof(float), "allocate"));
  BS_RETURN_IF_ERROR(flag.alloc(sizeof(int), "allocate"));
  BS_RETURN_IF_ERROR(workspace.alloc(quant::workspace_size(p), "allocate the workspace"));
  BS_RETURN_IF_ERROR(device_status(cudaMemset(flag.data(), 0, sizeof(int)), "clear the flag"));
  const bool nvfp4 = p.recipe == formats::Format::kNvfp4;
  quant::QuantizeOutputs out;
  out.rowwise_data = row_data.as<uint8_t>();
  out.rowwise_scales = row_scales.data();
  out.columnwise_data = col_data.as<uint8_t>();
  out.columnwise_scales = col_scales.data();
  out.rowwise_scale_dec = nvfp4 ? row_dec.as<float>() : nullptr;
  out.columnwise_scale_dec = nvfp4 ? col_dec.as<float>() : nullptr;
  out.nonfinite = flag.as<int>();
  BS_RETURN_IF_ERROR(quant::run(p, quant::QuantizeInputs{x.data()}, out, workspace.data(), quant::workspace_size(p), nullptr));
  BS_RETURN_IF_ERROR(device_status(cudaDeviceSynchronize(), "quantize kernel"));
  int nonfinite = 0;
  BS_RETURN_IF_ERROR(device_status(cudaMemcpy(&nonfinite, flag.data(), sizeof(int), cudaMemcpyDeviceToHost), "copy the flag"));
  if (rowwise) {
    BS_RETURN_IF_ERROR(fetch(options, rows, cols, row_data, row_scales, quant::rowwise_scale_bytes(p), row_dec, rowwise));
    rowwise->nonfinite_seen = nonfinite != 0;
  }
  if (columnwise) {
    BS_RETURN_IF_ERROR(fetch(options, cols, rows, col_data, col_scales, quant::columnwise_scale_bytes(p), col_dec, columnwise));
    columnwise->nonfinite_seen = nonfinite != 0;
  }
  return Status::ok();
}

}  // namespace blockscale::tools
