// The NVFP4 quantize kernel's data (quant/nvfp4_quantize_kernel.cuh, its one includer): its
// parameters, the shared tile and its cp.async load (dense and grouped), the per-thread state, and
// the helpers that stage and store codes and scales. The tiling is the kernel file's comment.
#pragma once

#include <cstdint>

#include "quant/device_common.cuh"
#include "quant/grouped_offsets.cuh"  // defines: grouped_offsets, grouped_segment, Segment
#include "quant/nvfp4_amax.h"         // defines: kNvfp4MaxPartials
#include "quant/nvfp4_block.cuh"      // defines: block maxima, block_scale, encode_block
#include "quant/nvfp4_device.cuh"

namespace blockscale::quant::detail {

struct Nvfp4Params {
  const void* x;
  int64_t rows, cols, ld;
  uint8_t* row_data;
  uint8_t* row_scales;
  float* row_scale_dec;
  uint8_t* col_data;
  uint8_t* col_scales;
  float* col_scale_dec;
  float* amax;
  float* col_amax;
  int* nonfinite;
  const float* given_row_amax;  // kGiven
  const float* given_col_amax;
  const uint32_t* partials;     // kMeasure: [0, n): max |x| bits per CTA; [kMaxPartials, +n): max |RHT x|
  int n_partials;
  bool measure;
  bool track_amax;              // kGiven: this pass accumulates amax / col_amax
  uint64_t sr_seed, sr_offset;
  int row_tiles, col_tiles;               // tile counts (an int: 2^31 tiles would be 2^45 elements)
  int last_tile_rows, last_tile_cols;     // rows / columns of the last tile row / column: 1..128
  int whole_row_tiles, whole_col_tiles;   // tile rows / columns with all 128
  int64_t row_pitch, col_pitch;           // data bytes per stored row: ceil(cols / 2), ceil(rows / 2)
  int64_t row_chunk_cols, col_chunk_cols; // 512-byte chunks per 128 stored rows: ceil(cols / 64), ceil(rows / 64)
  bool vec_load;       // x and ld * element size 16-byte aligned
  bool row_vec_store;  // rowwise data 8-byte aligned, cols % 16 == 0
  bool col_vec_store;  // columnwise data 8-byte aligned, rows % 16 == 0 (grouped: the capacity)
  bool scale_vec_store;
  // Grouped mode with a columnwise copy (kGrouped): the tiles walk tile_rows = the capacity rows of
  // the padded row space; col_pitch, col_chunk_cols and row_tiles count those rows.
  int64_t tile_rows;
  const int32_t* group_ends;
  int32_t* padded_group_ends;
  int num_groups;
  bool row_scale_word_store;  // rowwise scales 4-byte aligned (grouped stores them by words)
  // Batched (batches > 1; rowwise, measured amax): `batches` matrices of batch_rows rows (a
  // multiple of the tile) stacked as rows; matrix b's partials at partials + b * 2 * kMaxPartials,
  // its decode scale at row_scale_dec[b]. Each tile belongs to one matrix, whose tensor scale the
  // CTA sets up when its tile's matrix changes.
  int64_t batch_rows;
  int64_t batches;
};

namespace {

using formats::Direction;

constexpr int kTile = 128;
constexpr int kThreads = 256;
constexpr int kChunkBytes = 512;
constexpr int kMaxPartials = kNvfp4MaxPartials;  // workspace = 2 x 1024 floats

template <DType kIn>
struct TileShape {
  static constexpr int kBytes = InputTraits<kIn>::kBytes;
  static constexpr int kWordsPerRow = kTile * kBytes / 4;  // 64 or 128
  static constexpr int kGranules = kWordsPerRow / 4;       // 16-byte granules per row: 16 or 32
  static constexpr int kUpperMask = kGranules / 8 - 1;     // granule bits above the low three
  static constexpr int kWords = kTile * kWordsPerRow;
  static constexpr int kStages = kBytes == 2 ? 2 : 1;
  static constexpr int kElemsPerGranule = 16 / kBytes;
};

// Word offset of granule g of tile row r in the shared tile.
template <DType kIn>
__device__ __forceinline__ int tile_word(int r, int g) {
  using S = TileShape<kIn>;
  return r * S::kWordsPerRow + 4 * (g ^ (((r >> 4) & 7) ^ ((g >> 3) & S::kUpperMask)));
}

struct TileAt {
  int tr, tc;
  int64_t r0, c0;
  int rows_in, cols_in;  // 1..128
  bool whole;
};

// kGrouped: rows of the padded row space (whole: all 128 padded rows exist, tokens or zeros).
__device__ __forceinline__ TileAt tile_at(const Nvfp4Params& p, int tr, int tc) {
  TileAt a;
  a.tr = tr;
  a.tc = tc;
  a.r0 = int64_t{tr} * kTile;
  a.c0 = int64_t{tc} * kTile;
  a.rows_in = tr + 1 < p.row_tiles ? kTile : p.last_tile_rows;
  a.cols_in = tc + 1 < p.col_tiles ? kTile : p.last_tile_cols;
  a.whole = tr < p.whole_row_tiles && tc < p.whole_col_tiles;
  return a;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// cp.async of a whole 16-byte granule to a shared address.
__device__ __forceinline__ void cp_async_16B_s(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// Starts the copy of a tile into `stage`: consecutive threads take consecutive granules of a row.
template <DType kIn>
__device__ __forceinline__ void copy_tile(const Nvfp4Params& p, const TileAt& at, uint32_t* stage) {
  using S = TileShape<kIn>;
  constexpr int kRowsPerStep = kThreads / S::kGranules;  // 16 or 8
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row_bytes = p.ld * S::kBytes;
  if (p.vec_load && at.whole) {
    // Whole tile: warp k copies the 16-row chunk k (rows of one swizzle key); lane l takes granule
    // gl = l % kGranules of rows 16k + l / kGranules + (32 / kGranules) s, so its shared addresses
    // are the first plus 512 s bytes (32 / kGranules rows), and each step writes whole rows (no
    // bank conflicts).
    const int gl = tid % S::kGranules, rl = 16 * (tid >> 5) + (tid & 31) / S::kGranules;
    const uint32_t dst = smem_addr(stage) + 4u * static_cast<uint32_t>(tile_word<kIn>(rl, gl));
    const char* from = static_cast<const char*>(p.x) + (at.r0 + rl) * row_bytes + at.c0 * S::kBytes + 16 * gl;
    const int64_t step = (32 / S::kGranules) * row_bytes;
#pragma unroll
    for (int s = 0; s < S::kGranules / 2; ++s) cp_async_16B_s(dst + 512u * s, from + s * step);
    return;
  }
  const int g = tid % S::kGranules;
  const int row = tid / S::kGranules;
  if (p.vec_load) {
    const char* src = static_cast<const char*>(p.x) + (at.r0 + row) * row_bytes + (at.c0 + g * S::kElemsPerGranule) * S::kBytes;
    const int in_row = max(0, min(S::kElemsPerGranule, at.cols_in - g * S::kElemsPerGranule)) * S::kBytes;
#pragma unroll
    for (int s = 0; s < kTile / kRowsPerStep; ++s) {
      const int rt = row + s * kRowsPerStep;
      const int bytes = at.whole ? 16 : (rt < at.rows_in ? in_row : 0);
      cp_async_16B(stage + tile_word<kIn>(rt, g), bytes > 0 ? static_cast<const void*>(src + s * kRowsPerStep * row_bytes) : p.x,
                   bytes);
    }
  } else {
#pragma unroll 1
    for (int s = 0; s < kTile / kRowsPerStep; ++s) {
      const int rt = row + s * kRowsPerStep;
      *reinterpret_cast<uint4*>(stage + tile_word<kIn>(rt, g)) =
          granule_scalar<kIn>(p.x, p.ld, p.rows, p.cols, at.r0 + rt, at.c0 + g * S::kElemsPerGranule);
    }
  }
}

// Grouped: the copy of a tile of the padded row space. Segment k (tile rows 16k..16k+15) reads
// `valid` input rows from row `src`, zeros after them. Lane l finds segment l % 8; the copy takes
// each segment's (src, valid) from its lane by shuffles (16-bit input: step s is segment s; fp32:
// segment s / 2). Warp 0 leaves the eight in `segs` for the tile's rowwise pass.
template <DType kIn>
__device__ __forceinline__ void copy_tile_grouped(const Nvfp4Params& p, const TileAt& at, uint32_t* stage,
                                                  const uint32_t* ends, const uint32_t* pends, Segment* segs) {
  using S = TileShape<kIn>;
  constexpr int kRowsPerStep = kThreads / S::kGranules;  // 16 or 8
  const int tid = static_cast<int>(threadIdx.x);
  const Segment mine = grouped_segment<16>(static_cast<uint32_t>(at.r0) + 16u * static_cast<uint32_t>(tid & 7), ends,
                                           pends, p.num_groups);
  if (tid < 8) segs[tid] = mine;
  const int g = tid % S::kGranules;
  const int row = tid / S::kGranules;
  const int64_t row_bytes = p.ld * S::kBytes;
  const int64_t c = at.c0 + g * S::kElemsPerGranule;
  const int in_row = max(0, min(S::kElemsPerGranule, at.cols_in - g * S::kElemsPerGranule)) * S::kBytes;
#pragma unroll
  for (int s = 0; s < kTile / kRowsPerStep; ++s) {
    const int k = (s * kRowsPerStep) >> 4;  // row < kRowsPerStep: the step's rows lie in one segment
    const int i = row + ((s * kRowsPerStep) & 15);
    const uint32_t src = __shfl_sync(0xFFFFFFFFu, mine.src, k);
    const uint32_t valid = __shfl_sync(0xFFFFFFFFu, mine.valid, k);
    const bool ok = static_cast<uint32_t>(i) < valid;
    uint32_t* dst = stage + tile_word<kIn>(16 * k + i, g);
    if (p.vec_load) {
      const int bytes = ok ? in_row : 0;
      cp_async_16B(dst, bytes > 0 ? static_cast<const void*>(static_cast<const char*>(p.x) + (int64_t{src} + i) * row_bytes + c * S::kBytes)
                                  : p.x,
                   bytes);
    } else {
      *reinterpret_cast<uint4*>(dst) = granule_scalar<kIn>(p.x, p.ld, p.rows, p.cols, ok ? int64_t{src} + i : p.rows, c);
    }
  }
}

// ---- Block arithmetic: quant/nvfp4_block.cuh; the stochastic encode needs the parameters ----

template <class Note>
__device__ __forceinline__ uint2 encode16_stochastic(const float* f, const BlockScale& b, const Nvfp4Params& p,
                                                     uint64_t index, Note note) {
  uint32_t r[16];
  nvfp4::philox_words16(p.sr_seed, p.sr_offset, index, r);
  const uint2 out = make_uint2(nvfp4::encode8_stochastic(f, b.enc, r), nvfp4::encode8_stochastic(f + 8, b.enc, r + 8));
  note(b.nonfinite());
  return b.nonfinite() ? make_uint2(0, 0) : out;
}

// Up to 8 code bytes of a block at dst: `n` = elements of the 16 inside the matrix.
__device__ __forceinline__ void store_codes(uint8_t* dst, uint2 v, int n, bool vec) {
  if (vec && n >= 16) {
    *reinterpret_cast<uint2*>(dst) = v;
    return;
  }
  const int bytes = min(8, (n + 1) / 2);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (i < bytes) dst[i] = static_cast<uint8_t>((i < 4 ? v.x : v.y) >> (8 * (i % 4)));
}

// Byte of a staged 1 KB pair of scale chunks for stored row i (0..127), block j (0..7).
__device__ __forceinline__ int staged_scale(int i, int j) { return (j >> 2) * kChunkBytes + (i & 31) * 16 + (i >> 5) * 4 + (j & 3); }

// Per-thread state of the quantize kernel.
struct State {
  uint32_t row_enc;      // shared addresses of the tables: encode factor of each scale code
  uint32_t col_enc;      // (x 0.25 when col_fold)
  float row_k, col_k;    // S_enc * fl(1/6) of each copy
  bool col_fold;         // RHT: the final x 0.25 is folded into col_enc (exact: see tensor_setup)
  uint32_t amax_bits;    // running max |x| (fp32 bits), kGiven
  uint32_t rht_amax_bits;
  bool saw_nonfinite;
  uint32_t col_len;      // grouped: padded_total, the stored row length the SR counters run over
};

// 2D: both copies' scale of each 16x16 block of the tile, left in shared memory.
struct TileBlocks {
  uint32_t info[2][64];  // code | cap << 8 (0: rowwise copy, 1: columnwise)
  float enc[2][64];
};

__device__ __forceinline__ BlockScale from_info(uint32_t info, float enc) {
  return BlockScale{info & 0xFFu, enc, ((info >> 8) & 1u) != 0};
}

// Magnitude maximum of a 16-element run (its sign meaningless; NaN or Inf for a run holding a NaN
// or Inf) and its values as fp32.
template <DType kIn>
__device__ __forceinline__ float run_amax(const uint32_t* w, float* f) {
  using In = InputTraits<kIn>;
#pragma unroll
  for (int i = 0; i < 16; ++i) f[i] = In::kBytes == 2 ? In::elem(w[i / 2], i % 2) : __uint_as_float(w[i]);
  if constexpr (In::kBytes == 2) return fold_lanes<kIn>(pair_absmax<kIn, 8>(w));
  else return absmax16_nan(f);
}

// The signs of a 16-element run.
template <DType kIn>
__device__ __forceinline__ nvfp4::BlockSigns run_signs(const uint32_t* w) {
  if constexpr (InputTraits<kIn>::kBytes == 2) return {nvfp4::signs_of_pairs(w), nvfp4::signs_of_pairs(w + 4)};
  else return {nvfp4::signs_of_singles<3>(w), nvfp4::signs_of_singles<3>(w + 8)};
}

// Raises the running max |x| by a finite block amax (sign ignored).
__device__ __forceinline__ void note_amax(uint32_t& amax_bits, float a) {
  amax_bits = __float_as_uint(fmaxf(__uint_as_float(amax_bits), fabsf(a)));
}

// Shared-memory accesses by 32-bit shared addresses (kept in registers across the loops).
__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ void sts8(uint32_t a, uint32_t v) { asm volatile("st.shared.u8 [%0], %1;" ::"r"(a), "r"(v)); }
// Keeps a value in a register: the compiler can no longer recompute it from its inputs.
__device__ __forceinline__ void pin(uint32_t& v) { asm volatile("" : "+r"(v)); }

// Words of a 16-element run: granules at the shared addresses a[0..kGran).
template <DType kIn>
__device__ __forceinline__ void read_run(const uint32_t* a, uint32_t* w) {
  constexpr int kGran = InputTraits<kIn>::kBytes;  // granules holding 16 elements: 2 or 4
#pragma unroll
  for (int j = 0; j < kGran; ++j) {
    const uint4 v = lds128(a[j]);
    w[4 * j] = v.x, w[4 * j + 1] = v.y, w[4 * j + 2] = v.z, w[4 * j + 3] = v.w;
  }
}

// Grouped: the rowwise scales of one row of a tile go straight to the swizzled buffer (the row's
// 128-row scale chunk spans tiles of other experts). The 8 lanes of the row (q = 0..7, blocks
// 8 tc + q) gather their codes into two words, one per 512-byte chunk (blocks 8 tc .. + 3 and
// + 4 .. + 7), which lanes q = 0 and 4 store. Every lane calls it (shuffles).
__device__ __forceinline__ void store_row_scales(const Nvfp4Params& p, const TileAt& at, int64_t r, int q,
                                                 uint32_t code, bool row_ok) {
  uint32_t v = code << (8 * (q & 3));
  v |= __shfl_xor_sync(0xFFFFFFFFu, v, 1);
  v |= __shfl_xor_sync(0xFFFFFFFFu, v, 2);
  const int64_t cc = 2 * at.tc + (q >> 2);
  if ((q & 3) != 0 || !row_ok || cc >= p.row_chunk_cols) return;
  uint8_t* dst = p.row_scales + ((r >> 7) * p.row_chunk_cols + cc) * kChunkBytes + (r & 31) * 16 + ((r >> 5) & 3) * 4;
  if (p.row_scale_word_store) {
    *reinterpret_cast<uint32_t*>(dst) = v;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
  }
}

// Grouped: the rowwise scale rows past `rows` up to the 128-row swizzle padding hold zeros; no
// tile of the padded row space holds them. A grid-stride loop over (row, chunk) words.
__device__ __forceinline__ void zero_row_scale_padding(const Nvfp4Params& p) {
  const int64_t pad_rows = (p.rows + kTile - 1) / kTile * kTile - p.rows;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < pad_rows * p.row_chunk_cols;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = p.rows + i / p.row_chunk_cols, cc = i % p.row_chunk_cols;
    uint8_t* dst = p.row_scales + ((r >> 7) * p.row_chunk_cols + cc) * kChunkBytes + (r & 31) * 16 + ((r >> 5) & 3) * 4;
    if (p.row_scale_word_store) *reinterpret_cast<uint32_t*>(dst) = 0u;
    else dst[0] = dst[1] = dst[2] = dst[3] = 0;
  }
}


}  // namespace
}  // namespace blockscale::quant::detail
