#include "runtime/cuda_status.h"

#include <string>

namespace blockscale::runtime {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  std::string msg = std::string(what) + ": " + cudaGetErrorString(err);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess) {
      msg += " (this GPU is sm_" + std::to_string(major * 10 + minor) +
             "; blockscale's kernels are built for sm_90a and sm_100a: BLOCKSCALE_CUDA_ARCHS)";
    }
  }
  (void)cudaGetLastError();
  return Status::error(msg);
}

Status launch_status(const char* what) { return cuda_status(cudaGetLastError(), what); }

}  // namespace blockscale::runtime
