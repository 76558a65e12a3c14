// MXFP8 quantize (E4M3, E5M2; 1x32 blocks, E8M0 scales, ceil or floor rounding) of a row-major
// bf16 / fp16 / fp32 matrix: ONE read of the input writes the rowwise copy (rows x cols, blocks
// along cols), the columnwise copy (cols x rows, the transpose, blocks along the input's rows), or
// both, with their scales in the swizzled 128x4 layout (padding written as 0).
//
// Must match, byte for byte: formats::quantize() (formats/mx_quantize.cpp) followed by
// formats::pack_swizzled_scales(). Elements: x * 2^-e in fp32 (formats::mul_rn), then
// cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (or formats::encode_minifloat itself); the scale:
// formats::mx_scale_exponent as integer steps (mx_block_scale). tests/quant checks both against
// formats on every finite fp32 pattern.
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
//               shuffle); 16 codes as one 16-byte store (a warp writes four full 128-byte rows).
//   columnwise: a thread reads 16 rows of one word column (2 columns of 16-bit input); block amax
//               = 2 lanes (one xor shuffle); 16 codes per column as one 16-byte store (a warp
//               writes 4 or 8 full 128-byte rows of the transpose).
//   amax      : 16-bit input: max.u16x2 on packed magnitudes, widened once per block.
//   Tiles wholly inside the matrix (with aligned pointers) take a path without bounds checks.
//   One barrier per tile: the scale chunks are double-buffered and stored one tile late.
#include <algorithm>
#include <string>

#include "quant/mx_device.cuh"
#include "quant/launchers.h"
#include "quant/mx_quantize.h"

