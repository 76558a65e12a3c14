// MoE un-permute + combine: out[t] = sum_j gate[t, j] * y[slot_row[t * top_k + j]] (quant/moe.h),
// bit-identical to formats::moe_unpermute_combine: fp32, acc = +0, one fma per routed slot in j
// order (formats::moe_combine_step), then fp32 or bf16 RNE (formats::float_to_bf16_bits_rn).
//
// Bandwidth-bound: a CTA of 128 threads takes one token at a time (grid-stride); its top_k rows and
// gates go to shared memory once (dropped slots as row -1), then each thread owns 8 consecutive
// columns: one 16-byte load of y per routed slot, 8 fmas, one 16-byte (bf16) or 32-byte (fp32)
// store. Unaligned pointers / strides / cols take the element-wise path (same arithmetic).
#include <algorithm>

#include "formats/moe.h"  // defines: moe_combine_step, float_to_bf16_bits_rn
#include "quant/launchers.h"
#include "quant/moe_launchers.h"

namespace blockscale::quant::detail {
namespace {

constexpr int kThreads = 128;

struct CombineParams {
  const uint16_t* y;
  const float* gates;
  const int32_t* slot_row;
  void* out;
  int64_t tokens, cols, y_rows, ld_y, ld_out;
  int top_k;
};

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

template <bool kVec, bool kBf16Out>
__global__ void __launch_bounds__(kThreads) moe_combine_kernel(const __grid_constant__ CombineParams p) {
  // top_k rows, then top_k gates from a 16-byte boundary; combine_smem_bytes leaves 16 bytes of
  // slack after each, so a vectorised read of the last entries stays inside the allocation
  // (compute-sanitizer flagged a 12-byte read past the end without it).
  extern __shared__ int32_t token_slots[];
  int32_t* const rows = token_slots;
  float* const gates = reinterpret_cast<float*>(token_slots + (p.top_k + 7) / 4 * 4);
  const int tid = static_cast<int>(threadIdx.x);
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    __syncthreads();  // the previous token's slots are no longer read
    for (int j = tid; j < p.top_k; j += kThreads) {
      const int64_t s = t * p.top_k + j;
      const int32_t r = p.slot_row[s];
      const bool ok = r >= 0 && r < p.y_rows;
      rows[j] = ok ? r : -1;
      gates[j] = ok ? p.gates[s] : 0.0f;  // a dropped slot's gate is never read from global memory
    }
    __syncthreads();
    if constexpr (kVec) {
      for (int64_t c = 8 * int64_t{tid}; c < p.cols; c += 8 * kThreads) {
        float acc[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
        for (int j = 0; j < p.top_k; ++j) {
          const int32_t r = rows[j];
          if (r < 0) continue;
          const float g = gates[j];
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(p.y + r * p.ld_y + c));
          const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            acc[2 * i] = formats::moe_combine_step(acc[2 * i], g, bf16_lo(w[i]));
            acc[2 * i + 1] = formats::moe_combine_step(acc[2 * i + 1], g, bf16_hi(w[i]));
          }
        }
        if constexpr (kBf16Out) {
          uint32_t o[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            o[i] = uint32_t{formats::float_to_bf16_bits_rn(acc[2 * i])} |
                   (uint32_t{formats::float_to_bf16_bits_rn(acc[2 * i + 1])} << 16);
          *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.out) + t * p.ld_out + c) = make_uint4(o[0], o[1], o[2], o[3]);
        } else {
          float4* dst = reinterpret_cast<float4*>(static_cast<float*>(p.out) + t * p.ld_out + c);
          dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
          dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
        }
      }
    } else {
      for (int64_t c = tid; c < p.cols; c += kThreads) {
        float acc = 0.0f;
        for (int j = 0; j < p.top_k; ++j) {
          const int32_t r = rows[j];
          if (r < 0) continue;
          acc = formats::moe_combine_step(acc, gates[j], formats::bf16_bits_to_float(p.y[r * p.ld_y + c]));
        }
        if constexpr (kBf16Out) static_cast<uint16_t*>(p.out)[t * p.ld_out + c] = formats::float_to_bf16_bits_rn(acc);
        else static_cast<float*>(p.out)[t * p.ld_out + c] = acc;
      }
    }
  }
}

template <bool kVec, bool kBf16Out>
Status launch(const CombineParams& params, cudaStream_t stream) {
  auto* kernel = moe_combine_kernel<kVec, kBf16Out>;
  const int smem = 8 * ((params.top_k + 7) / 4 * 4);
  int resident = 0;
  BS_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, "moe_combine_kernel",
                                   &resident));
  // Tokens are short (cols / 8 vectors over 128 threads): many CTAs per SM keep the loads in flight.
  const int64_t grid = std::min<int64_t>(params.tokens, std::max<int64_t>(int64_t{resident} * 4, 1));
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(params);
  return cuda_status(cudaGetLastError(), "moe_combine_kernel launch");
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

Status launch_moe_combine(const CombineProblem& p, const CombineInputs& in, const CombineOutputs& out,
                          cudaStream_t stream) {
  CombineParams params{static_cast<const uint16_t*>(in.y), in.gates, in.slot_row, out.out, p.tokens, p.cols,
                       p.y_rows, p.ld_y, p.ld_out, p.top_k};
  const bool vec = aligned16(in.y) && aligned16(out.out) && p.cols % 8 == 0 && p.ld_y % 8 == 0 && p.ld_out % 8 == 0;
  const bool bf16 = p.out_type == CombineOutputType::kBf16;
  if (vec) return bf16 ? launch<true, true>(params, stream) : launch<true, false>(params, stream);
  return bf16 ? launch<false, true>(params, stream) : launch<false, false>(params, stream);
}

}  // namespace blockscale::quant::detail
