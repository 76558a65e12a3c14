// FP8 blockwise quantize (the Hopper-native recipe: E4M3 elements, fp32 scales; 1x128 blocks for
// activations and gradients, 128x128 blocks for weights; optional power-of-two scales) of a
// row-major bf16 / fp16 / fp32 matrix with row stride ld. ONE read of the input writes the rowwise
// copy (rows x cols codes, blocks along cols), the columnwise copy (cols x rows codes: the
// transpose, blocks along the input's rows), or both.
//
// Must match, byte for byte: formats::quantize() (formats/fp8_block_quantize.cpp; columnwise =
// quantize the transpose, formats/quantize.cpp) followed by
//   1x128  : formats::pack_vec128_scales  (VEC128_32F: scale (r, kb) at kb * round_up(rows, 4) + r)
//   128x128: formats::pack_blk128_scales  (BLK128x128_32F: (rb, kb) at rb * round_up(kbs, 4) + kb)
// with the layouts' padding written as 0.0f here. The scale arithmetic is fp8_block_scale()
// (quant/fp8_block_quantize.h: __fdiv_rn, clamp to FLT_MAX, mx_scale_exponent for pow2); a block
// holding a NaN or an Inf gets the scale bits 0x7FC00000 and element codes 0x00. Elements: x * r
// in fp32 (__fmul_rn), then cvt.rn.satfinite.e4m3x2.f32 (encode2/encode4 of device_common.cuh,
// proven equal to formats::encode_minifloat on every finite fp32 by tests/quant/mx_quantize_test).
//
// Tiling: a CTA of 256 threads (8 warps) walks 128 x 128 input tiles in a grid-stride loop. Tiles
// start on multiples of 128, so the FP8 blocks fit them exactly: a tile row is one rowwise 1x128
// block, a tile column one columnwise 1x128 block, the whole tile one 128x128 block (for both
// copies: the transposed block holds the same elements, hence the same scale).
//   load       : cp.async 16-byte granules (zero-filled past the matrix: the zero padding of a
//                partial block) into a shared tile; 16-bit input double-buffers (the next tile is
//                in flight while this one is quantized), fp32 (64 KB tiles) single-buffers. Within
//                a row the low 3 bits of the granule index are rotated by the row's 16-row band and
//                by the granule's upper bits, so the copies, the row reads and the column reads
//                below are free of shared-memory bank conflicts. Inputs whose pointer or stride
//                rule out 16-byte copies are loaded element by element (same bytes, slower).
//   rowwise    : warp w owns tile rows 16w..16w+15; a lane takes 16 consecutive elements of a row
//                (8 lanes per row); 1x128 amax = 3 xor shuffles; 16 codes = one 16-byte store.
//   columnwise : a lane reads one 32-bit word column (2 columns of 16-bit input) over 16 rows;
//                8 lanes cover a 128-row column; 1x128 amax = 3 xor shuffles (packed max.u16x2 for
//                16-bit input); 16 codes per column = one 16-byte store into the transpose.
//   128x128    : a pre-pass takes the tile's amax (warp shuffles, 8 partial maxima in shared
//                memory, one extra barrier); both copies then encode with that one scale.
//   scales     : 1x128: the lane that starts a row / column stores its fp32 scale; the 128 scales
//                of a tile are contiguous in VEC128. 128x128: thread 0 stores the tile's scale.
//                The tile at the layout's edge also writes the padding floats (0.0f).
//   amax, flag : folded in by whichever pass reads every element once; one atomicMax on the float
//                bits per warp, and the non-finite flag set to 1 (never written otherwise).
// Tiles wholly inside the matrix with 16-byte aligned outputs take a path without bounds checks;
// other tiles and alignments store 16, 8 or 1 byte at a time, writing the same bytes.
#include <algorithm>
#include <string>

#include "formats/scale_layout.h"
#include "quant/device_common.cuh"
#include "quant/fp8_block_quantize.h"
#include "quant/launchers.h"

