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
//   load      : cp.async of 16-byte granules (zero-filled past the matrix; on whole tiles each
//               warp copies one 16-row chunk, so a lane's shared addresses differ by immediates)
//               into a shared tile of 32-bit words whose granule index is XOR-swizzled by the row's
//               16-row chunk and the granule's upper bits, so the copies, the row reads and the
//               column reads are free of bank conflicts; 16-bit input double-buffers, fp32 (64 KB
//               tiles) single-buffers.
//   rowwise   : a thread quantizes whole 1x16 blocks (4 per tile): 16 codes = one 8-byte store,
//               8 lanes write 64 contiguous bytes of a row.
//   columnwise: a thread reads 16 rows of one word column (two 16-bit columns or one fp32), applies
//               the RHT per column when asked, and writes 8 bytes per column; 8 lanes write 64
//               contiguous bytes of a stored row.
//   2D        : before the row / column work, 4 threads per 16x16 tile block reduce its amax and
//               leave both copies' (scale, encode factor) in shared memory.
//   Block amax: 16-bit input takes max.NaN.xorsign.abs on element pairs (HMNMX2; the maximum of
//               bf16 / fp16 values is one of them), a column pair's two maxima in one word.
//   Encoder   : the saturating minimum is needed only when some |y| of a block may reach 7 (known
//               from the block amax); a warp vote picks the cheaper encoder when no lane needs it.
//               A NaN scale also takes the saturating path, which zeroes the block and keeps the
//               NaN-free amax, so the cheaper path holds no test for it.
//   Tiles wholly inside the matrix (with aligned outputs) take a path without bounds checks.
// The amax pass (kMeasure) walks the matrix from its end to its start, so the quantize kernel (which
// starts at the top) finds the most recently read rows in L2.
// The grouped mode's tiles and host side: quant/nvfp4_grouped_quantize.cu; the host side that picks
// an instantiation: quant/nvfp4_quantize_dispatch.cuh. Included by each mode's file, which
// instantiates its own kernels (the anonymous namespace keeps them in that file).
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "quant/nvfp4_quantize_tile.cuh"  // defines: Nvfp4Params, TileShape, the load, State, stores

