// The element / block formats (Format), their quantization options, and the quantized matrix
// every formats/ function produces or consumes. docs/numerics.md defines the bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/scalar_codecs.h"

namespace blockscale::formats {

enum class Format {
  kMxfp8E4M3,        // 1x32 blocks, E4M3 elements, E8M0 scales
  kMxfp8E5M2,        // 1x32 blocks, E5M2 elements, E8M0 scales
  kMxfp6E2M3,        // 1x32 blocks, E2M3 elements (one per byte), E8M0 scales; studies only
  kMxfp6E3M2,        // 1x32 blocks, E3M2 elements (one per byte), E8M0 scales; studies only
  kMxfp4,            // 1x32 blocks, E2M1 elements (two per byte), E8M0 scales
  kNvfp4,            // 1x16 (or 16x16) blocks, E2M1 elements, UE4M3 scales, fp32 tensor scale
  kFp8Block1x128,    // 1x128 blocks, E4M3 elements, fp32 scales (activations, gradients)
  kFp8Block128x128,  // 128x128 blocks, E4M3 elements, fp32 scales (weights)
};

// The MX scale rule (docs/numerics.md): kCeil (the default) or kFloor. kBoth asks for the two
// (the accuracy study's columns, study/study.h); a quantization and a stored tensor take one.
enum class ScaleRounding { kCeil, kFloor, kBoth };

// Which quantized copy. kRowwise: blocks run along each row, stored as the input is (rows x cols).
// kColumnwise: blocks run along each column, stored transposed (cols x rows, the block dimension
// contiguous: the K-major operand that wgrad/dgrad take). kBoth: the two copies at once, which
// quant/'s kernels write from one read of the input; formats::quantize and a stored tensor hold
// one copy, rowwise or columnwise.
enum class Direction { kRowwise, kColumnwise, kBoth };

struct QuantizeOptions {
  Format recipe = Format::kMxfp8E4M3;
  ScaleRounding rounding = ScaleRounding::kCeil;  // MX recipes only
  bool pow2_scales = false;                      // FP8 blockwise only
  bool nvfp4_2d = false;                         // NVFP4: one scale per 16x16 tile
  bool stochastic_rounding = false;              // NVFP4: Philox-driven SR of the elements
  uint64_t sr_seed = 0;
  uint64_t sr_offset = 0;
  bool hadamard = false;          // NVFP4: 16-point random Hadamard transform along the blocks
  bool has_tensor_amax = false;   // NVFP4: use tensor_amax instead of measuring it
  float tensor_amax = 0.0f;
};

// A quantized matrix in its stored orientation: `rows` x `cols`, blocks of
// block_rows x block_cols, with the block dimension (cols) contiguous. A columnwise copy of an
// R x C input is stored as C x R (transposed).
struct QuantizedMatrix {
  Format recipe = Format::kMxfp8E4M3;
  int64_t rows = 0;
  int64_t cols = 0;
  int block_rows = 1;
  int block_cols = 32;
  // Element codes, row-major with data_row_bytes() per row: one code per byte, or for E2M1 two
  // codes per byte, low nibble = even column (an odd last column leaves the high nibble 0).
  std::vector<uint8_t> data;
  // Scales, linear row-major [scale_rows()][scale_cols()]: E8M0 or UE4M3 codes in `scales`,
  // or, for FP8 blockwise, the fp32 dequantization scales in `scales_f32`.
  std::vector<uint8_t> scales;
  std::vector<float> scales_f32;
  float global_scale_dec = 1.0f;  // NVFP4 S_dec (the tensor's dequantization scale)
  bool nonfinite_seen = false;    // a NaN or Inf was in the input

  int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  int64_t data_row_bytes() const;
};

bool is_mx(Format r);
bool is_fp4(Format r);       // E2M1 elements, two per byte
bool is_fp8_block(Format r);
const MinifloatSpec& element_spec(Format r);
float element_max(Format r);  // largest finite element value
int default_block_rows(Format r, bool nvfp4_2d);
int default_block_cols(Format r);

// Names used by the CLI and the file schema: mxfp8, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4,
// nvfp4, fp8_block128, fp8_block128x128.
const char* format_name(Format r);
bool parse_format(const std::string& name, Format* out);
std::vector<Format> all_formats();

}  // namespace blockscale::formats
