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
// Recipes in this slice (docs/numerics.md, "FP8 blockwise"):
//   fprop / dgrad : A fp8_block128 (1x128, VEC128_32F scales) x B fp8_block128x128
//                   (128x128, BLK128x128_32F scales)
//   wgrad         : A fp8_block128 x B fp8_block128 (both 1x128, VEC128_32F)
// MX and NVFP4 recipes are refused with "not implemented yet" (issue 5, later slices).
// Architectures: sm_90 (Hopper) runs the sm90a wgmma kernel; sm_100 has a compiled stub that
// says "not implemented"; anything else is refused. One dispatch function (gemm.cpp) decides.
// Numerics: products exact, each 128-of-K partial sum accumulated by the tensor core, then scaled
// by scale_A[row] * scale_B[col] and added into an fp32 accumulator (tests/gemm/gemm_test.cu
// derives the error bound against formats::reference_gemm).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::gemm {

enum class MatrixType { kBf16, kFp32 };  // C and D element types

struct GemmProblem {
  int64_t m = 0;  // rows of A and D
  int64_t n = 0;  // rows of B, columns of D
  int64_t k = 0;  // reduction length: a positive multiple of the recipes' block (128)
  formats::Recipe a_recipe = formats::Recipe::kFp8Block1x128;
  formats::Recipe b_recipe = formats::Recipe::kFp8Block128x128;
  MatrixType c_type = MatrixType::kFp32;  // read only when beta != 0
  MatrixType d_type = MatrixType::kBf16;
  int64_t ldc = 0;  // row stride of C in elements (>= n when beta != 0)
  int64_t ldd = 0;  // row stride of D in elements (>= n)
  float alpha = 1.0f;
  float beta = 0.0f;
};

// Device pointers. Data: rows x k codes (row stride k bytes), 16-byte aligned. Scales: the fp32
// layout of the operand's recipe (formats/scale_layout.h: vec128_* for 1x128, blk128_* for
// 128x128), 16-byte aligned. c: may be null when beta == 0. d: aligned to its element size.
struct GemmArguments {
  const uint8_t* a_data = nullptr;
  const float* a_scales = nullptr;
  const uint8_t* b_data = nullptr;
  const float* b_scales = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
};

// The kernel families the dispatch can pick.
enum class GemmKernel { kNone, kSm90Fp8Blockwise, kSm100Fp8Blockwise };

// Shape, stride and recipe checks (no device access). m == 0 or n == 0 is a valid empty problem.
Status can_implement(const GemmProblem& p);
// The above plus the kernel for a device of compute capability sm (e.g. 90, 100): the one
// dispatch rule, usable without a GPU. *kernel (optional) receives the choice.
Status can_implement_for_arch(const GemmProblem& p, int sm, GemmKernel* kernel = nullptr);
// The above for the current device, plus pointers (non-null, aligned, D not overlapping the
// operands, C either D itself or disjoint from it).
Status can_implement(const GemmProblem& p, const GemmArguments& args);

// Bytes of device workspace run() needs (0 for every kernel of this slice).
size_t workspace_size(const GemmProblem& p);

// Checks (can_implement), then enqueues the GEMM on `stream`. Asynchronous: ok means the launch
// succeeded.
Status run(const GemmProblem& p, const GemmArguments& args, void* workspace, size_t workspace_bytes,
           cudaStream_t stream);

const char* matrix_type_name(MatrixType t);  // "bf16" / "fp32"

}  // namespace blockscale::gemm
