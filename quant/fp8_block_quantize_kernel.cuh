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
// proven equal to formats::encode_minifloat on every finite fp32 by tests/quant/mx_device_test).
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
//                (8 lanes per row, 4 passes); 16 codes = one 16-byte store.
//   columnwise : a lane reads one 32-bit word column (2 columns of 16-bit input) over 16 rows;
//                8 lanes cover a 128-row column; 16 codes per column = one 16-byte store into the
//                transpose.
//   1x128 scale: two steps per direction. First every pass / item only reads and takes maxima
//                (3 xor shuffles per row / column; packed max.u16x2 for 16-bit input); then lane L
//                < 16 of each warp evaluates fp8_block_scale for the warp's L-th row / column (one
//                evaluation, divisions included, per warp and direction and tile) and stores the
//                fp32 scale; the passes re-read their elements from shared memory and fetch their
//                multiplier with one shuffle. A multiplier of 0 marks a non-finite block.
//   128x128    : a pre-pass takes the tile's amax (warp shuffles, 8 partial maxima in shared
//                memory, one extra barrier); both copies then encode with that one scale, which
//                thread 0 stores.
//   scales     : VEC128 puts a tile's 128 row (column) scales in 128 consecutive floats; the tile
//                at the layout's edge also writes the padding floats (0.0f).
//   amax, flag : folded in by whichever pass reads every element once; one atomicMax on the float
//                bits per warp, and the non-finite flag set to 1 (never written otherwise).
// Tiles wholly inside the matrix with 16-byte aligned outputs take a path without bounds checks;
// other tiles and alignments store 16, 8 or 1 byte at a time, writing the same bytes.
//
// The grouped (MoE) mode's tiles (kGrouped): quant/fp8_block_grouped_quantize.cu. The host side
// that picks an instantiation: quant/fp8_block_quantize_dispatch.cuh. Included by each mode's file,
// which instantiates its own kernels (the anonymous namespace keeps them in that file).
#pragma once

#include <cstdint>

#include "formats/scale_layout.h"
#include "quant/device_common.cuh"
#include "quant/fp8_block_quantize.h"
#include "quant/grouped_offsets.cuh"

namespace blockscale::quant::detail {

struct Fp8BlockArgs {
  const void* x;
  int64_t rows, cols, ld;
  uint8_t* row_codes;  // rows x cols
  float* row_scales;
  uint8_t* col_codes;  // cols x col_ld
  float* col_scales;
  int64_t col_ld;      // row length of the columnwise copy: rows, or the grouped capacity
  float* amax;
  int* nonfinite;
  int tiles_r, tiles_c;
  bool pow2;
  bool async_load;  // x and ld * element size 16-byte aligned: cp.async granules
  int row_align;    // 16, 8 or 1: widest store of rowwise codes the pointer and cols allow
  int col_align;    // the same for the columnwise codes (pointer and col_ld)
  // Grouped mode.
  const int32_t* group_ends;
  int32_t* padded_group_ends;
  int num_groups;
  // Gather (the kGather template argument): quantized row r reads input row row_index[r] of the
  // input_rows rows of x; an index outside [0, input_rows) reads a zero row.
  const int32_t* row_index;
  int64_t input_rows;
  // Batched 128x128 (BatchedQuantizeProblem): tiles_r counts the tile rows of every matrix,
  // batch_tiles_r those of one. Matrix b's input and rowwise copy start at row b * batch_rows of
  // the stacked rows (its scale rows follow the previous matrix's), its columnwise codes at
  // b * col_batch_bytes, its columnwise scales at b * col_batch_scales floats. One matrix:
  // batch_tiles_r = tiles_r.
  int batch_tiles_r;
  int64_t batch_rows, col_batch_bytes, col_batch_scales;
};

namespace {

using formats::Direction;
using formats::Format;

constexpr int kDim = 128;      // tile rows = tile columns = FP8 block length
constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;

// ---- The shared tile: 128 rows of 32-bit words, 16-byte granules.
template <DType kIn>
struct Smem {
  static constexpr int kElemBytes = InputTraits<kIn>::kBytes;
  static constexpr int kRowWords = kDim * kElemBytes / 4;  // 64 (16-bit) or 128 (fp32)
  static constexpr int kRowGranules = kRowWords / 4;       // 16 or 32
  static constexpr int kWords = kDim * kRowWords;
  static constexpr int kStages = kElemBytes == 2 ? 2 : 1;  // 64 KB of tiles either way
  static constexpr int kColsPerWord = 4 / kElemBytes;
  static constexpr int kWordsPer16 = 4 * kElemBytes;       // words holding 16 elements of a row

