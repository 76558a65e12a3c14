// The installed CUDA layers, called from plain C++: size and shape checks that need no GPU, and
// the device query, which answers with or without one. Built only when the install has CUDA.
#include <cstdio>

#include "formats/recipe.h"
#include "gemm/gemm.h"
#include "quant/quantize.h"
#include "runtime/device.h"

bool check_cuda_parts() {
  namespace f = blockscale::formats;
  bool ok = true;

  blockscale::quant::QuantizeProblem p;
  ok &= f::parse_format("mxfp8", &p.recipe);
  p.rows = 128;
  p.cols = 64;
  p.ld = 64;
  // One byte per MXFP8 element.
  if (blockscale::quant::rowwise_data_bytes(p) != 128 * 64) {
    std::fprintf(stderr, "consumer: FAILED: quant::rowwise_data_bytes of 128 x 64 MXFP8 is not 8192\n");
    ok = false;
  }

  blockscale::gemm::GemmProblem g;
  g.m = g.n = g.k = 128;
  g.ldd = 128;
  ok &= f::parse_format("fp8_block128", &g.a_recipe) && f::parse_format("fp8_block128x128", &g.b_recipe);
  const blockscale::Status s = blockscale::gemm::can_implement(g);
  if (!s) {
    std::fprintf(stderr, "consumer: FAILED: gemm::can_implement of a 128^3 FP8 blockwise GEMM: %s\n",
                 s.message().c_str());
    ok = false;
  }

  const blockscale::Status gpu = blockscale::runtime::gpu_available();
  std::printf("consumer: GPU: %s\n", gpu ? "available" : gpu.message().c_str());
  return ok;
}
