// quant/mx_bf16.h: MX quantize straight to bf16 values, rowwise and columnwise from one read.
//
// Must match, bit for bit (NaN: NaN): formats::quantize() then formats::dequantize(), rounded to
// bf16 (formats::float_to_bf16_bits_rn). Per element: y = x * 2^-e in fp32 (formats::mul_rn),
// the FP8 code by cvt.rn.satfinite (quant/device_common.cuh encode2, the quantize kernels' own),
// decoded exactly (cvt to f16x2), times 2^e in fp32 (exact: every product is >= 2^-136), then
// cvt.rn to bf16. The block scale is mx_block_scale (quant/mx_device.cuh).
//
// Tiling: a CTA of 256 threads takes a tile of one 32-row segment (a columnwise block of rows)
// by 256 columns at a time (a grid-stride loop):
//   rowwise   : warp w takes segment rows w, w + 8, w + 16, w + 24; lane l columns 8l..8l+7
//               (one 32-column block = 4 lanes: two xor shuffles for its amax); writes 8 bf16 as
//               one 16-byte store and keeps the fp32 inputs in a shared tile (zeros past the
//               segment's rows and the matrix's columns).
//   columnwise: thread t takes column t of the shared tile: its amax over the 32 rows, then the
//               segment's values down the column.
// Segments: dense, the 32-row steps of each stacked matrix; grouped, the 32-row steps of the
// padded row space of quant/grouped_offsets.cuh (each expert's rows from its first, the last
// segment of an expert partial), which every CTA maps from group_ends in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <vector>

#include "quant/grouped_offsets.cuh"  // defines: grouped_offsets, grouped_segment
#include "quant/launchers.h"          // defines: resident_ctas, tile_grid, cuda_status, Range
#include "quant/mx_bf16.h"
#include "formats/host_device.h"  // defines: exp2i, mul_rn
#include "quant/mx_device.cuh"  // defines: MxScale, MxScaleRule, mx_block_scale, mx_scale_rule

namespace blockscale::quant {
namespace detail {
namespace {

using formats::Format;

constexpr int kThreads = 256;
constexpr int kSegRows = 32;               // a columnwise block's rows
constexpr int kTileCols = kThreads;        // columnwise: a thread per column
constexpr int kLaneCols = 8;               // rowwise: a lane's columns (4 lanes = one block)
constexpr int kRowsPerWarp = kSegRows / (kThreads / 32);
constexpr uint16_t kBf16Nan = 0x7FC0u;
constexpr size_t kTileBytes = sizeof(float) * kSegRows * kTileCols;

struct Params {
  const float* x;
  const int32_t* group_ends;
  const int32_t* row_index;
  uint16_t* rowwise;
  uint16_t* columnwise;
  int64_t rows, cols;
  int64_t input_rows;   // rows of x (row_index) or rows
  int64_t batch_rows;   // dense: rows of each stacked matrix
  int num_groups;
  int64_t segments;     // dense: exact; grouped: an upper bound on the padded space's segments
  int64_t col_tiles;
  MxScaleRule rule;
  bool vector;          // 16-byte loads and rowwise stores (aligned pointers, cols % 8 == 0)
};

// Two FP8 codes (the first in the low byte) -> their values, exactly.
template <Format kRecipe>
__device__ __forceinline__ float2 decode2(uint32_t codes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h2;
  const unsigned short c = static_cast<unsigned short>(codes);
  if constexpr (kRecipe == Format::kMxfp8E4M3)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(c));
  else
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(c));
  return __half22float2(*reinterpret_cast<const __half2*>(&h2));
#else
  const formats::MinifloatSpec s = Fp8Format<kRecipe>::spec();
  return make_float2(formats::decode_minifloat(codes & 0xFFu, s), formats::decode_minifloat((codes >> 8) & 0xFFu, s));
#endif
}

// Two inputs of one block -> their dequantized values as a bf16 pair (the first in the low half).
template <Format kRecipe>
__device__ __forceinline__ uint32_t bf16_pair(float a, float b, const MxScale& s) {
  if (s.nonfinite) return kBf16Nan * 0x00010001u;
  const uint32_t codes = encode2<kRecipe, kDefaultEncoder>(formats::mul_rn(a, s.inv), formats::mul_rn(b, s.inv));
  const float2 v = decode2<kRecipe>(codes);
  const float up = formats::exp2i(static_cast<int>(s.code) - 127);  // 2^e (a subnormal for e = -127)
  const __nv_bfloat162 r = __floats2bfloat162_rn(v.x * up, v.y * up);
  return *reinterpret_cast<const uint32_t*>(&r);
}

__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7FFFFFFFu; }

