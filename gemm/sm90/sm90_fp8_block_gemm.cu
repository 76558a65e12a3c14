// Host side of the sm_90a FP8 blockwise GEMM: tensor maps for the operands and scale vectors,
// the persistent grid, the launch. Compiled for sm_90a only (gemm/CMakeLists.txt).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "formats/scale_layout.h"
#include "gemm/common/tensor_map.h"
#include "gemm/launchers.h"
#include "gemm/sm90/sm90_fp8_block_gemm.cuh"

namespace blockscale::gemm::detail {
namespace {

using formats::Recipe;
using sm90::Fp8BlockGemmConfig;
using sm90::Fp8BlockGemmParams;

const void* kernel_for(bool b_scale_per_row) {
  return b_scale_per_row ? reinterpret_cast<const void*>(&sm90::sm90_fp8_block_gemm_kernel<true>)
                         : reinterpret_cast<const void*>(&sm90::sm90_fp8_block_gemm_kernel<false>);
}

// Checks the kernel loads on the current device, raises its shared-memory limit once per
// (kernel, device) and returns the device's SM count.
Status prepare_kernel(const void* kernel, int* sm_count) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> prepared;
  int dev = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = prepared.find({kernel, dev});
  if (it != prepared.end()) {
    *sm_count = it->second;
    return Status::ok();
  }
  cudaFuncAttributes attr;
  BS_RETURN_IF_ERROR(cuda_status(cudaFuncGetAttributes(&attr, kernel), "sm90_fp8_block_gemm_kernel"));
  BS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      Fp8BlockGemmConfig::kSmemBytes),
                                 "cudaFuncSetAttribute(sm90_fp8_block_gemm_kernel, max dynamic shared memory)"));
  int sms = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                                 "cudaDeviceGetAttribute(multiprocessor count)"));
  prepared[{kernel, dev}] = sms;
  *sm_count = sms;
  return Status::ok();
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

Status sm90_fp8_block_gemm_loadable() {
  int sms = 0;
  BS_RETURN_IF_ERROR(prepare_kernel(kernel_for(false), &sms));
  return prepare_kernel(kernel_for(true), &sms);
}

Status launch_sm90_fp8_block_gemm(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream) {
  using Cfg = Fp8BlockGemmConfig;
  const bool b_scale_per_row = p.b_recipe == Recipe::kFp8Block1x128;
  const void* kernel = kernel_for(b_scale_per_row);
  int sm_count = 0;
  BS_RETURN_IF_ERROR(prepare_kernel(kernel, &sm_count));

  const int64_t k_blocks = p.k / 128;
  // Operand tiles: 128 rows x 128 bytes of K, 128-byte swizzle (the wgmma K-major layout).
  TensorMap2d a{args.a_data, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(p.m), static_cast<uint64_t>(p.k),
                static_cast<uint64_t>(p.k), Cfg::kTileM, Cfg::kTileK, CU_TENSOR_MAP_SWIZZLE_128B};
  TensorMap2d b{args.b_data, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.k),
                static_cast<uint64_t>(p.k), Cfg::kTileN, Cfg::kTileK, CU_TENSOR_MAP_SWIZZLE_128B};
  // VEC128 scales: k_blocks rows of round_up(rows, 4) floats; a box is 128 scales of one K block.
  const int64_t a_scale_ld = formats::vec128_scale_ld(p.m);
  TensorMap2d a_scale{args.a_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(k_blocks),
                      static_cast<uint64_t>(a_scale_ld), static_cast<uint64_t>(a_scale_ld * 4), 1, 128,
                      CU_TENSOR_MAP_SWIZZLE_NONE};
  TensorMap2d b_scale = a_scale;  // unused by the 128x128 kernel
  if (b_scale_per_row) {
    const int64_t b_scale_ld = formats::vec128_scale_ld(p.n);
    b_scale = {args.b_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(k_blocks),
               static_cast<uint64_t>(b_scale_ld), static_cast<uint64_t>(b_scale_ld * 4), 1, 128,
               CU_TENSOR_MAP_SWIZZLE_NONE};
  }
  CUtensorMap a_map, b_map, a_scale_map, b_scale_map;
  BS_RETURN_IF_ERROR(encode_tensor_map(a, "a_data", &a_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(b, "b_data", &b_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(a_scale, "a_scales", &a_scale_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(b_scale, "b_scales", &b_scale_map));

  Fp8BlockGemmParams params;
  params.m = static_cast<int32_t>(p.m);
  params.n = static_cast<int32_t>(p.n);
  params.k_blocks = static_cast<int32_t>(k_blocks);
  params.order.tiles_m = static_cast<int32_t>((p.m + Cfg::kTileM - 1) / Cfg::kTileM);
  params.order.tiles_n = static_cast<int32_t>((p.n + Cfg::kTileN - 1) / Cfg::kTileN);
  params.order.group_m = 8;
  params.b_block_scales = b_scale_per_row ? nullptr : args.b_scales;
  params.b_block_scales_ld = static_cast<int32_t>(formats::blk128_scale_ld(k_blocks));
  params.alpha = p.alpha;
  params.beta = p.beta;
  const bool c_bf16 = p.c_type == MatrixType::kBf16, d_bf16 = p.d_type == MatrixType::kBf16;
  params.c = args.c;
  params.ldc = p.ldc;
  params.c_bf16 = c_bf16;
  params.c_pairs = args.c != nullptr && p.ldc % 2 == 0 && aligned(args.c, c_bf16 ? 4 : 8);
  params.d = args.d;
  params.ldd = p.ldd;
  params.d_bf16 = d_bf16;
  params.d_pairs = p.ldd % 2 == 0 && aligned(args.d, d_bf16 ? 4 : 8);

  const int64_t tiles = int64_t{params.order.tiles_m} * params.order.tiles_n;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tiles, sm_count)));
  if (b_scale_per_row) {
    sm90::sm90_fp8_block_gemm_kernel<true><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
        a_map, b_map, a_scale_map, b_scale_map, params);
  } else {
    sm90::sm90_fp8_block_gemm_kernel<false><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
        a_map, b_map, a_scale_map, b_scale_map, params);
  }
  return cuda_status(cudaGetLastError(), "sm90_fp8_block_gemm_kernel launch");
}

}  // namespace blockscale::gemm::detail
