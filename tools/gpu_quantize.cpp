#include "tools/gpu_quantize.h"

#include <cuda_runtime_api.h>

#include <algorithm>
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
  BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(q.data.data(), data.p, q.data.size(), cudaMemcpyDeviceToHost), "copy data back"));
  std::vector<uint8_t> packed(scale_bytes);
  BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(packed.data(), scales.p, scale_bytes, cudaMemcpyDeviceToHost), "copy scales back"));
  const auto* packed_f32 = reinterpret_cast<const float*>(packed.data());
  if (o.recipe == formats::Recipe::kFp8Block1x128) {
    BS_RETURN_IF_ERROR(formats::unpack_vec128_scales(packed_f32, scale_bytes / 4, q.scale_rows(), q.scale_cols(), &q.scales_f32));
  } else if (o.recipe == formats::Recipe::kFp8Block128x128) {
    BS_RETURN_IF_ERROR(formats::unpack_blk128_scales(packed_f32, scale_bytes / 4, q.scale_rows(), q.scale_cols(), &q.scales_f32));
  } else {
    std::vector<uint8_t> per_row;
    BS_RETURN_IF_ERROR(formats::unpack_swizzled_scales(packed.data(), packed.size(), rows, q.scale_cols(), &per_row));
    q.scales.resize(static_cast<size_t>(q.scale_rows() * q.scale_cols()));
    for (int64_t i = 0; i < q.scale_rows(); ++i)  // row i * block_rows holds tile row i's scales
      std::copy_n(per_row.begin() + i * q.block_rows * q.scale_cols(), q.scale_cols(), q.scales.begin() + i * q.scale_cols());
  }
  if (o.recipe == formats::Recipe::kNvfp4)
    BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(&q.global_scale_dec, scale_dec.p, sizeof(float), cudaMemcpyDeviceToHost),
                                  "copy the tensor scale back"));
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
                    bool rht_columnwise, formats::QuantizedMatrix* rowwise, formats::QuantizedMatrix* columnwise) {
  quant::QuantizeProblem p;
  p.recipe = options.recipe;
  p.rounding = options.rounding;
  p.rows = rows;
  p.cols = cols;
  p.ld = cols;
  p.directions = rowwise && columnwise ? quant::Directions::kBoth
                 : rowwise             ? quant::Directions::kRowwise
                                       : quant::Directions::kColumnwise;
  p.pow2_scales = options.pow2_scales;
  p.nvfp4_2d = options.nvfp4_2d;
  p.stochastic_rounding = options.stochastic_rounding;
  p.sr_seed = options.sr_seed;
  p.sr_offset = options.sr_offset;
  p.hadamard_columnwise = rht_columnwise;
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
  DeviceBuffer x, row_data, row_scales, row_dec, col_data, col_scales, col_dec, flag, workspace;
  BS_RETURN_IF_ERROR(x.alloc(host_bytes, "allocate the input"));
  BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(x.p, host, host_bytes, cudaMemcpyHostToDevice), "copy the input"));
  BS_RETURN_IF_ERROR(row_data.alloc(quant::rowwise_data_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(row_scales.alloc(quant::rowwise_scale_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(row_dec.alloc(sizeof(float), "allocate"));
  BS_RETURN_IF_ERROR(col_data.alloc(quant::columnwise_data_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(col_scales.alloc(quant::columnwise_scale_bytes(p), "allocate"));
  BS_RETURN_IF_ERROR(col_dec.alloc(sizeof(float), "allocate"));
  BS_RETURN_IF_ERROR(flag.alloc(sizeof(int), "allocate"));
  BS_RETURN_IF_ERROR(workspace.alloc(quant::workspace_size(p), "allocate the workspace"));
  BS_RETURN_IF_ERROR(cuda_check(cudaMemset(flag.p, 0, sizeof(int)), "clear the flag"));
  const bool nvfp4 = p.recipe == formats::Recipe::kNvfp4;
  quant::QuantizeOutputs out;
  out.rowwise_data = static_cast<uint8_t*>(row_data.p);
  out.rowwise_scales = row_scales.p;
  out.columnwise_data = static_cast<uint8_t*>(col_data.p);
  out.columnwise_scales = col_scales.p;
  out.rowwise_scale_dec = nvfp4 ? static_cast<float*>(row_dec.p) : nullptr;
  out.columnwise_scale_dec = nvfp4 ? static_cast<float*>(col_dec.p) : nullptr;
  out.nonfinite = static_cast<int*>(flag.p);
  BS_RETURN_IF_ERROR(quant::run(p, quant::QuantizeInputs{x.p}, out, workspace.p, quant::workspace_size(p), nullptr));
  BS_RETURN_IF_ERROR(cuda_check(cudaDeviceSynchronize(), "quantize kernel"));
  int nonfinite = 0;
  BS_RETURN_IF_ERROR(cuda_check(cudaMemcpy(&nonfinite, flag.p, sizeof(int), cudaMemcpyDeviceToHost), "copy the flag"));
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
