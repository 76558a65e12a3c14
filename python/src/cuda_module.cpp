// blockscale._cuda: the GPU kernels (quant/, gemm/) on CUDA tensors passed through DLPack (torch
// tensors directly), on the caller's stream, with every output allocated by the caller. The
// Python layer over it is blockscale/torch.py. Built only where CUDA and Python both are.
//
// Importing needs no GPU: a call without one raises RuntimeError from the device check.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "python/src/cuda_args.h"
#include "runtime/device.h"

namespace blockscale::python {
void register_quantize(nb::module_& m);  // cuda_quantize.cpp: quantize, grouped quantize, sizes, dequantize
void register_gemm(nb::module_& m);      // cuda_gemm.cpp: dense and grouped GEMMs
}  // namespace blockscale::python

NB_MODULE(_cuda, m) {
  namespace bp = blockscale::python;
  m.doc() = "blockscale's GPU quantize and GEMM kernels on CUDA tensors (DLPack), on the caller's stream";
#ifdef BLOCKSCALE_VERSION
  m.attr("__version__") = BLOCKSCALE_VERSION;
#endif
  // "" when a CUDA device is usable, else why not (one line).
  m.def("gpu_status", [] {
    const blockscale::Status s = blockscale::runtime::gpu_available();
    return s ? std::string() : s.message();
  });
  bp::register_quantize(m);
  bp::register_gemm(m);
}