// One segment of the tiles: `valid` (0..32) rows of the problem from row `first` on.
struct Segment32 {
  int64_t first;
  int valid;
};

template <bool kGrouped>
__device__ __forceinline__ Segment32 segment_at(const Params& p, int64_t s, const uint32_t* ends,
                                                const uint32_t* pends) {
  if constexpr (kGrouped) {
    const Segment g = grouped_segment<kSegRows>(static_cast<uint32_t>(s * kSegRows), ends, pends, p.num_groups);
    return {g.src, static_cast<int>(g.valid)};
  } else {
    const int64_t per_batch = (p.batch_rows + kSegRows - 1) / kSegRows;
    const int64_t b = s / per_batch, j = s - b * per_batch;
    const int64_t left = p.batch_rows - j * kSegRows;
    return {b * p.batch_rows + j * kSegRows, static_cast<int>(left < kSegRows ? left : kSegRows)};
  }
}

// The fp32 row of x that problem row r reads (null: a zero row).
__device__ __forceinline__ const float* input_row(const Params& p, int64_t r) {
  const int64_t src = p.row_index != nullptr ? p.row_index[r] : r;
  return src >= 0 && src < p.input_rows ? p.x + src * p.cols : nullptr;
}

// Columns c..c+7 of a row (zeros past cols or for a null row).
__device__ __forceinline__ void load8(const Params& p, const float* row, int64_t c, float* v) {
  if (row != nullptr && p.vector && c + kLaneCols <= p.cols) {
    const float4 a = *reinterpret_cast<const float4*>(row + c), b = *reinterpret_cast<const float4*>(row + c + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
#pragma unroll
  for (int j = 0; j < kLaneCols; ++j) v[j] = row != nullptr && c + j < p.cols ? row[c + j] : 0.0f;
}

template <Format kRecipe>
__device__ __forceinline__ void store8_rowwise(const Params& p, int64_t r, int64_t c, const float* v,
                                               const MxScale& s) {
  uint32_t w[kLaneCols / 2];
#pragma unroll
  for (int j = 0; j < kLaneCols / 2; ++j) w[j] = bf16_pair<kRecipe>(v[2 * j], v[2 * j + 1], s);
  uint16_t* dst = p.rowwise + r * p.cols + c;
  if (p.vector && c + kLaneCols <= p.cols) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    return;
  }
#pragma unroll
  for (int j = 0; j < kLaneCols; ++j)
    if (c + j < p.cols) dst[j] = static_cast<uint16_t>(w[j / 2] >> (16 * (j % 2)));
}

template <Format kRecipe, bool kGrouped>
__global__ void __launch_bounds__(kThreads) mx_bf16_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  float(*tile)[kTileCols] = reinterpret_cast<float(*)[kTileCols]>(smem);
  uint32_t* ends = reinterpret_cast<uint32_t*>(smem + kTileBytes);
  uint32_t* pends = ends + p.num_groups;
  uint32_t* warp_totals = pends + p.num_groups;
  if constexpr (kGrouped)
    grouped_offsets<kThreads, kSegRows>(p.group_ends, p.num_groups, p.rows, ends, pends, warp_totals);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tiles = p.segments * p.col_tiles;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const Segment32 seg = segment_at<kGrouped>(p, t / p.col_tiles, ends, pends);
    const int64_t c0 = (t % p.col_tiles) * kTileCols;
    if (seg.valid == 0) continue;  // past the padded total: the same for every thread of the CTA
    // Rowwise, and the shared tile.
    float v[kRowsPerWarp][kLaneCols];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * (kThreads / 32);
      load8(p, r < seg.valid ? input_row(p, seg.first + r) : nullptr, c0 + lane * kLaneCols, v[i]);
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * (kThreads / 32);
      float4* dst = reinterpret_cast<float4*>(&tile[r][lane * kLaneCols]);
      dst[0] = make_float4(v[i][0], v[i][1], v[i][2], v[i][3]);
      dst[1] = make_float4(v[i][4], v[i][5], v[i][6], v[i][7]);
      if (p.rowwise == nullptr) continue;
      uint32_t amax = 0;
#pragma unroll
      for (int j = 0; j < kLaneCols; ++j) amax = max(amax, abs_bits(v[i][j]));
      amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
      amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
      if (r < seg.valid && c0 + lane * kLaneCols < p.cols)
        store8_rowwise<kRecipe>(p, seg.first + r, c0 + lane * kLaneCols, v[i], mx_block_scale(amax, p.rule));
    }
    __syncthreads();
    // Columnwise: thread t down column c0 + t.
    const int64_t c = c0 + threadIdx.x;
    if (p.columnwise != nullptr && c < p.cols) {
      uint32_t amax = 0;
#pragma unroll 8
      for (int r = 0; r < kSegRows; ++r) amax = max(amax, abs_bits(tile[r][threadIdx.x]));
      const MxScale s = mx_block_scale(amax, p.rule);
      for (int r = 0; r < seg.valid; r += 2) {
        const uint32_t w = bf16_pair<kRecipe>(tile[r][threadIdx.x], tile[r + 1][threadIdx.x], s);
        p.columnwise[(seg.first + r) * p.cols + c] = static_cast<uint16_t>(w);
        if (r + 1 < seg.valid) p.columnwise[(seg.first + r + 1) * p.cols + c] = static_cast<uint16_t>(w >> 16);
      }
    }
    __syncthreads();  // the tile is rewritten by the next iteration
  }
}

