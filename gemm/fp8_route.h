// Which implementation runs Hopper's (sm_90's) FP8 blockwise GEMMs, and the names the command
// line gives it (`blockscale gemm --fp8-route`, `blockscale train --fp8-gemm`). Free of CUDA:
// train/'s host code and the CLI include it in builds without the CUDA parts.
#pragma once

#include <string>

#include "formats/status.h"

namespace blockscale::gemm {

// kAuto (the default): the wgmma kernel (sm90_fp8_gemm), except dense problems of at most 512 rows
// that cuBLASLt takes (gemm.h's shape rule and an algorithm found), where cuBLASLt's blockwise
// kernel measures faster, and grouped problems whose caller gives the group ends on the host
// (grouped.h). kKernel: always the wgmma kernel. kCublasLt: cuBLASLt or an error naming the rule
// it needs (tests, comparisons). set_sm90_fp8_route (gemm.h) selects one, process-wide.
enum class Sm90Fp8Route { kAuto, kKernel, kCublasLt };

inline const char* sm90_fp8_route_name(Sm90Fp8Route r) {  // auto, kernel, cublaslt
  switch (r) {
    case Sm90Fp8Route::kAuto: return "auto";
    case Sm90Fp8Route::kKernel: return "kernel";
    case Sm90Fp8Route::kCublasLt: return "cublaslt";
  }
  return "?";
}

// The route named `name`, or "<option>: unknown route '<name>' (expected auto, kernel or cublaslt)".
inline Status parse_sm90_fp8_route(const std::string& option, const std::string& name, Sm90Fp8Route* out) {
  for (Sm90Fp8Route r : {Sm90Fp8Route::kAuto, Sm90Fp8Route::kKernel, Sm90Fp8Route::kCublasLt}) {
    if (name == sm90_fp8_route_name(r)) {
      *out = r;
      return Status::ok();
    }
  }
  return Status::error(option + ": unknown route '" + name + "' (expected auto, kernel or cublaslt)");
}

}  // namespace blockscale::gemm