namespace blockscale::quant::detail {
namespace {

using formats::Recipe;

constexpr int kTile = 128;     // tile rows = tile columns
constexpr int kThreads = 256;  // 8 warps
constexpr int kChunkBytes = 512;

struct Mxfp8Params {
  const void* x;
  int64_t rows, cols, ld;
  uint8_t* row_data;
  uint8_t* row_scales;
  uint8_t* col_data;
  uint8_t* col_scales;
  float* amax;
  int* nonfinite;
  int row_tiles, col_tiles;
  MxScaleRule rule;      // formats::mx_scale_exponent's constants for the recipe and rounding
  bool vec_load;         // x and ld * element size 16-byte aligned: cp.async
  int row_store_align;   // 16, 8 or 1: widest rowwise data store (pointer and cols allow)
  bool vec_col_store;    // columnwise data 16-byte aligned, rows % 16 == 0
  bool vec_scale_store;  // both scale buffers 16-byte aligned
};

// The shared tile of one input type: 128 rows of 32-bit words, in 16-byte granules.
template <InputType kIn>
struct TileShape {
  static constexpr int kBytes = InputTraits<kIn>::kBytes;
  static constexpr int kWordsPerRow = kTile * kBytes / 4;   // 64 or 128
  static constexpr int kGranulesPerRow = kWordsPerRow / 4;  // 16 or 32
  static constexpr int kHalfMask = kGranulesPerRow / 8 - 1; // granule bits above the low 3: 1 or 3
  static constexpr int kWords = kTile * kWordsPerRow;
  static constexpr int kVecsPerRow = kBytes;                // 16-byte vectors in 16 elements
  static constexpr int kStages = kBytes == 2 ? 2 : 1;
};

// Word offset of granule g of tile row r. The XOR changes the low 3 bits of g by the row's
// 16-row chunk and by g's higher bits: 8 lanes reading 8 consecutive granule pairs (quads) of a
// row, or the same granule of 8 row chunks, hit 8 distinct bank groups.
template <InputType kIn>
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

// One tile's position and how much of it lies inside the matrix.
struct TilePos {
  int tr, tc;
  int64_t r0, c0;
  int rows_in, cols_in;  // rows / columns of the tile inside the matrix (1..128)
  bool inside;           // rows_in == cols_in == 128
};

__device__ __forceinline__ TilePos tile_pos(const Mxfp8Params& p, TileIndex t) {
  TilePos tp;
  tp.tr = t.tr;
  tp.tc = t.tc;
  tp.r0 = int64_t{t.tr} * kTile;
  tp.c0 = int64_t{t.tc} * kTile;
  tp.rows_in = static_cast<int>(min(int64_t{kTile}, p.rows - tp.r0));
  tp.cols_in = static_cast<int>(min(int64_t{kTile}, p.cols - tp.c0));
  tp.inside = tp.rows_in == kTile && tp.cols_in == kTile;
  return tp;
}

// One 16-byte granule (8 or 4 elements) of row gr, columns gc.. of the input, by scalar loads
// (zeros outside the matrix): the path for inputs whose pointer or stride rules out cp.async.
template <InputType kIn>
__device__ __forceinline__ uint4 load_granule_scalar(const Mxfp8Params& p, int64_t gr, int64_t gc) {
  constexpr int kBytes = InputTraits<kIn>::kBytes;
  uint32_t w[4] = {0, 0, 0, 0};
  if (gr < p.rows) {
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
template <InputType kIn>
__device__ __forceinline__ void load_tile(const Mxfp8Params& p, const TilePos& tp, uint32_t* stage) {
  using S = TileShape<kIn>;
  constexpr int kBytes = S::kBytes;
  constexpr int kElems = 16 / kBytes;                                    // elements per granule
  constexpr int kLanesPerRow = S::kGranulesPerRow < 32 ? S::kGranulesPerRow : 32;
  constexpr int kRowsPerPass = (kThreads / 32) * (32 / kLanesPerRow);   // 16 or 8
  constexpr int kPasses = kTile / kRowsPerPass;                          // 8 or 16
  const int tid = static_cast<int>(threadIdx.x);
  const int g = tid % kLanesPerRow, row0 = tid / kLanesPerRow;
  const char* src = static_cast<const char*>(p.x) + ((tp.r0 + row0) * p.ld + tp.c0 + kElems * g) * kBytes;
  const int64_t pass_stride = kRowsPerPass * p.ld * kBytes;
  if (p.vec_load && tp.inside) {
#pragma unroll
    for (int s = 0; s < kPasses; ++s)
      cp_async_16B(stage + granule_word<kIn>(kRowsPerPass * s + row0, g), src + s * pass_stride, 16);
  } else if (p.vec_load) {
    const int bytes_in_row = max(0, min(kElems, tp.cols_in - kElems * g)) * kBytes;
#pragma unroll
    for (int s = 0; s < kPasses; ++s) {
      const int rt = kRowsPerPass * s + row0;
      const int bytes = rt < tp.rows_in ? bytes_in_row : 0;
      cp_async_16B(stage + granule_word<kIn>(rt, g),
                   bytes > 0 ? static_cast<const void*>(src + s * pass_stride) : p.x, bytes);
    }
  } else {
#pragma unroll 1
    for (int s = 0; s < kPasses; ++s) {
      const int rt = kRowsPerPass * s + row0;
      *reinterpret_cast<uint4*>(stage + granule_word<kIn>(rt, g)) =
          load_granule_scalar<kIn>(p, tp.r0 + rt, tp.c0 + kElems * g);
    }
  }
}

// Rowwise: this thread's 16 elements of tile row rt (columns 16q..16q+15); lanes q and q ^ 1
// hold one 32-column block. kFull: the tile is inside the matrix and stores are 16-byte aligned.
template <InputType kIn, Recipe kRecipe, ElementEncoder kEnc, bool kFull>
__device__ __forceinline__ void quantize_row16(const Mxfp8Params& p, const uint32_t* tile,
                                               const TilePos& tp, int rt, int q, uint8_t* dst,
                                               uint8_t* scale_chunk, uint32_t& tensor_amax,
                                               bool& saw_nonfinite) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  constexpr int kWords = 4 * In::kBytes;  // words holding 16 elements
  uint32_t w[kWords];
#pragma unroll
  for (int j = 0; j < S::kVecsPerRow; ++j) {
    const uint4 v = *reinterpret_cast<const uint4*>(tile + granule_word<kIn>(rt, S::kVecsPerRow * q + j));
    w[4 * j] = v.x, w[4 * j + 1] = v.y, w[4 * j + 2] = v.z, w[4 * j + 3] = v.w;
  }
  uint32_t m = fold_slots<kIn>(abs_max_words<kIn, kWords>(w));
  note_tensor_amax<kIn, kWords>(w, m, tensor_amax, saw_nonfinite);
  m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
  const MxScale s = mx_block_scale(In::widen(m), p.rule);
  float f[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) f[i] = In::kBytes == 2 ? In::elem(w[i / 2], i % 2) : In::elem(w[i], 0);
  uint4 out;
  out.x = encode4<kRecipe, kEnc>(f, s.inv);
  out.y = encode4<kRecipe, kEnc>(f + 4, s.inv);
  out.z = encode4<kRecipe, kEnc>(f + 8, s.inv);
  out.w = encode4<kRecipe, kEnc>(f + 12, s.inv);
  if (s.nonfinite) out = make_uint4(0, 0, 0, 0);

  if (kFull) {
    *reinterpret_cast<uint4*>(dst) = out;
  } else if (rt < tp.rows_in) {
    const int n = tp.cols_in - 16 * q;  // elements of the 16 inside the matrix
    if (p.row_store_align == 16 && n >= 16) {
      *reinterpret_cast<uint4*>(dst) = out;
    } else {
      const uint32_t words[4] = {out.x, out.y, out.z, out.w};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (p.row_store_align >= 8 && n >= 8 * h + 8) {
          *reinterpret_cast<uint2*>(dst + 8 * h) = make_uint2(words[2 * h], words[2 * h + 1]);
        } else {
#pragma unroll
          for (int i = 8 * h; i < 8 * h + 8; ++i)
            if (i < n) dst[i] = static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
        }
      }
    }
  }
  // Both lanes of the block write its scale (the same byte); 0 outside the matrix (padding).
  const int j = q >> 1;
  const bool inside = kFull || (rt < tp.rows_in && 32 * j < tp.cols_in);
  scale_chunk[(rt & 31) * 16 + (rt >> 5) * 4 + j] = static_cast<uint8_t>(inside ? s.code : 0u);
}

// Columnwise: word column 4g + pl of the shared tile (granule g), rows 16k..16k+15; lanes k and
// k ^ 1 hold one 32-row block.
template <InputType kIn, Recipe kRecipe, ElementEncoder kEnc, bool kFull, bool kTensorAmax>
__device__ __forceinline__ void quantize_col16(const Mxfp8Params& p, const uint32_t* tile,
                                               const TilePos& tp, int g, int pl, int k,
                                               uint8_t* scale_chunk, uint32_t& tensor_amax,
                                               bool& saw_nonfinite) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;
  constexpr int kColsPerWord = 4 / In::kBytes;
  const uint32_t* col = tile + granule_word<kIn>(16 * k, g) + pl;  // rows 16k.. share the swizzle
  uint32_t w[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = col[i * S::kWordsPerRow];
  uint32_t m = abs_max_words<kIn, 16>(w);  // per column (16-bit: per half)
  if (kTensorAmax) note_tensor_amax<kIn, 16>(w, fold_slots<kIn>(m), tensor_amax, saw_nonfinite);
  m = shfl_max_xor<kIn>(m, 1);
#pragma unroll
  for (int h = 0; h < kColsPerWord; ++h) {
    const int ct = (4 * g + pl) * kColsPerWord + h;  // tile column
    const MxScale s = mx_block_scale(In::widen(slot<kIn>(m, h)), p.rule);
    float f[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] = In::elem(w[i], h);
    uint4 out;
    out.x = encode4<kRecipe, kEnc>(f, s.inv);
    out.y = encode4<kRecipe, kEnc>(f + 4, s.inv);
    out.z = encode4<kRecipe, kEnc>(f + 8, s.inv);
    out.w = encode4<kRecipe, kEnc>(f + 12, s.inv);
    if (s.nonfinite) out = make_uint4(0, 0, 0, 0);

    uint8_t* dst = p.col_data + (tp.c0 + ct) * p.rows + tp.r0 + 16 * k;
    if (kFull) {
      *reinterpret_cast<uint4*>(dst) = out;
    } else if (ct < tp.cols_in) {
      const int n = tp.rows_in - 16 * k;  // rows of the 16 inside the matrix
      if (p.vec_col_store && n >= 16) {
        *reinterpret_cast<uint4*>(dst) = out;
      } else {
        const uint32_t words[4] = {out.x, out.y, out.z, out.w};
#pragma unroll
        for (int i = 0; i < 16; ++i)
          if (i < n) dst[i] = static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
      }
    }
    // Both lanes of the block write its scale; 0 outside the matrix (padding).
    const bool inside = kFull || (ct < tp.cols_in && 32 * (k >> 1) < tp.rows_in);
    scale_chunk[(ct & 31) * 16 + (ct >> 5) * 4 + (k >> 1)] = static_cast<uint8_t>(inside ? s.code : 0u);
  }
}

// The row and column work of one tile in shared memory.
template <InputType kIn, Recipe kRecipe, bool kRow, bool kCol, ElementEncoder kEnc, bool kFull>
__device__ __forceinline__ void quantize_tile(const Mxfp8Params& p, const uint32_t* tile,
                                              const TilePos& tp, uint8_t* row_chunk, uint8_t* col_chunk,
                                              uint32_t& tensor_amax, bool& saw_nonfinite) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  if constexpr (kRow) {
    const int q = lane & 7, row_in_pass = 4 * (tid >> 5) + (lane >> 3);
    uint8_t* dst = p.row_data + (tp.r0 + row_in_pass) * p.cols + tp.c0 + 16 * q;
    const int64_t pass_stride = 32 * p.cols;
#pragma unroll
    for (int s = 0; s < 4; ++s)
      quantize_row16<kIn, kRecipe, kEnc, kFull>(p, tile, tp, 32 * s + row_in_pass, q, dst + s * pass_stride,
                                                row_chunk, tensor_amax, saw_nonfinite);
  }
  if constexpr (kCol) {
    constexpr int kItems = TileShape<kIn>::kWordsPerRow * 8;  // (word column, 16-row chunk) pairs
#pragma unroll
    for (int n = 0; n < kItems / kThreads; ++n)
      quantize_col16<kIn, kRecipe, kEnc, kFull, !kRow>(p, tile, tp, (tid + n * kThreads) >> 5, lane >> 3, lane & 7,
                                                        col_chunk, tensor_amax, saw_nonfinite);
  }
}

// 512 staged scale bytes -> chunk `chunk` of a swizzled scale buffer, by 32 threads.
__device__ __forceinline__ void store_scale_chunk(const Mxfp8Params& p, uint8_t* dst_buffer,
                                                  int64_t chunk, const uint8_t* staged, int t) {
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

template <InputType kIn, Recipe kRecipe, bool kRow, bool kCol, ElementEncoder kEnc>
__global__ void __launch_bounds__(kThreads, 3)
    mxfp8_quantize_kernel(const __grid_constant__ Mxfp8Params p) {
  using In = InputTraits<kIn>;
  using S = TileShape<kIn>;

  extern __shared__ uint4 shared_tiles[];  // S::kStages tiles of S::kWords words
  // Scale chunks staged per tile, double-buffered: tile i's are stored to global memory after
  // the next barrier, while tile i+1 is processed (one barrier per tile).
  __shared__ alignas(16) uint8_t row_chunks[2][kChunkBytes];
  __shared__ alignas(16) uint8_t col_chunks[2][kChunkBytes];

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  uint32_t tensor_amax = 0;  // magnitude bits of the input type
  bool saw_nonfinite = false;
  uint32_t* const tiles = reinterpret_cast<uint32_t*>(shared_tiles);
  const bool full_stores = p.row_store_align == 16 && p.vec_col_store;
  // Threads 0..31 store the rowwise chunk of the previous tile, 32..63 the columnwise one.
  auto store_chunks = [&](TileIndex t, int buffer) {
    if (kRow && tid < 32)
      store_scale_chunk(p, p.row_scales, int64_t{t.tr} * p.col_tiles + t.tc, row_chunks[buffer], tid);
    if (kCol && tid >= 32 && tid < 64)
      store_scale_chunk(p, p.col_scales, int64_t{t.tc} * p.row_tiles + t.tr, col_chunks[buffer], tid - 32);
  };

  const TileIndex step{static_cast<int>(gridDim.x / p.col_tiles), static_cast<int>(gridDim.x % p.col_tiles)};
  TileIndex cur{static_cast<int>(blockIdx.x / p.col_tiles), static_cast<int>(blockIdx.x % p.col_tiles)};
  TileIndex prev = cur;
  if (cur.tr < p.row_tiles) load_tile<kIn>(p, tile_pos(p, cur), tiles);
  cp_async_commit();
  int i = 0;
  for (; cur.tr < p.row_tiles; ++i) {
    const TileIndex nxt = advance(cur, step, p.col_tiles);
    cp_async_wait<0>();  // this thread's copies of tile i (the only group in flight)
    // Tile i is in shared memory for every thread; every thread is done with tile i-1, so its
    // stage (2 stages) and its chunk buffer are free to reuse / complete to store.
    __syncthreads();
    if constexpr (S::kStages == 2) {  // tile i+1 goes into the buffer tile i-1 used
      if (nxt.tr < p.row_tiles) load_tile<kIn>(p, tile_pos(p, nxt), tiles + ((i + 1) % 2) * S::kWords);
      cp_async_commit();
    }
    if (i > 0) store_chunks(prev, (i - 1) % 2);

    const TilePos tp = tile_pos(p, cur);
    uint32_t* const tile = tiles + (i % S::kStages) * S::kWords;
    if (tp.inside && full_stores)
      quantize_tile<kIn, kRecipe, kRow, kCol, kEnc, true>(p, tile, tp, row_chunks[i % 2], col_chunks[i % 2],
                                                          tensor_amax, saw_nonfinite);
    else
      quantize_tile<kIn, kRecipe, kRow, kCol, kEnc, false>(p, tile, tp, row_chunks[i % 2], col_chunks[i % 2],
                                                           tensor_amax, saw_nonfinite);
    if constexpr (S::kStages == 1) {  // the only stage is free once every thread has read it
      __syncthreads();
      if (nxt.tr < p.row_tiles) load_tile<kIn>(p, tile_pos(p, nxt), tiles);
      cp_async_commit();
    }
    prev = cur;
    cur = nxt;
  }
  cp_async_wait<0>();
  __syncthreads();  // the last tile's chunks are staged
  if (i > 0) store_chunks(prev, (i - 1) % 2);

  if (p.amax != nullptr) {
    uint32_t a = In::widen(tensor_amax);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) a = max(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
    if (lane == 0) atomicMax(reinterpret_cast<unsigned int*>(p.amax), a);
  }
  if (p.nonfinite != nullptr) {
    if (__any_sync(0xFFFFFFFFu, saw_nonfinite) && lane == 0) *p.nonfinite = 1;
  }
}

// ---- Dispatch: one plain switch per template argument; the leaf checks or launches.
enum class Action { kCheck, kLaunch };

bool aligned(const void* ptr, int64_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }

template <InputType kIn, Recipe kRecipe, bool kRow, bool kCol, ElementEncoder kEnc>
Status leaf(Action action, const Mxfp8Params& params, cudaStream_t stream) {
  auto* kernel = mxfp8_quantize_kernel<kIn, kRecipe, kRow, kCol, kEnc>;
  int dev = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  if (action == Action::kCheck) {
    cudaFuncAttributes attr;
    const cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
    if (err == cudaSuccess) return Status::ok();
    (void)cudaGetLastError();  // clear the (non-sticky) error
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return Status::error("device " + std::to_string(dev) + " (sm_" + std::to_string(major) +
                         std::to_string(minor) + "): no MXFP8 quantize kernel for it (" +
                         cudaGetErrorString(err) +
                         "); blockscale_quant is built for BLOCKSCALE_CUDA_ARCHS");
  }
  const int smem = TileShape<kIn>::kStages * TileShape<kIn>::kWords * 4;
  if (smem > 48 * 1024) {
    BS_RETURN_IF_ERROR(cuda_status(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute"));
  }
  int sms = 0, per_sm = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                                 "cudaDeviceGetAttribute"));
  BS_RETURN_IF_ERROR(cuda_status(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem),
      "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
  // As many CTAs as fit at once, evened out so the last round of tiles keeps most of them busy.
  const int64_t tiles = int64_t{params.row_tiles} * params.col_tiles;
  const int64_t resident = int64_t{sms} * std::max(per_sm, 1);
  const int64_t rounds = (tiles + resident - 1) / resident;
  const int64_t grid = (tiles + rounds - 1) / rounds;
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(params);
  return cuda_status(cudaGetLastError(), "mxfp8_quantize_kernel launch");
}

template <InputType kIn, Recipe kRecipe, bool kRow, bool kCol>
Status dispatch_encoder(ElementEncoder enc, Action a, const Mxfp8Params& params, cudaStream_t s) {
  switch (enc) {
    case ElementEncoder::kHardware: return leaf<kIn, kRecipe, kRow, kCol, ElementEncoder::kHardware>(a, params, s);
    case ElementEncoder::kSoftware: return leaf<kIn, kRecipe, kRow, kCol, ElementEncoder::kSoftware>(a, params, s);
  }
  return Status::error("encoder: unknown element encoder");
}

template <InputType kIn, Recipe kRecipe>
Status dispatch_directions(const QuantizeProblem& p, ElementEncoder enc, Action a,
                           const Mxfp8Params& params, cudaStream_t s) {
  switch (p.directions) {
    case Directions::kRowwise: return dispatch_encoder<kIn, kRecipe, true, false>(enc, a, params, s);
    case Directions::kColumnwise: return dispatch_encoder<kIn, kRecipe, false, true>(enc, a, params, s);
    case Directions::kBoth: return dispatch_encoder<kIn, kRecipe, true, true>(enc, a, params, s);
  }
  return Status::error("problem.directions: unknown value");
}

template <InputType kIn>
Status dispatch_recipe(const QuantizeProblem& p, ElementEncoder enc, Action a,
                       const Mxfp8Params& params, cudaStream_t s) {
  switch (p.recipe) {
    case Recipe::kMxfp8E4M3: return dispatch_directions<kIn, Recipe::kMxfp8E4M3>(p, enc, a, params, s);
    case Recipe::kMxfp8E5M2: return dispatch_directions<kIn, Recipe::kMxfp8E5M2>(p, enc, a, params, s);
    default: return Status::error("problem.recipe: not an MXFP8 recipe");
  }
}

Status dispatch(const QuantizeProblem& p, ElementEncoder enc, Action a, const Mxfp8Params& params,
                cudaStream_t s) {
  switch (p.input_type) {
    case InputType::kBf16: return dispatch_recipe<InputType::kBf16>(p, enc, a, params, s);
    case InputType::kFp16: return dispatch_recipe<InputType::kFp16>(p, enc, a, params, s);
    case InputType::kFp32: return dispatch_recipe<InputType::kFp32>(p, enc, a, params, s);
  }
  return Status::error("problem.input_type: unknown value");
}

int element_bytes(InputType t) { return t == InputType::kFp32 ? 4 : 2; }

}  // namespace

Status mxfp8_check_device(const QuantizeProblem& p, ElementEncoder encoder) {
  return dispatch(p, encoder, Action::kCheck, Mxfp8Params{}, nullptr);
}

Status launch_mxfp8_quantize(const QuantizeProblem& p, const void* x, const QuantizeOutputs& out,
                             ElementEncoder encoder, cudaStream_t stream) {
  const bool row = p.directions != Directions::kColumnwise;
  const bool col = p.directions != Directions::kRowwise;
  Mxfp8Params params{};
  params.x = x;
  params.rows = p.rows;
  params.cols = p.cols;
  params.ld = p.ld;
  params.row_data = row ? out.rowwise_data : nullptr;
  params.row_scales = row ? static_cast<uint8_t*>(out.rowwise_scales) : nullptr;
  params.col_data = col ? out.columnwise_data : nullptr;
  params.col_scales = col ? static_cast<uint8_t*>(out.columnwise_scales) : nullptr;
  params.amax = out.amax;
  params.nonfinite = out.nonfinite;
  params.row_tiles = static_cast<int>((p.rows + kTile - 1) / kTile);
  params.col_tiles = static_cast<int>((p.cols + kTile - 1) / kTile);
  params.rule = mx_scale_rule(formats::element_max(p.recipe), p.rounding == formats::ScaleRounding::kCeil);
  params.vec_load = aligned(x, 16) && (p.ld * element_bytes(p.input_type)) % 16 == 0;
  params.row_store_align = 1;
  for (int a : {16, 8})
    if (params.row_store_align == 1 && (!row || (aligned(out.rowwise_data, a) && p.cols % a == 0)))
      params.row_store_align = a;
  params.vec_col_store = !col || (aligned(out.columnwise_data, 16) && p.rows % 16 == 0);
  params.vec_scale_store = (!row || aligned(out.rowwise_scales, 16)) &&
                           (!col || aligned(out.columnwise_scales, 16));
  return dispatch(p, encoder, Action::kLaunch, params, stream);
}

Status run_mxfp8(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                 ElementEncoder encoder, cudaStream_t stream) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  if (!(p.recipe == Recipe::kMxfp8E4M3 || p.recipe == Recipe::kMxfp8E5M2))
    return Status::error("problem.recipe: not an MXFP8 recipe");
  if (!(p.rows == 0 || p.cols == 0)) BS_RETURN_IF_ERROR(mxfp8_check_device(p, encoder));
  for (float* a : {out.amax})
    if (a != nullptr) BS_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(a, 0, sizeof(float), stream), "outputs.amax"));
  if (p.rows == 0 || p.cols == 0) return Status::ok();
  return launch_mxfp8_quantize(p, in.x, out, encoder, stream);
}

Status launch_mx_quantize(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                          cudaStream_t stream) {
  if (p.recipe == Recipe::kMxfp4) return Status::error("problem.recipe: mxfp4 GPU quantize is not implemented yet");
  return launch_mxfp8_quantize(p, in.x, out, kDefaultEncoder, stream);
}

Status launch_mx_grouped_quantize(const GroupedQuantizeProblem&, const GroupedQuantizeInputs&,
                                  const GroupedQuantizeOutputs&, cudaStream_t) {
  return Status::error("grouped quantize is not implemented yet");
}

}  // namespace blockscale::quant::detail
