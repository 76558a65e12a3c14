// The quantized-tensor file schema (docs/file-format.md): a quantized copy of an input tensor
// NAME stored in a .safetensors file as plain tensors plus string metadata, so any safetensors
// reader can load it.
//
//   NAME.data          F8_E4M3 / F8_E5M2 element codes, or U8: two E2M1 codes per byte, low
//                      nibble first (mxfp4, nvfp4), or one E2M3/E3M2 code per byte (mxfp6);
//                      shape [rows, data_row_bytes] of the stored (for columnwise: transposed)
//                      matrix
//   NAME.scale         U8 E8M0 (MX) or UE4M3 (nvfp4) codes, or F32 (FP8 blockwise), in the linear
//                      layout [ceil(rows/block_rows), ceil(cols/block_cols)]
//   NAME.global_scale  F32, shape [] (nvfp4 only): the tensor's dequantization scale S_dec
//   metadata NAME.recipe     mxfp8 | mxfp8_e5m2 | mxfp6_e2m3 | mxfp6_e3m2 | mxfp4 | nvfp4 |
//                            fp8_block128 | fp8_block128x128
//            NAME.rounding   ceil | floor (MX recipes); rn (nvfp4, FP8 blockwise)
//            NAME.direction  rowwise | columnwise
//            NAME.shape      the input tensor's shape as a JSON list, e.g. "[4,128,256]"
//            NAME.block      block_rows x block_cols of the stored matrix, e.g. "1x32", "16x16"
//            NAME.transform  none | rht16 (nvfp4's random Hadamard transform was applied)
//
// The 2D view of an input tensor of any rank >= 1 is [product of all but the last dimension,
// last dimension]; rank 0 and empty tensors have none (matrix_view() says so).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "formats/io/safetensors.h"
#include "formats/io/tensor_view.h"
#include "formats/quantize.h"
#include "formats/status.h"

namespace blockscale::io {

// One quantized copy of an input tensor, as the file stores it.
struct QuantizedTensor {
  std::string name;                // entry name; the file's keys are name + ".data", ...
  std::vector<int64_t> shape;      // the input tensor's shape (any rank >= 1)
  formats::Direction direction = formats::Direction::kRowwise;
  formats::ScaleRounding rounding = formats::ScaleRounding::kCeil;  // MX recipes only (else kCeil)
  bool hadamard = false;           // nvfp4 with the random Hadamard transform
  formats::QuantizedMatrix q;      // stored orientation: columnwise copies are transposed
};

// The 2D view [rows, cols] of a tensor of `shape`: an error naming the rule for rank 0 and for
// empty tensors (no element to quantize).
Status matrix_view(const std::vector<int64_t>& shape, int64_t* rows, int64_t* cols);

// Appends t's tensors (views into t.q: t must outlive the write) and its metadata keys, after
// checking t (validate(), the shape against q's, the options against the recipe, the entry name:
// non-empty, and none of its metadata keys already in `metadata`, so a clash is an error, never
// an overwrite). An error leaves both unchanged. The cost does not grow with the entries already
// added (a model file has thousands): an entry of the same name is found through its metadata
// keys; a tensor the caller put in `tensors` under one of t's names is refused by
// write_safetensors (a duplicate name) instead.
Status add_quantized_tensor(const QuantizedTensor& t,
                            std::vector<std::pair<std::string, TensorView>>* tensors,
                            std::map<std::string, std::string>* metadata);

// Entry names in a file: every NAME with a NAME.recipe metadata key, sorted.
std::vector<std::string> quantized_tensor_names(const SafetensorsFile& file);

// Reads entry `name` back (copies its bytes) after checking every key, dtype and shape against
// the schema, and every scale against what quantize writes (formats::check_scales); errors name
// the key and the rule, and leave `out` unchanged. Other keys in the file are ignored.
// q.nonfinite_seen is not stored: it reads as false (a NaN scale marks a block that held a NaN
// or Inf).
Status read_quantized_tensor(const SafetensorsFile& file, const std::string& name,
                             QuantizedTensor* out);

}  // namespace blockscale::io
