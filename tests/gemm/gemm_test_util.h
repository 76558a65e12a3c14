// Shared by the GEMM tests: C and D elements (bf16 or fp32) as bytes and back, a value rounded
// once to D's type, |A| for error bounds, operand scales in the GEMM layout, Frobenius norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/dtype.h"
#include "formats/recipe.h"
#include "formats/scalar_codecs.h"
#include "formats/scale_layout.h"
#include "gemm/gemm.h"

namespace blockscale_test {

// Selects gemm/'s process-wide sm_90 FP8 route for one scope; kAuto comes back after it.
struct RouteScope {
  explicit RouteScope(blockscale::gemm::GemmRoute r) { blockscale::gemm::set_gemm_route(r); }
  ~RouteScope() { blockscale::gemm::set_gemm_route(blockscale::gemm::GemmRoute::kAuto); }
};

// Element i of a bf16 or fp32 buffer.
inline double element_value(const std::vector<uint8_t>& bytes, int64_t i, blockscale::formats::DType t) {
  if (t == blockscale::formats::DType::kF32) {
    float f;
    std::memcpy(&f, bytes.data() + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + i * 2, 2);
  return blockscale::formats::bf16_bits_to_float(h);
}

// Values as the bytes of type t (fp32 round-to-nearest, then bf16 RNE for bf16).
inline std::vector<uint8_t> encode(const std::vector<double>& v, blockscale::formats::DType t) {
  std::vector<uint8_t> bytes(v.size() * blockscale::formats::dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == blockscale::formats::DType::kF32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(bytes.data() + i * 4, &f, 4);
    } else {
      const uint16_t h = blockscale::formats::float_to_bf16_bits_rn(static_cast<float>(v[i]));
      std::memcpy(bytes.data() + i * 2, &h, 2);
    }
  }
  return bytes;
}

// v rounded once (RNE) to D's type.
inline double round_to(double v, blockscale::formats::DType t) {
  const float f = static_cast<float>(v);
  return t == blockscale::formats::DType::kF32
             ? f
             : blockscale::formats::bf16_bits_to_float(blockscale::formats::float_to_bf16_bits_rn(f));
}

// The operand with its codes' signs cleared (scales and S_dec are unsigned): the fp64 reference
// GEMM on two of these is |A| |B|^T, the size the error bounds scale with.
inline blockscale::formats::QuantizedMatrix absolute(const blockscale::formats::QuantizedMatrix& q) {
  blockscale::formats::QuantizedMatrix a = q;
  const uint8_t sign_bits = blockscale::formats::is_fp4(q.recipe) ? 0x88 : 0x80;
  for (auto& byte : a.data) byte = static_cast<uint8_t>(byte & ~sign_bits);
  return a;
}

// An (A, B) recipe pair, a test parameter, named "a_x_b" in test names.
struct RecipePair {
  blockscale::formats::Format a, b;
};
inline std::string recipe_pair_name(const ::testing::TestParamInfo<RecipePair>& info) {
  return std::string(blockscale::formats::format_name(info.param.a)) + "_x_" +
         blockscale::formats::format_name(info.param.b);
}

// q's scales in the GEMM layout of its recipe (formats::pack_gemm_scales), as bytes.
inline std::vector<uint8_t> gemm_scales(const blockscale::formats::QuantizedMatrix& q) {
  std::vector<uint8_t> bytes;
  const blockscale::Status s = blockscale::formats::pack_gemm_scales(q, &bytes);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return bytes;
}

inline double frobenius(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

}  // namespace blockscale_test