namespace blockscale::quant::detail {
namespace {

using formats::Recipe;

constexpr int kDim = 128;      // tile rows = tile columns = FP8 block length
constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;

struct Fp8BlockArgs {
  const void* x;
  int64_t rows, cols, ld;
  uint8_t* row_codes;  // rows x cols
  float* row_scales;
  uint8_t* col_codes;  // cols x rows
  float* col_scales;
  float* amax;
  int* nonfinite;
  int tiles_r, tiles_c;
  bool pow2;
  bool async_load;  // x and ld * element size 16-byte aligned: cp.async granules
  int row_align;    // 16, 8 or 1: widest store of rowwise codes the pointer and cols allow
  int col_align;    // the same for the columnwise codes (pointer and rows)
};

// ---- The shared tile: 128 rows of 32-bit words, 16-byte granules.
template <InputType kIn>
struct Smem {
  static constexpr int kElemBytes = InputTraits<kIn>::kBytes;
  static constexpr int kRowWords = kDim * kElemBytes / 4;  // 64 (16-bit) or 128 (fp32)
  static constexpr int kRowGranules = kRowWords / 4;       // 16 or 32
  static constexpr int kWords = kDim * kRowWords;
  static constexpr int kStages = kElemBytes == 2 ? 2 : 1;
  static constexpr int kColsPerWord = 4 / kElemBytes;
  static constexpr int kWordsPer16 = 4 * kElemBytes;       // words holding 16 elements of a row

