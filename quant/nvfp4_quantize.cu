// NVFP4 quantize (E2M1 elements two per byte, UE4M3 block scales, an fp32 tensor scale) of a
// row-major bf16 / fp16 / fp32 matrix with a row stride: the rowwise copy (rows x cols, 1x16
// blocks along cols), the columnwise copy (cols x rows, the transpose, blocks along the input's
// rows), or both from one read of the input. Options: 16x16 blocks (nvfp4_2d: one scale per tile,
// written once per row of the tile, shared by both copies), stochastic rounding (Philox word of the
// element's STORED position), the 16-point random Hadamard transform on the columnwise copy, and
// the tensor amax either measured (TensorAmax::kMeasure: the amax pass, quant/nvfp4_amax.cu,
// reads the input first and leaves per-CTA partial maxima in the workspace; the quantize kernel
// reduces them and derives S_enc / S_dec on the device, no host sync) or given (kGiven: device
// floats, one pass).
//
// Two modes of the same kernel (the `kGrouped` template argument), as the MX kernel has:
//   dense  : the matrix as it is (quant/quantize.h run()).
//   grouped: MoE tokens sorted by expert (run() of GroupedQuantizeProblem, 1D blocks only): the
//            rowwise copy is the dense one; the columnwise copy is quantized in the padded row
//            space of quant/grouped_offsets.cuh (each expert padded with zero rows to a multiple
//            of 16, zero rows up to the capacity), as formats::quantize_grouped_columnwise does,
//            and the kernel writes the padded ends. One tensor scale for all experts. No host
//            synchronisation: every CTA scans group_ends into shared memory.
//
// Layouts: data rows of ceil(n / 2) bytes, element 2i in the low nibble of byte i; scales in the
// swizzled 128x4 layout (formats::swizzled_scale_offset), padding bytes written as 0.
//
// Must match, byte for byte: formats::quantize() (formats/nvfp4_quantize.cpp; formats/quantize.cpp
// for the columnwise transpose and the per-copy tensor amax: the RHT copy measures the amax of the
// transformed values; grouped: formats::quantize_grouped_columnwise, whose RHT copy transforms the
// zero-padded expert blocks, and whose SR counters index the padded cols x padded_total copy)
// followed by formats::pack_swizzled_scales(). The arithmetic is formats':
// formats::nvfp4_tensor_scales, formats::nvfp4_block_encode_factor (a 128-entry table per copy,
// built once per CTA), the block scale code UE4M3(amax * (S_enc * fl(1/6))) (hardware
// cvt.rn.satfinite.e4m3x2.f32, identical to formats::encode_ue4m3 on every value >= 0: checked on
// the GPU over all of them), formats::hadamard16_inplace's butterflies in its order
// (nvfp4::rht16_unscaled: the same fp32 operations minus the final exact x 0.25, which is applied
// to the values or, for 16-bit input, folded into the encode factors where that is exact),
// formats::philox4x32_10 and formats::encode_e2m1_stochastic (on the device nvfp4::e2m1_stochastic_code:
// the same decision in fp32 without doubles or branches; tests/quant compares the two on the GPU
// on every fp32 pattern around its rounding threshold). The E2M1 elements are encoded in
// SOFTWARE on every architecture (nvfp4::e2m1_magnitude_biased: three fp32 roundings and a min;
// tests/quant compares it with formats::encode_e2m1 on every non-NaN fp32): the hardware
// cvt.rn.satfinite.e2m1x2.f32 exists only on sm_100a, so the sm_90a and sm_100a images run the
// same code and write identical bytes by construction. Divisions are IEEE (div_rn); no fast-math.
// outputs.nonfinite is set when a block of a copy written gets the NaN scale (a NaN / Inf input,
// or, for the RHT copy, a transform that overflows fp32 on finite input), as formats'
// nonfinite_seen of those copies.
//
// Tiling: a CTA of 256 threads owns a 128 x 128 input tile at a time (grid-stride loop over tiles,
// the grid sized from the SM count and the occupancy, 3 CTAs per SM). The tile matches two 512-byte
// chunks of each swizzled scale buffer (128 rows x 8 blocks of 16), staged in shared memory and
// stored one tile late (one barrier per tile; two with 2D blocks).
//   load      : cp.async of 16-byte granules (zero-filled past the matrix; whole tiles take an
//               unchecked path with compile-time swizzle keys) into a shared tile of
//               32-bit words whose granule index is XOR-swizzled by the row's 16-row chunk and the
//               granule's upper bits, so the copies, the row reads and the column reads are free of
//               bank conflicts; 16-bit input double-buffers, fp32 (64 KB tiles) single-buffers.
//   rowwise   : a thread quantizes whole 1x16 blocks (4 per tile): 16 codes = one 8-byte store,
//               8 lanes write 64 contiguous bytes of a row.
//   columnwise: a thread reads 16 rows of one word column (two 16-bit columns or one fp32), applies
//               the RHT per column when asked, and writes 8 bytes per column; 8 lanes write 64
//               contiguous bytes of a stored row.
//   2D        : before the row / column work, 4 threads per 16x16 tile block reduce its amax and
//               leave both copies' (scale, encode factor) in shared memory.
//   Encoder   : the saturating minimum is needed only when some |y| of a block may reach 7 (known
//               from the block amax); a warp vote picks the cheaper encoder when no lane needs it.
//   Tiles wholly inside the matrix (with aligned outputs) take a path without bounds checks.
// The amax pass (kMeasure) walks the matrix from its end to its start, so the quantize kernel (which
// starts at the top) finds the most recently read rows in L2.
// Grouped mode with a columnwise copy: the tiles walk the padded row space (capacity rows); a tile
// is 8 segments of 16 rows, segment k reading `valid` input rows from row `src` (zeros after them:
// each lane finds segment lane % 8 by a binary search over the padded ends; the warp shares them
// by shuffles while copying; warp 0 leaves them in shared memory for the rowwise pass). The
// columnwise copy is the dense path's with the capacity as its row count (a 16-row block is one
// segment; its SR counter runs over padded_total, not the capacity). The rowwise copy of a tile
// goes to the token rows' dense positions (zero rows are not stored), its scales stored directly
// as two words per row (a row's 128-row scale chunk spans tiles of several experts); the rowwise
// scale rows past `rows` (swizzle padding, in no tile) are zeroed by a grid-stride loop. The RHT
// amax pass walks the same segments. Rowwise-only grouped runs are the dense kernel plus
// launch_grouped_offsets (the padded ends).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "quant/device_common.cuh"
#include "quant/grouped_offsets.cuh"  // defines: grouped_offsets, grouped_segment, Segment
#include "quant/launchers.h"
#include "quant/nvfp4_amax.h"
#include "quant/nvfp4_block.cuh"  // defines: block maxima, block_scale, encode_block
#include "quant/nvfp4_device.cuh"