  // Word offset of granule g of tile row r: the low 3 bits of g rotate by (r / 16) + (g / 8).
  __device__ __forceinline__ static int at(int r, int g) {
    const int rot = (r >> 4) + (g >> 3);
    return r * kRowWords + 4 * ((g & ~7) | ((g + rot) & 7));
  }
};

// A tile: its index, its origin in the matrix and how much of it lies inside. Dense: tile row tr
// reads input rows 128 tr.. and its columnwise codes go to the same positions of the transpose.
// Grouped: tile row tr is the padded rows 128 tr.. (one expert block), reading nr token rows from
// input row r0; its columnwise codes are all 128 written at position 128 tr.
struct Tile {
  int tr, tc;
  int64_t r0, c0;
  int nr, nc;       // rows / columns inside the matrix: 1..128 (grouped: 0..128 rows)
  int64_t col_r0;   // first position of the tile's rows in the columnwise copy
  int col_n;        // codes of a transposed row to write: nr, or 128 in grouped mode
  int batch, batch_tr;  // batched 128x128: the tile's matrix and its tile row within it
  bool whole;
};

// Grouped mode: the input rows of tile row tr (one 128-row segment). Short scans: the warp scans
// group_ends in registers (grouped_offsets.cuh: lane_experts); otherwise a binary search of the
// CTA's tables in shared memory (offsets: the ends, then the padded ends). Every thread calls it.
__device__ __forceinline__ Segment tile_segment(const Fp8BlockArgs& a, int tr, const uint32_t* offsets) {
  const uint32_t pr = static_cast<uint32_t>(tr) * kDim;
  if (a.num_groups <= kShortScanGroups)
    return lane_experts_segment<kDim, 1>(lane_experts<kDim>(a.group_ends, a.num_groups, a.rows), a.group_ends,
                                         a.num_groups, a.rows, pr);
  return grouped_segment<kDim>(pr, offsets, offsets + a.num_groups, a.num_groups);
}

// seg: grouped mode's segment of tile row tr (tile_segment; unused otherwise). kBatched: the
// 128x128 recipe, whose tile rows may span several stacked matrices (one division per tile).
template <bool kGrouped, bool kBatched>
__device__ __forceinline__ Tile make_tile(const Fp8BlockArgs& a, int tr, int tc, Segment seg) {
  Tile t;
  t.tr = tr, t.tc = tc;
  t.c0 = int64_t{tc} * kDim;
  t.nc = static_cast<int>(min(a.cols - t.c0, int64_t{kDim}));
  t.col_r0 = int64_t{tr} * kDim;
  if constexpr (kGrouped) {
    t.r0 = seg.src, t.nr = static_cast<int>(seg.valid), t.col_n = kDim;
  } else if constexpr (kBatched) {
    t.batch = tr / a.batch_tiles_r, t.batch_tr = tr - t.batch * a.batch_tiles_r;
    t.col_r0 = int64_t{t.batch_tr} * kDim;
    t.r0 = t.batch * a.batch_rows + t.col_r0;
    t.nr = static_cast<int>(min(a.batch_rows - t.col_r0, int64_t{kDim}));
    t.col_n = t.nr;
  } else {
    t.r0 = t.col_r0;
    t.nr = static_cast<int>(min(a.rows - t.r0, int64_t{kDim}));
    t.col_n = t.nr;
  }
  t.whole = (t.nr == kDim) & (t.nc == kDim);
  return t;
}

// ---- Load: thread t copies granule t % G of rows t / G + k * (256 / G) (G granules per row):
// a warp copies 512 contiguous bytes of the input per instruction.
// kGather: tile row r (r < t.nr) is quantized row t.r0 + r, read from input row row_index[t.r0 + r]
// (-1: a zero row, for an index outside the input); the indices of all steps are fetched first.
template <DType kIn, bool kGather>
__device__ __forceinline__ void fetch_tile(const Fp8BlockArgs& a, const Tile& t, uint32_t* stage) {
  using S = Smem<kIn>;
  constexpr int kRowsPerStep = kThreads / S::kRowGranules;  // 16 or 8
  constexpr int kSteps = kDim / kRowsPerStep;               // 8 or 16
  constexpr int kGranuleElems = 16 / S::kElemBytes;
  const int tid = static_cast<int>(threadIdx.x);
  const int g = tid % S::kRowGranules, r_first = tid / S::kRowGranules;
  const int64_t row_bytes = a.ld * S::kElemBytes;
  if constexpr (kGather) {
    int64_t src[kSteps];
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const int r = r_first + k * kRowsPerStep;
      const int32_t i = r < t.nr ? __ldg(a.row_index + t.r0 + r) : -1;
      src[k] = i >= 0 && i < a.input_rows ? i : -1;
    }
    const int64_t col = t.c0 + kGranuleElems * g;
    const int n_in = max(0, min(kGranuleElems, t.nc - kGranuleElems * g));  // elements inside the row
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const int r = r_first + k * kRowsPerStep;
      const char* from = static_cast<const char*>(a.x) + (src[k] * a.ld + col) * S::kElemBytes;
      if (a.async_load) {
        const int n = src[k] >= 0 ? n_in * S::kElemBytes : 0;
        cp_async_16B(stage + S::at(r, g), n > 0 ? static_cast<const void*>(from) : a.x, n);
        continue;
      }
      uint32_t w[4] = {0u, 0u, 0u, 0u};
      const int n = src[k] >= 0 ? n_in : 0;
#pragma unroll
      for (int e = 0; e < kGranuleElems; ++e) {
        if (e >= n) break;
        if constexpr (S::kElemBytes == 2)
          w[e >> 1] |= uint32_t{reinterpret_cast<const uint16_t*>(from)[e]} << (16 * (e & 1));
        else
          w[e] = reinterpret_cast<const uint32_t*>(from)[e];
      }
      *reinterpret_cast<uint4*>(stage + S::at(r, g)) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    return;
  }
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

// ---- Thread mappings over the shared tile. Neither depends on the tile, and within one pass
// function every address is a per-thread base plus a compile-time offset.
//   rowwise : warp w owns tile rows 16w .. 16w + 15; in pass s (0..3) lane l takes row
//             16w + 4s + l / 8, elements 16 * (l % 8) .. + 15 (8 lanes per row). Rows 16w.. share
//             one 16-row band, hence one rotation: pass s is pass 0 plus 4s rows.
//   columnwise: item n of warp w is granule column g = w + 8n (4 word columns); lane l takes word
//             column 4g + l % 4 over tile rows 16 * (l / 4) .. + 15 (8 lanes per column).
template <DType kIn>
struct RowLanes {
  using S = Smem<kIn>;
  static constexpr int kPassWords = 4 * S::kRowWords;  // word distance between passes
  int row0, q;                                          // tile row of pass 0, 16-element group
  int word[S::kElemBytes];                              // word offset of each granule, pass 0
  __device__ __forceinline__ RowLanes() {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    row0 = 16 * (static_cast<int>(threadIdx.x) >> 5) + (lane >> 3);
    q = lane & 7;
#pragma unroll
    for (int j = 0; j < S::kElemBytes; ++j) word[j] = S::at(row0, S::kElemBytes * q + j);
  }
  // The kWordsPer16 words of pass s.
  __device__ __forceinline__ void read(const uint32_t* tile, int s, uint32_t* w) const {
#pragma unroll
    for (int j = 0; j < S::kElemBytes; ++j) {
      const uint4 v = *reinterpret_cast<const uint4*>(tile + word[j] + s * kPassWords);
      w[4 * j] = v.x, w[4 * j + 1] = v.y, w[4 * j + 2] = v.z, w[4 * j + 3] = v.w;
    }
  }
};

template <DType kIn>
struct ColLanes {
  using S = Smem<kIn>;
  static constexpr int kItems = S::kRowWords * 8 / kThreads;  // 2 or 4
  static constexpr int kCpw = S::kColsPerWord;
  int pl, k, warp;
  __device__ __forceinline__ ColLanes() {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    pl = lane & 3, k = lane >> 2, warp = static_cast<int>(threadIdx.x) >> 5;
  }
  // Tile column of item n, half h (16-bit input: 2 columns per word).
  __device__ __forceinline__ int column(int n, int h) const { return (4 * (warp + kWarps * n) + pl) * kCpw + h; }
  // The 16 words of item n.
  __device__ __forceinline__ void read(const uint32_t* tile, int n, uint32_t* w) const {
    const uint32_t* src = tile + S::at(16 * k, warp + kWarps * n) + pl;  // the band's rows share a rotation
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = src[i * S::kRowWords];
  }
};

// ---- Encoding and storing 16 codes. A block's multiplier r travels as one float; 0 marks a
// block holding NaN / Inf (a finite block's r is never 0), whose codes are all 0x00.

__device__ __forceinline__ float block_mult(const Fp8BlockScale& s) { return s.nonfinite ? 0.0f : s.mult; }

template <Format kRecipe>
__device__ __forceinline__ uint4 encode16(const float* f, float mult) {
  constexpr ElementEncoder kEnc = kDefaultEncoder;
  uint4 v;
  v.x = encode4<kRecipe, kEnc>(f, mult);
  v.y = encode4<kRecipe, kEnc>(f + 4, mult);
  v.z = encode4<kRecipe, kEnc>(f + 8, mult);
  v.w = encode4<kRecipe, kEnc>(f + 12, mult);
  return mult == 0.0f ? make_uint4(0u, 0u, 0u, 0u) : v;
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

// Rowwise codes of 16 elements (words from RowLanes::read) to dst: tile row rt, group q.
template <DType kIn, Format kRecipe, bool kWhole>
__device__ __forceinline__ void emit_row16(const Fp8BlockArgs& a, const Tile& t, uint8_t* dst, int rt, int q,
                                           const uint32_t* w, float mult) {
  using In = InputTraits<kIn>;
  float f[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) f[i] = In::kBytes == 2 ? In::elem(w[i >> 1], i & 1) : In::elem(w[i], 0);
  const uint4 codes = encode16<kRecipe>(f, mult);
  if constexpr (kWhole) {
    *reinterpret_cast<uint4*>(dst) = codes;
  } else if (rt < t.nr) {
    put_codes(dst, codes, t.nc - 16 * q, a.row_align);
  }
}

// Columnwise codes of 16 rows (words from ColLanes::read, element h of each) to dst: tile
// column ct, rows 16k ..
template <DType kIn, Format kRecipe, bool kWhole>
__device__ __forceinline__ void emit_col16(const Fp8BlockArgs& a, const Tile& t, uint8_t* dst, int ct, int k,
                                           const uint32_t* w, int h, float mult) {
  using In = InputTraits<kIn>;
  float f[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i], h);
  const uint4 codes = encode16<kRecipe>(f, mult);
  if constexpr (kWhole) {
    *reinterpret_cast<uint4*>(dst) = codes;
  } else if (ct < t.nc) {
    put_codes(dst, codes, t.col_n - 16 * k, a.col_align);
  }
}

// Where this thread's codes of a tile go: rowwise pass 0 (pass s: + 4s rows), columnwise item 0
// half 0 (item n, half h: + (32 * kCpw * n + h) rows of the transpose).
template <DType kIn>
__device__ __forceinline__ uint8_t* row_dst(const Fp8BlockArgs& a, const Tile& t, const RowLanes<kIn>& m) {
  return a.row_codes + (t.r0 + m.row0) * a.cols + (t.c0 + 16 * m.q);
}
template <DType kIn>
__device__ __forceinline__ uint8_t* col_dst(const Fp8BlockArgs& a, const Tile& t, const ColLanes<kIn>& m) {
  return a.col_codes + (t.c0 + m.column(0, 0)) * a.col_ld + (t.col_r0 + 16 * m.k);
}

// 1x128 scales. VEC128 pads the rows of each K block to a multiple of 4 with 0.0f: a tile row
// (column) past the matrix stores 0 when it lies in that padding, nothing otherwise. Grouped
// tiles store their token rows' scales only (the rows below belong to other tiles; CTA 0 writes
// the padding rows), and a tile past the padded total stores 0.0f column scales.
template <bool kWhole, bool kGrouped>
__device__ __forceinline__ void put_row_scale(const Fp8BlockArgs& a, const Tile& t, int rt, float s) {
  const int64_t r = t.r0 + rt;
  if (kWhole || rt < t.nr)
    a.row_scales[formats::vec128_scale_offset(r, t.tc, a.rows)] = s;
  else if (!kGrouped && r < formats::vec128_scale_ld(a.rows))
    a.row_scales[formats::vec128_scale_offset(r, t.tc, a.rows)] = 0.0f;
}
template <bool kWhole>
__device__ __forceinline__ void put_col_scale(const Fp8BlockArgs& a, const Tile& t, int ct, float s) {
  const int64_t c = t.c0 + ct;
  if (kWhole || ct < t.nc)
    a.col_scales[formats::vec128_scale_offset(c, t.tr, a.cols)] = t.nr > 0 ? s : 0.0f;
  else if (c < formats::vec128_scale_ld(a.cols))
    a.col_scales[formats::vec128_scale_offset(c, t.tr, a.cols)] = 0.0f;
}

// sm_100a's register allocator spills the fp32 1x128 kernels (80 registers for 3 CTAs per SM)
// once the unrolled passes' shared-memory reads are all hoisted; an empty asm with a memory
// clobber at the end of each pass keeps one pass's words live at a time there. The sm_90a code
// is left as it is (no spills there).
template <DType kIn>
__device__ __forceinline__ void pass_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  if constexpr (InputTraits<kIn>::kBytes == 4) asm volatile("" ::: "memory");
#endif
}

// Max of m over the lanes that differ from this one in the lane bits first_mask .. last_mask.
__device__ __forceinline__ uint32_t warp_max_u32(uint32_t m, int first_mask, int last_mask) {
#pragma unroll
  for (int mask = first_mask; mask <= last_mask; mask <<= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, mask));
  return m;
}