  // Word offset of granule g of tile row r: the low 3 bits of g rotate by (r / 16) + (g / 8).
  __device__ __forceinline__ static int at(int r, int g) {
    const int rot = (r >> 4) + (g >> 3);
    return r * kRowWords + 4 * ((g & ~7) | ((g + rot) & 7));
  }
};

// A tile: its index, its origin in the matrix and how much of it lies inside.
struct Tile {
  int tr, tc;
  int64_t r0, c0;
  int nr, nc;  // rows / columns inside the matrix, 1..128
  bool whole;
};

__device__ __forceinline__ Tile make_tile(const Fp8BlockArgs& a, int tr, int tc) {
  Tile t;
  t.tr = tr, t.tc = tc;
  t.r0 = int64_t{tr} * kDim, t.c0 = int64_t{tc} * kDim;
  t.nr = static_cast<int>(min(a.rows - t.r0, int64_t{kDim}));
  t.nc = static_cast<int>(min(a.cols - t.c0, int64_t{kDim}));
  t.whole = (t.nr == kDim) & (t.nc == kDim);
  return t;
}

// ---- Load: thread t copies granule t % G of rows t / G + k * (256 / G) (G granules per row):
// a warp copies 512 contiguous bytes of the input per instruction.
template <InputType kIn>
__device__ __forceinline__ void fetch_tile(const Fp8BlockArgs& a, const Tile& t, uint32_t* stage) {
  using S = Smem<kIn>;
  constexpr int kRowsPerStep = kThreads / S::kRowGranules;  // 16 or 8
  constexpr int kSteps = kDim / kRowsPerStep;               // 8 or 16
  constexpr int kGranuleElems = 16 / S::kElemBytes;
  const int tid = static_cast<int>(threadIdx.x);
  const int g = tid % S::kRowGranules, r_first = tid / S::kRowGranules;
  const int64_t row_bytes = a.ld * S::kElemBytes;
  const char* base = static_cast<const char*>(a.x) + t.r0 * row_bytes + (t.c0 + kGranuleElems * g) * S::kElemBytes;
  if (a.async_load) {
    // Bytes of this granule inside the matrix, for rows inside it (the rest is zero-filled).
    const int in_row = t.whole ? 16 : max(0, min(kGranuleElems, t.nc - kGranuleElems * g)) * S::kElemBytes;
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const int r = r_first + k * kRowsPerStep;
      const int n = (t.whole || r < t.nr) ? in_row : 0;
      const void* src = n > 0 ? static_cast<const void*>(base + r * row_bytes) : a.x;
      cp_async_16B(stage + S::at(r, g), src, n);
    }
    return;
  }
  // Element-wise fallback: any alignment of x and ld the API accepts.
#pragma unroll 1
  for (int k = 0; k < kSteps; ++k) {
    const int r = r_first + k * kRowsPerStep;
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    const int n = r < t.nr ? min(kGranuleElems, t.nc - kGranuleElems * g) : 0;
    const char* src = base + r * row_bytes;
#pragma unroll
    for (int e = 0; e < kGranuleElems; ++e) {
      if (e >= n) break;
      if constexpr (S::kElemBytes == 2)
        w[e >> 1] |= uint32_t{reinterpret_cast<const uint16_t*>(src)[e]} << (16 * (e & 1));
      else
        w[e] = reinterpret_cast<const uint32_t*>(src)[e];
    }
    *reinterpret_cast<uint4*>(stage + S::at(r, g)) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// ---- Encoding and storing 16 codes.

// 16 fp32 values times r -> 16 E4M3 codes (zeros for a non-finite block).
template <Recipe kRecipe>
__device__ __forceinline__ uint4 encode16(const float* f, const Fp8BlockScale& s) {
  constexpr ElementEncoder kEnc = kDefaultEncoder;
  uint4 v;
  v.x = encode4<kRecipe, kEnc>(f, s.mult);
  v.y = encode4<kRecipe, kEnc>(f + 4, s.mult);
  v.z = encode4<kRecipe, kEnc>(f + 8, s.mult);
  v.w = encode4<kRecipe, kEnc>(f + 12, s.mult);
  return s.nonfinite ? make_uint4(0u, 0u, 0u, 0u) : v;
}

// The first n (clamped to 0..16) of the 16 codes in v to dst, with stores as wide as `align`
// (16, 8 or 1; dst is aligned to it) allows.
__device__ __forceinline__ void put_codes(uint8_t* dst, const uint4& v, int n, int align) {
  if (n >= 16 && align == 16) {
    *reinterpret_cast<uint4*>(dst) = v;
    return;
  }
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (align >= 8 && n >= 8 * half + 8) {
      *reinterpret_cast<uint2*>(dst + 8 * half) = make_uint2(w[2 * half], w[2 * half + 1]);
      continue;
    }
#pragma unroll
    for (int i = 8 * half; i < 8 * half + 8; ++i)
      if (i < n) dst[i] = static_cast<uint8_t>(w[i >> 2] >> (8 * (i & 3)));
  }
}

// Max of m over the lanes that differ from this one in the lane bits first_mask .. last_mask.
__device__ __forceinline__ uint32_t warp_max_u32(uint32_t m, int first_mask, int last_mask) {
#pragma unroll
  for (int mask = first_mask; mask <= last_mask; mask <<= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, mask));
  return m;
}

// ---- Rowwise: warp w, pass s: tile row 16w + 4s + lane / 8, elements 16 * (lane % 8) .. + 15.
// kTileScale: the 128x128 recipe (the scale comes in); else the row's 1x128 scale is found here.
// kAmax: this pass folds every element into the tensor amax and the non-finite flag.
template <InputType kIn, Recipe kRecipe, bool kWhole, bool kTileScale, bool kAmax>
__device__ __forceinline__ void rowwise_pass(const Fp8BlockArgs& a, const uint32_t* tile, const Tile& t,
                                             const Fp8BlockScale& tile_scale, uint32_t& tensor_amax,
                                             bool& saw_nonfinite) {
  using S = Smem<kIn>;
  using In = InputTraits<kIn>;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int q = lane & 7;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int rt = 16 * warp + 4 * s + (lane >> 3);
    uint32_t w[S::kWordsPer16];
#pragma unroll
    for (int j = 0; j < S::kElemBytes; ++j) {
      const uint4 v = *reinterpret_cast<const uint4*>(tile + S::at(rt, S::kElemBytes * q + j));
      w[4 * j] = v.x, w[4 * j + 1] = v.y, w[4 * j + 2] = v.z, w[4 * j + 3] = v.w;
    }
    Fp8BlockScale sc = tile_scale;
    if constexpr (!kTileScale || kAmax) {
      const uint32_t m = fold_slots<kIn>(abs_max_words<kIn, S::kWordsPer16>(w));
      if constexpr (kAmax) note_tensor_amax<kIn, S::kWordsPer16>(w, m, tensor_amax, saw_nonfinite);
      if constexpr (!kTileScale) sc = fp8_block_scale(In::widen(warp_max_u32(m, 1, 4)), a.pow2);
    }
    float f[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] = S::kElemBytes == 2 ? In::elem(w[i >> 1], i & 1) : In::elem(w[i], 0);
    const uint4 codes = encode16<kRecipe>(f, sc);

    const int64_t r = t.r0 + rt;
    uint8_t* dst = a.row_codes + r * a.cols + t.c0 + 16 * q;
    if constexpr (kWhole) {
      *reinterpret_cast<uint4*>(dst) = codes;
    } else if (rt < t.nr) {
      put_codes(dst, codes, t.nc - 16 * q, a.row_align);
    }
    if constexpr (!kTileScale) {
      if (q == 0) {  // VEC128: rows past `rows` up to round_up(rows, 4) are padding
        if (kWhole || rt < t.nr)
          a.row_scales[formats::vec128_scale_offset(r, t.tc, a.rows)] = sc.scale;
        else if (r < formats::vec128_scale_ld(a.rows))
          a.row_scales[formats::vec128_scale_offset(r, t.tc, a.rows)] = 0.0f;
      }
    }
  }
}