namespace blockscale::quant::detail {
namespace {

using formats::Direction;

constexpr int kTile = 128;
constexpr int kThreads = 256;
constexpr int kChunkBytes = 512;
constexpr int kMaxPartials = kNvfp4MaxPartials;  // workspace = 2 x 1024 floats

// ---- Parameters --------------------------------------------------------------------------------

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
  int64_t row_tiles, col_tiles;
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
};

template <InputType kIn>
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
template <InputType kIn>
__device__ __forceinline__ int tile_word(int r, int g) {
  using S = TileShape<kIn>;
  return r * S::kWordsPerRow + 4 * (g ^ (((r >> 4) & 7) ^ ((g >> 3) & S::kUpperMask)));
}

struct TileAt {
  int64_t tr, tc, r0, c0;
  int rows_in, cols_in;  // 1..128
  bool whole;
};

// kGrouped: rows of the padded row space (whole: all 128 padded rows exist, tokens or zeros).
template <bool kGrouped>
__device__ __forceinline__ TileAt tile_at(const Nvfp4Params& p, int64_t tr, int64_t tc) {
  TileAt a;
  a.tr = tr;
  a.tc = tc;
  a.r0 = a.tr * kTile;
  a.c0 = a.tc * kTile;
  a.rows_in = static_cast<int>(min(int64_t{kTile}, (kGrouped ? p.tile_rows : p.rows) - a.r0));
  a.cols_in = static_cast<int>(min(int64_t{kTile}, p.cols - a.c0));
  a.whole = a.rows_in == kTile && a.cols_in == kTile;
  return a;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// cp.async of a whole 16-byte granule to a shared address.
__device__ __forceinline__ void cp_async_16B_s(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// Starts the copy of a tile into `stage`: consecutive threads take consecutive granules of a row.
template <InputType kIn>
__device__ __forceinline__ void copy_tile(const Nvfp4Params& p, const TileAt& at, uint32_t* stage) {
  using S = TileShape<kIn>;
  constexpr int kRowsPerStep = kThreads / S::kGranules;  // 16 or 8
  const int tid = static_cast<int>(threadIdx.x);
  const int g = tid % S::kGranules;
  const int row = tid / S::kGranules;
  const int64_t row_bytes = p.ld * S::kBytes;
  const char* src = static_cast<const char*>(p.x) + (at.r0 + row) * row_bytes + (at.c0 + g * S::kElemsPerGranule) * S::kBytes;
  if (p.vec_load && at.whole) {
    // Whole tile: row rt = row + kRowsPerStep s has the swizzle key ((rt >> 4) & 7) = (kRowsPerStep s)
    // >> 4 (row < kRowsPerStep, which divides 16), known at compile time, so each copy is the
    // step-0 byte offset XOR a constant (bits 4..6, below the 256-byte row pitch) plus a constant.
    const uint32_t base = smem_addr(stage);
    const uint32_t off0 = 4u * static_cast<uint32_t>(tile_word<kIn>(row, g));  // key 0 (row < 16)
    const int64_t step = kRowsPerStep * row_bytes;
#pragma unroll
    for (int s = 0; s < kTile / kRowsPerStep; ++s) {
      const uint32_t key = static_cast<uint32_t>((kRowsPerStep * s) >> 4);
      cp_async_16B_s(base + ((off0 ^ (16u * key)) + 4u * s * kRowsPerStep * S::kWordsPerRow), src + s * step);
    }
  } else if (p.vec_load) {
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
template <InputType kIn>
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

__device__ __forceinline__ uint2 encode16_stochastic(const float* f, const BlockScale& b, const Nvfp4Params& p,
                                                     uint64_t index) {
  uint32_t r[16];
  nvfp4::philox_words16(p.sr_seed, p.sr_offset, index, r);
  const uint2 out = make_uint2(nvfp4::encode8_stochastic(f, b.enc, r), nvfp4::encode8_stochastic(f + 8, b.enc, r + 8));
  return b.nonfinite ? make_uint2(0, 0) : out;
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
  const float* row_enc;  // shared tables: encode factor of each scale code
  const float* col_enc;  // (x 0.25 when col_fold)
  float row_k, col_k;    // S_enc * fl(1/6) of each copy
  bool col_fold;         // RHT: the final x 0.25 is folded into col_enc (exact: see tensor_setup)
  uint32_t amax_bits;    // running max |x| (fp32 bits), kGiven
  uint32_t rht_amax_bits;
  bool saw_nonfinite;
  uint32_t col_len;      // grouped: padded_total, the stored row length the SR counters run over
};

// 2D: both copies' scale of each 16x16 block of the tile, left in shared memory.
struct TileBlocks {
  uint32_t info[2][64];  // code | nonfinite << 8 | cap << 9 (0: rowwise copy, 1: columnwise)
  float enc[2][64];
};

__device__ __forceinline__ BlockScale from_info(uint32_t info, float enc) {
  return BlockScale{info & 0xFFu, enc, ((info >> 8) & 1u) != 0, ((info >> 9) & 1u) != 0};
}

// Magnitude maximum of a 16-element run (fp32 bits; NaN bits for NaN / Inf) and its values as fp32.
template <InputType kIn>
__device__ __forceinline__ uint32_t run_amax(const uint32_t* w, float* f) {
  using In = InputTraits<kIn>;
  if constexpr (In::kBytes == 2) {
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i / 2], i % 2);
    const uint32_t m2 = doubled_mags<8>(w);
    return widen_mag<kIn>(max(mag_of_doubled(m2, 0), mag_of_doubled(m2, 1)));
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] = __uint_as_float(w[i]);
    const uint32_t m = __float_as_uint(absmax16_nan(f));
    return m >= 0x7F800000u ? 0x7FFFFFFFu : m;
  }
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
template <InputType kIn>
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

// ---- Rowwise: thread (warp w, lane l) quantizes block q = l % 8 of rows r_s = 32s + 4w + l / 8,
// s = 0..3. The shared-memory swizzle key of row r_s is ((r_0 >> 4) & 7) ^ 2s (r_0 < 32), so the
// word offset of each granule of block s is (offset at s = 0) ^ 8s, plus 32 rows.
// kGrouped: tile row r_s is row r_s % 16 of segment segs[r_s / 16]; every row is quantized (zero
// rows give zeros), only token rows are stored, at their input row.
template <InputType kIn, bool k2D, bool kSr, bool kFull, bool kGrouped>
__device__ __forceinline__ void rowwise_tile(const Nvfp4Params& p, const uint32_t* tile, const TileAt& at,
                                             State& st, const TileBlocks* tb, uint8_t* staged, const Segment* segs) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  constexpr int kGran = In::kBytes;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int q = lane & 7;
  const int row0 = 4 * (static_cast<int>(threadIdx.x) >> 5) + (lane >> 3);
  // Byte offsets of the granules of block 0 (granule j of the run is granule 0's ^ 16 j bytes:
  // kGran q + j differs from kGran q in the low bits only, below the swizzle's upper bits).
  uint32_t off0 = 4u * static_cast<uint32_t>(tile_word<kIn>(row0, kGran * q));
  uint32_t tile_s = smem_addr(tile);
  uint32_t stage = smem_addr(staged + staged_scale(row0, q));
  uint8_t* dst = p.row_data + (at.r0 + row0) * p.row_pitch + (at.c0 >> 1) + 8 * q;
  const int64_t dst_step = 32 * p.row_pitch;
#pragma unroll 1
  for (int s = 0; s < 4; ++s, dst += dst_step) {
    pin(off0);
    pin(tile_s);
    pin(stage);
    const int rt = 32 * s + row0;
    const bool inside = kFull || (rt < at.rows_in && 16 * q < at.cols_in);
    int64_t r = at.r0 + rt;  // the input row (stored row) of tile row rt
    bool row_ok = true;
    if constexpr (kGrouped) {
      const Segment sg = segs[rt >> 4];
      row_ok = static_cast<uint32_t>(rt & 15) < sg.valid;
      r = int64_t{sg.src} + (rt & 15);
    }
    uint32_t code = 0;
    if (inside) {
      const uint32_t off = (off0 ^ (32u * s)) + s * 128u * S::kWordsPerRow;  // 32 rows = 128 W bytes
      uint32_t a[kGran];
#pragma unroll
      for (int j = 0; j < kGran; ++j) a[j] = tile_s + (off ^ (16u * j));
      uint32_t w[4 * kGran];
      float f[16];
      read_run<kIn>(a, w);
      BlockScale b;
      if constexpr (k2D) {
#pragma unroll
        for (int i = 0; i < 16; ++i) f[i] = In::kBytes == 2 ? In::elem(w[i / 2], i % 2) : __uint_as_float(w[i]);
        const int blk = (rt >> 4) * 8 + q;
        b = from_info(tb->info[0][blk], tb->enc[0][blk]);
      } else {
        const uint32_t m = run_amax<kIn>(w, f);
        b = block_scale(m, __uint_as_float(m), st.row_k, st.row_enc);
        if (b.nonfinite) {
          st.saw_nonfinite = true;
          st.amax_bits = max(st.amax_bits, finite_max_bits(f));
        } else {
          st.amax_bits = max(st.amax_bits, m);
        }
      }
      uint2 out;
      if constexpr (kSr)
        out = encode16_stochastic(f, b, p, static_cast<uint64_t>(r) * static_cast<uint64_t>(p.cols) +
                                               static_cast<uint64_t>(at.c0 + 16 * q));
      else if constexpr (In::kBytes == 2)
        out = encode_block<kFull, true, 0>(f, w, b);
      else
        out = encode_block<kFull, false, 3>(f, w, b);
      if constexpr (kGrouped) {
        uint8_t* const gdst = p.row_data + r * p.row_pitch + (at.c0 >> 1) + 8 * q;
        if (row_ok && kFull) *reinterpret_cast<uint2*>(gdst) = out;
        else if (row_ok) store_codes(gdst, out, at.cols_in - 16 * q, p.row_vec_store);
      } else {
        if (kFull) *reinterpret_cast<uint2*>(dst) = out;
        else store_codes(dst, out, at.cols_in - 16 * q, p.row_vec_store);
      }
      code = b.code;
    }
    if constexpr (kGrouped) store_row_scales(p, at, r, q, code, row_ok);
    else sts8(stage + 4 * s, code);
  }
}

// ---- Columnwise: item n (granule g = warp + 8n, word wsub = l / 8, 16-row chunk k = l % 8): 16
// rows of one word column = two 16-bit columns or one fp32 column. The swizzle key of rows 16k..
// is k; the granule's upper bits are n, so the word offset of item n is (offset of item 0 with
// upper bits 0) ^ 4 (n & mask) + 32 n.
// kGrouped: the tile rows are the padded row space; a 16-row block is one segment.
template <InputType kIn, bool k2D, bool kSr, bool kRht, bool kFull, bool kPlainAmax, bool kGrouped>
__device__ __forceinline__ void columnwise_tile(const Nvfp4Params& p, const uint32_t* tile, const TileAt& at,
                                                State& st, const TileBlocks* tb, uint8_t* staged) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  constexpr int kCols = 4 / In::kBytes;  // columns per word
  constexpr int kItems = S::kWordsPerRow * 8 / kThreads;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int k = lane & 7, wsub = lane >> 3;
  const int off0 = tile_word<kIn>(16 * k, warp) + wsub;
  uint8_t* const dst0 = p.col_data + (at.r0 >> 1) + 8 * k;
  uint32_t stage = smem_addr(staged + staged_scale(0, k));  // + staged_scale(ct, 0)
#pragma unroll 1
  for (int n = 0; n < kItems; ++n) {
    pin(stage);
    const int g = warp + 8 * n;
    const int wc = 4 * g + wsub;  // word column
    if (!kFull && (wc * kCols >= at.cols_in || 16 * k >= at.rows_in)) {
#pragma unroll
      for (int h = 0; h < kCols; ++h) sts8(stage + staged_scale(wc * kCols + h, 0), 0);
      continue;
    }
    const uint32_t* col = tile + ((off0 ^ (4 * (n & S::kUpperMask))) + 32 * n);
    uint32_t w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = col[i * S::kWordsPerRow];
    uint32_t m2 = 0;  // 16-bit, no RHT: both columns' magnitudes at once
    if constexpr (In::kBytes == 2 && !kRht && !k2D) m2 = doubled_mags<16>(w);
    if constexpr (kRht && kPlainAmax) {  // max |x| of the input when no rowwise pass takes it
      if constexpr (In::kBytes == 2) {
        const uint32_t d = doubled_mags<16>(w);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t m = widen_mag<kIn>(mag_of_doubled(d, h));
          if (m < 0x7F800000u) {
            st.amax_bits = max(st.amax_bits, m);
          } else {
            float f[16];
#pragma unroll
            for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i], h);
            st.amax_bits = max(st.amax_bits, finite_max_bits(f));
          }
        }
      } else {
        float f[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) f[i] = __uint_as_float(w[i]);
        st.amax_bits = max(st.amax_bits, finite_max_bits(f));
      }
    }