// ---- Rowwise. 128x128: every row encodes with the tile's multiplier.
template <DType kIn, Format kRecipe, bool kWhole>
__device__ __forceinline__ void rowwise_tile_scale(const Fp8BlockArgs& a, const uint32_t* tile, const Tile& t,
                                                   float tile_mult) {
  const RowLanes<kIn> m;
  uint8_t* dst = row_dst<kIn>(a, t, m);
  const int64_t pass_bytes = 4 * a.cols;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t w[Smem<kIn>::kWordsPer16];
    m.read(tile, s, w);
    emit_row16<kIn, kRecipe, kWhole>(a, t, dst + s * pass_bytes, m.row0 + 4 * s, m.q, w, tile_mult);
  }
}

// 1x128: the amax of the warp's 16 rows first (8 lanes per row), then lane L < 16 evaluates the
// scale of warp row L (one scale evaluation per warp and tile) and stores it (16 consecutive
// floats of VEC128); the passes then re-read their elements and take their row's multiplier by
// shuffle.
template <DType kIn, Format kRecipe, bool kWhole, bool kAmax, bool kGrouped>
__device__ __forceinline__ void rowwise_1x128(const Fp8BlockArgs& a, const uint32_t* tile, const Tile& t,
                                              uint32_t& tensor_amax, bool& saw_nonfinite) {
  using S = Smem<kIn>;
  using In = InputTraits<kIn>;
  const RowLanes<kIn> m;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  uint32_t row_amax[4];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t w[S::kWordsPer16];
    m.read(tile, s, w);
    const uint32_t mx = fold_slots<kIn>(abs_max_words<kIn, S::kWordsPer16>(w));
    if constexpr (kAmax) note_tensor_amax<kIn, S::kWordsPer16>(w, mx, tensor_amax, saw_nonfinite);
    row_amax[s] = warp_max_u32(mx, 1, 4);
    pass_fence<kIn>();
  }
  // Warp row L % 16 = 4 * pass + group: pass (L / 4) % 4, held by the lanes of group L % 4.
  uint32_t mine = 0;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t v = __shfl_sync(0xFFFFFFFFu, row_amax[s], (lane & 3) << 3);
    if (((lane >> 2) & 3) == s) mine = v;
  }
  const Fp8BlockScale sc = fp8_block_scale(In::widen(mine), a.pow2);
  if (lane < 16) put_row_scale<kWhole, kGrouped>(a, t, m.row0 - (lane >> 3) + lane, sc.scale);
  const float my_mult = block_mult(sc);
  uint8_t* dst = row_dst<kIn>(a, t, m);
  const int64_t pass_bytes = 4 * a.cols;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const float mult = __shfl_sync(0xFFFFFFFFu, my_mult, 4 * s + (lane >> 3));
    uint32_t w[S::kWordsPer16];
    m.read(tile, s, w);
    emit_row16<kIn, kRecipe, kWhole>(a, t, dst + s * pass_bytes, m.row0 + 4 * s, m.q, w, mult);
    pass_fence<kIn>();
  }
}

