// The one way blockscale turns a CUDA runtime result into a Status: ok, or an error naming what
// was being done and the runtime's description of what went wrong.
#pragma once

#include <cuda_runtime.h>

#include "formats/status.h"

namespace blockscale::runtime {

// "what: <cudaGetErrorString>"; a missing kernel image also names the build's architectures.
// Clears a launch error (it is not sticky), so the caller's next call starts clean.
Status cuda_status(cudaError_t err, const char* what);

// The status of the kernel launches just made (cudaGetLastError), named by `what`.
Status launch_status(const char* what);

}  // namespace blockscale::runtime