#pragma unroll 2
    for (int h = 0; h < kCols; ++h) {
      const int ct = wc * kCols + h;  // tile column = stored row
      const bool inside = kFull || ct < at.cols_in;
      uint32_t code = 0;
      if (inside) {
        float f[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i], h);
        BlockScale b;
        if constexpr (kRht) {
          // f = the unscaled transform; formats' values are f * 0.25 (exact for 16-bit input). With
          // col_fold the 0.25 sits in the table entries instead.
          const float vmax = nvfp4::rht16_unscaled(f);
          if (!st.col_fold) {
#pragma unroll
            for (int i = 0; i < 16; ++i) f[i] = __fmul_rn(f[i], 0.25f);
          }
          uint32_t m = __float_as_uint(__fmul_rn(vmax, 0.25f));
          if (m >= 0x7F800000u) m = 0x7FFFFFFFu;
          b = block_scale(m, st.col_fold ? vmax : __uint_as_float(m), st.col_k, st.col_enc);
          if (b.nonfinite) {
            st.saw_nonfinite = true;
            st.rht_amax_bits = max(st.rht_amax_bits, finite_max_bits(f, st.col_fold ? 0.25f : 1.0f));
          } else {
            st.rht_amax_bits = max(st.rht_amax_bits, m);
          }
        } else if constexpr (k2D) {
          const int blk = k * 8 + (ct >> 4);
          b = from_info(tb->info[1][blk], tb->enc[1][blk]);
        } else {
          uint32_t m;
          if constexpr (In::kBytes == 2) {
            m = widen_mag<kIn>(mag_of_doubled(m2, h));
          } else {
            m = __float_as_uint(absmax16_nan(f));
            if (m >= 0x7F800000u) m = 0x7FFFFFFFu;
          }
          b = block_scale(m, __uint_as_float(m), st.col_k, st.col_enc);
          if (b.nonfinite) {
            st.saw_nonfinite = true;
            if (kPlainAmax) st.amax_bits = max(st.amax_bits, finite_max_bits(f));
          } else if (kPlainAmax) {
            st.amax_bits = max(st.amax_bits, m);
          }
        }
        uint2 out;
        if constexpr (kSr) {
          // The stored row length: rows, or grouped the padded total (formats' padded matrix; the
          // zero blocks past it round to zero with any word).
          const uint64_t len = kGrouped ? uint64_t{st.col_len} : static_cast<uint64_t>(p.rows);
          out = encode16_stochastic(f, b, p, static_cast<uint64_t>(at.c0 + ct) * len + static_cast<uint64_t>(at.r0 + 16 * k));
        } else if constexpr (kRht || In::kBytes == 4) {
          uint32_t sw[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) sw[i] = __float_as_uint(f[i]);
          out = encode_block<kFull, false, 3>(f, sw, b);
        } else {
          out = h ? encode_block<kFull, false, 3>(f, w, b) : encode_block<kFull, false, 1>(f, w, b);
        }
        uint8_t* dst = dst0 + (at.c0 + ct) * p.col_pitch;
        if (kFull) *reinterpret_cast<uint2*>(dst) = out;
        else store_codes(dst, out, at.rows_in - 16 * k, p.col_vec_store);
        code = b.code;
      }
      sts8(stage + staged_scale(ct, 0), code);
    }
  }
}