template <Format kRecipe, bool kGrouped>
Status launch(const Params& p, cudaStream_t stream) {
  const auto kernel = mx_bf16_kernel<kRecipe, kGrouped>;
  const int smem = static_cast<int>(kTileBytes) + (kGrouped ? (2 * p.num_groups + 32) * 4 : 0);
  const int smem_limit = static_cast<int>(kTileBytes) + (kGrouped ? (2 * kMaxGroups + 32) * 4 : 0);
  int resident = 0;
  BS_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, "mx_bf16", &resident,
                                   smem_limit));
  const int64_t grid = tile_grid(p.segments * p.col_tiles, resident);
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p);
  return cuda_status(cudaGetLastError(), "mx_bf16");
}

}  // namespace
}  // namespace detail

namespace {

constexpr const char* kFn = "mx_bf16: ";

Status fail(const std::string& what) { return Status::error(kFn + what); }

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

Status check_problem(const MxBf16Problem& p, const MxBf16Inputs& in) {
  if (p.recipe != formats::Format::kMxfp8E4M3 && p.recipe != formats::Format::kMxfp8E5M2)
    return fail(std::string("recipe: must be mxfp8_e4m3 or mxfp8_e5m2 (got ") + formats::format_name(p.recipe) + ")");
  if (p.rounding != formats::ScaleRounding::kCeil && p.rounding != formats::ScaleRounding::kFloor)
    return fail("rounding: kCeil or kFloor (one rule per run)");
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  if (p.rows < 0 || p.rows > kMaxDim) return fail("rows: must be in [0, 2^31] (got " + std::to_string(p.rows) + ")");
  if (p.cols < 0 || p.cols > kMaxDim) return fail("cols: must be in [0, 2^31] (got " + std::to_string(p.cols) + ")");
  if (p.batches < 1 || p.rows % p.batches != 0)
    return fail("batches: must be >= 1 and divide rows (got " + std::to_string(p.batches) + " for " +
                std::to_string(p.rows) + " rows)");
  if (p.num_groups < 0 || p.num_groups > detail::kMaxGroups)
    return fail("num_groups: must be in [0, " + std::to_string(detail::kMaxGroups) + "] (got " +
                std::to_string(p.num_groups) + ")");
  if (p.num_groups > 0 && p.batches != 1) return fail("batches: must be 1 in grouped mode (num_groups > 0)");
  if (in.row_index != nullptr && (p.input_rows < 0 || p.input_rows > kMaxDim))
    return fail("input_rows: must be in [0, 2^31] with row_index (got " + std::to_string(p.input_rows) + ")");
  return Status::ok();
}

}  // namespace