// ---- Columnwise. 128x128: every column encodes with the tile's multiplier.
template <DType kIn, Format kRecipe, bool kWhole>
__device__ __forceinline__ void columnwise_tile_scale(const Fp8BlockArgs& a, const uint32_t* tile, const Tile& t,
                                                      float tile_mult) {
  using M = ColLanes<kIn>;
  const M m;
  uint8_t* dst = col_dst<kIn>(a, t, m) + t.batch * a.col_batch_bytes;
#pragma unroll
  for (int n = 0; n < M::kItems; ++n) {
    uint32_t w[16];
    m.read(tile, n, w);
#pragma unroll
    for (int h = 0; h < M::kCpw; ++h)
      emit_col16<kIn, kRecipe, kWhole>(a, t, dst + (32 * M::kCpw * n + h) * a.col_ld, m.column(n, h), m.k, w, h,
                                       tile_mult);
  }
}

// 1x128: the amax of the warp's 16 columns first (8 lanes per column, packed per 16-bit half),
// then lane L < 16 evaluates the scale of the warp's column L and stores it; the items then
// re-read their elements and take their column's multiplier by shuffle.
template <DType kIn, Format kRecipe, bool kWhole, bool kAmax>
__device__ __forceinline__ void columnwise_1x128(const Fp8BlockArgs& a, const uint32_t* tile, const Tile& t,
                                                 uint32_t& tensor_amax, bool& saw_nonfinite) {
  using M = ColLanes<kIn>;
  using In = InputTraits<kIn>;
  const M m;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  uint32_t col_amax[M::kItems];
#pragma unroll
  for (int n = 0; n < M::kItems; ++n) {
    uint32_t w[16];
    m.read(tile, n, w);
    uint32_t mx = abs_max_words<kIn, 16>(w);  // one maximum per column of the word
    if constexpr (kAmax) note_tensor_amax<kIn, 16>(w, fold_slots<kIn>(mx), tensor_amax, saw_nonfinite);
    mx = shfl_max_xor<kIn>(mx, 4);
    mx = shfl_max_xor<kIn>(mx, 8);
    col_amax[n] = shfl_max_xor<kIn>(mx, 16);
    pass_fence<kIn>();
  }
  // The warp's column L % 16 = (item * kCpw + h) * 4 + pl, held by lane pl.
  const int my_n = (lane & 15) / (4 * M::kCpw), my_h = ((lane & 15) >> 2) % M::kCpw;
  uint32_t mine = 0;
#pragma unroll
  for (int n = 0; n < M::kItems; ++n) {
    const uint32_t v = __shfl_sync(0xFFFFFFFFu, col_amax[n], m.pl);
    if (my_n == n) mine = v;
  }
  const Fp8BlockScale sc = fp8_block_scale(In::widen(slot<kIn>(mine, my_h)), a.pow2);
  if (lane < 16) put_col_scale<kWhole>(a, t, m.column(my_n, my_h), sc.scale);
  const float my_mult = block_mult(sc);
  uint8_t* dst = col_dst<kIn>(a, t, m);
#pragma unroll
  for (int n = 0; n < M::kItems; ++n) {
    uint32_t w[16];
    m.read(tile, n, w);
#pragma unroll
    for (int h = 0; h < M::kCpw; ++h) {
      const float mult = __shfl_sync(0xFFFFFFFFu, my_mult, (n * M::kCpw + h) * 4 + m.pl);
      emit_col16<kIn, kRecipe, kWhole>(a, t, dst + (32 * M::kCpw * n + h) * a.col_ld, m.column(n, h), m.k, w, h,
                                       mult);
    }
    pass_fence<kIn>();
  }
}