// ---- 2D: 4 threads per 16x16 block (4 rows each) reduce its amax; thread 0 of the four derives
// both copies' scale.
template <InputType kIn>
__device__ __forceinline__ void tile_blocks(const uint32_t* tile, State& st, TileBlocks* tb) {
  using In = InputTraits<kIn>;
  constexpr int kGran = In::kBytes;
  const int tid = static_cast<int>(threadIdx.x);
  const int blk = tid >> 2, sub = tid & 3;
  const int bi = blk >> 3, bj = blk & 7;
  uint32_t m = 0;
#pragma unroll 1
  for (int i = 0; i < 4; ++i) {
    const int r = 16 * bi + 4 * sub + i;
    uint32_t addr[kGran];
#pragma unroll
    for (int j = 0; j < kGran; ++j) addr[j] = smem_addr(tile + tile_word<kIn>(r, kGran * bj + j));
    uint32_t w[4 * kGran];
    float f[16];
    read_run<kIn>(addr, w);
    const uint32_t a = run_amax<kIn>(w, f);
    st.amax_bits = max(st.amax_bits, a >= 0x7F800000u ? finite_max_bits(f) : a);
    m = max(m, a);
  }
  m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
  m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 2));
  if (sub == 0) {
    const BlockScale r = block_scale(m, __uint_as_float(m), st.row_k, st.row_enc);
    const BlockScale c = block_scale(m, __uint_as_float(m), st.col_k, st.col_enc);
    if (r.nonfinite) st.saw_nonfinite = true;
    tb->info[0][blk] = r.code | (r.nonfinite ? 1u << 8 : 0u) | (r.cap ? 1u << 9 : 0u);
    tb->info[1][blk] = c.code | (c.nonfinite ? 1u << 8 : 0u) | (c.cap ? 1u << 9 : 0u);
    tb->enc[0][blk] = r.enc;
    tb->enc[1][blk] = c.enc;
  }
}

