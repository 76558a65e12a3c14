// GPU block-scaled GEMM: the four-call host protocol (describe the problem, can_implement,
// workspace_size, run on a stream). Raw device pointers and a small descriptor; every call
// returns a blockscale::Status whose message names the argument and the rule it broke.
//
//   D = alpha * (A ⊗ scales_A) · (B ⊗ scales_B)^T + beta * C
//
// A (M x K) and B (N x K) are K-major quantized operands exactly as quant/ writes them (see
// quant/quantize.h): element codes row-major with a row stride of K bytes, scales in the GEMM
// layout of their recipe. C and D are row-major with row strides ldc / ldd (elements), bf16 or
// fp32. beta with an fp32 C is how wgrad accumulates into a main gradient; C may be D itself
// (same pointer, type and stride: in place). With beta == 0, C is not read (BLAS).
//
// Recipes (docs/numerics.md):
//   FP8 blockwise, fprop / dgrad : A fp8_block128 (1x128, VEC128_32F fp32 scales) x
//                                  B fp8_block128x128 (128x128, BLK128x128_32F fp32 scales)
//   FP8 blockwise, wgrad         : A fp8_block128 x B fp8_block128 (both 1x128, VEC128_32F)
//   MX / NVFP4 (block-scaled)    : A mxfp8 or mxfp8_e5m2 x B mxfp8, mxfp8_e5m2, mxfp4 or nvfp4;
//                                  A mxfp4 x B mxfp4; A nvfp4 x B nvfp4. Byte scales (E8M0 /
//                                  UE4M3) in the swizzled 128x4 layout, as quant/ writes them.
//                                  NVFP4 operands also take their tensor decode scale S_dec
//                                  (a device float, quant/'s *_scale_dec), applied with alpha.
// Architectures (one dispatch function, gemm.cpp):
//   sm_90 (Hopper): FP8 blockwise through cuBLASLt's blockwise FP8 matmul where it takes the shape
//     (m and n multiples of 4, rows of D and C 16-byte aligned, C's type D's; it ran 0.96-1.16x
//     the speed of gemm/'s own kernel on the H200, docs/performance.md), on gemm/'s sm90a wgmma
//     e4m3 kernel otherwise; MX / NVFP4 on the sm90a exact kernel (elements times their scale
//     converted to bf16 in the kernel, which is exact for the scale ranges of docs/numerics.md,
//     then bf16 wgmma with fp32 accumulation).
//   sm_100 (Blackwell): every recipe through cuBLASLt's block-scaled matmul (compiled, not run on
//     Blackwell hardware). Anything else is refused.
// Numerics: FP8 blockwise: products exact, each 128-of-K partial sum accumulated by the tensor
// core, then scaled by scale_A[row] * scale_B[col] into an fp32 accumulator. MX / NVFP4 on sm_90:
// every product exact, accumulated in the tensor core's fp32 accumulator over the whole K.
// tests/gemm/ derives each recipe's error bound against formats::reference_gemm.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/dtype.h"
#include "formats/recipe.h"
#include "formats/status.h"
#include "gemm/gemm_route.h"  // defines: GemmRoute

namespace blockscale::gemm {

struct GemmProblem {
  int64_t m = 0;  // rows of A and D
  int64_t n = 0;  // rows of B, columns of D
  int64_t k = 0;  // reduction length: a positive multiple of 128 (FP8 blockwise) or 32 (MX, NVFP4)
  formats::Format a_recipe = formats::Format::kFp8Block1x128;
  formats::Format b_recipe = formats::Format::kFp8Block128x128;
  // C and D element types: kBf16 or kF32 (any other dtype is refused).
  formats::DType c_type = formats::DType::kF32;  // read only when beta != 0
  formats::DType d_type = formats::DType::kBf16;
  int64_t ldc = 0;  // row stride of C in elements (>= n when beta != 0)
  int64_t ldd = 0;  // row stride of D in elements (>= n)
  float alpha = 1.0f;
  float beta = 0.0f;
};

// Device pointers. Data: rows x k codes, row stride k bytes (k / 2 for E2M1: two codes per
// byte, low nibble = lower k), 16-byte aligned. Scales, 16-byte aligned, in the layout of the
// operand's recipe (formats/scale_layout.h): FP8 blockwise: fp32, vec128_* for 1x128, blk128_*
// for 128x128; MX / NVFP4: bytes, swizzled_scale_offset over rows x (k / block).
// a_scale_dec / b_scale_dec: NVFP4 operands only (required there, ignored otherwise): a device
// float, the tensor decode scale S_dec; D = alpha * S_dec_a * S_dec_b * A B^T + beta * C.
// c: may be null when beta == 0. d: aligned to its element size.
struct GemmArguments {
  const uint8_t* a_data = nullptr;
  const void* a_scales = nullptr;
  const uint8_t* b_data = nullptr;
  const void* b_scales = nullptr;
  const float* a_scale_dec = nullptr;
  const float* b_scale_dec = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
};

// The kernel families the dispatch can pick.
enum class GemmKernel {
  kNone,
  kSm90Fp8Blockwise,      // sm90a wgmma e4m3, 128-of-K promotion
  kSm90BlockScaledExact,  // sm90a MX / NVFP4: exact conversion to bf16, bf16 wgmma
  kCublasLtBlockScaled    // cuBLASLt: FP8 blockwise on sm_90; every recipe on sm_100 (not run on Blackwell)
};

// Shape, stride and recipe checks (no device access). m == 0 or n == 0 is a valid empty problem.
Status can_implement(const GemmProblem& p);
// The above plus the kernel for a device of compute capability sm (e.g. 90, 100): the one
// dispatch rule, usable without a GPU. *kernel (optional) receives the choice.
Status can_implement_for_arch(const GemmProblem& p, int sm, GemmKernel* kernel = nullptr);
// The above for the current device, plus pointers (non-null, aligned, D not overlapping the
// operands, C either D itself or disjoint from it).
Status can_implement(const GemmProblem& p, const GemmArguments& args);

// Bytes of device workspace run() can use: 32 MiB for FP8 blockwise (cuBLASLt's; it also runs,
// perhaps slower, with less or none), 0 otherwise.
size_t workspace_size(const GemmProblem& p);

// Checks (can_implement), then enqueues the GEMM on `stream`. Asynchronous: ok means the launch
// succeeded.
Status run(const GemmProblem& p, const GemmArguments& args, void* workspace, size_t workspace_bytes,
           cudaStream_t stream);

// Which FP8 blockwise implementation sm_90 runs (GemmRoute, gemm/gemm_route.h), process-wide.
// kAuto's cuBLASLt products are the dense ones the shape rule above takes. kBf16Values, a
// training-step route, is stored as kAuto: gemm/'s products have no bf16-values form.
void set_gemm_route(GemmRoute route);
GemmRoute gemm_route();

// Whether (a_recipe, b_recipe) is a pair this API multiplies, and the FP8 blockwise family.
bool is_fp8_blockwise_pair(formats::Format a, formats::Format b);
bool is_block_scaled_pair(formats::Format a, formats::Format b);  // MX / NVFP4 pairs above

}  // namespace blockscale::gemm