namespace blockscale::quant::detail {
namespace {

// ---- Rowwise: thread (warp w, lane l) quantizes block q = l % 8 of rows r_s = 32s + 4w + l / 8,
// s = 0..3. The shared-memory swizzle key of row r_s is ((r_0 >> 4) & 7) ^ 2s (r_0 < 32), so the
// word offset of each granule of block s is (offset at s = 0) ^ 8s, plus 32 rows.
// kGrouped: tile row r_s is row r_s % 16 of segment segs[r_s / 16]; every row is quantized (zero
// rows give zeros), only token rows are stored, at their input row.
template <DType kIn, bool k2D, bool kSr, bool kFull, bool kGrouped>
__device__ __forceinline__ void rowwise_tile(const Nvfp4Params& p, const uint32_t* tile, const TileAt& at,
                                             State& st, const TileBlocks* tb, uint8_t* staged, const Segment* segs) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  constexpr int kGran = In::kBytes;
  const int q = static_cast<int>(threadIdx.x) & 7;
  const int row0 = static_cast<int>(threadIdx.x) >> 3;  // 4 w + l / 8
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
    pin(st.row_enc);
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
      float m = 0.0f;
      if constexpr (k2D) {
#pragma unroll
        for (int i = 0; i < 16; ++i) f[i] = In::kBytes == 2 ? In::elem(w[i / 2], i % 2) : __uint_as_float(w[i]);
        const int blk = (rt >> 4) * 8 + q;
        b = from_info(tb->info[0][blk], tb->enc[0][blk]);
      } else {
        m = run_amax<kIn>(w, f);
        b = block_scale(m, m, st.row_k, st.row_enc);
      }
      auto note = [&](bool nonfinite) {  // 2D: tile_blocks keeps the amax
        if constexpr (!k2D) {
          if (nonfinite) {
            st.saw_nonfinite = true;
            st.amax_bits = max(st.amax_bits, finite_max_bits(f));
          } else {
            note_amax(st.amax_bits, m);
          }
        }
      };
      uint2 out;
      if constexpr (kSr)
        out = encode16_stochastic(f, b, p, static_cast<uint64_t>(r) * static_cast<uint64_t>(p.cols) +
                                               static_cast<uint64_t>(at.c0 + 16 * q), note);
      else
        out = encode_block<kFull>(f, run_signs<kIn>(w), b, note);
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
// upper bits 0) ^ 4 (n & mask) + 32 n. Its stored rows are ct = c + 32 kCols n + h (c: item 0's
// first, kCols c + h < 64 never crosses a 32-row boundary), so the data pointer steps by
// 32 kCols rows and the staged scale byte by 4 kCols per item, 16 per column h.
// kGrouped: the tile rows are the padded row space; a 16-row block is one segment.
template <DType kIn, bool k2D, bool kSr, bool kRht, bool kFull, bool kPlainAmax, bool kGrouped>
__device__ __forceinline__ void columnwise_tile(const Nvfp4Params& p, const uint32_t* tile, const TileAt& at,
                                                State& st, const TileBlocks* tb, uint8_t* staged) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  constexpr int kCols = 4 / In::kBytes;  // columns per word
  constexpr int kItems = S::kWordsPerRow * 8 / kThreads;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int k = static_cast<int>(threadIdx.x) & 7, wsub = (static_cast<int>(threadIdx.x) >> 3) & 3;
  const int off0 = tile_word<kIn>(16 * k, warp) + wsub;
  const int c = kCols * (static_cast<int>(threadIdx.x) >> 3);  // kCols (4 warp + wsub)
  uint8_t* dst = p.col_data + (at.r0 >> 1) + 8 * k + (at.c0 + c) * p.col_pitch;
  const int64_t dst_step = 32 * kCols * p.col_pitch;
  uint32_t stage = smem_addr(staged + staged_scale(c, k));
  // The plain 16-bit items run unrolled (no per-item address or loop work); the heavier variants
  // (SR, RHT, grouped, fp32) keep a loop, which their registers need.
  constexpr int kUnroll = In::kBytes == 2 && !kSr && !kRht && !kGrouped ? kItems : 1;
#pragma unroll kUnroll
  for (int n = 0; n < kItems; ++n, dst += dst_step, stage += 4 * kCols) {
    pin(stage);
    pin(st.col_enc);
    const int ct0 = c + 32 * kCols * n;  // stored row of column h = 0
    if (!kFull && (ct0 >= at.cols_in || 16 * k >= at.rows_in)) {
#pragma unroll
      for (int h = 0; h < kCols; ++h) sts8(stage + 16 * h, 0);
      continue;
    }
    const uint32_t* col = tile + ((off0 ^ (4 * (n & S::kUpperMask))) + 32 * n);
    uint32_t w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = col[i * S::kWordsPerRow];
    // 16-bit without the RHT: both columns' magnitude maxima and sign words at once.
    uint32_t m2 = 0;
    if constexpr (In::kBytes == 2 && !kRht && !k2D) m2 = pair_absmax<kIn, 16>(w);
    nvfp4::BlockSigns signs[2];  // column h
    if constexpr (In::kBytes == 2 && !kRht && !kSr) {
      nvfp4::signs_of_halves(w, signs[0].lo, signs[1].lo);
      nvfp4::signs_of_halves(w + 8, signs[0].hi, signs[1].hi);
    }
    if constexpr (kRht && kPlainAmax) {  // max |x| of the input when no rowwise pass takes it
      if constexpr (In::kBytes == 2) {
        const uint32_t d = pair_absmax<kIn, 16>(w);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float m = lane_value<kIn>(d, h);
          if (fabsf(m) < CUDART_INF_F) {
            note_amax(st.amax_bits, m);
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
      const int ct = ct0 + h;  // tile column = stored row
      const bool inside = kFull || ct < at.cols_in;
      uint32_t code = 0;
      if (inside) {
        float f[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i], h);
        BlockScale b;
        float m = 0.0f;
        if constexpr (kRht) {
          // f = the unscaled transform; formats' values are f * 0.25 (exact for 16-bit input). With
          // col_fold the 0.25 sits in the table entries instead.
          const float vmax = nvfp4::rht16_unscaled(f);
          if (!st.col_fold) {
#pragma unroll
            for (int i = 0; i < 16; ++i) f[i] = __fmul_rn(f[i], 0.25f);
          }
          m = __fmul_rn(vmax, 0.25f);
          b = block_scale(m, st.col_fold ? vmax : m, st.col_k, st.col_enc);
        } else if constexpr (k2D) {
          const int blk = k * 8 + (ct >> 4);
          b = from_info(tb->info[1][blk], tb->enc[1][blk]);
        } else {
          m = In::kBytes == 2 ? lane_value<kIn>(m2, h) : absmax16_nan(f);
          b = block_scale(m, m, st.col_k, st.col_enc);
        }
        // The amax bookkeeping: the RHT copy's own amax, the plain one when no rowwise pass keeps
        // it; 2D: tile_blocks.
        auto note = [&](bool nonfinite) {
          if constexpr (kRht) {
            if (nonfinite) {
              st.saw_nonfinite = true;
              st.rht_amax_bits = max(st.rht_amax_bits, finite_max_bits(f, st.col_fold ? 0.25f : 1.0f));
            } else {
              note_amax(st.rht_amax_bits, m);
            }
          } else if constexpr (!k2D) {
            if (nonfinite) {
              st.saw_nonfinite = true;
              if (kPlainAmax) st.amax_bits = max(st.amax_bits, finite_max_bits(f));
            } else if (kPlainAmax) {
              note_amax(st.amax_bits, m);
            }
          }
        };
        uint2 out;
        if constexpr (kSr) {
          // The stored row length: rows, or grouped the padded total (formats' padded matrix; the
          // zero blocks past it round to zero with any word).
          const uint64_t len = kGrouped ? uint64_t{st.col_len} : static_cast<uint64_t>(p.rows);
          out = encode16_stochastic(f, b, p, static_cast<uint64_t>(at.c0 + ct) * len + static_cast<uint64_t>(at.r0 + 16 * k), note);
        } else if constexpr (kRht || In::kBytes == 4) {
          uint32_t sw[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) sw[i] = __float_as_uint(f[i]);
          out = encode_block<kFull>(f, run_signs<DType::kF32>(sw), b, note);
        } else {
          out = encode_block<kFull>(f, signs[h], b, note);
        }
        uint8_t* const row = dst + h * p.col_pitch;
        if (kFull) *reinterpret_cast<uint2*>(row) = out;
        else store_codes(row, out, at.rows_in - 16 * k, p.col_vec_store);
        code = b.code;
      }
      sts8(stage + 16 * h, code);
    }
  }
}

// ---- 2D: 4 threads per 16x16 block (4 rows each) reduce its amax; thread 0 of the four derives
// both copies' scale.
template <DType kIn>
__device__ __forceinline__ void tile_blocks(const uint32_t* tile, State& st, TileBlocks* tb) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  constexpr int kGran = In::kBytes;
  const int tid = static_cast<int>(threadIdx.x);
  const int blk = tid >> 2, sub = tid & 3;
  const int bi = blk >> 3, bj = blk & 7;
  // The four rows lie in one 16-row chunk (one swizzle key): row i is row 0's address plus i rows.
  uint32_t addr[kGran];
#pragma unroll
  for (int j = 0; j < kGran; ++j) addr[j] = smem_addr(tile + tile_word<kIn>(16 * bi + 4 * sub, kGran * bj + j));
  auto read_row = [&](int i, uint32_t* w) {
    uint32_t a[kGran];
#pragma unroll
    for (int j = 0; j < kGran; ++j) a[j] = addr[j] + 4u * S::kWordsPerRow * i;
    read_run<kIn>(a, w);
  };
  // The four rows' magnitude maximum (sign meaningless, NaN-propagating): 16-bit input keeps the
  // packed pair maximum across the rows and folds once.
  uint32_t m2 = 0;
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t w[4 * kGran];
    read_row(i, w);
    if constexpr (In::kBytes == 2) {
      const uint32_t r = pair_absmax<kIn, 8>(w);
      m2 = i ? absmax2<kIn>(m2, r) : r;
    } else {
      float f[16];
      a = nvfp4::max_nan(a, run_amax<kIn>(w, f));
    }
  }
  if constexpr (In::kBytes == 2) a = fold_lanes<kIn>(m2);
  if (fabsf(a) < CUDART_INF_F) {
    note_amax(st.amax_bits, a);
  } else {  // formats' tensor amax skips the NaNs: row by row, NaN-free (rare: out of line)
#pragma unroll 1
    for (int i = 0; i < 4; ++i) {
      uint32_t w[4 * kGran];
      float f[16];
      read_row(i, w);
      run_amax<kIn>(w, f);
      st.amax_bits = max(st.amax_bits, finite_max_bits(f));
    }
  }
  uint32_t m = __float_as_uint(fabsf(a));  // NaN above Inf above the finite values
  m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
  m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 2));
  if (sub == 0) {
    const BlockScale r = block_scale(__uint_as_float(m), __uint_as_float(m), st.row_k, st.row_enc);
    const BlockScale c = block_scale(__uint_as_float(m), __uint_as_float(m), st.col_k, st.col_enc);
    if (r.nonfinite()) st.saw_nonfinite = true;
    tb->info[0][blk] = r.code | (r.cap ? 1u << 8 : 0u);
    tb->info[1][blk] = c.code | (c.cap ? 1u << 8 : 0u);
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
// Batched (batch >= 0): matrix `batch`'s partials; its decode scale is written by
// batch_decode_scales, so nothing is written here, and the tables are rewritten in place: every
// thread must be done with the previous matrix's (the caller's barrier) and waits for the new ones.
template <DType kIn, bool kRow, bool kCol, bool kRht>
__device__ __forceinline__ void tensor_setup(const Nvfp4Params& p, State& st, float* tables, int64_t batch = -1) {
  const int tid = static_cast<int>(threadIdx.x);
  float row_amax = 0.0f, col_amax = 0.0f, plain = 0.0f, rht = 0.0f;
  if (p.measure) {
    __shared__ uint32_t red[2][kThreads / 32];
    const uint32_t* partials = p.partials + (batch > 0 ? batch * 2 * kMaxPartials : 0);
    uint32_t a = 0, b = 0;
    for (int i = tid; i < p.n_partials; i += kThreads) {
      a = max(a, partials[i]);
      if (kRht) b = max(b, partials[kMaxPartials + i]);
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
  st.row_enc = smem_addr(tables);
  st.col_enc = smem_addr(tables + 128);
  if (batch >= 0) {
    __syncthreads();  // the new tables, before any thread encodes with them
    return;
  }
  if (blockIdx.x == 0 && tid == 0) {
    if (kRow) *p.row_scale_dec = rs.s_dec;
    if (kCol) *p.col_scale_dec = cs.s_dec;
    if (p.measure && p.amax != nullptr) *p.amax = plain;
    if (p.measure && p.col_amax != nullptr) *p.col_amax = rht;
  }
}

// Batched: CTA 0 writes every matrix's decode scale (thread b reduces matrix b's partials) and
// raises outputs.amax (zeroed by run()) to each matrix's amax.
__device__ __forceinline__ void batch_decode_scales(const Nvfp4Params& p) {
  if (blockIdx.x != 0) return;
  for (int64_t b = threadIdx.x; b < p.batches; b += kThreads) {
    uint32_t a = 0;
    for (int i = 0; i < p.n_partials; ++i) a = max(a, p.partials[b * 2 * kMaxPartials + i]);
    p.row_scale_dec[b] = formats::nvfp4_tensor_scales(__uint_as_float(a)).s_dec;
    if (p.amax != nullptr) raise_amax(p.amax, a);
  }
}

template <DType kIn, bool kRow, bool kCol, bool kRht, bool k2D, bool kSr, bool kFull, bool kGrouped>
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
template <DType kIn, bool kRow, bool kCol, bool kRht, bool k2D, bool kSr, bool kGrouped = false>
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
  const bool batched = p.batches > 1;
  int64_t setup_batch = -1;  // batched: the matrix whose tensor scale the tables hold
  if (batched) {
    batch_decode_scales(p);
  } else {
    tensor_setup<kIn, kRow, kCol, kRht>(p, st, tables);
  }

  const bool full_stores = p.row_vec_store && p.col_vec_store;
  auto flush = [&](int ftr, int ftc, int buf) {  // threads 0..63 rowwise chunks, 64..127 columnwise
    if (kRow && !kGrouped && tid < 64)
      store_chunks(p.row_scales, ftr, 2 * ftc, p.row_chunk_cols, row_staged[buf], tid, p.scale_vec_store);
    if (kCol && tid >= 64 && tid < 128)
      store_chunks(p.col_scales, ftc, 2 * ftr, p.col_chunk_cols, col_staged[buf], tid - 64, p.scale_vec_store);
  };
  // Tile `a` into `stage`; grouped: its segments into segs[buf].
  auto load = [&](const TileAt& a, uint32_t* stage, int buf) {
    if constexpr (kGrouped) copy_tile_grouped<kIn>(p, a, stage, ends, pends, segs + 8 * buf);
    else copy_tile<kIn>(p, a, stage);
  };

  // Grid-stride walk over tiles (column tile fastest), stepped without divisions. Only the tile
  // coordinates live across the loop; the rest of a TileAt is derived where it is used.
  const int step_tr = static_cast<int>(gridDim.x) / p.col_tiles;
  const int step_tc = static_cast<int>(gridDim.x) - step_tr * p.col_tiles;
  int tr = static_cast<int>(blockIdx.x) / p.col_tiles;
  int tc = static_cast<int>(blockIdx.x) - tr * p.col_tiles;
  if (tr < p.row_tiles) load(tile_at(p, tr, tc), tiles, 0);
  cp_async_commit();
  int prev_tr = 0, prev_tc = 0;
  int it = 0;
  while (tr < p.row_tiles) {
    int next_tr = tr + step_tr, next_tc = tc + step_tc;
    if (next_tc >= p.col_tiles) next_tc -= p.col_tiles, ++next_tr;
    cp_async_wait<0>();
    __syncthreads();  // tile `it` is in shared memory; every thread is done with tile it-1
    if constexpr (S::kStages == 2) {
      if (next_tr < p.row_tiles) load(tile_at(p, next_tr, next_tc), tiles + ((it + 1) & 1) * S::kWords, (it + 1) & 1);
      cp_async_commit();
    }
    if (it > 0) flush(prev_tr, prev_tc, (it - 1) & 1);
    const TileAt at = tile_at(p, tr, tc);
    const uint32_t* tile = tiles + (it % S::kStages) * S::kWords;
    if (batched && at.r0 / p.batch_rows != setup_batch) {  // uniform: the CTA's tile
      setup_batch = at.r0 / p.batch_rows;
      tensor_setup<kIn, kRow, kCol, kRht>(p, st, tables, setup_batch);
    }
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
      if (next_tr < p.row_tiles) load(tile_at(p, next_tr, next_tc), tiles, (it + 1) & 1);
      cp_async_commit();
    }
    prev_tr = tr, prev_tc = tc;
    tr = next_tr, tc = next_tc;
    ++it;
  }
  cp_async_wait<0>();
  __syncthreads();
  if (it > 0) flush(prev_tr, prev_tc, (it - 1) & 1);

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

}  // namespace
}  // namespace blockscale::quant::detail