// 1 KB of staged scales (two chunks) -> the swizzled buffer, by 64 threads (t = 0..63). Chunk
// (row block rb, column chunk cc) exists when cc < chunk_cols.
__device__ __forceinline__ void store_chunks(uint8_t* dst_buffer, int64_t rb, int64_t cc0, int64_t chunk_cols,
                                             const uint8_t* staged, int t, bool vec) {
  const int h = t >> 5;
  if (cc0 + h >= chunk_cols) return;
  uint8_t* dst = dst_buffer + (rb * chunk_cols + cc0 + h) * kChunkBytes + 16 * (t & 31);
  const uint4 v = reinterpret_cast<const uint4*>(staged)[t];
  if (vec) {
    *reinterpret_cast<uint4*>(dst) = v;
  } else {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) dst[i] = static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
  }
}

// The tensor amax of each copy: the measured partials (reduced by the whole CTA) or the given
// values; S_enc / S_dec, the block-scale factor and the encode-factor tables. With the RHT on
// 16-bit input the columnwise table holds enc * 0.25 when that is exact for every code (the
// smallest entry, code 0x7E, is at least 2^-124): the transform's outputs v are multiples of the
// input's smallest subnormal step (sums and differences of such values, rounded in fp32 to
// coarser steps), so v * 0.25 is exact, and fl(fl(v * 0.25) * enc) = fl(v * (enc * 0.25)).
template <InputType kIn, bool kRow, bool kCol, bool kRht>
__device__ __forceinline__ void tensor_setup(const Nvfp4Params& p, State& st, float* tables) {
  const int tid = static_cast<int>(threadIdx.x);
  float row_amax = 0.0f, col_amax = 0.0f, plain = 0.0f, rht = 0.0f;
  if (p.measure) {
    __shared__ uint32_t red[2][kThreads / 32];
    uint32_t a = 0, b = 0;
    for (int i = tid; i < p.n_partials; i += kThreads) {
      a = max(a, p.partials[i]);
      if (kRht) b = max(b, p.partials[kMaxPartials + i]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      a = max(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
      b = max(b, __shfl_xor_sync(0xFFFFFFFFu, b, off));
    }
    if ((tid & 31) == 0) red[0][tid >> 5] = a, red[1][tid >> 5] = b;
    __syncthreads();
    a = 0, b = 0;
#pragma unroll
    for (int i = 0; i < kThreads / 32; ++i) a = max(a, red[0][i]), b = max(b, red[1][i]);
    plain = __uint_as_float(a);
    rht = __uint_as_float(b);
    row_amax = plain;
    col_amax = kRht ? rht : plain;
  } else {
    if (kRow) row_amax = *p.given_row_amax;
    if (kCol) col_amax = *p.given_col_amax;
  }
  const formats::Nvfp4TensorScales rs = formats::nvfp4_tensor_scales(row_amax);
  const formats::Nvfp4TensorScales cs = formats::nvfp4_tensor_scales(col_amax);
  st.row_k = nvfp4::block_scale_factor(rs.s_enc);
  st.col_k = nvfp4::block_scale_factor(cs.s_enc);
  st.col_fold = kRht && InputTraits<kIn>::kBytes == 2 &&
                formats::nvfp4_block_encode_factor(0x7E, cs.s_dec) >= 2.35098870e-38f;  // 2^-124
  // Entry c: formats::nvfp4_block_encode_factor(c, S_dec); 0x7F (NaN scale) is never used.
  const int c = tid & 127;
  float e = c == 0x7F ? 0.0f : formats::nvfp4_block_encode_factor(static_cast<uint8_t>(c), tid < 128 ? rs.s_dec : cs.s_dec);
  if (tid >= 128 && st.col_fold) e = __fmul_rn(e, 0.25f);
  tables[tid] = e;
  st.row_enc = tables;
  st.col_enc = tables + 128;
  if (blockIdx.x == 0 && tid == 0) {
    if (kRow) *p.row_scale_dec = rs.s_dec;
    if (kCol) *p.col_scale_dec = cs.s_dec;
    if (p.measure && p.amax != nullptr) *p.amax = plain;
    if (p.measure && p.col_amax != nullptr) *p.col_amax = rht;
  }
}

template <InputType kIn, bool kRow, bool kCol, bool kRht, bool k2D, bool kSr, bool kFull, bool kGrouped>
__device__ __forceinline__ void quantize_tile(const Nvfp4Params& p, const uint32_t* tile, const TileAt& at,
                                              State& st, const TileBlocks* tb, uint8_t* row_staged,
                                              uint8_t* col_staged, const Segment* segs) {
  if constexpr (kRow) rowwise_tile<kIn, k2D, kSr, kFull, kGrouped>(p, tile, at, st, tb, row_staged, segs);
  if constexpr (kCol) {
    // The columnwise pass takes the plain max |x| when there is no rowwise pass (and no 2D pass).
    if (!kRow && !k2D && kRht && p.track_amax && p.amax != nullptr)
      columnwise_tile<kIn, k2D, kSr, kRht, kFull, true, kGrouped>(p, tile, at, st, tb, col_staged);
    else
      columnwise_tile<kIn, k2D, kSr, kRht, kFull, !kRow && !kRht, kGrouped>(p, tile, at, st, tb, col_staged);
  }
}

// kGrouped: the grouped mode with a columnwise copy (the tiles walk the padded row space; CTA 0
// writes the padded ends). A rowwise-only grouped run is the dense kernel.
template <InputType kIn, bool kRow, bool kCol, bool kRht, bool k2D, bool kSr, bool kGrouped = false>
__global__ void __launch_bounds__(kThreads, kSr ? 2 : 3) nvfp4_quantize_kernel(const __grid_constant__ Nvfp4Params p) {
  using S = TileShape<kIn>;
  static_assert(!kGrouped || (kCol && !k2D), "grouped tiles carry a 1D columnwise copy");
  // S::kStages tiles; grouped: then the expert ends and padded ends (num_groups words each) and
  // two tiles' segments (2 x 8).
  extern __shared__ uint4 dynamic_smem[];
  __shared__ alignas(16) uint8_t row_staged[kGrouped ? 1 : 2][kGrouped ? 16 : 2 * kChunkBytes];
  __shared__ alignas(16) uint8_t col_staged[2][2 * kChunkBytes];
  __shared__ float tables[2 * 128];
  __shared__ TileBlocks tb;

  const int tid = static_cast<int>(threadIdx.x);
  uint32_t* const tiles = reinterpret_cast<uint32_t*>(dynamic_smem);
  uint32_t* const ends = tiles + S::kStages * S::kWords;
  uint32_t* const pends = ends + p.num_groups;
  Segment* const segs = reinterpret_cast<Segment*>(pends + p.num_groups);
  State st;
  st.amax_bits = 0;
  st.rht_amax_bits = 0;
  st.saw_nonfinite = false;
  if constexpr (kGrouped) {
    __shared__ uint32_t warp_totals[32];
    grouped_offsets<kThreads, 16>(p.group_ends, p.num_groups, p.rows, ends, pends, warp_totals);
    st.col_len = pends[p.num_groups - 1];
    if (blockIdx.x == 0)
      for (int g = tid; g < p.num_groups; g += kThreads) p.padded_group_ends[g] = static_cast<int32_t>(pends[g]);
    if constexpr (kRow) zero_row_scale_padding(p);
  }
  tensor_setup<kIn, kRow, kCol, kRht>(p, st, tables);

  const bool full_stores = p.row_vec_store && p.col_vec_store;
  auto flush = [&](const TileAt& a, int buf) {  // threads 0..63 rowwise chunks, 64..127 columnwise
    if (kRow && !kGrouped && tid < 64)
      store_chunks(p.row_scales, a.tr, 2 * a.tc, p.row_chunk_cols, row_staged[buf], tid, p.scale_vec_store);
    if (kCol && tid >= 64 && tid < 128)
      store_chunks(p.col_scales, a.tc, 2 * a.tr, p.col_chunk_cols, col_staged[buf], tid - 64, p.scale_vec_store);
  };
  // Tile `a` into `stage`; grouped: its segments into segs[buf].
  auto load = [&](const TileAt& a, uint32_t* stage, int buf) {
    if constexpr (kGrouped) copy_tile_grouped<kIn>(p, a, stage, ends, pends, segs + 8 * buf);
    else copy_tile<kIn>(p, a, stage);
  };

  // Grid-stride walk over tiles (column tile fastest), stepped without divisions.
  const int64_t step_tr = gridDim.x / p.col_tiles, step_tc = gridDim.x - step_tr * p.col_tiles;
  int64_t tr = blockIdx.x / p.col_tiles, tc = blockIdx.x - (blockIdx.x / p.col_tiles) * p.col_tiles;
  TileAt at = tile_at<kGrouped>(p, tr, tc);
  if (tr < p.row_tiles) load(at, tiles, 0);
  cp_async_commit();
  TileAt prev{};
  int it = 0;
  while (at.tr < p.row_tiles) {
    tc += step_tc;
    tr += step_tr;
    if (tc >= p.col_tiles) tc -= p.col_tiles, ++tr;
    const TileAt next = tile_at<kGrouped>(p, tr, tc);
    cp_async_wait<0>();
    __syncthreads();  // tile `it` is in shared memory; every thread is done with tile it-1
    if constexpr (S::kStages == 2) {
      if (next.tr < p.row_tiles) load(next, tiles + ((it + 1) & 1) * S::kWords, (it + 1) & 1);
      cp_async_commit();
    }
    if (it > 0) flush(prev, (it - 1) & 1);
    const uint32_t* tile = tiles + (it % S::kStages) * S::kWords;
    if constexpr (k2D) {
      tile_blocks<kIn>(tile, st, &tb);
      __syncthreads();
    }
    uint8_t* const rs = row_staged[kGrouped ? 0 : it & 1];
    const Segment* const ts = segs + 8 * (it & 1);
    if (at.whole && full_stores)
      quantize_tile<kIn, kRow, kCol, kRht, k2D, kSr, true, kGrouped>(p, tile, at, st, &tb, rs, col_staged[it & 1], ts);
    else
      quantize_tile<kIn, kRow, kCol, kRht, k2D, kSr, false, kGrouped>(p, tile, at, st, &tb, rs, col_staged[it & 1], ts);
    if constexpr (S::kStages == 1) {
      __syncthreads();
      if (next.tr < p.row_tiles) load(next, tiles, (it + 1) & 1);
      cp_async_commit();
    }
    prev = at;
    at = next;
    ++it;
  }
  cp_async_wait<0>();
  __syncthreads();
  if (it > 0) flush(prev, (it - 1) & 1);

  const int lane = tid & 31;
  if (p.track_amax) {
    uint32_t a = st.amax_bits, b = st.rht_amax_bits;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      a = max(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
      b = max(b, __shfl_xor_sync(0xFFFFFFFFu, b, off));
    }
    if (lane == 0 && p.amax != nullptr) raise_amax(p.amax, a);
    if (lane == 0 && kRht && p.col_amax != nullptr) raise_amax(p.col_amax, b);
  }
  if (p.nonfinite != nullptr && __any_sync(0xFFFFFFFFu, st.saw_nonfinite) && lane == 0) *p.nonfinite = 1;
}

// ---- Dispatch ------------------------------------------------------------------------------------

bool aligned(const void* ptr, int64_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }
int element_bytes(InputType t) { return t == InputType::kFp32 ? 4 : 2; }

// Dynamic shared memory of the grouped mode past the tiles: the expert ends and padded ends, and
// two tiles' segments.
int grouped_smem(int num_groups) { return 8 * num_groups + 2 * 8 * static_cast<int>(sizeof(Segment)); }

template <InputType kIn, bool kRow, bool kCol, bool kRht, bool k2D, bool kSr, bool kGrouped = false>
Status launch_quantize(const Nvfp4Params& params, cudaStream_t stream) {
  auto* kernel = nvfp4_quantize_kernel<kIn, kRow, kCol, kRht, k2D, kSr, kGrouped>;
  const int tile_smem = TileShape<kIn>::kStages * TileShape<kIn>::kWords * 4;
  const int smem = tile_smem + (kGrouped ? grouped_smem(params.num_groups) : 0);
  int resident = 0;
  BS_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, "nvfp4_quantize_kernel",
                                   &resident, kGrouped ? tile_smem + grouped_smem(kMaxGroups) : 0));
  // Persistent: each CTA builds its encode tables (and, with a measured amax, reduces the amax
  // pass's partial maxima; grouped: scans the group ends) once. One CTA per tile
  // (detail::tile_grid) measured slower here on an H200: row+col RHT given 55.0% -> 50.6% of copy
  // (docs/performance.md).
  const int64_t grid = even_grid(params.row_tiles * params.col_tiles, resident);
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(params);
  return cuda_status(cudaGetLastError(), "nvfp4_quantize_kernel launch");
}

