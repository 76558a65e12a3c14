// MXFP8 dequantize (E4M3, E5M2) of a stored quantized matrix (rows x cols codes, row stride cols
// bytes; E8M0 scales in the swizzled 128x4 layout) to row-major fp32, for tests and debugging.
// One thread per element, plain loads: no bandwidth target.
//
// Must match formats::dequantize(): formats::decode_minifloat(q) * formats::decode_e8m0(s) in
// fp32, round to nearest (a NaN scale gives NaN; its payload bits are the GPU's).
#include <algorithm>
#include <string>

#include "formats/scale_layout.h"
#include "quant/mxfp8_device.cuh"
#include "quant/mxfp8_quantize.h"

namespace blockscale::quant::detail {
namespace {

template <formats::Recipe kRecipe>
__global__ void mxfp8_dequantize_kernel(const uint8_t* data, const uint8_t* scales, float* out,
                                        int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const int64_t scale_cols = (cols + 31) / 32;
  const formats::MinifloatSpec spec = Fp8Format<kRecipe>::spec();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float scale = formats::decode_e8m0(scales[formats::swizzled_scale_offset(r, c / 32, scale_cols)]);
    out[i] = formats::mul_rn(formats::decode_minifloat(data[i], spec), scale);
  }
}

}  // namespace

Status launch_mxfp8_dequantize(const DequantizeProblem& p, const uint8_t* data,
                               const uint8_t* swizzled_scales, float* out, cudaStream_t stream) {
  int dev = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return Status::error(std::string("dequantize: ") + cudaGetErrorString(err));
  const int64_t blocks = std::min<int64_t>((p.rows * p.cols + 255) / 256, int64_t{sms} * 8);
  if (p.recipe == formats::Recipe::kMxfp8E4M3)
    mxfp8_dequantize_kernel<formats::Recipe::kMxfp8E4M3>
        <<<static_cast<unsigned>(blocks), 256, 0, stream>>>(data, swizzled_scales, out, p.rows, p.cols);
  else
    mxfp8_dequantize_kernel<formats::Recipe::kMxfp8E5M2>
        <<<static_cast<unsigned>(blocks), 256, 0, stream>>>(data, swizzled_scales, out, p.rows, p.cols);
  err = cudaGetLastError();
  if (err != cudaSuccess)
    return Status::error(std::string("mxfp8_dequantize_kernel launch: ") + cudaGetErrorString(err));
  return Status::ok();
}

}  // namespace blockscale::quant::detail
