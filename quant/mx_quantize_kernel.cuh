// MX quantize: MXFP8 (E4M3, E5M2) and MXFP4 (E2M1); 1x32 blocks, E8M0 scales, ceil or floor
// rounding, of a row-major bf16 / fp16 / fp32 matrix: ONE read of the input writes the rowwise
// copy (rows x cols, blocks along cols), the columnwise copy (cols x rows, the transpose, blocks
// along the input's rows), or both, with their scales in the swizzled 128x4 layout (padding
// written as 0). Two modes of the same kernel (the `kGrouped` template argument):
//   dense  : the matrix as it is (quant/quantize.h run()).
//   grouped: MoE tokens sorted by expert (run() of GroupedQuantizeProblem): the rowwise copy is
//            the dense one; the columnwise copy is quantized in the padded row space of
//            quant/grouped_offsets.cuh (each expert padded with zero rows to a multiple of 32, zero
//            rows up to the capacity), and the kernel writes the padded ends. The offsets are read
//            on the device (no host synchronisation): up to kShortScanGroups experts every warp
//            scans group_ends in registers for each tile (one CTA per tile on large inputs, as
//            dense), more experts are scanned into shared memory once per CTA (persistent grid);
//            either maps each tile's four 32-row segments to input rows.
//
// Must match, byte for byte: formats::quantize() (formats/mx_quantize.cpp; grouped:
// formats::quantize_grouped_columnwise) followed by formats::pack_swizzled_scales(). Elements:
// x * 2^-e in fp32 (formats::mul_rn), then
//   MXFP8: cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (or formats::encode_minifloat itself);
//   MXFP4: software E2M1 encoders (quant/mx_device.cuh) on EVERY architecture: bf16 input two
//          elements at a time with bf16 fmas (encode16_e2m1_bf16; columnwise, the two columns of a
//          word together: encode16x2_e2m1_bf16), fp16 with packed f16 adds, fp32 and tiny or huge
//          scales with e2m1_code. The E2M1 cvt exists only on sm_100a, so the sm_90a and
//          sm_100a images run the same code and write identical bytes by construction;
// the scale: formats::mx_scale_exponent as integer steps (mx_block_scale). tests/quant checks the
// encoders and the scale against formats on every finite fp32 pattern.
//
// Tiling: a CTA of 256 threads owns a 128 x 128 input tile at a time (a grid-stride loop over
// tiles, the grid sized from the SM count and the occupancy). The tile matches one 512-byte chunk
// of each swizzled scale buffer (128 rows x 4 blocks), so every tile writes exactly one chunk of
// each, padding included, staged in shared memory and stored as 32 x 16 bytes.
//   load      : cp.async (16 bytes, zero-filled past the matrix) straight into a shared tile;
//               16-bit input double-buffers (tile i+1 is in flight while tile i is processed),
//               fp32 (64 KB tiles) single-buffers. Consecutive lanes copy consecutive 16-byte
//               granules (a warp reads 512 contiguous bytes per instruction). The shared tile is
//               32-bit words in 16-byte granules, XOR-swizzled by the row's 16-row chunk and the
//               granule's half (quarter) of the row, so the copies, the row reads (8 lanes, one
//               row) and the column reads (8 lanes, 8 row chunks) are free of bank conflicts.
//   rowwise   : thread (warp w, lane l) takes 16 consecutive elements of rows 32s + 4w + l/8
//               (s = 0..3), columns 16 * (l % 8); amax over a 32-column block = 2 lanes (one xor
//               shuffle); 16 codes as one 16-byte (E2M1: 8-byte) store.
//   columnwise: a thread reads 16 rows of one word column (2 columns of 16-bit input); block amax
//               = 2 lanes (one xor shuffle); 16 codes per column as one 16-byte (8-byte) store.
//   amax      : 16-bit input: max.u16x2 on packed magnitudes, widened once per block.
//   Tiles wholly inside the matrix (with aligned pointers) take a path without bounds checks.
//   One barrier per tile: the scale chunks are double-buffered and stored one tile late.
// The grouped mode's host side: quant/mx_grouped_quantize.cu; the host side that picks an
// instantiation: quant/mx_quantize_dispatch.cuh. Included by each mode's file, which instantiates
// its own kernels (the anonymous namespace keeps them in that file).
#pragma once

#include <cstdint>

#include "quant/device_common.cuh"   // defines: InputTraits, ElementEncoder, cp.async
#include "quant/mx_device.cuh"       // defines: MxScale, mx_block_scale, e2m1_code, encode16
#include "quant/grouped_offsets.cuh"  // defines: grouped_offsets, grouped_segment, lane_experts
#include "quant/mx_quantize.h"       // defines: GridPolicy