// ---- Columnwise: item n of thread tid is granule column (tid + 256 n) / 32 (4 word columns);
// lane: word column 4g + lane % 4, rows 16 * (lane / 4) .. + 15.
template <InputType kIn, Recipe kRecipe, bool kWhole, bool kTileScale, bool kAmax>
__device__ __forceinline__ void columnwise_pass(const Fp8BlockArgs& a, const uint32_t* tile, const Tile& t,
                                                const Fp8BlockScale& tile_scale, uint32_t& tensor_amax,
                                                bool& saw_nonfinite) {
  using S = Smem<kIn>;
  using In = InputTraits<kIn>;
  constexpr int kItems = S::kRowWords * 8 / kThreads;  // 2 or 4
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const int k = lane >> 2;  // 16-row band
#pragma unroll
  for (int n = 0; n < kItems; ++n) {
    const int g = (tid + n * kThreads) >> 5;
    const int wc = 4 * g + (lane & 3);
    const uint32_t* src = tile + S::at(16 * k, g) + (lane & 3);  // the band's rows share a rotation
    uint32_t w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = src[i * S::kRowWords];
    uint32_t m = 0;
    if constexpr (!kTileScale || kAmax) {
      m = abs_max_words<kIn, 16>(w);  // one maximum per column of the word
      if constexpr (kAmax) note_tensor_amax<kIn, 16>(w, fold_slots<kIn>(m), tensor_amax, saw_nonfinite);
      if constexpr (!kTileScale) {
        m = shfl_max_xor<kIn>(m, 4);
        m = shfl_max_xor<kIn>(m, 8);
        m = shfl_max_xor<kIn>(m, 16);
      }
    }
#pragma unroll
    for (int h = 0; h < S::kColsPerWord; ++h) {
      const int ct = wc * S::kColsPerWord + h;
      const Fp8BlockScale sc = kTileScale ? tile_scale : fp8_block_scale(In::widen(slot<kIn>(m, h)), a.pow2);
      float f[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i], h);
      const uint4 codes = encode16<kRecipe>(f, sc);

      const int64_t c = t.c0 + ct;
      uint8_t* dst = a.col_codes + c * a.rows + t.r0 + 16 * k;
      if constexpr (kWhole) {
        *reinterpret_cast<uint4*>(dst) = codes;
      } else if (ct < t.nc) {
        put_codes(dst, codes, t.nr - 16 * k, a.col_align);
      }
      if constexpr (!kTileScale) {
        if (k == 0) {  // VEC128 of the transpose: columns past `cols` up to round_up(cols, 4) pad
          if (kWhole || ct < t.nc)
            a.col_scales[formats::vec128_scale_offset(c, t.tr, a.cols)] = sc.scale;
          else if (c < formats::vec128_scale_ld(a.cols))
            a.col_scales[formats::vec128_scale_offset(c, t.tr, a.cols)] = 0.0f;
        }
      }
    }
  }
}

