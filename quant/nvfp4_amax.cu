// NVFP4 amax pass (TensorAmax::kMeasure): reads a row-major bf16 / fp16 / fp32 matrix once and
// leaves per-CTA maxima for the quantize kernel, which derives S_enc / S_dec from them on the
// device (no host sync). max |x| follows formats' amax rule (NaN ignored, Inf counts); max |RHT(x)|
// applies formats::hadamard16_inplace to 16-row groups of each column, as formats::quantize does
// for the RHT columnwise copy. Grouped (MoE) input (kGrouped): the RHT copy is quantized per
// expert, each expert's tokens padded with zero rows to a multiple of 16
// (formats::quantize_grouped_columnwise), so the 16-row groups are the segments of that padded row
// space (quant/grouped_offsets.cuh; every CTA scans group_ends into shared memory first): `valid`
// input rows from row `src`, zeros after them.
#include <algorithm>

#include "formats/hadamard.h"
#include "quant/device_common.cuh"
#include "quant/grouped_offsets.cuh"
#include "quant/launchers.h"
#include "quant/nvfp4_amax.h"

namespace blockscale::quant::detail {
namespace {

constexpr int kThreads = 256;

// Items of 16 input rows x one 16-byte granule; consecutive threads take consecutive granules of a
// row group (a warp reads 512 contiguous bytes per row). The grid walks the items from the END of
// the matrix to its start, so that the rows the quantize kernel reads first (it starts at the top)
// are the ones most recently read into L2. kPlain: max |x| (NaN ignored, Inf counts); kRht:
// max |RHT(x)| over 16-row groups along each column (rows % 16 == 0; kGrouped: the padded
// segments). Each CTA writes its maxima (fp32 bits) to partials[blockIdx.x] and
// partials[kNvfp4MaxPartials + blockIdx.x].
struct AmaxParams {
  const void* x;
  int64_t rows, cols, ld;
  int64_t groups, granules;  // 16-row groups (kGrouped: of the padded row space), granules per row
  uint32_t* partials;
  bool vec_load;
  const int32_t* group_ends;  // kGrouped
  int num_groups;
  int64_t batch_elems;  // batched (gridDim.y matrices): elements from one matrix's first to the next's
};

template <DType kIn, bool kPlain, bool kRht, bool kGrouped>
__global__ void __launch_bounds__(kThreads) nvfp4_amax_kernel(const __grid_constant__ AmaxParams p) {
  using In = InputTraits<kIn>;
  constexpr int kE = 16 / In::kBytes;  // elements per granule
  extern __shared__ uint32_t offsets[];  // kGrouped: the clamped ends, then the padded ends
  if constexpr (kGrouped) {
    __shared__ uint32_t warp_totals[32];
    grouped_offsets<kThreads, 16>(p.group_ends, p.num_groups, p.rows, offsets, offsets + p.num_groups, warp_totals);
  }
  // Batched: matrix blockIdx.y, its partials at 2 kNvfp4MaxPartials words per matrix.
  const void* const x = static_cast<const char*>(p.x) + int64_t{blockIdx.y} * p.batch_elems * In::kBytes;
  uint32_t* const partials = p.partials + int64_t{blockIdx.y} * 2 * kNvfp4MaxPartials;
  const int64_t items = p.groups * p.granules;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  const int64_t first = items - 1 - (int64_t{blockIdx.x} * kThreads + threadIdx.x);
  uint32_t plain_bits = 0;
  float rht = 0.0f;
  if (first >= 0) {
    int64_t grp = first / p.granules, g = first - grp * p.granules;
    const int64_t step_grp = stride / p.granules, step_g = stride - step_grp * p.granules;
    while (grp >= 0) {
      const int64_t c = g * kE;
      uint32_t w[16][4];
      const bool vec = p.vec_load && c + kE <= p.cols;
      Segment seg{0u, 0u};
      if constexpr (kGrouped)
        seg = grouped_segment<16>(static_cast<uint32_t>(grp * 16), offsets, offsets + p.num_groups, p.num_groups);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        // Grouped: row i of the segment, or a zero row (rows: granule_scalar's zeros).
        const int64_t r = kGrouped ? (static_cast<uint32_t>(i) < seg.valid ? int64_t{seg.src} + i : p.rows) : grp * 16 + i;
        uint4 v;
        if (vec && r < p.rows)
          v = __ldg(reinterpret_cast<const uint4*>(static_cast<const char*>(x) + (r * p.ld + c) * In::kBytes));
        else
          v = granule_scalar<kIn>(x, p.ld, p.rows, p.cols, r, c);
        w[i][0] = v.x, w[i][1] = v.y, w[i][2] = v.z, w[i][3] = v.w;
      }
      if constexpr (kPlain) {
        if constexpr (In::kBytes == 2) {
          uint32_t m = 0;
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            m = __vimax3_u16x2(m, w[i][0] & 0x7FFF7FFFu, w[i][1] & 0x7FFF7FFFu);
            m = __vimax3_u16x2(m, w[i][2] & 0x7FFF7FFFu, w[i][3] & 0x7FFF7FFFu);
          }
          uint32_t mm = max(m & 0xFFFFu, m >> 16);
          if (mm > In::kInfBits) {  // a NaN: recount without it
            mm = 0;
#pragma unroll
            for (int i = 0; i < 16; ++i)
#pragma unroll
              for (int j = 0; j < 8; ++j) {
                const uint32_t a = (w[i][j / 2] >> (16 * (j % 2))) & 0x7FFFu;
                if (a <= In::kInfBits) mm = max(mm, a);
              }
          }
          plain_bits = max(plain_bits, mm == In::kInfBits ? 0x7F800000u : In::widen(mm));
        } else {
          float m = 0.0f;
#pragma unroll
          for (int i = 0; i < 16; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) m = fmaxf(m, fabsf(__uint_as_float(w[i][j])));  // NaN ignored
          plain_bits = max(plain_bits, __float_as_uint(m));
        }
      }
      if constexpr (kRht) {
#pragma unroll
        for (int col = 0; col < kE; ++col) {
          float f[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i][col / (4 / In::kBytes)], col % (4 / In::kBytes));
          formats::hadamard16_inplace(f);
#pragma unroll
          for (int i = 0; i < 16; ++i) rht = fmaxf(rht, fabsf(f[i]));  // NaN ignored, Inf counts
        }
      }
      grp -= step_grp;
      g -= step_g;
      if (g < 0) g += p.granules, --grp;
    }
  }
  __shared__ uint32_t red[2][kThreads / 32];
  uint32_t a = plain_bits, b = __float_as_uint(rht);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    a = max(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
    b = max(b, __shfl_xor_sync(0xFFFFFFFFu, b, off));
  }
  const int tid = static_cast<int>(threadIdx.x);
  if ((tid & 31) == 0) red[0][tid >> 5] = a, red[1][tid >> 5] = b;
  __syncthreads();
  if (tid == 0) {
    for (int i = 1; i < kThreads / 32; ++i) a = max(a, red[0][i]), b = max(b, red[1][i]);
    a = max(a, red[0][0]), b = max(b, red[1][0]);
    partials[blockIdx.x] = a;
    partials[kNvfp4MaxPartials + blockIdx.x] = b;
  }
}

