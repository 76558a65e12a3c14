// GPU quantize / dequantize: the four-call host protocol (describe the problem, can_implement,
// workspace_size, run on a stream). Raw device pointers and small descriptors; every call returns
// a blockscale::Status whose message names the argument and the rule it broke.
//
// Every recipe of docs/numerics.md that training uses: MXFP8 (E4M3, E5M2), MXFP4, NVFP4 (1D, 2D,
// stochastic rounding, RHT on the columnwise copy, measured or given tensor amax) and FP8 blockwise
// (1x128, 128x128, pow2). The bytes written are exactly those of formats::quantize() followed by
// the GEMM-layout packing of formats/scale_layout.h. (MXFP6 is a study format: CPU only.)
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/dtype.h"
#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::quant {

// NVFP4's tensor amax (which sets the fp32 tensor scale S_enc = 2688 / amax):
//   kMeasure: two passes: an amax kernel reads the input, then the quantize kernel reads it again.
//   kGiven  : one pass, with the amax the caller supplies on the device (e.g. the previous step's,
//             which every run returns in outputs.amax / outputs.columnwise_amax).
enum class TensorAmax { kMeasure, kGiven };

// The problem: an input matrix of rows x cols elements, row-major with a row stride of `ld`
// elements (ld >= cols), and what to make of it. The recipe options mean what the fields of
// formats::QuantizeOptions of the same name mean.
struct QuantizeProblem {
  formats::Format recipe = formats::Format::kMxfp8E4M3;
  formats::ScaleRounding rounding = formats::ScaleRounding::kCeil;  // MX recipes only
  formats::DType input_type = formats::DType::kBf16;  // the input's dtype: kBf16, kF16 or kF32
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // input row stride in elements
  formats::Direction directions = formats::Direction::kRowwise;  // which copies: one or both
  bool pow2_scales = false;          // FP8 blockwise: power-of-two scales
  bool nvfp4_2d = false;             // NVFP4: 16x16 blocks (weights); both copies share them
  bool stochastic_rounding = false;  // NVFP4: Philox SR of the elements (both copies)
  uint64_t sr_seed = 0;
  uint64_t sr_offset = 0;
  bool hadamard_columnwise = false;  // NVFP4: 16-point RHT on the columnwise copy (rows % 16 == 0)
  TensorAmax tensor_amax = TensorAmax::kMeasure;  // NVFP4 only
};

struct QuantizeInputs {
  const void* x = nullptr;  // device pointer to the input, input_type elements
  // NVFP4 with TensorAmax::kGiven: device pointers to the amax each copy's tensor scale comes
  // from (formats' tensor_amax option; finite and >= 0). They may be the same pointer; the
  // columnwise copy with the RHT wants the amax of the transformed values.
  const float* rowwise_tensor_amax = nullptr;
  const float* columnwise_tensor_amax = nullptr;
};

// Device pointers. Buffers of a direction that is not requested are ignored (may be null).
//   rowwise_data      : rows x row_bytes element codes, row-major (row_bytes = cols, or
//                       ceil(cols / 2) for E2M1: two codes per byte, low nibble = even column)
//   rowwise_scales    : MX, NVFP4: the byte scales (E8M0 / UE4M3) of the rows x ceil(cols/block)
//                       scale matrix in the swizzled 128x4 layout (formats::swizzled_scale_offset),
//                       padding written as 0. NVFP4 2D: one scale per row like 1D (each row of a
//                       16-row tile holds the tile's scale), the layout the GEMM reads.
//                       FP8 1x128: fp32 scales in the VEC128_32F layout (formats::vec128_*);
//                       FP8 128x128: fp32 in BLK128x128_32F (formats::blk128_*); padding 0.0f.
//   rowwise_scale_dec : NVFP4: the fp32 tensor decode scale S_dec of the rowwise copy (1 float)
//   columnwise_*      : the same for the columnwise copy: cols x rows (the transpose), its scale
//                       matrix cols x ceil(rows/block)
//   amax              : optional; run() writes max |x| over the whole input (NaN ignored, Inf
//                       counts: formats' amax rule)
//   columnwise_amax   : optional, NVFP4 with hadamard_columnwise: max |RHT(x)| over the columnwise
//                       copy's transformed values (the amax its tensor scale needs)
//   nonfinite         : optional; the kernel stores 1 when the input holds a NaN or Inf and never
//                       writes anything else: the caller zeroes it once, it stays set across runs
// Vector loads/stores are used where pointers and strides allow; any other alignment takes a
// slower path that writes the same bytes. Scale buffers must be 4-byte aligned for fp32 scales.
struct QuantizeOutputs {
  uint8_t* rowwise_data = nullptr;
  void* rowwise_scales = nullptr;
  float* rowwise_scale_dec = nullptr;
  uint8_t* columnwise_data = nullptr;
  void* columnwise_scales = nullptr;
  float* columnwise_scale_dec = nullptr;
  float* amax = nullptr;
  float* columnwise_amax = nullptr;
  int* nonfinite = nullptr;
};

