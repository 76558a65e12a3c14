// Internal to gemm/: the argument-check helpers the dense (gemm.cpp) and grouped (grouped.cpp)
// APIs share: operand byte sizes, alignment and overlap tests, and errors that name the argument.
#pragma once

#include <cstdint>
#include <string>

#include "formats/dtype.h"
#include "formats/recipe.h"
#include "formats/scale_layout.h"
#include "gemm/gemm.h"

namespace blockscale::gemm::detail {

constexpr int64_t kInt32Max = 0x7FFFFFFF;  // TMA coordinates and tile indices are 32-bit

inline std::string str(int64_t v) { return std::to_string(v); }

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

inline int64_t element_bytes(formats::DType t) { return static_cast<int64_t>(formats::dtype_size(t)); }

// C and D are bf16 or fp32 (the epilogues' two stores); `name` is the field ("c_type").
inline Status check_c_d_dtype(const char* name, formats::DType t) {
  if (t != formats::DType::kBf16 && t != formats::DType::kF32)
    return Status::error(std::string(name) + ": must be BF16 or F32, got " + formats::dtype_name(t));
  return Status::ok();
}

// Bytes of an operand's scale buffer in the GEMM layout of its recipe.
inline int64_t scale_bytes(formats::Format r, int64_t rows, int64_t k) {
  if (r == formats::Format::kFp8Block1x128) return formats::vec128_scale_floats(rows, k / 128) * 4;
  if (r == formats::Format::kFp8Block128x128) return formats::blk128_scale_floats((rows + 127) / 128, k / 128) * 4;
  return formats::swizzled_scale_bytes(rows, k / formats::default_block_cols(r));
}

inline int64_t data_bytes(formats::Format r, int64_t rows, int64_t k) {
  return rows * (formats::is_fp4(r) ? k / 2 : k);
}

inline bool overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + static_cast<uintptr_t>(b_bytes) && y < x + static_cast<uintptr_t>(a_bytes);
}

// Bytes a row-major rows x cols matrix with row stride ld spans.
inline int64_t span_bytes(int64_t rows, int64_t cols, int64_t ld, int64_t element) {
  return rows > 0 && cols > 0 ? ((rows - 1) * ld + cols) * element : 0;
}

// ptr non-null and aligned to `align` bytes; the error names the argument and the rule.
inline Status need_pointer(const void* ptr, size_t align, const char* name, const char* rule) {
  if (ptr == nullptr) return Status::error(std::string(name) + ": must not be null");
  if (!aligned(ptr, align)) return Status::error(std::string(name) + ": must be " + rule);
  return Status::ok();
}

// An NVFP4 operand's S_dec pointer (count floats).
inline Status need_scale_dec(const float* ptr, const char* name) {
  if (ptr == nullptr || !aligned(ptr, 4))
    return Status::error(std::string(name) + ": must be a 4-byte aligned device pointer to the NVFP4 operand's "
                         "tensor decode scale S_dec (quant/ writes it to *_scale_dec), got " +
                         (ptr == nullptr ? "null" : "a misaligned pointer"));
  return Status::ok();
}

// How many p-sized copies each buffer holds: dense 1 each; M-grouped: B, its scales and its S_dec
// hold num_groups experts; K-grouped: C and D hold num_groups outputs. group_ends (`ends` int32)
// is an input too.
struct BufferCopies {
  int64_t b = 1;
  int64_t c_d = 1;
  int64_t ends = 0;
};

// The pointer rules of both APIs (gemm.cpp): operands non-null and 16-byte aligned, NVFP4 S_dec
// present, D aligned and overlapping no input, C (beta != 0) aligned and either D itself or
// disjoint from it.
Status check_pointers(const GemmProblem& p, const GemmArguments& args, const BufferCopies& copies,
                      const int32_t* group_ends);

// The current device's compute capability as major * 10 + minor (gemm.cpp).
Status current_sm(int* sm);

}  // namespace blockscale::gemm::detail
