// Small GPU kernels that connect the training step's pieces (train/gpu/gpu_backend.cpp): the MoE
// gather of the bf16 path, rounding a tensor to bf16 values, and element-wise adds.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace blockscale::train::gpu {

// out[r] = x[row_index[r]] (rows x d); an index outside [0, x_rows) gives a zero row
// (formats::moe_gather).
void gather_rows(const float* x, int64_t x_rows, int d, const int32_t* row_index, int64_t rows, float* out,
                 cudaStream_t stream);
// x[i] = bf16 value of x[i] (RNE) and bits[i] its bf16 bits.
void round_to_bf16(float* x, uint16_t* bits, int64_t n, cudaStream_t stream);
// y[i] += x[i].
void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream);

}  // namespace blockscale::train::gpu
