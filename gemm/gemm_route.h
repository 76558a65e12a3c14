// Which engine runs the GEMMs, and the names the command line gives it (`blockscale gemm
// --gemm-route`, `blockscale train --gemm-route`: one option for both). Free of CUDA: train/'s
// host code and the CLI include it in builds without the CUDA parts.
#pragma once

#include <string>

#include "formats/status.h"

namespace blockscale::gemm {

// Every route gives the sums docs/numerics.md defines for the recipe; they differ in speed and in
// what the host must know.
//   kAuto      : the default. FP8 blockwise on Hopper: gemm/'s wgmma kernel, except dense problems
//                of at most 512 rows that cuBLASLt takes (gemm.h's shape rule and an algorithm
//                found), where its blockwise kernel measures faster, and grouped problems whose
//                caller gives the group ends on the host (grouped.h). The training step's mxfp8 and
//                nvfp4 GEMMs: kBf16Values on Hopper, kKernel elsewhere.
//   kKernel    : gemm/'s own kernels for every product (FP8 blockwise wgmma; MX / NVFP4 block-scaled).
//   kCublasLt  : cuBLASLt's blockwise FP8 matmul for every FP8 blockwise product, or an error naming
//                the rule it needs; grouped products one matmul per group, their sizes on the host.
//                FP8 blockwise only.
//   kBf16Values: the training step's mxfp8 and nvfp4 products as exact bf16 products of the block
//                values, multiplied by cuBLASLt (train/gpu/gpu_layers.h). A training route only:
//                gemm/'s own calls run it as kAuto.
// set_gemm_route (gemm.h) selects one for gemm/, process-wide; train/ takes one per run.
enum class GemmRoute { kAuto, kKernel, kCublasLt, kBf16Values };

inline const char* gemm_route_name(GemmRoute r) {  // auto, kernel, cublaslt, bf16
  switch (r) {
    case GemmRoute::kAuto: return "auto";
    case GemmRoute::kKernel: return "kernel";
    case GemmRoute::kCublasLt: return "cublaslt";
    case GemmRoute::kBf16Values: return "bf16";
  }
  return "?";
}

// The route named `name`, or "<option>: unknown route '<name>' (expected auto, kernel, cublaslt or bf16)".
inline Status parse_gemm_route(const std::string& option, const std::string& name, GemmRoute* out) {
  for (GemmRoute r : {GemmRoute::kAuto, GemmRoute::kKernel, GemmRoute::kCublasLt, GemmRoute::kBf16Values}) {
    if (name == gemm_route_name(r)) {
      *out = r;
      return Status::ok();
    }
  }
  return Status::error(option + ": unknown route '" + name + "' (expected auto, kernel, cublaslt or bf16)");
}

}  // namespace blockscale::gemm
