#include "runtime/cuda_libraries.h"

#include <cublas_api.h>  // CUBLAS_VER_MAJOR
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace blockscale::runtime {
namespace {

struct Opened {
  void* handle = nullptr;
  std::string error;
};

const char* library_name(CudaLibrary lib) {
  switch (lib) {
    case CudaLibrary::kCublas: return "cuBLAS";
    case CudaLibrary::kCublasLt: return "cuBLASLt";
    case CudaLibrary::kNccl: return "NCCL";
    case CudaLibrary::kCudnn: return "cuDNN";
  }
  return "?";
}

// The file names the toolkit this build compiled against installs (its major version), then the
// unversioned development link; each by the loader's search, then in the directory CMake found.
Opened open_library(CudaLibrary lib) {
  const std::string major = std::to_string(CUBLAS_VER_MAJOR);
  std::string base;
  std::string dir;
  switch (lib) {
    case CudaLibrary::kCublas: base = "libcublas.so", dir = BLOCKSCALE_CUDA_LIBRARY_DIR; break;
    case CudaLibrary::kCublasLt: base = "libcublasLt.so", dir = BLOCKSCALE_CUDA_LIBRARY_DIR; break;
    case CudaLibrary::kNccl: base = "libnccl.so", dir = BLOCKSCALE_NCCL_LIBRARY_DIR; break;
    case CudaLibrary::kCudnn: base = "libcudnn.so", dir = BLOCKSCALE_CUDA_LIBRARY_DIR; break;
  }
  // NCCL 2 and cuDNN 9 (the graph API the frontend builds on) have their own major versions.
  const std::string versioned =
      base + "." + (lib == CudaLibrary::kNccl ? std::string("2") : lib == CudaLibrary::kCudnn ? std::string("9") : major);
  std::string first_error;
  for (const std::string& name : {versioned, base, dir + "/" + versioned, dir + "/" + base}) {
    if (name.front() == '/' && dir.empty()) continue;
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return {h, ""};
    if (first_error.empty()) {
      const char* why = dlerror();
      first_error = why != nullptr ? why : "not found";
    }
  }
  return {nullptr, std::string("cannot load ") + library_name(lib) + " (" + versioned + "): " + first_error};
}

const Opened& opened(CudaLibrary lib) {
  static std::once_flag once[4];
  static Opened result[4];
  const int i = static_cast<int>(lib);
  std::call_once(once[i], [&] { result[i] = open_library(lib); });
  return result[i];
}

}  // namespace

Status open_cuda_library(CudaLibrary lib) {
  const Opened& o = opened(lib);
  return o.handle != nullptr ? Status::ok() : Status::error(o.error);
}

void* cuda_library_symbol(CudaLibrary lib, const char* name) {
  const Opened& o = opened(lib);
  void* fn = o.handle != nullptr ? dlsym(o.handle, name) : nullptr;
  if (fn == nullptr) {
    std::fprintf(stderr, "blockscale: %s\n",
                 o.handle == nullptr ? o.error.c_str()
                                     : (std::string(library_name(lib)) + " has no entry point " + name).c_str());
    std::abort();
  }
  return fn;
}

void* cuda_library_handle(CudaLibrary lib) { return opened(lib).handle; }

}  // namespace blockscale::runtime