// ---- 128x128: the tile's amax over every element (the rowwise mapping), reduced through
// `partial` (one slot per warp) with a barrier; also the tensor amax and the flag.
template <DType kIn>
__device__ __forceinline__ Fp8BlockScale tile_block_scale(const Fp8BlockArgs& a, const uint32_t* tile,
                                                          uint32_t* partial, uint32_t& tensor_amax,
                                                          bool& saw_nonfinite) {
  using S = Smem<kIn>;
  const RowLanes<kIn> m;
  uint32_t mx = 0;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t w[S::kWordsPer16];
    m.read(tile, s, w);
    const uint32_t v = fold_slots<kIn>(abs_max_words<kIn, S::kWordsPer16>(w));
    note_tensor_amax<kIn, S::kWordsPer16>(w, v, tensor_amax, saw_nonfinite);
    mx = max(mx, v);
  }
  mx = warp_max_u32(mx, 1, 16);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = partial[0];
#pragma unroll
  for (int i = 1; i < kWarps; ++i) mx = max(mx, partial[i]);
  return fp8_block_scale(InputTraits<kIn>::widen(mx), a.pow2);
}

// 128x128: the tile's scale into both BLK128 buffers (thread 0), padding at the layout's edge;
// the columnwise one in its matrix's buffer (batched: tile row t.tr of the stacked rows is tile
// row t.batch_tr of matrix t.batch).
template <bool kRow, bool kCol>
__device__ __forceinline__ void store_tile_scale(const Fp8BlockArgs& a, const Tile& t, float s) {
  if (kRow) {
    a.row_scales[formats::blk128_scale_offset(t.tr, t.tc, a.tiles_c)] = s;
    if (t.tc == a.tiles_c - 1)
      for (int kb = a.tiles_c; kb < formats::blk128_scale_ld(a.tiles_c); ++kb)
        a.row_scales[formats::blk128_scale_offset(t.tr, kb, a.tiles_c)] = 0.0f;
  }
  if (kCol) {
    float* scales = a.col_scales + t.batch * a.col_batch_scales;
    scales[formats::blk128_scale_offset(t.tc, t.batch_tr, a.batch_tiles_r)] = s;
    if (t.batch_tr == a.batch_tiles_r - 1)
      for (int kb = a.batch_tiles_r; kb < formats::blk128_scale_ld(a.batch_tiles_r); ++kb)
        scales[formats::blk128_scale_offset(t.tc, kb, a.batch_tiles_r)] = 0.0f;
  }
}

