// Block quantize / dequantize of every recipe on the CPU: the emulator whose bytes every GPU
// kernel must reproduce.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::formats {

// Quantizes the rows x cols fp32 matrix x (row stride ld >= cols elements).
//   kRowwise   : blocks run along cols; out is rows x cols.
//   kColumnwise: blocks run along rows; out holds the transpose, cols x rows.
//   kBoth is refused: one call writes one copy.
// Partial blocks at the edges are treated as zero-padded. On error `out` is left unchanged.
Status quantize(const float* x, int64_t rows, int64_t cols, int64_t ld,
                const QuantizeOptions& options, Direction direction, QuantizedMatrix* out);

// MoE: x holds the tokens of G experts sorted by expert; expert g owns rows
// [group_ends[g-1], group_ends[g]) (group_ends[-1] = 0, group_ends.back() == rows; empty experts
// allowed). Each expert's token range is padded with zero rows up to a multiple of the recipe's
// block length so that no block crosses experts; the columnwise copy (cols x padded_rows) is
// written to out and the padded cumulative ends to padded_group_ends. The rowwise copy of grouped
// tokens is the plain rowwise quantize(): its blocks never cross rows.
Status quantize_grouped_columnwise(const float* x, int64_t rows, int64_t cols, int64_t ld,
                                   const std::vector<int64_t>& group_ends,
                                   const QuantizeOptions& options, QuantizedMatrix* out,
                                   std::vector<int64_t>* padded_group_ends);

// q widened to `cols` columns with zero codes and zero scales (FP8 blockwise: 0.0f): the bytes
// quant/'s grouped quantize writes past the padded total of its columnwise copy, up to the
// capacity its buffers hold. q.cols and cols must be multiples of q.block_cols, cols >= q.cols.
Status pad_columns(const QuantizedMatrix& q, int64_t cols, QuantizedMatrix* out);

// Dequantizes to fp32 exactly as docs/numerics.md defines (rows x cols, stored orientation).
Status dequantize(const QuantizedMatrix& q, std::vector<float>* out);

// Dequantizes to fp64 without rounding (element x scale products are exact in fp64): the operand
// values the reference GEMMs use.
Status dequantize_exact(const QuantizedMatrix& q, std::vector<double>* out);

// Reads one element code of q (unpacks E2M1 nibbles).
uint32_t element_code(const QuantizedMatrix& q, int64_t r, int64_t c);

// Checks internal consistency (sizes of data and scales against the shape and recipe).
Status validate(const QuantizedMatrix& q, const char* name);

// Checks that every block scale of q (its sizes already checked by validate()) is one quantize()
// can write, so a file from another writer cannot smuggle in a scale the GEMMs never meet:
//   MX     : any E8M0 code (0xFF is NaN: a block that held NaN or Inf)
//   nvfp4  : a UE4M3 code 0x00-0x7F (7 bits, no sign; 0x7F is NaN)
//   FP8 blockwise: an fp32 value with the sign bit clear that is finite (+0 for a block whose
//            values are too small for a normal scale) or NaN; never negative, -0 or Inf.
// Errors name `name`, the scale's (row, col) in the scale grid, its value and the rule.
Status check_scales(const QuantizedMatrix& q, const std::string& name);

}  // namespace blockscale::formats