template <DType kIn, bool kPlain, bool kRht, bool kGrouped>
Status launch(const AmaxParams& a, int64_t batches, int* n_partials, cudaStream_t stream) {
  auto* kernel = nvfp4_amax_kernel<kIn, kPlain, kRht, kGrouped>;
  // Grouped: 8 bytes of offsets per expert (at most 32 KB: no opt-in needed).
  const int smem = kGrouped ? 8 * a.num_groups : 0;
  int resident = 0;
  BS_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, "nvfp4_amax_kernel", &resident));
  const int64_t grid = even_grid((a.groups * a.granules + kThreads - 1) / kThreads, std::min(resident, kNvfp4MaxPartials));
  kernel<<<dim3(static_cast<unsigned>(grid), static_cast<unsigned>(batches)), kThreads, smem, stream>>>(a);
  *n_partials = static_cast<int>(grid);
  return cuda_status(cudaGetLastError(), "nvfp4_amax_kernel launch");
}

template <DType kIn>
Status launch_for(const AmaxParams& a, bool plain, bool rht, bool grouped, int64_t batches, int* n_partials,
                  cudaStream_t stream) {
  if (grouped) {  // the RHT amax of the padded segments (the plain amax needs no grouping)
    if (plain) return launch<kIn, true, true, true>(a, 1, n_partials, stream);
    return launch<kIn, false, true, true>(a, 1, n_partials, stream);
  }
  if (rht && plain) return launch<kIn, true, true, false>(a, batches, n_partials, stream);
  if (rht) return launch<kIn, false, true, false>(a, batches, n_partials, stream);
  return launch<kIn, true, false, false>(a, batches, n_partials, stream);
}

}  // namespace

Status launch_nvfp4_amax(const QuantizeProblem& p, const void* x, bool vec_load, bool plain, bool rht,
                         uint32_t* partials, int* n_partials, cudaStream_t stream, const Nvfp4AmaxGroups* groups,
                         int64_t batches) {
  const int elems_per_granule = p.input_type == DType::kF32 ? 4 : 8;
  const bool grouped = rht && groups != nullptr;
  if (grouped && (groups->num_groups < 1 || groups->num_groups > kMaxGroups || groups->capacity % 16 != 0))
    return Status::error("nvfp4 amax pass: grouped walk needs 1..4096 experts and a capacity that is a multiple of 16");
  AmaxParams a{};
  a.x = x;
  a.rows = p.rows, a.cols = p.cols, a.ld = p.ld;
  a.groups = grouped ? groups->capacity / 16 : (p.rows + 15) / 16;
  a.granules = (p.cols + elems_per_granule - 1) / elems_per_granule;
  a.partials = partials;
  a.vec_load = vec_load;
  a.group_ends = grouped ? groups->group_ends : nullptr;
  a.num_groups = grouped ? groups->num_groups : 0;
  a.batch_elems = p.rows * p.ld;
  if (batches < 1 || (grouped && batches != 1) || batches > 65535)
    return Status::error("nvfp4 amax pass: 1..65535 matrices, and one when grouped");
  switch (p.input_type) {
    case DType::kBf16: return launch_for<DType::kBf16>(a, plain, rht, grouped, batches, n_partials, stream);
    case DType::kF16: return launch_for<DType::kF16>(a, plain, rht, grouped, batches, n_partials, stream);
    case DType::kF32: return launch_for<DType::kF32>(a, plain, rht, grouped, batches, n_partials, stream);
    default: break;
  }
  return Status::error("problem.input_type: unknown value");
}

}  // namespace blockscale::quant::detail