template <DType kIn, Format kRecipe, bool kRow, bool kCol, bool kWhole, bool kGrouped>
__device__ __forceinline__ void quantize_tile(const Fp8BlockArgs& a, const uint32_t* tile, const Tile& t,
                                              uint32_t* partial, uint32_t& tensor_amax, bool& saw_nonfinite) {
  if constexpr (kRecipe == Format::kFp8Block128x128) {
    const Fp8BlockScale sc = tile_block_scale<kIn>(a, tile, partial, tensor_amax, saw_nonfinite);
    if (threadIdx.x == 0) store_tile_scale<kRow, kCol>(a, t, sc.scale);
    if constexpr (kRow) rowwise_tile_scale<kIn, kRecipe, kWhole>(a, tile, t, block_mult(sc));
    if constexpr (kCol) columnwise_tile_scale<kIn, kRecipe, kWhole>(a, tile, t, block_mult(sc));
  } else {
    if constexpr (kRow) rowwise_1x128<kIn, kRecipe, kWhole, true, kGrouped>(a, tile, t, tensor_amax, saw_nonfinite);
    if constexpr (kCol) columnwise_1x128<kIn, kRecipe, kWhole, !kRow>(a, tile, t, tensor_amax, saw_nonfinite);
  }
}

// A position in the grid-stride walk over tiles (row-major), advanced without divisions.
struct Cursor {
  int tr, tc;
};