Status can_implement(const MxBf16Problem& p, const MxBf16Inputs& in, const MxBf16Outputs& out) {
  BS_RETURN_IF_ERROR(check_problem(p, in));
  const bool gather = p.num_groups > 0 && in.row_index != nullptr;
  const int64_t x_rows = gather ? p.input_rows : p.rows;
  if (in.x == nullptr && x_rows * p.cols > 0) return fail("x: must not be null");
  if (p.num_groups > 0 && in.group_ends == nullptr) return fail("group_ends: must not be null when num_groups > 0");
  if (out.rowwise == nullptr && out.columnwise == nullptr) return fail("outputs: rowwise and columnwise are both null");
  const int64_t out_bytes = p.rows * p.cols * 2;
  std::vector<detail::Range> ranges{detail::range("x", in.x, x_rows * p.cols * 4)};
  if (p.num_groups > 0) ranges.push_back(detail::range("group_ends", in.group_ends, 4 * int64_t{p.num_groups}));
  if (gather) ranges.push_back(detail::range("row_index", in.row_index, 4 * p.rows));
  if (out.rowwise != nullptr) ranges.push_back(detail::range("rowwise", out.rowwise, out_bytes));
  if (out.columnwise != nullptr) ranges.push_back(detail::range("columnwise", out.columnwise, out_bytes));
  const Status overlap = detail::check_no_overlap(ranges);
  if (!overlap) return fail(overlap.message());
  return Status::ok();
}

Status run(const MxBf16Problem& p, const MxBf16Inputs& in, const MxBf16Outputs& out, cudaStream_t stream) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  if (p.rows == 0 || p.cols == 0) return Status::ok();
  detail::Params k{};
  k.x = in.x;
  k.group_ends = p.num_groups > 0 ? in.group_ends : nullptr;
  k.row_index = p.num_groups > 0 ? in.row_index : nullptr;
  k.rowwise = out.rowwise;
  k.columnwise = out.columnwise;
  k.rows = p.rows, k.cols = p.cols;
  k.input_rows = k.row_index != nullptr ? p.input_rows : p.rows;
  k.batch_rows = p.rows / p.batches;
  k.num_groups = p.num_groups;
  k.segments = p.num_groups > 0 ? (p.rows + detail::kSegRows - 1) / detail::kSegRows + p.num_groups
                                : p.batches * ((k.batch_rows + detail::kSegRows - 1) / detail::kSegRows);
  k.col_tiles = (p.cols + detail::kTileCols - 1) / detail::kTileCols;
  k.rule = detail::mx_scale_rule(formats::element_max(p.recipe), p.rounding == formats::ScaleRounding::kCeil);
  k.vector = p.cols % detail::kLaneCols == 0 && aligned16(in.x) && (out.rowwise == nullptr || aligned16(out.rowwise));
  const bool e4m3 = p.recipe == formats::Format::kMxfp8E4M3;
  if (p.num_groups > 0)
    return e4m3 ? detail::launch<formats::Format::kMxfp8E4M3, true>(k, stream)
                : detail::launch<formats::Format::kMxfp8E5M2, true>(k, stream);
  return e4m3 ? detail::launch<formats::Format::kMxfp8E4M3, false>(k, stream)
              : detail::launch<formats::Format::kMxfp8E5M2, false>(k, stream);
}

}  // namespace blockscale::quant