// The problem of a dense rows x cols matrix (ld = cols) quantized with formats' options `o`: its
// recipe fields, o.hadamard as the columnwise copy's RHT. The tensor amax stays measured (kGiven
// takes device pointers: QuantizeInputs).
QuantizeProblem problem_from_options(const formats::QuantizeOptions& o, formats::DType input_type, int64_t rows,
                                     int64_t cols, formats::Direction directions);

// Sizes in bytes of each output for a problem (0 for a direction not requested or an empty shape).
int64_t rowwise_data_bytes(const QuantizeProblem& p);
int64_t rowwise_scale_bytes(const QuantizeProblem& p);
int64_t columnwise_data_bytes(const QuantizeProblem& p);
int64_t columnwise_scale_bytes(const QuantizeProblem& p);

// Shape, stride, recipe and option checks (no device access). rows == 0 or cols == 0 is a valid
// empty problem.
Status can_implement(const QuantizeProblem& p);
// The above plus pointers (non-null where needed, aligned, no two buffers overlapping, the input
// included) and the current device (a kernel image for its architecture).
Status can_implement(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out);

// Bytes of device workspace run() needs (NVFP4 with a measured amax keeps it there; else 0).
size_t workspace_size(const QuantizeProblem& p);

// Checks (can_implement), then enqueues the work on `stream`. Asynchronous: a Status of ok means
// the launch succeeded.
Status run(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
           void* workspace, size_t workspace_bytes, cudaStream_t stream);

// ---- Batched: several matrices of one shape in one launch (a MoE layer's expert weights) ----
// `batches` matrices of matrix.rows x matrix.cols, stacked in one input: matrix b is rows
// b * rows .. b * rows + rows - 1 of x (row stride matrix.ld). Each is quantized on its own, and
// the outputs hold each buffer of the one-matrix problem `batches` times, back to back: matrix b's
// rowwise data at b * rowwise_data_bytes(matrix), its rowwise scales at
// b * rowwise_scale_bytes(matrix), and so on. The bytes are those of `batches` run() calls on the
// matrices and those offsets; amax (optional) is the maximum over all of them, nonfinite is set by
// any. FP8 blockwise 128x128 (the fp8_block recipe's weights), the MX recipes and NVFP4 (matrix.rows
// a multiple of 128, so each 128-row tile is one matrix's); one run() per matrix for the others.
// NVFP4: the rowwise copy only, each matrix's amax measured (its own tensor scale, as its own
// run() would), no stochastic rounding; outputs.rowwise_scale_dec holds `batches` decode scales;
// the workspace (workspace_size) holds each matrix's amax pass.
struct BatchedQuantizeProblem {
  QuantizeProblem matrix;
  int64_t batches = 1;
};
Status can_implement(const BatchedQuantizeProblem& p);
Status can_implement(const BatchedQuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out);
size_t workspace_size(const BatchedQuantizeProblem& p);
Status run(const BatchedQuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
           void* workspace, size_t workspace_bytes, cudaStream_t stream);
// The recipes that need no workspace (FP8 blockwise, MX).
Status run(const BatchedQuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
           cudaStream_t stream);