template <InputType kIn, bool kRow, bool kCol>
Status dispatch_options(const QuantizeProblem& p, const Nvfp4Params& params, cudaStream_t s) {
  const bool rht = kCol && p.hadamard_columnwise;
  if (p.nvfp4_2d)
    return p.stochastic_rounding ? launch_quantize<kIn, kRow, kCol, false, true, true>(params, s)
                                 : launch_quantize<kIn, kRow, kCol, false, true, false>(params, s);
  if (rht) {
    if constexpr (kCol)
      return p.stochastic_rounding ? launch_quantize<kIn, kRow, kCol, true, false, true>(params, s)
                                   : launch_quantize<kIn, kRow, kCol, true, false, false>(params, s);
  }
  return p.stochastic_rounding ? launch_quantize<kIn, kRow, kCol, false, false, true>(params, s)
                               : launch_quantize<kIn, kRow, kCol, false, false, false>(params, s);
}

template <InputType kIn>
Status dispatch_directions(const QuantizeProblem& p, const QuantizeOutputs& out, Nvfp4Params* params,
                           cudaStream_t s) {
  if (params->measure) {
    // The plain amax is needed by the rowwise copy, the un-transformed columnwise one and outputs.amax.
    const bool rht = p.hadamard_columnwise;
    const bool plain = p.directions != Direction::kColumnwise || !rht || out.amax != nullptr;
    BS_RETURN_IF_ERROR(launch_nvfp4_amax(p, params->x, params->vec_load, plain, rht,
                                         const_cast<uint32_t*>(params->partials), &params->n_partials, s));
  }
  switch (p.directions) {
    case Direction::kRowwise: return dispatch_options<kIn, true, false>(p, *params, s);
    case Direction::kColumnwise: return dispatch_options<kIn, false, true>(p, *params, s);
    case Direction::kBoth: return dispatch_options<kIn, true, true>(p, *params, s);
  }
  return Status::error("problem.directions: unknown value");
}