namespace blockscale::quant::detail {

struct MxParams {
  const void* x;
  int64_t rows, cols, ld;
  int64_t tile_rows;      // rows the tiles walk: rows, or the capacity (grouped with columnwise)
  int64_t row_bytes;      // rowwise data row stride: cols, or ceil(cols / 2) (E2M1)
  int64_t col_row_bytes;  // columnwise data row stride: codes of tile_rows rows
  uint8_t* row_data;
  uint8_t* row_scales;
  uint8_t* col_data;
  uint8_t* col_scales;
  float* amax;
  int* nonfinite;
  int row_tiles, col_tiles;  // row_tiles = ceil(tile_rows / 128); both 0 for an empty matrix
  MxScaleRule rule;      // formats::mx_scale_exponent's constants for the recipe and rounding
  bool vec_load;         // x and ld * element size 16-byte aligned: cp.async
  int row_store_align;   // 16, 8, 4 or 1: widest rowwise data store (pointer and row bytes allow)
  bool vec_col_store;    // columnwise data: 16 codes per store (pointer and row stride allow)
  bool vec_scale_store;  // both scale buffers 16-byte aligned
  bool word_scale_store; // rowwise scales 4-byte aligned (grouped: padding rows zeroed by words)
  // Grouped mode.
  const int32_t* group_ends;
  int32_t* padded_group_ends;
  int num_groups;
  // Gather (the kGather template argument): quantized row r reads input row row_index[r] of the
  // input_rows rows of x; an index outside [0, input_rows) reads a zero row.
  const int32_t* row_index;
  int64_t input_rows;
  // Batched (quant::BatchedQuantizeProblem): the rows are matrices of batch_tiles whole row tiles
  // each, stacked; the columnwise copy of matrix b is its own transpose at col_data + b *
  // col_batch_bytes (col_row_bytes: one matrix's rows), its scales at col_scales + b *
  // col_batch_scale_bytes. 0: one matrix. The rowwise copy of the stack is already the matrices'.
  int batch_tiles;
  int64_t col_batch_bytes, col_batch_scale_bytes;
  GridPolicy grid_policy;  // host side only: how many CTAs the launch asks for
};

namespace {

using formats::Direction;
using formats::Format;

constexpr int kTile = 128;     // tile rows = tile columns
constexpr int kThreads = 256;  // 8 warps
constexpr int kChunkBytes = 512;
constexpr uint32_t kFullMask = 0xFFFFFFFFu;

// The matrix (batched) that row tile tr belongs to.
__device__ __forceinline__ int tile_batch(const MxParams& p, int tr) {
  return p.batch_tiles > 0 ? tr / p.batch_tiles : 0;
}

// The shared tile of one input type: 128 rows of 32-bit words, in 16-byte granules.
template <DType kIn>
struct TileShape {
  static constexpr int kBytes = InputTraits<kIn>::kBytes;
  static constexpr int kWordsPerRow = kTile * kBytes / 4;   // 64 or 128
  static constexpr int kGranulesPerRow = kWordsPerRow / 4;  // 16 or 32
  static constexpr int kHalfMask = kGranulesPerRow / 8 - 1; // granule bits above the low 3: 1 or 3
  static constexpr int kWords = kTile * kWordsPerRow;
  static constexpr int kVecsPerRow = kBytes;                // 16-byte vectors in 16 elements
  static constexpr int kStages = kBytes == 2 ? 2 : 1;
  // The copy's thread mapping (load_tile).
  static constexpr int kElems = 16 / kBytes;                                      // per granule
  static constexpr int kLanesPerRow = kGranulesPerRow < 32 ? kGranulesPerRow : 32;
  static constexpr int kRowsPerPass = (kThreads / 32) * (32 / kLanesPerRow);     // 16 or 8
  static constexpr int kPasses = kTile / kRowsPerPass;                            // 8 or 16
  static constexpr int kPassesPerSegment = 32 / kRowsPerPass;                     // 2 or 4
};

// Word offset of granule g of tile row r. The XOR changes the low 3 bits of g by the row's
// 16-row chunk and by g's higher bits: 8 lanes reading 8 consecutive granule pairs (quads) of a
// row, or the same granule of 8 row chunks, hit 8 distinct bank groups.
template <DType kIn>
__device__ __forceinline__ int granule_word(int r, int g) {
  using S = TileShape<kIn>;
  return r * S::kWordsPerRow + 4 * (g ^ (((r >> 4) & 7) ^ ((g >> 3) & S::kHalfMask)));
}

// Tile coordinates, advanced over a grid-stride loop without divisions.
struct TileIndex {
  int tr, tc;
};

__device__ __forceinline__ TileIndex advance(TileIndex t, TileIndex step, int col_tiles) {
  t.tr += step.tr;
  t.tc += step.tc;
  if (t.tc >= col_tiles) t.tc -= col_tiles, ++t.tr;
  return t;
}

// One tile's position and how much of it lies inside the matrix (the padded row space in grouped
// mode with a columnwise copy).
struct TilePos {
  int tr, tc;
  int64_t r0, c0;
  int rows_in, cols_in;  // rows / columns of the tile inside (1..128)
  bool inside;           // rows_in == cols_in == 128 (grouped: and every segment holds 32 rows)
};

__device__ __forceinline__ TilePos tile_pos(const MxParams& p, TileIndex t) {
  TilePos tp;
  tp.tr = t.tr;
  tp.tc = t.tc;
  tp.r0 = int64_t{t.tr} * kTile;
  tp.c0 = int64_t{t.tc} * kTile;
  tp.rows_in = static_cast<int>(min(int64_t{kTile}, p.tile_rows - tp.r0));
  tp.cols_in = static_cast<int>(min(int64_t{kTile}, p.cols - tp.c0));
  tp.inside = tp.rows_in == kTile && tp.cols_in == kTile;
  return tp;
}

// Grouped mode: lane l holds segment l % 4 of a tile (every lane computes one, no divergence).
struct LaneSegment {
  Segment seg;
  bool all_full;  // every segment of the tile holds 32 input rows
};

// Short scans: the warp scans group_ends for this tile (grouped_offsets.cuh: lane_experts);
// otherwise a binary search of the CTA's tables in shared memory.
__device__ __forceinline__ LaneSegment lane_segment(const MxParams& p, TileIndex t, const uint32_t* ends,
                                                    const uint32_t* pends) {
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t pr = static_cast<uint32_t>(t.tr) * kTile + 32u * (lane & 3u);
  const Segment s =
      p.num_groups <= kShortScanGroups
          ? lane_experts_segment<32, 4>(lane_experts<32>(p.group_ends, p.num_groups, p.rows), p.group_ends,
                                        p.num_groups, p.rows, pr)
          : grouped_segment(pr, ends, pends, p.num_groups);
  return {s, __all_sync(kFullMask, s.valid == 32u) != 0};
}

// One 16-byte granule (8 or 4 elements) of row gr, columns gc.. of the input, by scalar loads
// (zeros outside the matrix): the path for inputs whose pointer or stride rules out cp.async.
template <DType kIn>
__device__ __forceinline__ uint4 load_granule_scalar(const MxParams& p, int64_t gr, int64_t gc,
                                                     int64_t row_limit) {
  constexpr int kBytes = InputTraits<kIn>::kBytes;
  uint32_t w[4] = {0, 0, 0, 0};
  if (gr >= 0 && gr < row_limit) {
    const char* src = static_cast<const char*>(p.x) + (gr * p.ld + gc) * kBytes;
#pragma unroll
    for (int e = 0; e < 16 / kBytes; ++e) {
      if (gc + e >= p.cols) break;
      if constexpr (kBytes == 2)
        w[e / 2] |= static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(src)[e]) << (16 * (e % 2));
      else
        w[e] = reinterpret_cast<const uint32_t*>(src)[e];
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Starts the copy of a tile into `stage`. The copy's own thread mapping: consecutive lanes take
// consecutive 16-byte granules of a row (a warp instruction reads 512 contiguous bytes: two rows
// of 16-bit input, one of fp32); the compute mappings read the tile after a barrier.
template <DType kIn>
__device__ __forceinline__ void load_tile(const MxParams& p, const TilePos& tp, uint32_t* stage) {
  using S = TileShape<kIn>;
  constexpr int kBytes = S::kBytes;
  const int tid = static_cast<int>(threadIdx.x);
  const int g = tid % S::kLanesPerRow, row0 = tid / S::kLanesPerRow;
  const char* src = static_cast<const char*>(p.x) + ((tp.r0 + row0) * p.ld + tp.c0 + S::kElems * g) * kBytes;
  const int64_t pass_stride = S::kRowsPerPass * p.ld * kBytes;
  if (p.vec_load && tp.inside) {
    // Row kRowsPerPass * s + row0 (row0 < kRowsPerPass, which divides 16) lies in 16-row chunk
    // (kRowsPerPass * s) >> 4, a compile-time swizzle key: each destination is pass 0's XOR a
    // constant plus a constant, not a fresh granule_word.
    const uint32_t off0 = static_cast<uint32_t>(granule_word<kIn>(row0, g));  // key 0
#pragma unroll
    for (int s = 0; s < S::kPasses; ++s) {
      const uint32_t key = static_cast<uint32_t>(((S::kRowsPerPass * s) >> 4) & 7);
      cp_async_16B(stage + ((off0 ^ (4u * key)) + s * S::kRowsPerPass * S::kWordsPerRow), src + s * pass_stride, 16);
    }
  } else if (p.vec_load) {
    const int bytes_in_row = max(0, min(S::kElems, tp.cols_in - S::kElems * g)) * kBytes;
#pragma unroll
    for (int s = 0; s < S::kPasses; ++s) {
      const int rt = S::kRowsPerPass * s + row0;
      const int bytes = rt < tp.rows_in ? bytes_in_row : 0;
      cp_async_16B(stage + granule_word<kIn>(rt, g),
                   bytes > 0 ? static_cast<const void*>(src + s * pass_stride) : p.x, bytes);
    }
  } else {
#pragma unroll 1
    for (int s = 0; s < S::kPasses; ++s) {
      const int rt = S::kRowsPerPass * s + row0;
      *reinterpret_cast<uint4*>(stage + granule_word<kIn>(rt, g)) =
          load_granule_scalar<kIn>(p, tp.r0 + rt, tp.c0 + S::kElems * g, p.rows);
    }
  }
}

// The grouped copy of a tile of the padded row space: segment k (tile rows 32k..32k+31) reads
// `valid` input rows from row `src`, zeros after them. `ls`: this lane's segment (lane % 4).
template <DType kIn>
__device__ __forceinline__ void load_tile_grouped(const MxParams& p, const TilePos& tp, const LaneSegment& ls,
                                                  uint32_t* stage) {
  using S = TileShape<kIn>;
  constexpr int kBytes = S::kBytes;
  const int tid = static_cast<int>(threadIdx.x);
  const int g = tid % S::kLanesPerRow, row0 = tid / S::kLanesPerRow;  // row0 < kRowsPerPass <= 32
  const int64_t pass_stride = S::kRowsPerPass * p.ld * kBytes;
  const bool full = p.vec_load && ls.all_full && tp.cols_in == kTile;
  const int bytes_in_row = max(0, min(S::kElems, tp.cols_in - S::kElems * g)) * kBytes;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t seg_src = __shfl_sync(kFullMask, ls.seg.src, k);
    const uint32_t seg_valid = __shfl_sync(kFullMask, ls.seg.valid, k);
    const char* src = static_cast<const char*>(p.x) +
                      ((int64_t{seg_src} + row0) * p.ld + tp.c0 + S::kElems * g) * kBytes;
#pragma unroll
    for (int s2 = 0; s2 < S::kPassesPerSegment; ++s2) {
      const int rs = S::kRowsPerPass * s2 + row0;  // row in the segment
      uint32_t* dst = stage + granule_word<kIn>(32 * k + rs, g);
      if (full) {
        cp_async_16B(dst, src + s2 * pass_stride, 16);
      } else if (p.vec_load) {
        const int bytes = rs < static_cast<int>(seg_valid) ? bytes_in_row : 0;
        cp_async_16B(dst, bytes > 0 ? static_cast<const void*>(src + s2 * pass_stride) : p.x, bytes);
      } else {
        const int64_t gr = rs < static_cast<int>(seg_valid) ? int64_t{seg_src} + rs : p.rows;  // p.rows: zeros
        *reinterpret_cast<uint4*>(dst) = load_granule_scalar<kIn>(p, gr, tp.c0 + S::kElems * g, p.rows);
      }
    }
  }
}

// Gather: the input row quantized row r reads, or -1 (a zero row) for an index outside the input.
__device__ __forceinline__ int64_t gathered_row(const MxParams& p, int64_t r) {
  const int32_t src = __ldg(p.row_index + r);
  return src >= 0 && src < p.input_rows ? src : -1;
}

// The copy of a tile whose rows are gathered through row_index (dense tiles, or the grouped tiles
// of the padded row space). The copy's thread mapping is load_tile's, so pass s covers tile row
// kRowsPerPass * s + row0, which lies in segment s / kPassesPerSegment. Every pass's row index
// is fetched first (independent loads, one wait), then the granules are copied.
template <DType kIn, bool kGroupedTiles>
__device__ __forceinline__ void load_tile_gathered(const MxParams& p, const TilePos& tp, const LaneSegment& ls,
                                                   uint32_t* stage) {
  using S = TileShape<kIn>;
  constexpr int kBytes = S::kBytes;
  const int tid = static_cast<int>(threadIdx.x);
  const int g = tid % S::kLanesPerRow, row0 = tid / S::kLanesPerRow;
  int64_t src[S::kPasses];
#pragma unroll
  for (int s = 0; s < S::kPasses; ++s) {
    const int rt = S::kRowsPerPass * s + row0;
    bool row_ok;
    int64_t sorted;
    if constexpr (kGroupedTiles) {
      constexpr int kPerSeg = S::kPassesPerSegment;
      const uint32_t seg_src = __shfl_sync(kFullMask, ls.seg.src, s / kPerSeg);
      const uint32_t seg_valid = __shfl_sync(kFullMask, ls.seg.valid, s / kPerSeg);
      const int rs = rt - 32 * (s / kPerSeg);
      row_ok = rs < static_cast<int>(seg_valid);
      sorted = int64_t{seg_src} + rs;
    } else {
      row_ok = rt < tp.rows_in;
      sorted = tp.r0 + rt;
    }
    src[s] = row_ok ? gathered_row(p, sorted) : -1;
  }
  const int64_t col = tp.c0 + S::kElems * g;
  const int bytes_in_row = max(0, min(S::kElems, tp.cols_in - S::kElems * g)) * kBytes;
#pragma unroll
  for (int s = 0; s < S::kPasses; ++s) {
    uint32_t* dst = stage + granule_word<kIn>(S::kRowsPerPass * s + row0, g);
    if (p.vec_load) {
      const int bytes = src[s] >= 0 ? bytes_in_row : 0;
      const char* from = static_cast<const char*>(p.x) + (src[s] * p.ld + col) * kBytes;
      cp_async_16B(dst, bytes > 0 ? static_cast<const void*>(from) : p.x, bytes);
    } else {
      *reinterpret_cast<uint4*>(dst) = load_granule_scalar<kIn>(p, src[s], col, p.input_rows);
    }
  }
}

// Stores the first `n` (<= kBytes) bytes of 16 codes at dst; align: the widest store the pointer
// and row stride allow.
template <int kBytes, typename Vec>
__device__ __forceinline__ void store_codes_partial(uint8_t* dst, const Vec& v, int n, int align) {
  if (n <= 0) return;
  if (align >= kBytes && n >= kBytes) {
    *reinterpret_cast<Vec*>(dst) = v;
    return;
  }
  if constexpr (kBytes == 16) {
    const uint4 u = v;
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (align >= 8 && n >= 8 * h + 8) {
        *reinterpret_cast<uint2*>(dst + 8 * h) = make_uint2(words[2 * h], words[2 * h + 1]);
      } else {
#pragma unroll
        for (int i = 8 * h; i < 8 * h + 8; ++i)
          if (i < n) dst[i] = static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kBytes; ++i)
      if (i < n) dst[i] = vec_byte(v, i);
  }
}

// Bytes of `n` codes (E2M1: two per byte).
template <Format kRecipe>
__device__ __forceinline__ int code_bytes(int n) {
  return MxCodes<kRecipe>::kFp4 ? (n + 1) >> 1 : n;
}

// Rowwise: this thread's 16 elements of tile row rt (columns 16q..16q+15), from word `word` of the
// tile on (granule_word(rt, kVecsPerRow * q); the row's next granules are that XOR 4, 8, 12); lanes
// q and q ^ 1 hold one 32-column block. kFull: the tile is inside the matrix and stores are
// vector-aligned.
// row_ok: the row exists (dense: rt < rows_in; grouped: a token row of the segment).
//   kWordScale == false: the scale byte goes to the staged chunk (dense tiles);
//   kWordScale == true : the row's 4 scale bytes (blocks 4 * tc .. 4 * tc + 3, contiguous in the
//                        swizzled layout) go to scale_word directly, and nothing is stored for a
//                        row that does not exist, kFull or not (grouped tiles).
template <DType kIn, Format kRecipe, ElementEncoder kEnc, bool kFull, bool kWordScale>
__device__ __forceinline__ void quantize_row16(const MxParams& p, const uint32_t* tile, const TilePos& tp,
                                               int rt, uint32_t word, int q, bool row_ok, uint8_t* dst,
                                               uint8_t* scale_chunk, uint8_t* scale_word, uint32_t& tensor_amax,
                                               bool& saw_nonfinite) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  using C = MxCodes<kRecipe>;
  constexpr int kWords = 4 * In::kBytes;  // words holding 16 elements
  uint32_t w[kWords];
#pragma unroll
  for (int j = 0; j < S::kVecsPerRow; ++j) {
    const uint4 v = *reinterpret_cast<const uint4*>(tile + (word ^ (4u * j)));
    w[4 * j] = v.x, w[4 * j + 1] = v.y, w[4 * j + 2] = v.z, w[4 * j + 3] = v.w;
  }
  uint32_t m = fold_slots<kIn>(abs_max_words<kIn, kWords>(w));
  note_tensor_amax<kIn, kWords>(w, m, tensor_amax, saw_nonfinite);
  m = max(m, __shfl_xor_sync(kFullMask, m, 1));
  const MxScale s = mx_block_scale(In::widen(m), p.rule);
  typename C::Vec out;
  if constexpr (C::kFp4 && kIn == DType::kBf16) {
    out = encode16_e2m1_bf16(w, s);  // w: 8 pairs of consecutive columns
  } else {
    float f[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] = In::kBytes == 2 ? In::elem(w[i / 2], i % 2) : In::elem(w[i], 0);
    if constexpr (C::kFp4 && kIn == DType::kF16) out = encode16_e2m1_fp16(f, s.inv);
    else out = encode16<kRecipe, kEnc>(f, s.inv);
  }
  if (s.nonfinite) out = zero_vec(out);

  if (kFull) {
    if (!kWordScale || row_ok) *reinterpret_cast<typename C::Vec*>(dst) = out;
  } else if (row_ok) {
    const int n = tp.cols_in - 16 * q;  // elements of the 16 inside the matrix
    if (p.row_store_align >= C::kBytes && n >= 16) *reinterpret_cast<typename C::Vec*>(dst) = out;
    else store_codes_partial<C::kBytes>(dst, out, min(C::kBytes, code_bytes<kRecipe>(n)), p.row_store_align);
  }
  const int j = q >> 1;
  if constexpr (!kWordScale) {
    // Both lanes of the block write its scale (the same byte); 0 outside the matrix (padding).
    const bool inside = kFull || (row_ok && 32 * j < tp.cols_in);
    scale_chunk[(rt & 31) * 16 + (rt >> 5) * 4 + j] = static_cast<uint8_t>(inside ? s.code : 0u);
  } else {
    // The row's 4 scale bytes (0 for padding blocks) gathered from lanes q = 0, 2, 4, 6 into one word
    // (every lane shuffles), stored by lane q = 0: one store per row instead of four byte stores.
    uint32_t v = ((kFull || 32 * j < tp.cols_in) ? s.code : 0u) << (8 * j);
    v |= __shfl_xor_sync(kFullMask, v, 2);
    v |= __shfl_xor_sync(kFullMask, v, 4);
    if (q == 0 && row_ok) {
      if (p.word_scale_store) {
        *reinterpret_cast<uint32_t*>(scale_word) = v;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) scale_word[i] = static_cast<uint8_t>(v >> (8 * i));
      }
    }
  }
}

// Columnwise: word column 4g + pl of the shared tile (granule g), rows 16k..16k+15; lanes k and
// k ^ 1 hold one 32-row block.
template <DType kIn, Format kRecipe, ElementEncoder kEnc, bool kFull, bool kTensorAmax>
__device__ __forceinline__ void quantize_col16(const MxParams& p, const uint32_t* tile, const TilePos& tp,
                                               uint8_t* col_base, int g, int pl, int k, uint8_t* scale_chunk,
                                               uint32_t& tensor_amax, bool& saw_nonfinite) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  using C = MxCodes<kRecipe>;
  constexpr int kColsPerWord = 4 / In::kBytes;
  const uint32_t* col = tile + granule_word<kIn>(16 * k, g) + pl;  // rows 16k.. share the swizzle
  uint32_t w[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = col[i * S::kWordsPerRow];
  uint32_t m = abs_max_words<kIn, 16>(w);  // per column (16-bit: per half)
  if (kTensorAmax) note_tensor_amax<kIn, 16>(w, fold_slots<kIn>(m), tensor_amax, saw_nonfinite);
  m = shfl_max_xor<kIn>(m, 1);
  // Column h's codes (zeros for a non-finite block) and its scale byte.
  auto store = [&](int h, const MxScale& s, typename C::Vec out) {
    const int ct = (4 * g + pl) * kColsPerWord + h;  // tile column
    if (s.nonfinite) out = zero_vec(out);

    uint8_t* dst = col_base + ct * p.col_row_bytes + k * C::kBytes;  // rows 16k.. of stored row c0 + ct
    if (kFull) {
      *reinterpret_cast<typename C::Vec*>(dst) = out;
    } else if (ct < tp.cols_in) {
      store_codes_partial<C::kBytes>(dst, out, min(C::kBytes, code_bytes<kRecipe>(tp.rows_in - 16 * k)),
                                     p.vec_col_store ? C::kBytes : 1);
    }
    // Both lanes of the block write its scale; 0 outside the matrix (padding).
    const bool inside = kFull || (ct < tp.cols_in && 32 * (k >> 1) < tp.rows_in);
    scale_chunk[(ct & 31) * 16 + (ct >> 5) * 4 + (k >> 1)] = static_cast<uint8_t>(inside ? s.code : 0u);
  };
  if constexpr (C::kFp4 && kIn == DType::kBf16) {  // both columns at once, from the words as read
    const MxScale s0 = mx_block_scale(In::widen(slot<kIn>(m, 0)), p.rule);
    const MxScale s1 = mx_block_scale(In::widen(slot<kIn>(m, 1)), p.rule);
    uint2 out[2];
    encode16x2_e2m1_bf16(w, s0, s1, out);
    store(0, s0, out[0]);
    store(1, s1, out[1]);
  } else {
#pragma unroll
    for (int h = 0; h < kColsPerWord; ++h) {
      const MxScale s = mx_block_scale(In::widen(slot<kIn>(m, h)), p.rule);
      float f[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i], h);
      if constexpr (C::kFp4 && kIn == DType::kF16) store(h, s, encode16_e2m1_fp16(f, s.inv));
      else store(h, s, encode16<kRecipe, kEnc>(f, s.inv));
    }
  }
}