// Grouped mode, CTA 0: the padded ends (short scans: by warp 0 from its registers; otherwise
// from the shared tables), and the rowwise VEC128 padding rows [rows, round_up(rows, 4)) of
// every K block (dense mode's bottom tiles write those; no grouped tile owns them).
template <bool kRow>
__device__ void grouped_prologue(const Fp8BlockArgs& a, const uint32_t* pends) {
  if (a.num_groups <= kShortScanGroups) {
    if (threadIdx.x < 32)
      store_padded_ends<kDim>(lane_experts<kDim>(a.group_ends, a.num_groups, a.rows), a.group_ends, a.num_groups,
                              a.rows, a.padded_group_ends);
  } else {
    for (int g = static_cast<int>(threadIdx.x); g < a.num_groups; g += kThreads)
      a.padded_group_ends[g] = static_cast<int32_t>(pends[g]);
  }
  if constexpr (kRow) {
    const int pad = static_cast<int>(formats::vec128_scale_ld(a.rows) - a.rows);  // 0..3
    for (int i = static_cast<int>(threadIdx.x); i < a.tiles_c * pad; i += kThreads)
      a.row_scales[formats::vec128_scale_offset(a.rows + i % pad, i / pad, a.rows)] = 0.0f;
  }
}

template <DType kIn, Format kRecipe, bool kRow, bool kCol, bool kGrouped, bool kGather>
__global__ void __launch_bounds__(kThreads, 3) fp8_block_quantize_kernel(const __grid_constant__ Fp8BlockArgs a) {
  using S = Smem<kIn>;
  constexpr bool kBatched = kRecipe == Format::kFp8Block128x128;
  // S::kStages tiles; grouped with a long scan: then the clamped ends and the padded ends
  // (num_groups words each).
  extern __shared__ uint4 fp8_block_smem[];
  __shared__ uint32_t partial[kWarps];  // 128x128: per-warp tile amax
  __shared__ uint32_t warp_totals[kGrouped ? 32 : 1];
  uint32_t* const stages = reinterpret_cast<uint32_t*>(fp8_block_smem);
  uint32_t* const offsets = kGrouped ? stages + S::kStages * S::kWords : nullptr;
  if constexpr (kGrouped) {
    if (a.num_groups > kShortScanGroups)
      grouped_offsets<kThreads, kDim>(a.group_ends, a.num_groups, a.rows, offsets, offsets + a.num_groups,
                                      warp_totals);
    if (blockIdx.x == 0) grouped_prologue<kRow>(a, offsets + a.num_groups);
  }

  uint32_t tensor_amax = 0;  // magnitude bits of the input type
  bool saw_nonfinite = false;
  const bool whole_stores = a.row_align == 16 && a.col_align == 16;
  const int grid = static_cast<int>(gridDim.x), block = static_cast<int>(blockIdx.x);
  const Cursor step{grid / a.tiles_c, grid % a.tiles_c};
  auto advance = [&](Cursor& c) {
    c.tr += step.tr, c.tc += step.tc;
    if (c.tc >= a.tiles_c) c.tc -= a.tiles_c, ++c.tr;
  };
  Cursor cur{block / a.tiles_c, block % a.tiles_c};
  Cursor ahead = cur;  // the next tile to copy
  // Grouped: each stage's segment, looked up once by the copy and read back by the quantize
  // (shared memory rather than registers held across the quantize).
  __shared__ Segment stage_segments[kGrouped ? S::kStages : 1];
  auto fetch = [&](int stage) {
    if (ahead.tr < a.tiles_r) {
      Segment seg{};
      if constexpr (kGrouped) {
        seg = tile_segment(a, ahead.tr, offsets);
        if (threadIdx.x == 0) stage_segments[stage] = seg;
      }
      fetch_tile<kIn, kGather>(a, make_tile<kGrouped, kBatched>(a, ahead.tr, ahead.tc, seg),
                               stages + stage * S::kWords);
    }
    cp_async_commit();
    advance(ahead);
  };
  // After a barrier that follows the stage's fetch.
  auto quantize = [&](int stage) {
    const uint32_t* tile = stages + stage * S::kWords;
    const Tile t = make_tile<kGrouped, kBatched>(a, cur.tr, cur.tc, kGrouped ? stage_segments[stage] : Segment{});
    if (t.whole && whole_stores)
      quantize_tile<kIn, kRecipe, kRow, kCol, true, kGrouped>(a, tile, t, partial, tensor_amax, saw_nonfinite);
    else
      quantize_tile<kIn, kRecipe, kRow, kCol, false, kGrouped>(a, tile, t, partial, tensor_amax, saw_nonfinite);
  };

  fetch(0);
  for (int stage = 0; cur.tr < a.tiles_r; advance(cur)) {
    cp_async_wait<0>();  // this thread's copies of the current tile (the only group in flight)
    // The tile has landed for every thread, and every thread is done with the previous one.
    __syncthreads();
    if constexpr (S::kStages == 2) {
      fetch(stage ^ 1);  // the next tile goes where the previous one was
      quantize(stage);
      stage ^= 1;
    } else {
      quantize(0);
      __syncthreads();  // the one stage is free once every thread has read it
      fetch(0);
    }
  }
  cp_async_wait<0>();

  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (a.amax != nullptr) {
    const uint32_t bits = warp_max_u32(InputTraits<kIn>::widen(tensor_amax), 1, 16);
    if (lane == 0 && bits != 0) raise_amax(a.amax, bits);
  }
  if (a.nonfinite != nullptr && __any_sync(0xFFFFFFFFu, saw_nonfinite) && lane == 0) *a.nonfinite = 1;
}

}  // namespace
}  // namespace blockscale::quant::detail