// Grouped with a columnwise copy (1D blocks): the amax pass walks the padded segments when the RHT
// copy needs its amax.
template <InputType kIn>
Status dispatch_grouped(const GroupedQuantizeProblem& gp, const QuantizeOutputs& out, Nvfp4Params* params,
                        cudaStream_t s) {
  const QuantizeProblem& p = gp.dense;
  const bool rht = p.hadamard_columnwise;
  if (params->measure) {
    const bool plain = p.directions != Direction::kColumnwise || !rht || out.amax != nullptr;
    const Nvfp4AmaxGroups groups{params->group_ends, params->num_groups, params->tile_rows};
    BS_RETURN_IF_ERROR(launch_nvfp4_amax(p, params->x, params->vec_load, plain, rht,
                                         const_cast<uint32_t*>(params->partials), &params->n_partials, s, &groups));
  }
  const bool sr = p.stochastic_rounding;
  if (p.directions == Direction::kBoth) {
    if (rht) return sr ? launch_quantize<kIn, true, true, true, false, true, true>(*params, s)
                       : launch_quantize<kIn, true, true, true, false, false, true>(*params, s);
    return sr ? launch_quantize<kIn, true, true, false, false, true, true>(*params, s)
              : launch_quantize<kIn, true, true, false, false, false, true>(*params, s);
  }
  if (rht) return sr ? launch_quantize<kIn, false, true, true, false, true, true>(*params, s)
                     : launch_quantize<kIn, false, true, true, false, false, true>(*params, s);
  return sr ? launch_quantize<kIn, false, true, false, false, true, true>(*params, s)
            : launch_quantize<kIn, false, true, false, false, false, true>(*params, s);
}