// The row and column work of one tile in shared memory. kGroupedTiles: the tile lies in the
// padded row space of grouped mode; `ls` holds this lane's segment.
template <DType kIn, Format kRecipe, bool kRow, bool kCol, ElementEncoder kEnc, bool kFull, bool kGroupedTiles>
__device__ __forceinline__ void quantize_tile(const MxParams& p, const uint32_t* tile, const TilePos& tp,
                                              const LaneSegment& ls, uint8_t* row_chunk, uint8_t* col_chunk,
                                              uint32_t& tensor_amax, bool& saw_nonfinite) {
  using C = MxCodes<kRecipe>;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  if constexpr (kRow) {
    const int q = lane & 7, row_in_pass = 4 * (tid >> 5) + (lane >> 3);
    const int64_t col_byte = (tp.c0 + 16 * q) * C::kBytes / 16;
    // Tile row 32s + row_in_pass lies in 16-row chunk 2s + row_in_pass / 16: its words are row
    // row_in_pass's with the granule XOR 2s (granule_word), 32s rows on.
    const uint32_t word0 = static_cast<uint32_t>(granule_word<kIn>(row_in_pass, TileShape<kIn>::kVecsPerRow * q));
    auto word = [&](int s) { return (word0 ^ (8u * s)) + 32u * s * TileShape<kIn>::kWordsPerRow; };
    if constexpr (!kGroupedTiles) {
      uint8_t* dst = p.row_data + (tp.r0 + row_in_pass) * p.row_bytes + col_byte;
      const int64_t pass_stride = 32 * p.row_bytes;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int rt = 32 * s + row_in_pass;
        quantize_row16<kIn, kRecipe, kEnc, kFull, false>(p, tile, tp, rt, word(s), q, rt < tp.rows_in,
                                                         dst + s * pass_stride, row_chunk, nullptr, tensor_amax,
                                                         saw_nonfinite);
      }
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
      // sm_100a: ptxas spills 4 bytes in the FP8 kernels with this loop unrolled.
#pragma unroll(C::kFp4 ? 4 : 1)
#else
#pragma unroll
#endif
      for (int s = 0; s < 4; ++s) {
        const uint32_t seg_src = __shfl_sync(kFullMask, ls.seg.src, s);
        const uint32_t seg_valid = __shfl_sync(kFullMask, ls.seg.valid, s);
        const int64_t r = int64_t{seg_src} + row_in_pass;  // the dense row
        // Its 4 scale bytes of this tile's column range, in the swizzled layout (col_tiles = the
        // scale matrix's 4-column tiles).
        uint8_t* scale_word = p.row_scales + ((r >> 7) * p.col_tiles + tp.tc) * kChunkBytes + (r & 31) * 16 +
                              ((r >> 5) & 3) * 4;
        quantize_row16<kIn, kRecipe, kEnc, kFull, true>(p, tile, tp, 32 * s + row_in_pass, word(s), q,
                                                        row_in_pass < static_cast<int>(seg_valid),
                                                        p.row_data + r * p.row_bytes + col_byte, nullptr, scale_word,
                                                        tensor_amax, saw_nonfinite);
      }
    }
  }
  if constexpr (kCol) {
    constexpr int kItems = TileShape<kIn>::kWordsPerRow * 8;  // (word column, 16-row chunk) pairs
    // The tile's corner in the columnwise copy of its matrix (batched: matrix b's own transpose),
    // computed once per tile.
    const int b = tile_batch(p, tp.tr);
    const int64_t r0 = tp.r0 - int64_t{b} * p.batch_tiles * kTile;  // a multiple of 128
    uint8_t* const col_base = p.col_data + b * p.col_batch_bytes + tp.c0 * p.col_row_bytes + r0 / 16 * C::kBytes;
#pragma unroll
    for (int n = 0; n < kItems / kThreads; ++n)
      quantize_col16<kIn, kRecipe, kEnc, kFull, !kRow>(p, tile, tp, col_base, (tid + n * kThreads) >> 5, lane >> 3,
                                                        lane & 7, col_chunk, tensor_amax, saw_nonfinite);
  }
}