// ---- Grouped (MoE) quantize ------------------------------------------------------------------
// Recipes: MXFP8 / MXFP4 (block 32), FP8 blockwise 1x128 (block 128) and NVFP4 1D (block 16; SR,
// RHT and a measured or given tensor amax as in dense mode: one tensor scale for all experts).
// The weights' recipes (fp8_block128x128, nvfp4_2d) are refused. With the RHT, rows need not be a
// multiple of 16 (each expert is padded to 16).
// The input's rows are the tokens of num_groups experts sorted by expert; expert g owns rows
// [group_ends[g-1], group_ends[g]) (group_ends[-1] = 0; empty experts allowed), group_ends an
// int32 device array whose last entry must equal rows. The rowwise copy is the dense one. The
// columnwise copy is quantized per expert, each expert's token range padded with zero rows to a
// multiple of the block (formats::quantize_grouped_columnwise): it is cols x capacity codes,
// row stride capacity, with capacity = grouped_capacity(p) >= the padded total (a multiple of the
// block and of 32: what gemm/grouped.h's K-grouped GEMM takes as its k); bytes past the
// padded total are written as 0, and so are their scales. padded_group_ends (int32 device,
// num_groups entries) receives the padded cumulative ends. Nothing is read back to the host.
//
// Fused gather (MoE permute + quantize, quant/moe.h): with inputs.row_index (int32 device, rows
// entries), quantized row r is input row row_index[r] of x, which then has input_rows rows (row
// stride ld): the tokens are quantized in expert order straight from the unpermuted activations,
// with no permuted copy; the bytes are those of the same run on the gathered matrix. An index
// outside [0, input_rows) reads a ZERO row (never out of bounds). group_ends' last entry may then
// be below rows (dropped slots: routing's rows past the routed total carry index -1): those rows
// belong to no expert and the columnwise copy leaves them out; their rowwise rows are unspecified
// (zero codes from rowwise-only runs; not written by runs with a columnwise copy).
// MXFP8 / MXFP4 and FP8 1x128 only (NVFP4 is refused).
struct GroupedQuantizeProblem {
  QuantizeProblem dense;  // rows = all tokens (with row_index: the quantized, gathered rows)
  int num_groups = 0;
  int64_t input_rows = 0;  // with inputs.row_index: rows of x; ignored without
};
struct GroupedQuantizeInputs {
  const void* x = nullptr;
  const int32_t* group_ends = nullptr;
  // NVFP4 with TensorAmax::kGiven, as QuantizeInputs (the columnwise one: the amax of the padded,
  // transformed expert blocks when the RHT is on).
  const float* rowwise_tensor_amax = nullptr;
  const float* columnwise_tensor_amax = nullptr;
  const int32_t* row_index = nullptr;  // optional: the gather (see above)
};
struct GroupedQuantizeOutputs {
  QuantizeOutputs dense;  // columnwise_* sized by the grouped_* functions below
  int32_t* padded_group_ends = nullptr;
};
int64_t grouped_capacity(const GroupedQuantizeProblem& p);  // padded rows the buffers hold
int64_t grouped_columnwise_data_bytes(const GroupedQuantizeProblem& p);
int64_t grouped_columnwise_scale_bytes(const GroupedQuantizeProblem& p);
Status can_implement(const GroupedQuantizeProblem& p);
Status can_implement(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                     const GroupedQuantizeOutputs& out);
size_t workspace_size(const GroupedQuantizeProblem& p);
Status run(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
           const GroupedQuantizeOutputs& out, void* workspace, size_t workspace_bytes,
           cudaStream_t stream);

// ---- Dequantize (tests, debugging) ------------------------------------------------------------
// (MX values as bf16 for a bf16 GEMM, in one pass from the fp32 input: quant/mx_bf16.h; NVFP4's
// block values as bf16, from its quantized copies: nvfp4_block_values_bf16 below.)

// A quantized matrix in its stored orientation (a columnwise copy of an R x C input is C x R):
// rows x cols element codes (row bytes as above) and its scales in the layout run() writes.
struct DequantizeProblem {
  formats::Format recipe = formats::Format::kMxfp8E4M3;
  int64_t rows = 0;
  int64_t cols = 0;
};
struct DequantizeInputs {
  const uint8_t* data = nullptr;
  const void* scales = nullptr;
  const float* scale_dec = nullptr;  // NVFP4: the tensor decode scale (device, 1 float)
};

// out: rows x cols fp32, row-major: the values formats::dequantize() gives (a NaN scale gives
// NaN; NaN payload bits are the GPU's).
Status dequantize(const DequantizeProblem& p, const DequantizeInputs& in, float* out,
                  cudaStream_t stream);

// NVFP4's block values as bf16, the operands of Hopper's bf16 route for the NVFP4 GEMM: `batches`
// quantized matrices of p.rows x p.cols codes each, their data and scales back to back as the
// batched run() writes them (one matrix: batches = 1), to out: batches x rows x cols bf16 bits,
// row-major, each decode(q) * float(s_b) WITHOUT the tensor scale S_dec (in.scale_dec is not
// read). Exact: an E2M1 value times a UE4M3 scale has at most 6 significant bits and lies in
// [2^-10, 2688], so a bf16 GEMM of two such operands, scaled by S_dec_a * S_dec_b, computes the
// NVFP4 GEMM's contract (exact products, fp32 sums). A NaN scale gives NaN (0x7FC0). For speed:
// one thread per 16-element block, vector loads and stores when cols % 16 == 0 and out is
// 16-byte aligned.
Status nvfp4_block_values_bf16(const DequantizeProblem& p, int64_t batches, const DequantizeInputs& in,
                               uint16_t* out, cudaStream_t stream);

}  // namespace blockscale::quant
