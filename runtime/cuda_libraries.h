// cuBLAS, cuBLASLt, NCCL and cuDNN, opened on first use (dlopen) instead of linked. A program that links
// them pays their load-time initialisation at every start, GPU or not: the CLI started in 250 ms
// instead of 4 (perf: their static initialisers touching fresh pages), and its tests start it
// thousands of times. Call sites name an entry point as the headers spell it:
//
//   BS_RETURN_IF_ERROR(runtime::open_cuda_library(runtime::CudaLibrary::kCublasLt));  // once, first
//   BS_CUDA_LIB(kCublasLt, cublasLtMatmul)(handle, ...);
//
// The pointer has the header's type (decltype), so arguments are checked as for a direct call.
#pragma once

#include "formats/status.h"

namespace blockscale::runtime {

enum class CudaLibrary { kCublas, kCublasLt, kNccl, kCudnn };

// Opens `lib` (once per process; later calls return the first result): ok, or an error naming the
// library and why the loader refused it.
Status open_cuda_library(CudaLibrary lib);

// `name`'s entry point in `lib`. The library must have been opened (open_cuda_library ok): a
// missing library or symbol here is a broken installation, reported on stderr before aborting.
void* cuda_library_symbol(CudaLibrary lib, const char* name);

// The loader's handle of an opened library (null when open_cuda_library failed): for a library
// that resolves its own entry points (the cuDNN frontend, built to load cuDNN dynamically).
void* cuda_library_handle(CudaLibrary lib);

template <typename F>
F cuda_library_function(CudaLibrary lib, const char* name) {
  return reinterpret_cast<F>(cuda_library_symbol(lib, name));
}

}  // namespace blockscale::runtime

#define BS_CUDA_LIB_NAME_(x) #x
#define BS_CUDA_LIB_NAME(x) BS_CUDA_LIB_NAME_(x)  // after macro expansion: cublasCreate -> "cublasCreate_v2"
// `fn` of library `lib` (a CudaLibrary enumerator), resolved once per call site, with the type of
// the header's declaration; BS_CUDA_LIB_AS names the pointer type where C++ overloads `fn`.
#define BS_CUDA_LIB_AS(lib, fn, Pointer)                                                                 \
  ([] {                                                                                                  \
    static const auto bs_fn_ = ::blockscale::runtime::cuda_library_function<Pointer>(                    \
        ::blockscale::runtime::CudaLibrary::lib, BS_CUDA_LIB_NAME(fn));                                  \
    return bs_fn_;                                                                                       \
  }())
#define BS_CUDA_LIB(lib, fn) BS_CUDA_LIB_AS(lib, fn, decltype(&fn))
