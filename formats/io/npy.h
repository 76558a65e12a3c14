// NumPy .npy files (format versions 1.0, 2.0, 3.0), read into memory and written atomically.
//
//   dtypes : every formats::DType with an npy descr (npy.cpp's table): '<f2' '<f4' '<f8', '<V2'
//            (bf16 as ml_dtypes saves it), '|b1' '|u1' '|i1' '<i2' '<u2' '<i4' '<u4' '<i8' '<u8'
//            ('<' or '|' accepted for one-byte types). Big-endian, structured, object, complex
//            and '<V1' (an fp8 of unknown kind) are errors.
//   order  : C and Fortran order are read; Fortran order is converted to row-major in memory.
//   rank   : 0 (a scalar, one element) to kMaxRank.
//   writing: C order, version 1.0 (2.0 only when the header exceeds 1.0's 16-bit length), with
//            the same header bytes np.save writes (so files match np.save byte for byte).
// Corrupt input is an error Status naming the rule: bad magic, unknown version, a header longer
// than the file or than kMaxNpyHeader, a header not ending in '\n', a malformed or incomplete
// dict, an unsupported descr, a negative or overflowing shape, data shorter or longer than
// shape x itemsize. docs/file-io.md has the details.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/io/tensor_view.h"
#include "formats/status.h"

namespace blockscale::io {

// numpy itself refuses headers over 10,000 bytes unless told otherwise; 1 MiB is far above any
// real header (rank 64 needs under 2 KiB) and keeps a hostile length from costing memory.
inline constexpr size_t kMaxNpyHeader = size_t{1} << 20;

// An array read from a .npy file: the bytes are owned and row-major.
struct NpyArray {
  formats::DType dtype = formats::DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  TensorView view() const { return TensorView{dtype, shape, data.data(), data.size()}; }
};

// Reads a whole .npy file.
Status read_npy(const std::string& path, NpyArray* out);

// Parses .npy bytes held in memory (what read_npy does after reading the file).
Status parse_npy(const uint8_t* bytes, size_t size, NpyArray* out);

// Writes `t` as a C-order .npy file: to a temporary file in the target's directory, fsync, then
// rename over `path`. Fails (leaving no file) for dtypes without a .npy form (the fp8 types).
Status write_npy(const std::string& path, const TensorView& t);

// The bytes write_npy writes, in memory.
Status encode_npy(const TensorView& t, std::vector<uint8_t>* out);

}  // namespace blockscale::io
