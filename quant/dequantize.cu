// Dequantize of every GPU recipe: a stored quantized matrix (rows x cols codes; E2M1 two per byte,
// low nibble = even column) and its scales in the layout quant's run() writes (swizzled 128x4 for
// MX / NVFP4, VEC128_32F or BLK128x128_32F fp32 for FP8 blockwise) to row-major fp32. For tests
// and debugging: one thread per element, plain loads, no bandwidth target.
//
// Must match formats::dequantize(): decode(q) * scale in fp32 (NVFP4: (decode(q) * float(s_b)) *
// S_dec, left to right), each product rounded to nearest. A NaN scale gives NaN; NaN payload bits
// are the GPU's.
#include <algorithm>

#include "formats/scale_layout.h"
#include "formats/scalar_codecs.h"
#include "quant/launchers.h"

namespace blockscale::quant::detail {
namespace {

using formats::Format;

struct DequantizeParams {
  const uint8_t* data;
  const void* scales;
  const float* scale_dec;
  float* out;
  int64_t rows, cols;
};

__device__ __forceinline__ uint32_t code_at(const uint8_t* data, int64_t r, int64_t c, int64_t cols, bool fp4) {
  if (!fp4) return data[r * cols + c];
  const uint8_t byte = data[r * ((cols + 1) / 2) + c / 2];
  return c % 2 == 0 ? (byte & 0xFu) : (byte >> 4);
}

template <Format kRecipe>
__device__ __forceinline__ float dequantize_one(const DequantizeParams& p, int64_t r, int64_t c) {
  if constexpr (kRecipe == Format::kMxfp8E4M3 || kRecipe == Format::kMxfp8E5M2 || kRecipe == Format::kMxfp4) {
    constexpr formats::MinifloatSpec spec = kRecipe == Format::kMxfp8E4M3   ? formats::e4m3_spec()
                                            : kRecipe == Format::kMxfp8E5M2 ? formats::e5m2_spec()
                                                                             : formats::e2m1_spec();
    const auto* s = static_cast<const uint8_t*>(p.scales);
    const float scale = formats::decode_e8m0(s[formats::swizzled_scale_offset(r, c / 32, (p.cols + 31) / 32)]);
    return formats::mul_rn(formats::decode_minifloat(code_at(p.data, r, c, p.cols, kRecipe == Format::kMxfp4), spec), scale);
  } else if constexpr (kRecipe == Format::kNvfp4) {
    const auto* s = static_cast<const uint8_t*>(p.scales);
    const float scale = formats::decode_ue4m3(s[formats::swizzled_scale_offset(r, c / 16, (p.cols + 15) / 16)]);
    return formats::mul_rn(formats::mul_rn(formats::decode_e2m1(code_at(p.data, r, c, p.cols, true)), scale),
                           *p.scale_dec);
  } else {
    const auto* s = static_cast<const float*>(p.scales);
    const int64_t k_blocks = (p.cols + 127) / 128;
    const float scale = kRecipe == Format::kFp8Block1x128
                            ? s[formats::vec128_scale_offset(r, c / 128, p.rows)]
                            : s[formats::blk128_scale_offset(r / 128, c / 128, k_blocks)];
    return formats::mul_rn(formats::decode_e4m3(p.data[r * p.cols + c]), scale);
  }
}

template <Format kRecipe>
__global__ void dequantize_kernel(DequantizeParams p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p.out[i] = dequantize_one<kRecipe>(p, i / p.cols, i % p.cols);
}

template <Format kRecipe>
Status launch(const DequantizeParams& params, unsigned blocks, cudaStream_t stream) {
  dequantize_kernel<kRecipe><<<blocks, 256, 0, stream>>>(params);
  return cuda_status(cudaGetLastError(), "dequantize_kernel launch");
}

}  // namespace

Status launch_dequantize(const DequantizeProblem& p, const DequantizeInputs& in, float* out, cudaStream_t stream) {
  int dev = 0, sms = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "dequantize: cudaGetDevice"));
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                                 "dequantize: cudaDeviceGetAttribute"));
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((p.rows * p.cols + 255) / 256, int64_t{sms} * 8));
  const DequantizeParams params{in.data, in.scales, in.scale_dec, out, p.rows, p.cols};
  switch (p.recipe) {
    case Format::kMxfp8E4M3: return launch<Format::kMxfp8E4M3>(params, blocks, stream);
    case Format::kMxfp8E5M2: return launch<Format::kMxfp8E5M2>(params, blocks, stream);
    case Format::kMxfp4: return launch<Format::kMxfp4>(params, blocks, stream);
    case Format::kNvfp4: return launch<Format::kNvfp4>(params, blocks, stream);
    case Format::kFp8Block1x128: return launch<Format::kFp8Block1x128>(params, blocks, stream);
    case Format::kFp8Block128x128: return launch<Format::kFp8Block128x128>(params, blocks, stream);
    default: return Status::error("problem.recipe: no GPU dequantize kernel for it");
  }
}

}  // namespace blockscale::quant::detail