// 512 staged scale bytes -> chunk `chunk` of a swizzled scale buffer, by 32 threads.
__device__ __forceinline__ void store_scale_chunk(const MxParams& p, uint8_t* dst_buffer, int64_t chunk,
                                                  const uint8_t* staged, int t) {
  uint8_t* dst = dst_buffer + chunk * kChunkBytes + 16 * t;
  const uint4 v = reinterpret_cast<const uint4*>(staged)[t];
  if (p.vec_scale_store) {
    *reinterpret_cast<uint4*>(dst) = v;
  } else {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) dst[i] = static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
  }
}

// kGrouped: the grouped mode with a columnwise copy (the tiles walk the padded row space, see the
// file comment; CTA 0 writes the padded ends). A rowwise-only grouped run is the dense kernel plus
// launch_grouped_offsets.
// kGather: the input rows are read through p.row_index (load_tile_gathered); nothing else changes.
template <DType kIn, Format kRecipe, bool kRow, bool kCol, ElementEncoder kEnc, bool kGrouped, bool kGather>
__global__ void __launch_bounds__(kThreads, 3) mx_quantize_kernel(const __grid_constant__ MxParams p) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  static_assert(kCol || !kGrouped, "the grouped tiles carry a columnwise copy");
  constexpr bool kGroupedTiles = kGrouped;

  extern __shared__ uint4 shared_tiles[];  // S::kStages tiles of S::kWords words (grouped: + offsets)
  // Scale chunks staged per tile, double-buffered: tile i's are stored to global memory after
  // the next barrier, while tile i+1 is processed (one barrier per tile).
  __shared__ alignas(16) uint8_t row_chunks[kGroupedTiles ? 1 : 2][kGroupedTiles ? 16 : kChunkBytes];
  __shared__ alignas(16) uint8_t col_chunks[2][kChunkBytes];

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  uint32_t tensor_amax = 0;  // magnitude bits of the input type
  bool saw_nonfinite = false;
  uint32_t* const tiles = reinterpret_cast<uint32_t*>(shared_tiles);

  // Grouped: CTA 0 writes the padded ends. Long scans: the expert offsets in shared memory, after
  // the tiles (short scans look each tile up in registers: lane_segment).
  uint32_t* const ends = tiles + S::kStages * S::kWords;
  uint32_t* const pends = ends + p.num_groups;
  if constexpr (kGroupedTiles) {
    if (p.num_groups <= kShortScanGroups) {
      if (blockIdx.x == 0 && tid < 32)
        store_padded_ends<32>(lane_experts<32>(p.group_ends, p.num_groups, p.rows), p.group_ends, p.num_groups,
                              p.rows, p.padded_group_ends);
    } else {
      __shared__ uint32_t warp_totals[32];
      grouped_offsets<kThreads>(p.group_ends, p.num_groups, p.rows, ends, pends, warp_totals);
      if (blockIdx.x == 0)
        for (int g = tid; g < p.num_groups; g += kThreads) p.padded_group_ends[g] = static_cast<int32_t>(pends[g]);
    }
    if constexpr (kRow) {
      // Rowwise scale rows past `rows` up to the 128-row swizzle padding: zero (no tile holds them).
      const int64_t pad_rows = (p.rows + kTile - 1) / kTile * kTile - p.rows;
      for (int64_t i = blockIdx.x * int64_t{kThreads} + tid; i < pad_rows * p.col_tiles;
           i += int64_t{gridDim.x} * kThreads) {
        const int64_t r = p.rows + i / p.col_tiles, tc = i % p.col_tiles;
        uint8_t* dst = p.row_scales + ((r >> 7) * p.col_tiles + tc) * kChunkBytes + (r & 31) * 16 + ((r >> 5) & 3) * 4;
        if (p.word_scale_store) *reinterpret_cast<uint32_t*>(dst) = 0u;
        else dst[0] = dst[1] = dst[2] = dst[3] = 0;
      }
    }
  }

  const bool full_stores = (!kRow || p.row_store_align >= MxCodes<kRecipe>::kBytes) && (!kCol || p.vec_col_store);
  // Threads 0..31 store the rowwise chunk of the previous tile, 32..63 the columnwise one.
  auto store_chunks = [&](TileIndex t, int buffer) {
    if constexpr (kRow && !kGroupedTiles) {
      if (tid < 32) store_scale_chunk(p, p.row_scales, int64_t{t.tr} * p.col_tiles + t.tc, row_chunks[buffer], tid);
    }
    if constexpr (kCol) {
      if (tid >= 32 && tid < 64) {
        const int b = tile_batch(p, t.tr), matrix_tiles = p.batch_tiles > 0 ? p.batch_tiles : p.row_tiles;
        store_scale_chunk(p, p.col_scales + b * p.col_batch_scale_bytes,
                          int64_t{t.tc} * matrix_tiles + (t.tr - b * p.batch_tiles), col_chunks[buffer], tid - 32);
      }
    }
  };
  auto segment_of = [&](TileIndex t) {
    if constexpr (kGroupedTiles) return lane_segment(p, t, ends, pends);
    else return LaneSegment{{0u, 0u}, false};
  };
  auto load = [&](TileIndex t, const LaneSegment& ls, uint32_t* stage) {
    if constexpr (kGather) load_tile_gathered<kIn, kGroupedTiles>(p, tile_pos(p, t), ls, stage);
    else if constexpr (kGroupedTiles) load_tile_grouped<kIn>(p, tile_pos(p, t), ls, stage);
    else load_tile<kIn>(p, tile_pos(p, t), stage);
  };

  if (p.col_tiles == 0) return;  // empty matrix (not launched so)
  const TileIndex step{static_cast<int>(gridDim.x / p.col_tiles), static_cast<int>(gridDim.x % p.col_tiles)};
  TileIndex cur{static_cast<int>(blockIdx.x / p.col_tiles), static_cast<int>(blockIdx.x % p.col_tiles)};
  TileIndex prev = cur;
  LaneSegment seg_cur{{0u, 0u}, false};
  if (cur.tr < p.row_tiles) {
    seg_cur = segment_of(cur);
    load(cur, seg_cur, tiles);
  }
  cp_async_commit();
  int i = 0;
  for (; cur.tr < p.row_tiles; ++i) {
    const TileIndex nxt = advance(cur, step, p.col_tiles);
    // Tile i+1's segments: looked up while tile i lands (2 stages), or once tile i is done with (1
    // stage, so that they are not held through its quantize).
    LaneSegment seg_nxt{{0u, 0u}, false};
    if (S::kStages == 2 && nxt.tr < p.row_tiles) seg_nxt = segment_of(nxt);
    cp_async_wait<0>();  // this thread's copies of tile i (the only group in flight)
    // Tile i is in shared memory for every thread; every thread is done with tile i-1, so its
    // stage (2 stages) and its chunk buffer are free to reuse / complete to store.
    __syncthreads();
    if constexpr (S::kStages == 2) {  // tile i+1 goes into the buffer tile i-1 used
      if (nxt.tr < p.row_tiles) load(nxt, seg_nxt, tiles + ((i + 1) % 2) * S::kWords);
      cp_async_commit();
    }
    if (i > 0) store_chunks(prev, (i - 1) % 2);

    // Grouped: the compute path does not depend on the segments (missing rows are zeros in the
    // tile; their rowwise stores are predicated off).
    const TilePos tp = tile_pos(p, cur);
    uint32_t* const tile = tiles + (i % S::kStages) * S::kWords;
    uint8_t* const row_chunk = row_chunks[kGroupedTiles ? 0 : i % 2];
    if (tp.inside && full_stores)
      quantize_tile<kIn, kRecipe, kRow, kCol, kEnc, true, kGroupedTiles>(p, tile, tp, seg_cur, row_chunk,
                                                                         col_chunks[i % 2], tensor_amax, saw_nonfinite);
    else
      quantize_tile<kIn, kRecipe, kRow, kCol, kEnc, false, kGroupedTiles>(p, tile, tp, seg_cur, row_chunk,
                                                                          col_chunks[i % 2], tensor_amax, saw_nonfinite);
    if constexpr (S::kStages == 1) {  // the only stage is free once every thread has read it
      __syncthreads();
      if (nxt.tr < p.row_tiles) {
        seg_nxt = segment_of(nxt);
        load(nxt, seg_nxt, tiles);
      }
      cp_async_commit();
    }
    prev = cur;
    cur = nxt;
    seg_cur = seg_nxt;
  }
  cp_async_wait<0>();
  __syncthreads();  // the last tile's chunks are staged
  if (i > 0) store_chunks(prev, (i - 1) % 2);

  if (p.amax != nullptr) {
    uint32_t a = In::widen(tensor_amax);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) a = max(a, __shfl_xor_sync(kFullMask, a, off));
    if (lane == 0) raise_amax(p.amax, a);
  }
  if (p.nonfinite != nullptr) {
    if (__any_sync(kFullMask, saw_nonfinite) && lane == 0) *p.nonfinite = 1;
  }
}

}  // namespace
}  // namespace blockscale::quant::detail