// ---- 128x128: the tile's amax over every element (the rowwise thread mapping), reduced through
// `partial` (one slot per warp) with a barrier; also the tensor amax and the flag.
template <InputType kIn>
__device__ __forceinline__ Fp8BlockScale tile_block_scale(const Fp8BlockArgs& a, const uint32_t* tile,
                                                          uint32_t* partial, uint32_t& tensor_amax,
                                                          bool& saw_nonfinite) {
  using S = Smem<kIn>;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int q = lane & 7;
  uint32_t m = 0;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int rt = 16 * warp + 4 * s + (lane >> 3);
    uint32_t w[S::kWordsPer16];
#pragma unroll
    for (int j = 0; j < S::kElemBytes; ++j) {
      const uint4 v = *reinterpret_cast<const uint4*>(tile + S::at(rt, S::kElemBytes * q + j));
      w[4 * j] = v.x, w[4 * j + 1] = v.y, w[4 * j + 2] = v.z, w[4 * j + 3] = v.w;
    }
    const uint32_t mm = fold_slots<kIn>(abs_max_words<kIn, S::kWordsPer16>(w));
    note_tensor_amax<kIn, S::kWordsPer16>(w, mm, tensor_amax, saw_nonfinite);
    m = max(m, mm);
  }
  m = warp_max_u32(m, 1, 16);
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = partial[0];
#pragma unroll
  for (int i = 1; i < kWarps; ++i) m = max(m, partial[i]);
  return fp8_block_scale(InputTraits<kIn>::widen(m), a.pow2);
}

// 128x128: the tile's scale into both BLK128 buffers (thread 0), padding at the layout's edge.
template <bool kRow, bool kCol>
__device__ __forceinline__ void store_tile_scale(const Fp8BlockArgs& a, const Tile& t, float s) {
  if (kRow) {
    a.row_scales[formats::blk128_scale_offset(t.tr, t.tc, a.tiles_c)] = s;
    if (t.tc == a.tiles_c - 1)
      for (int kb = a.tiles_c; kb < formats::blk128_scale_ld(a.tiles_c); ++kb)
        a.row_scales[formats::blk128_scale_offset(t.tr, kb, a.tiles_c)] = 0.0f;
  }
  if (kCol) {
    a.col_scales[formats::blk128_scale_offset(t.tc, t.tr, a.tiles_r)] = s;
    if (t.tr == a.tiles_r - 1)
      for (int kb = a.tiles_r; kb < formats::blk128_scale_ld(a.tiles_r); ++kb)
        a.col_scales[formats::blk128_scale_offset(t.tc, kb, a.tiles_r)] = 0.0f;
  }
}

template <InputType kIn, Recipe kRecipe, bool kRow, bool kCol, bool kWhole>
__device__ __forceinline__ void quantize_tile(const Fp8BlockArgs& a, const uint32_t* tile, const Tile& t,
                                              uint32_t* partial, uint32_t& tensor_amax, bool& saw_nonfinite) {
  if constexpr (kRecipe == Recipe::kFp8Block128x128) {
    const Fp8BlockScale sc = tile_block_scale<kIn>(a, tile, partial, tensor_amax, saw_nonfinite);
    if (threadIdx.x == 0) store_tile_scale<kRow, kCol>(a, t, sc.scale);
    if constexpr (kRow) rowwise_pass<kIn, kRecipe, kWhole, true, false>(a, tile, t, sc, tensor_amax, saw_nonfinite);
    if constexpr (kCol) columnwise_pass<kIn, kRecipe, kWhole, true, false>(a, tile, t, sc, tensor_amax, saw_nonfinite);
  } else {
    const Fp8BlockScale none{};
    if constexpr (kRow) rowwise_pass<kIn, kRecipe, kWhole, false, true>(a, tile, t, none, tensor_amax, saw_nonfinite);
    if constexpr (kCol)
      columnwise_pass<kIn, kRecipe, kWhole, false, !kRow>(a, tile, t, none, tensor_amax, saw_nonfinite);
  }
}

