// The element type of a tensor, one enum for the whole toolkit: the file formats (formats/io),
// the GPU quantize input (quant/), the GEMM's C and D (gemm/), the CLI and the Python bindings.
// Each layer states which dtypes it takes and refuses the others by name.
//
//   defines: DType, kNumDTypes, DTypeInfo, dtype_info, dtype_size, dtype_name, dtype_is_float
#pragma once

#include <cstddef>
#include <cstdint>

namespace blockscale::formats {

// In the order of safetensors' reference `Dtype` enum (increasing alignment): its writer orders
// tensors by dtype descending, then by name, which keeps every tensor naturally aligned; ours
// does the same (formats/io/safetensors.h), so files match the reference byte for byte.
enum class DType : uint8_t {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kF8E8M0, kI16, kU16, kF16, kBf16, kI32, kU32, kF32, kF64, kI64, kU64
};
inline constexpr int kNumDTypes = 16;

struct DTypeInfo {
  const char* name;  // the dtype's one name: safetensors' dtype string ("BF16", "F32")
  uint8_t size;      // bytes per element
  bool is_float;
};

// A value outside the enum reads as the first row; callers that take values from outside the
// program (file headers, casts) check the range first.
inline const DTypeInfo& dtype_info(DType d) {
  static constexpr DTypeInfo kTable[kNumDTypes] = {
      {"BOOL", 1, false},   {"U8", 1, false},  {"I8", 1, false},  {"F8_E5M2", 1, true},
      {"F8_E4M3", 1, true}, {"F8_E8M0", 1, true}, {"I16", 2, false}, {"U16", 2, false},
      {"F16", 2, true},     {"BF16", 2, true}, {"I32", 4, false}, {"U32", 4, false},
      {"F32", 4, true},     {"F64", 8, true},  {"I64", 8, false}, {"U64", 8, false}};
  return kTable[static_cast<int>(d) < kNumDTypes ? static_cast<int>(d) : 0];
}
inline size_t dtype_size(DType d) { return dtype_info(d).size; }
// A value outside the enum (a cast from a bad integer) is named as such, so an error says so.
inline const char* dtype_name(DType d) {
  return static_cast<int>(d) < kNumDTypes ? dtype_info(d).name : "an unknown dtype";
}
inline bool dtype_is_float(DType d) { return dtype_info(d).is_float; }

}  // namespace blockscale::formats
