// `blockscale gemm`: one GEMM of gemm/ (dense or grouped) on operands the CPU emulator quantized,
// timed on the GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::tools {

struct GpuGemmResult {
  double median_us = 0;  // of the timed runs (CUDA events)
  std::vector<float> d;  // D (m x n, row-major) widened to fp32, or empty when not asked for
};

// D = A · B^T for a (m x k) and b (n x k), both K-major formats:: operands of FP8 blockwise
// recipes (their scales are packed into the GEMM's layouts here). D is bf16 or fp32 (`fp32_d`).
// One untimed run, then `iters` timed ones; fetch_d copies D back (after the first run).
Status gpu_gemm(const formats::QuantizedMatrix& a, const formats::QuantizedMatrix& b, bool fp32_d, int iters,
                bool fetch_d, GpuGemmResult* result);

// A grouped GEMM (gemm/grouped.h) on formats:: operands. M-grouped (k_grouped false): a holds the
// tokens of all experts (rows sorted by expert), b one n x k matrix per expert, ends the experts'
// cumulative token ends; D is a.rows x n. K-grouped: a (m x capacity) and b (n x capacity) are the
// columnwise copies (tokens padded per expert, widened to the capacity), b has one entry, ends
// the padded cumulative ends; D is ends.size() x m x n. D comes back widened to fp32 when
// fetch_d; the time is the median of `iters` runs after one untimed one.
Status gpu_grouped_gemm(bool k_grouped, const formats::QuantizedMatrix& a, const std::vector<formats::QuantizedMatrix>& b,
                        const std::vector<int64_t>& ends, bool fp32_d, int iters, bool fetch_d, GpuGemmResult* result);

}  // namespace blockscale::tools