template <InputType kIn, Recipe kRecipe, bool kRow, bool kCol>
__global__ void __launch_bounds__(kThreads, 3) fp8_block_quantize_kernel(const __grid_constant__ Fp8BlockArgs a) {
  using S = Smem<kIn>;
  extern __shared__ uint4 fp8_block_smem[];  // S::kStages tiles
  __shared__ uint32_t partial[kWarps];     // 128x128: per-warp tile amax
  uint32_t* const stages = reinterpret_cast<uint32_t*>(fp8_block_smem);

  uint32_t tensor_amax = 0;  // magnitude bits of the input type
  bool saw_nonfinite = false;
  const bool whole_stores = a.row_align == 16 && a.col_align == 16;

  // Grid-stride walk over tiles in row-major order, as (row, column) without divisions.
  const int step_r = static_cast<int>(gridDim.x) / a.tiles_c, step_c = static_cast<int>(gridDim.x) % a.tiles_c;
  int tr = static_cast<int>(blockIdx.x) / a.tiles_c, tc = static_cast<int>(blockIdx.x) % a.tiles_c;
  if (tr < a.tiles_r) fetch_tile<kIn>(a, make_tile(a, tr, tc), stages);
  cp_async_commit();
  for (int i = 0; tr < a.tiles_r; ++i) {
    int next_c = tc + step_c, next_r = tr + step_r;
    if (next_c >= a.tiles_c) next_c -= a.tiles_c, ++next_r;
    cp_async_wait<0>();
    // Tile i has landed for every thread, and every thread is done with tile i - 1.
    __syncthreads();
    if constexpr (S::kStages == 2) {
      if (next_r < a.tiles_r) fetch_tile<kIn>(a, make_tile(a, next_r, next_c), stages + ((i + 1) & 1) * S::kWords);
      cp_async_commit();
    }
    const Tile t = make_tile(a, tr, tc);
    const uint32_t* tile = stages + (S::kStages == 2 ? (i & 1) * S::kWords : 0);
    if (t.whole && whole_stores)
      quantize_tile<kIn, kRecipe, kRow, kCol, true>(a, tile, t, partial, tensor_amax, saw_nonfinite);
    else
      quantize_tile<kIn, kRecipe, kRow, kCol, false>(a, tile, t, partial, tensor_amax, saw_nonfinite);
    if constexpr (S::kStages == 1) {
      __syncthreads();  // the one stage is free once every thread has read it
      if (next_r < a.tiles_r) fetch_tile<kIn>(a, make_tile(a, next_r, next_c), stages);
      cp_async_commit();
    }
    tr = next_r, tc = next_c;
  }
  cp_async_wait<0>();

  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (a.amax != nullptr) {
    uint32_t bits = InputTraits<kIn>::widen(tensor_amax);
    bits = warp_max_u32(bits, 1, 16);
    if (lane == 0 && bits != 0) atomicMax(reinterpret_cast<unsigned int*>(a.amax), bits);
  }
  if (a.nonfinite != nullptr && __any_sync(0xFFFFFFFFu, saw_nonfinite) && lane == 0) *a.nonfinite = 1;
}

// ---- Host side: pick the instantiation, size the grid, launch.

template <InputType kIn, Recipe kRecipe, bool kRow, bool kCol>
Status launch(const Fp8BlockArgs& args, cudaStream_t stream) {
  auto* kernel = fp8_block_quantize_kernel<kIn, kRecipe, kRow, kCol>;
  constexpr int kSmem = Smem<kIn>::kStages * Smem<kIn>::kWords * 4;
  BS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
                                 "fp8_block_quantize_kernel: cudaFuncSetAttribute"));
  int dev = 0, sms = 0, per_sm = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                                 "cudaDeviceGetAttribute"));
  BS_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmem),
                                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
  // Every resident CTA gets work, and the tiles are spread evenly over the rounds.
  const int64_t tiles = int64_t{args.tiles_r} * args.tiles_c;
  const int64_t resident = int64_t{sms} * std::max(per_sm, 1);
  const int64_t rounds = (tiles + resident - 1) / resident;
  const int64_t grid = (tiles + rounds - 1) / rounds;
  kernel<<<static_cast<unsigned>(grid), kThreads, kSmem, stream>>>(args);
  return cuda_status(cudaGetLastError(), "fp8_block_quantize_kernel launch");
}

