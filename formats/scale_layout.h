// Scale-factor layouts the GEMMs take, and conversions from/to the emulator's linear layout
// (row-major [scale_rows][scale_cols], QuantizedMatrix::scales / scales_f32).
//
//   swizzled 128x4  : MX and NVFP4 byte scales (E8M0 / UE4M3); cuBLAS "1D block scaling factors
//                     layout" = the tcgen05 scale-factor layout. docs/numerics.md defines it.
//   VEC128_32F      : FP8 blockwise 1x128 fp32 scales, as cuBLASLt's
//                     CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F takes them.
//   BLK128x128_32F  : FP8 blockwise 128x128 fp32 scales, as cuBLASLt's
//                     CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F takes them.
//
// Index functions are BS_HOST_DEVICE so quantize kernels write these layouts directly.
// Pack/unpack functions validate their arguments and return a Status naming the argument.
// Zero-sized shapes (rows or cols == 0) are valid and give an empty buffer.
//
// ---- The fp32 layouts (cuBLAS docs, "Scaling factors layouts",
//      https://docs.nvidia.com/cuda/cublas/#scaling-factors-layouts, as cited below) ----
// cuBLASLt is column-major. An operand with `rows` outer rows (M for A, N for B) and K along its
// contiguous dimension ("K-major", the only FP8 layout Hopper takes) has:
//   VEC128_32F     : one fp32 scale per (row, 128-element K block); the scale tensor is
//                    "M-major" (the outer dimension is contiguous): scale (r, kb) at
//                    kb * ld + r, ld = round_up(rows, 4) (16-byte aligned columns).
//   BLK128x128_32F : one fp32 scale per (128-row block, 128-element K block); the K-block index
//                    is contiguous: scale (rb, kb) at rb * ld + kb, ld = round_up(k_blocks, 4).
// Sources agree on the order; on padding: PyTorch PR #166752
// (https://github.com/pytorch/pytorch/pull/166752) quotes the docs with BLK128x128 stride
// round_up(K/128, 4) (a missing round-up gave silent wrong answers) and VEC128 stride M; NVIDIA's
// cuBLASMp sample pads both to a multiple of 4, as Transformer Engine's GEMM-ready scales do.
// Checked against cuBLASLt 13.1 on an H200 (all-ones FP8 operands, distinct scales, fp32 D):
//   - BLK128x128 (operand A, 2 row blocks) with k_blocks = 3: ld 4 matches, ld 3 does not;
//     k_blocks = 4: ld 4 matches.
//   - VEC128 with rows in {4, 8, 12, 16, 20, 128} (A and B): M-major, ld = rows, matches.
//   - rows (M or N) not a multiple of 4 (6, 10, 13): CUBLAS_STATUS_NOT_SUPPORTED, for VEC128 and
//     alongside BLK128x128 alike.
// So ld = round_up(rows, 4) is cuBLASLt's layout for every shape it accepts; for rows % 4 != 0
// (which cuBLASLt rejects) the padding to 4 is blockscale's choice, kept 16-byte aligned.
// Padding entries (rows beyond `rows`, K blocks beyond `k_blocks`) are written as 0.0f; cuBLASLt
// does not use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/host_device.h"
#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::formats {

// ---- Swizzled 128x4 (MX, NVFP4 byte scales) -----------------------------------------------

// Byte offset of scale (i, j) of a scale matrix with `cols` columns (cols = K / block):
// 512-byte tiles of 128 rows x 4 columns, the column-tile index fastest.
BS_HOST_DEVICE int64_t swizzled_scale_offset(int64_t i, int64_t j, int64_t cols) {
  const int64_t col_tiles = (cols + 3) / 4;
  return ((i / 128) * col_tiles + j / 4) * 512 + (i % 32) * 16 + ((i % 128) / 32) * 4 + j % 4;
}

// Bytes of the swizzled buffer: rows padded to a multiple of 128, cols to a multiple of 4.
// 0 for negative or zero shapes.
int64_t swizzled_scale_bytes(int64_t rows, int64_t cols);

// linear: rows x cols bytes, row-major. out: swizzled_scale_bytes(rows, cols) bytes, padding 0.
Status pack_swizzled_scales(const uint8_t* linear, int64_t rows, int64_t cols,
                            std::vector<uint8_t>* out);

// swizzled_bytes must equal swizzled_scale_bytes(rows, cols). linear: rows x cols, row-major.
// Padding bytes are not read.
Status unpack_swizzled_scales(const uint8_t* swizzled, size_t swizzled_bytes, int64_t rows,
                              int64_t cols, std::vector<uint8_t>* linear);

// ---- VEC128_32F (FP8 blockwise 1x128, fp32) ----------------------------------------------

BS_HOST_DEVICE int64_t vec128_scale_ld(int64_t rows) { return (rows + 3) / 4 * 4; }

// Float offset of the scale of row r, K block kb.
BS_HOST_DEVICE int64_t vec128_scale_offset(int64_t r, int64_t kb, int64_t rows) {
  return kb * vec128_scale_ld(rows) + r;
}

// Floats of the packed buffer (k_blocks * round_up(rows, 4)); 0 for negative or zero shapes.
int64_t vec128_scale_floats(int64_t rows, int64_t k_blocks);

// linear: rows x k_blocks fp32, row-major (QuantizedMatrix::scales_f32 of a 1x128 operand).
Status pack_vec128_scales(const float* linear, int64_t rows, int64_t k_blocks,
                          std::vector<float>* out);
// packed_floats must equal vec128_scale_floats(rows, k_blocks).
Status unpack_vec128_scales(const float* packed, size_t packed_floats, int64_t rows,
                            int64_t k_blocks, std::vector<float>* linear);

// ---- BLK128x128_32F (FP8 blockwise 128x128, fp32) ----------------------------------------

BS_HOST_DEVICE int64_t blk128_scale_ld(int64_t k_blocks) { return (k_blocks + 3) / 4 * 4; }

// Float offset of the scale of row block rb, K block kb.
BS_HOST_DEVICE int64_t blk128_scale_offset(int64_t rb, int64_t kb, int64_t k_blocks) {
  return rb * blk128_scale_ld(k_blocks) + kb;
}

// Floats of the packed buffer (row_blocks * round_up(k_blocks, 4)); 0 for negative or zero
// shapes.
int64_t blk128_scale_floats(int64_t row_blocks, int64_t k_blocks);

// linear: row_blocks x k_blocks fp32, row-major (QuantizedMatrix::scales_f32 of a 128x128
// operand).
Status pack_blk128_scales(const float* linear, int64_t row_blocks, int64_t k_blocks,
                          std::vector<float>* out);
// packed_floats must equal blk128_scale_floats(row_blocks, k_blocks).
Status unpack_blk128_scales(const float* packed, size_t packed_floats, int64_t row_blocks,
                            int64_t k_blocks, std::vector<float>* linear);

// ---- A quantized operand's scales as quant/ writes them and gemm/ reads them ----------------

// q's scales as bytes in the layout of its recipe: VEC128_32F (1x128) or BLK128x128_32F (128x128)
// fp32 for FP8 blockwise; swizzled 128x4 for MX and NVFP4, one scale per row (NVFP4 2D tile scales
// repeated over their tile's rows).
Status pack_gemm_scales(const QuantizedMatrix& q, std::vector<uint8_t>* out);

}  // namespace blockscale::formats