// The parameters both modes share. tile_rows: the rows the tiles walk, = p.rows (dense) or the
// capacity (grouped with a columnwise copy: the columnwise copy's row count).
Nvfp4Params make_params(const QuantizeProblem& p, const void* x, const float* given_row, const float* given_col,
                        const QuantizeOutputs& out, void* workspace, int64_t tile_rows) {
  const bool row = p.directions != Direction::kColumnwise;
  const bool col = p.directions != Direction::kRowwise;
  const int64_t esize = element_bytes(p.input_type);
  Nvfp4Params params{};
  params.x = x;
  params.rows = p.rows, params.cols = p.cols, params.ld = p.ld;
  params.row_data = row ? out.rowwise_data : nullptr;
  params.row_scales = row ? static_cast<uint8_t*>(out.rowwise_scales) : nullptr;
  params.row_scale_dec = row ? out.rowwise_scale_dec : nullptr;
  params.col_data = col ? out.columnwise_data : nullptr;
  params.col_scales = col ? static_cast<uint8_t*>(out.columnwise_scales) : nullptr;
  params.col_scale_dec = col ? out.columnwise_scale_dec : nullptr;
  params.amax = out.amax;
  params.col_amax = out.columnwise_amax;
  params.nonfinite = out.nonfinite;
  params.measure = p.tensor_amax == TensorAmax::kMeasure;
  params.given_row_amax = given_row;
  params.given_col_amax = given_col;
  params.partials = static_cast<const uint32_t*>(workspace);
  params.track_amax = !params.measure && (out.amax != nullptr || out.columnwise_amax != nullptr);
  params.sr_seed = p.sr_seed, params.sr_offset = p.sr_offset;
  params.row_tiles = (tile_rows + kTile - 1) / kTile;
  params.col_tiles = (p.cols + kTile - 1) / kTile;
  params.row_pitch = (p.cols + 1) / 2;
  params.col_pitch = (tile_rows + 1) / 2;
  params.row_chunk_cols = (p.cols + 63) / 64;
  params.col_chunk_cols = (tile_rows + 63) / 64;
  params.vec_load = aligned(x, 16) && (p.ld * esize) % 16 == 0;
  params.row_vec_store = !row || (aligned(out.rowwise_data, 8) && p.cols % 16 == 0);
  params.col_vec_store = !col || (aligned(out.columnwise_data, 8) && tile_rows % 16 == 0);
  params.scale_vec_store = (!row || aligned(out.rowwise_scales, 16)) && (!col || aligned(out.columnwise_scales, 16));
  params.tile_rows = tile_rows;
  params.row_scale_word_store = !row || aligned(out.rowwise_scales, 4);
  return params;
}

}  // namespace

size_t nvfp4_workspace_size(const QuantizeProblem& p) {
  if (p.tensor_amax != TensorAmax::kMeasure || p.rows <= 0 || p.cols <= 0) return 0;
  return 2 * kMaxPartials * sizeof(uint32_t);
}

Status launch_nvfp4_quantize(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                             void* workspace, cudaStream_t stream) {
  Nvfp4Params params = make_params(p, in.x, in.rowwise_tensor_amax, in.columnwise_tensor_amax, out, workspace, p.rows);
  switch (p.input_type) {
    case InputType::kBf16: return dispatch_directions<InputType::kBf16>(p, out, &params, stream);
    case InputType::kFp16: return dispatch_directions<InputType::kFp16>(p, out, &params, stream);
    case InputType::kFp32: return dispatch_directions<InputType::kFp32>(p, out, &params, stream);
  }
  return Status::error("problem.input_type: unknown value");
}

// The same workspace as the dense mode: the amax pass's partial maxima.
size_t nvfp4_grouped_workspace_size(const GroupedQuantizeProblem& p) { return nvfp4_workspace_size(p.dense); }

Status launch_nvfp4_grouped_quantize(const GroupedQuantizeProblem& gp, const GroupedQuantizeInputs& in,
                                     const GroupedQuantizeOutputs& out, void* workspace, cudaStream_t stream) {
  const QuantizeProblem& p = gp.dense;  // checked by quantize.cpp's can_implement
  const bool col = p.directions != Direction::kRowwise;
  const bool empty = p.rows == 0 || p.cols == 0;
  const QuantizeInputs dense_in{in.x, in.rowwise_tensor_amax, in.columnwise_tensor_amax};
  if (!col || empty) {  // the padded ends alone; then the dense kernel writes the rowwise copy
    BS_RETURN_IF_ERROR(launch_grouped_offsets(in.group_ends, gp.num_groups, p.rows, 16, out.padded_group_ends, stream));
    if (empty) return Status::ok();
    return launch_nvfp4_quantize(p, dense_in, out.dense, workspace, stream);
  }
  // The tiles walk the padded row space: the columnwise copy's capacity rows.
  Nvfp4Params params = make_params(p, in.x, in.rowwise_tensor_amax, in.columnwise_tensor_amax, out.dense,
                                   workspace, grouped_capacity(gp));
  params.group_ends = in.group_ends;
  params.padded_group_ends = out.padded_group_ends;
  params.num_groups = gp.num_groups;
  switch (p.input_type) {
    case InputType::kBf16: return dispatch_grouped<InputType::kBf16>(gp, out.dense, &params, stream);
    case InputType::kFp16: return dispatch_grouped<InputType::kFp16>(gp, out.dense, &params, stream);
    case InputType::kFp32: return dispatch_grouped<InputType::kFp32>(gp, out.dense, &params, stream);
  }
  return Status::error("problem.input_type: unknown value");
}

}  // namespace blockscale::quant::detail