template <InputType kIn, Recipe kRecipe>
Status pick_directions(Directions d, const Fp8BlockArgs& args, cudaStream_t stream) {
  switch (d) {
    case Directions::kRowwise: return launch<kIn, kRecipe, true, false>(args, stream);
    case Directions::kColumnwise: return launch<kIn, kRecipe, false, true>(args, stream);
    case Directions::kBoth: return launch<kIn, kRecipe, true, true>(args, stream);
  }
  return Status::error("problem.directions: unknown value");
}

template <InputType kIn>
Status pick_recipe(const QuantizeProblem& p, const Fp8BlockArgs& args, cudaStream_t stream) {
  if (p.recipe == Recipe::kFp8Block1x128) return pick_directions<kIn, Recipe::kFp8Block1x128>(p.directions, args, stream);
  if (p.recipe == Recipe::kFp8Block128x128)
    return pick_directions<kIn, Recipe::kFp8Block128x128>(p.directions, args, stream);
  return Status::error("problem.recipe: not an FP8 blockwise recipe");
}

bool is_aligned(const void* ptr, int64_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }

// The widest store (16, 8 or 1 bytes) for rows of `row_len` codes starting at `ptr`.
int store_align(const void* ptr, int64_t row_len) {
  for (int n : {16, 8})
    if (is_aligned(ptr, n) && row_len % n == 0) return n;
  return 1;
}

}  // namespace

Status launch_fp8_block_quantize(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                                 cudaStream_t stream) {
  const bool row = p.directions != Directions::kColumnwise;
  const bool col = p.directions != Directions::kRowwise;
  const int64_t esize = p.input_type == InputType::kFp32 ? 4 : 2;
  Fp8BlockArgs a{};
  a.x = in.x;
  a.rows = p.rows, a.cols = p.cols, a.ld = p.ld;
  a.row_codes = row ? out.rowwise_data : nullptr;
  a.row_scales = row ? static_cast<float*>(out.rowwise_scales) : nullptr;
  a.col_codes = col ? out.columnwise_data : nullptr;
  a.col_scales = col ? static_cast<float*>(out.columnwise_scales) : nullptr;
  a.amax = out.amax;
  a.nonfinite = out.nonfinite;
  const int64_t tiles_r = (p.rows + kDim - 1) / kDim, tiles_c = (p.cols + kDim - 1) / kDim;
  if (tiles_r * tiles_c > int64_t{0x7FFFFFFF})
    return Status::error("problem: " + std::to_string(p.rows) + " x " + std::to_string(p.cols) +
                         " has more 128x128 tiles than the FP8 blockwise kernel indexes (2^31 - 1)");
  a.tiles_r = static_cast<int>(tiles_r), a.tiles_c = static_cast<int>(tiles_c);
  a.pow2 = p.pow2_scales;
  a.async_load = is_aligned(in.x, 16) && (p.ld * esize) % 16 == 0;
  a.row_align = row ? store_align(out.rowwise_data, p.cols) : 16;
  a.col_align = col ? store_align(out.columnwise_data, p.rows) : 16;
  switch (p.input_type) {
    case InputType::kBf16: return pick_recipe<InputType::kBf16>(p, a, stream);
    case InputType::kFp16: return pick_recipe<InputType::kFp16>(p, a, stream);
    case InputType::kFp32: return pick_recipe<InputType::kFp32>(p, a, stream);
  }
  return Status::error("problem.input_type: unknown value");
}

}  // namespace blockscale::quant::detail
