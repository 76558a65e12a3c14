// Tests of formats/mx_quantize.cpp: MXFP8 (E4M3, E5M2), MXFP6 (E2M3, E3M2), MXFP4 (E2M1).
// Golden vectors worked by hand (comments show the arithmetic), a spec model written here from
// docs/numerics.md (the scale exponent decided in fp64 with ilogb/ldexp, not with the library's
// mx_scale_exponent), error bounds and the ceil no-saturation property on random and
// heavy-tailed data, boundary and adversarial inputs.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/formats/quantize_test_data.h"
#include "formats/quantize.h"

namespace bf = blockscale::formats;
using bf::Direction;
using bf::QuantizedMatrix;
using bf::QuantizeOptions;
using bf::Format;
using bf::ScaleRounding;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

QuantizedMatrix quantize(const std::vector<float>& x, int64_t rows, int64_t cols, Format r,
                         ScaleRounding rounding, Direction d = Direction::kRowwise) {
  QuantizeOptions o;
  o.recipe = r;
  o.rounding = rounding;
  QuantizedMatrix q;
  auto s = bf::quantize(x.data(), rows, cols, cols, o, d, &q);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return q;
}

// One row: checks the scale codes and the stored data bytes.
void expect_row(Format r, ScaleRounding rounding, const std::vector<float>& x,
                const std::vector<uint8_t>& scales, const std::vector<uint8_t>& bytes) {
  const QuantizedMatrix q = quantize(x, 1, static_cast<int64_t>(x.size()), r, rounding);
  SCOPED_TRACE(rounding == ScaleRounding::kCeil ? "ceil" : "floor");
  EXPECT_EQ(q.scales, scales);
  ASSERT_EQ(q.data.size(), r == Format::kMxfp4 ? (x.size() + 1) / 2 : x.size());
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(q.data[i], bytes[i]) << "byte " << i;
  for (size_t i = bytes.size(); i < q.data.size(); ++i) EXPECT_EQ(q.data[i], 0) << "byte " << i;
}

// ---- golden vectors, by hand ------------------------------------------------------------------

TEST(MxGolden, Mxfp8E4M3) {
  // E4M3: maxnorm 448 = 1.75 * 2^8 (emax 8), 3 mantissa bits, bias 7, min normal 2^-6.
  // Block 0: amax 960 = 1.875 * 2^9.
  //   ceil : e = 9 - 8 = 1, and 1.875 > 1.75 -> e = 2, X = 4, code 127 + 2 = 0x81.
  //          960/4 = 240 = 1.875*2^7 -> exp 14, man 7: 0x77. 957/4 = 239.25: grid step 16 in
  //          [128,256) -> 240: 0x77. -3/4 = -0.75 = -1.5*2^-1 -> 0x80|(6<<3)|4 = 0xB4.
  //          0.1f/4 = 0.025000000373: in [2^-6, 2^-5) step 2^-9, 12.8 steps -> 13*2^-9 = 1.625*2^-6
  //          -> exp 1, man 5: 0x0D. 1/4 = 2^-2 -> 0x28. -0 -> 0x80. +0 -> 0x00.
  //   floor: e = 9 - 8 = 1, X = 2, code 0x80. 960/2 = 480 and 957/2 = 478.5 saturate: 0x7E.
  //          -3/2 = -1.5 -> 0xBC. 0.1f/2 = 0.05: step 2^-8 in [2^-5, 2^-4), 12.8 -> 13*2^-8 =
  //          1.625*2^-5 -> exp 2, man 5: 0x15. 1/2 -> 0x30. -0 -> 0x80.
  // Block 1: zeros and one -0 at column 40: amax 0 -> scale 0x00, codes keep the zero's sign.
  // Block 2 (columns 64..68, partial): amax 1.75 = 1.75*2^0 -> e = -8 for ceil (1.75 is not >
  //   1.75) and floor, code 119 = 0x77. 1.5*256 = 384 -> 0x7C, 0.5*256 = 128 -> 0x70,
  //   -1.75*256 = -448 -> 0xFE, 2^-20 * 2^8 = 2^-12 < 2^-10 (half the smallest subnormal) -> 0x00.
  std::vector<float> x(69, 0.0f);
  x[0] = 960; x[1] = 957; x[2] = -3; x[3] = 0.1f; x[4] = 1; x[5] = -0.0f;
  x[40] = -0.0f;
  x[64] = 1.5f; x[65] = 0.5f; x[66] = -1.75f; x[67] = std::ldexp(1.0f, -20);
  std::vector<uint8_t> ceil_bytes(69, 0), floor_bytes(69, 0);
  const uint8_t c0[] = {0x77, 0x77, 0xB4, 0x0D, 0x28, 0x80};
  const uint8_t f0[] = {0x7E, 0x7E, 0xBC, 0x15, 0x30, 0x80};
  for (int i = 0; i < 6; ++i) { ceil_bytes[i] = c0[i]; floor_bytes[i] = f0[i]; }
  for (auto* b : {&ceil_bytes, &floor_bytes}) {
    (*b)[40] = 0x80;
    (*b)[64] = 0x7C; (*b)[65] = 0x70; (*b)[66] = 0xFE; (*b)[67] = 0x00;
  }
  expect_row(Format::kMxfp8E4M3, ScaleRounding::kCeil, x, {0x81, 0x00, 0x77}, ceil_bytes);
  expect_row(Format::kMxfp8E4M3, ScaleRounding::kFloor, x, {0x80, 0x00, 0x77}, floor_bytes);
  // Dequantize (ceil): 957 -> 240*4 = 960; floor: 957 -> 448*2 = 896.
  std::vector<float> d;
  ASSERT_TRUE(bf::dequantize(quantize(x, 1, 69, Format::kMxfp8E4M3, ScaleRounding::kCeil), &d).is_ok());
  EXPECT_EQ(d[1], 960.0f);
  EXPECT_EQ(d[3], 13 * std::ldexp(1.0f, -9) * 4);
  EXPECT_TRUE(std::signbit(d[40]) && d[40] == 0.0f);
  ASSERT_TRUE(bf::dequantize(quantize(x, 1, 69, Format::kMxfp8E4M3, ScaleRounding::kFloor), &d).is_ok());
  EXPECT_EQ(d[1], 896.0f);
}

TEST(MxGolden, Mxfp8E5M2) {
  // E5M2: maxnorm 57344 = 1.75*2^15 (emax 15), 2 mantissa bits, bias 15, min normal 2^-14,
  // subnormals k*2^-16. amax = 1966080 = 1.875*2^20.
  //   ceil : e = 20-15 = 5, 1.875 > 1.75 -> e = 6, X = 64, code 0x85.
  //          1966080/64 = 30720 = 1.875*2^14: halfway between 1.75*2^14 (man 3, odd) and 2^15
  //          -> ties to even: 2^15 -> exp 30, man 0: 0x78.
  //          100/64 = 1.5625: between 1.5 and 1.75 -> 1.5 -> (15<<2)|2 = 0x3E.
  //          3*2^-10/64 = 3*2^-16 -> subnormal 3: 0x03. 2.5*2^-10/64 = 2.5*2^-16 -> tie -> 2: 0x02.
  //          -57344/64 = -896 = -1.75*2^9 -> 0x80|(24<<2)|3 = 0xE3.
  //   floor: e = 5, X = 32, code 0x84. 1966080/32 = 61440 > 57344 -> 0x7B.
  //          100/32 = 3.125 = 1.5625*2 -> 1.5*2 -> (16<<2)|2 = 0x42.
  //          3*2^-15 = 1.5*2^-14 (normal) -> (1<<2)|2 = 0x06. 2.5*2^-15 = 1.25*2^-14 -> 0x05.
  //          -57344/32 = -1792 = -1.75*2^10 -> 0x80|(25<<2)|3 = 0xE7.
  std::vector<float> x(32, 0.0f);
  x[0] = 1966080; x[1] = 100; x[2] = std::ldexp(3.0f, -10); x[3] = std::ldexp(2.5f, -10);
  x[4] = -57344;
  expect_row(Format::kMxfp8E5M2, ScaleRounding::kCeil, x, {0x85}, {0x78, 0x3E, 0x03, 0x02, 0xE3});
  expect_row(Format::kMxfp8E5M2, ScaleRounding::kFloor, x, {0x84}, {0x7B, 0x42, 0x06, 0x05, 0xE7});
}

TEST(MxGolden, Mxfp6E2M3) {
  // E2M3: maxnorm 7.5 = 1.875*2^2 (emax 2), bias 1; grid: k/8 below 1, step 1/8 in [1,2),
  // 1/4 in [2,4), 1/2 in [4,7.5]. Codes one per byte, sign bit 0x20.
  // amax = 15.5 = 1.9375*2^3.
  //   ceil : e = 3-2 = 1, 1.9375 > 1.875 -> e = 2, X = 4, code 0x81.
  //          15.5/4 = 3.875: tie between 3.75 (exp 2, man 7, odd) and 4.0 (exp 3, man 0) -> 4.0:
  //          (3<<3)|0 = 0x18.  5.3f/4 = 1.32500005 -> 1.375 -> (1<<3)|3 = 0x0B.
  //          -0.2f/4 = -0.05: 0.4 of the step 1/8 -> -0 (sign kept): 0x20.
  //          0.5/4 = 0.125 -> subnormal 1: 0x01. 0.75/4 = 0.1875: tie 1/8 vs 2/8 -> 2: 0x02.
  //   floor: e = 3-2 = 1, X = 2, code 0x80. 15.5/2 = 7.75 -> saturates: 0x1F.
  //          5.3f/2 = 2.65 -> 2.75 -> (2<<3)|3 = 0x13. -0.2f/2 = -0.1: 0.8 step -> -1/8: 0x21.
  //          0.5/2 = 0.25 -> 0x02. 0.75/2 = 0.375 -> 0x03.
  std::vector<float> x(32, 0.0f);
  x[0] = 15.5f; x[1] = 5.3f; x[2] = -0.2f; x[3] = 0.5f; x[4] = 0.75f;
  expect_row(Format::kMxfp6E2M3, ScaleRounding::kCeil, x, {0x81}, {0x18, 0x0B, 0x20, 0x01, 0x02});
  expect_row(Format::kMxfp6E2M3, ScaleRounding::kFloor, x, {0x80}, {0x1F, 0x13, 0x21, 0x02, 0x03});
}

TEST(MxGolden, Mxfp6E3M2) {
  // E3M2: maxnorm 28 = 1.75*2^4 (emax 4), bias 3; subnormals k/16, min normal 0.25.
  // amax = 120 = 1.875*2^6.
  //   ceil : e = 6-4 = 2, 1.875 > 1.75 -> e = 3, X = 8, code 0x82.
  //          120/8 = 15: tie between 14 (exp 6, man 3, odd) and 16 (exp 7, man 0) -> 16: 0x1C.
  //          3/8 = 0.375 = 1.5*2^-2 -> (1<<2)|2 = 0x06. -0.3f/8 = -0.0375 = 0.6 of 1/16 -> -1/16:
  //          0x21. 2^-5/8 = 2^-8 < 2^-5 (half of 1/16) -> 0x00. -7/8 = -0.875 = -1.75*2^-1 ->
  //          0x20|(2<<2)|3 = 0x2B.
  //   floor: e = 2, X = 4, code 0x81. 120/4 = 30 -> saturates to 28: 0x1F. 3/4 = 0.75 ->
  //          (2<<2)|2 = 0x0A. -0.3f/4 = -0.075 = 1.2/16 -> 0x21. 2^-5/4 = 2^-7 -> 0x00.
  //          -7/4 = -1.75 -> 0x20|(3<<2)|3 = 0x2F.
  std::vector<float> x(32, 0.0f);
  x[0] = 120; x[1] = 3; x[2] = -0.3f; x[3] = 1.0f / 32; x[4] = -7;
  expect_row(Format::kMxfp6E3M2, ScaleRounding::kCeil, x, {0x82}, {0x1C, 0x06, 0x21, 0x00, 0x2B});
  expect_row(Format::kMxfp6E3M2, ScaleRounding::kFloor, x, {0x81}, {0x1F, 0x0A, 0x21, 0x00, 0x2F});
}

TEST(MxGolden, Mxfp4NibblePacking) {
  // E2M1 grid 0 .5 1 1.5 2 3 4 6 = codes 0..7, sign 8; maxnorm 6 = 1.5*2^2 (emax 2).
  // Block 0: amax 7 = 1.75*2^2.
  //   ceil : e = 0, 1.75 > 1.5 -> e = 1, X = 2, code 0x80.
  //          7/2 = 3.5: tie 3 (code 5) / 4 (code 6) -> 6. -1.25/2 = -0.625 -> -0.5: 0x9.
  //          2.5/2 = 1.25: tie 1 (2) / 1.5 (3) -> 2. 0.2/2 = 0.1 -> 0. -0 -> 8.
  //          5/2 = 2.5: tie 2 (4) / 3 (5) -> 4.
  //          bytes (low nibble = even column): 6|9<<4 = 0x96, 2|0<<4 = 0x02, 8|4<<4 = 0x48.
  //   floor: e = 2-2 = 0, X = 1, code 0x7F.
  //          7 -> saturates to 6: 7. -1.25: tie 1 (2) / 1.5 (3) -> 0xA. 2.5: tie 2/3 -> 4.
  //          0.2 -> 0. -0 -> 8. 5: tie 4 (6) / 6 (7) -> 6.
  //          bytes: 7|0xA<<4 = 0xA7, 0x04, 8|6<<4 = 0x68.
  // Block 1 = column 32 alone (33 columns: 17 bytes per row): -3 = -1.5*2^1 -> e = 1-2 = -1
  //   (1.5 is not > 1.5) for both roundings, code 0x7E; -3/0.5 = -6 -> 0xF; byte 16 = 0x0F
  //   (the high nibble of an odd last column stays 0).
  std::vector<float> x(33, 0.0f);
  x[0] = 7; x[1] = -1.25f; x[2] = 2.5f; x[3] = 0.2f; x[4] = -0.0f; x[5] = 5; x[32] = -3;
  std::vector<uint8_t> ceil_bytes(17, 0), floor_bytes(17, 0);
  ceil_bytes[0] = 0x96; ceil_bytes[1] = 0x02; ceil_bytes[2] = 0x48; ceil_bytes[16] = 0x0F;
  floor_bytes[0] = 0xA7; floor_bytes[1] = 0x04; floor_bytes[2] = 0x68; floor_bytes[16] = 0x0F;
  expect_row(Format::kMxfp4, ScaleRounding::kCeil, x, {0x80, 0x7E}, ceil_bytes);
  expect_row(Format::kMxfp4, ScaleRounding::kFloor, x, {0x7F, 0x7E}, floor_bytes);
  const QuantizedMatrix q = quantize(x, 1, 33, Format::kMxfp4, ScaleRounding::kCeil);
  EXPECT_EQ(bf::element_code(q, 0, 0), 0x6u);
  EXPECT_EQ(bf::element_code(q, 0, 1), 0x9u);
  EXPECT_EQ(bf::element_code(q, 0, 32), 0xFu);
}

TEST(MxGolden, ScaleBoundaries) {
  // amax exactly maxnorm * 2^k gives e = k under ceil; the next float up gives k + 1.
  std::vector<float> x(32, 0.0f);
  x[0] = 448;  // e = 0: code 0x7F, 448 -> 0x7E
  expect_row(Format::kMxfp8E4M3, ScaleRounding::kCeil, x, {0x7F}, {0x7E});
  x[0] = std::nextafter(448.0f, 1000.0f);  // 448.00003 = 1.75000012*2^8 -> ceil e = 1: 224 -> 0x76
  expect_row(Format::kMxfp8E4M3, ScaleRounding::kCeil, x, {0x80}, {0x76});
  expect_row(Format::kMxfp8E4M3, ScaleRounding::kFloor, x, {0x7F}, {0x7E});  // saturates
  x[0] = 6;  // E2M1: e = 0, 6 -> code 7
  expect_row(Format::kMxfp4, ScaleRounding::kCeil, x, {0x7F}, {0x07});
  x[0] = std::nextafter(6.0f, 7.0f);  // ceil e = 1: 3.0000002 -> 3 (code 5); floor: saturates
  expect_row(Format::kMxfp4, ScaleRounding::kCeil, x, {0x80}, {0x05});
  expect_row(Format::kMxfp4, ScaleRounding::kFloor, x, {0x7F}, {0x07});
  x[0] = 28;  // E3M2 exactly maxnorm: e = 0, code 0x1F
  expect_row(Format::kMxfp6E3M2, ScaleRounding::kCeil, x, {0x7F}, {0x1F});
  x[0] = 7.5f * 1024;  // E2M3: 7.5*2^10 -> e = 10, 7.5 -> 0x1F
  expect_row(Format::kMxfp6E2M3, ScaleRounding::kCeil, x, {0x89}, {0x1F});
}

TEST(MxGolden, FltMaxAndSubnormals) {
  // FLT_MAX = (2 - 2^-23) * 2^127. E4M3 ceil: e = 127-8 = 119, +1 (1.99.. > 1.75) = 120: 0xF7;
  //   FLT_MAX * 2^-120 = 255.99998 -> 256 = 2^8: 0x78. -1e38 * 2^-120 = -75.23 -> -72 = -1.125*2^6:
  //   0x80|(13<<3)|1 = 0xE9. floor: e = 119 (0xF6); 511.99997 -> 0x7E; -150.46 -> -144: 0xF1.
  std::vector<float> x(32, 0.0f);
  x[0] = FLT_MAX; x[1] = -1e38f;
  expect_row(Format::kMxfp8E4M3, ScaleRounding::kCeil, x, {0xF7}, {0x78, 0xE9});
  expect_row(Format::kMxfp8E4M3, ScaleRounding::kFloor, x, {0xF6}, {0x7E, 0xF1});
  // E5M2 ceil: e = 127-15+1 = 113 (0xF0); FLT_MAX*2^-113 = 32767.998 -> 2^15: 0x78;
  //   -1e38*2^-113 = -9629.6 -> -10240 = -1.25*2^13 (step 2048): 0x80|(28<<2)|1 = 0xF1.
  // E2M1 ceil: e = 127-2+1 = 126 (0xFD); 3.9999998 -> 4: code 6; -1e38*2^-126 = -1.175 -> -1: 0xA.
  expect_row(Format::kMxfp8E5M2, ScaleRounding::kCeil, x, {0xF0}, {0x78, 0xF1});
  expect_row(Format::kMxfp4, ScaleRounding::kCeil, x, {0xFD}, {0xA6});
  // Note: decode(q) * 2^e = 2^128 here, so the fp32 dequantize overflows to +Inf (spec formula);
  // the exact fp64 value is 2^128.
  std::vector<double> dx;
  ASSERT_TRUE(bf::dequantize_exact(quantize(x, 1, 32, Format::kMxfp8E4M3, ScaleRounding::kCeil), &dx).is_ok());
  EXPECT_EQ(dx[0], std::ldexp(1.0, 128));

  // fp32 subnormals: amax = 2^-127 (subnormal): e = -127-8 = -135, clamped to -127: code 0x00,
  // which here is a real scale 2^-127, not a zero block. x*2^127: 2^-127 -> 1 (0x38),
  // -2^-149 -> -2^-22 -> -0 (0x80), 1.5*2^-130 -> 0.1875 = 1.5*2^-3 (0x24), 2^-136 -> 2^-9 (0x01).
  std::vector<float> s(32, 0.0f);
  s[0] = std::ldexp(1.0f, -127); s[1] = -std::numeric_limits<float>::denorm_min();
  s[2] = std::ldexp(1.5f, -130); s[3] = std::ldexp(1.0f, -136);
  for (auto rnd : {ScaleRounding::kCeil, ScaleRounding::kFloor}) {
    expect_row(Format::kMxfp8E4M3, rnd, s, {0x00}, {0x38, 0x80, 0x24, 0x01});
    // E2M1: 1 -> 2, -2^-22 -> 8, 0.1875 -> 0, 2^-9 -> 0: bytes 0x82, 0x00.
    expect_row(Format::kMxfp4, rnd, s, {0x00}, {0x82, 0x00});
  }
  std::vector<float> d;
  ASSERT_TRUE(bf::dequantize(quantize(s, 1, 32, Format::kMxfp8E4M3, ScaleRounding::kCeil), &d).is_ok());
  EXPECT_EQ(d[0], std::ldexp(1.0f, -127));
  EXPECT_EQ(d[3], std::ldexp(1.0f, -136));
}

// ---- spec model and properties ------------------------------------------------------------------

const bf::MinifloatSpec& spec_of(Format r) {
  switch (r) {
    case Format::kMxfp8E5M2: return bf::kE5M2;
    case Format::kMxfp6E2M3: return bf::kE2M3;
    case Format::kMxfp6E3M2: return bf::kE3M2;
    case Format::kMxfp4: return bf::kE2M1;
    default: return bf::kE4M3;
  }
}
float maxnorm_of(Format r) { return bf::decode_minifloat(spec_of(r).max_code, spec_of(r)); }

// The scale exponent, decided in fp64 from the definitions.
int model_exponent(float amax, float maxnorm, bool ceil) {
  if (amax == 0.0f) return -127;
  int e;
  if (ceil) {  // smallest e with amax <= maxnorm * 2^e; start where it is surely false
    e = std::ilogb(amax) - std::ilogb(maxnorm) - 1;
    while (static_cast<double>(amax) > std::ldexp(static_cast<double>(maxnorm), e)) ++e;
  } else {
    e = std::ilogb(amax) - std::ilogb(maxnorm);
  }
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// Rowwise model on a contiguous R x C matrix: codes (one per element) and scale codes.
void model(const std::vector<float>& x, int64_t R, int64_t C, Format r, bool ceil,
           std::vector<uint32_t>* codes, std::vector<uint8_t>* scales) {
  const auto& sp = spec_of(r);
  const int64_t nb = (C + 31) / 32;
  codes->assign(static_cast<size_t>(R * C), 0);
  scales->assign(static_cast<size_t>(R * nb), 0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * 32, c1 = std::min(C, c0 + 32);
      float amax = 0;
      bool bad = false;
      for (int64_t c = c0; c < c1; ++c) {
        const float v = x[i * C + c];
        if (!std::isfinite(v)) bad = true; else amax = std::max(amax, std::fabs(v));
      }
      if (bad) { (*scales)[i * nb + b] = 0xFF; continue; }
      const int e = model_exponent(amax, maxnorm_of(r), ceil);
      (*scales)[i * nb + b] = static_cast<uint8_t>(e + 127);
      for (int64_t c = c0; c < c1; ++c)
        (*codes)[i * C + c] = bf::encode_minifloat(
            static_cast<float>(std::ldexp(static_cast<double>(x[i * C + c]), -e)), sp);
    }
}

using blockscale_test::Dist;
using blockscale_test::make_data;

struct PropCase {
  Format recipe;
  ScaleRounding rounding;
  Dist dist;
  float magnitude;
};

void PrintTo(const PropCase& c, std::ostream* os) {
  *os << bf::format_name(c.recipe) << (c.rounding == ScaleRounding::kCeil ? " ceil" : " floor")
      << " dist " << int(c.dist) << " x" << c.magnitude;
}

class MxProperties : public ::testing::TestWithParam<PropCase> {};

// Bytes equal the model's; and per element, with X = 2^e, m mantissa bits, emin = 1 - bias:
//   ceil : |x / X| <= maxnorm (nothing saturates) and
//          |deq - x| <= max(|x| * 2^-(m+1), 2^(e + emin - m - 1))
//          (half an ulp of the element grid, relative in the normal range, absolute below it);
//   floor: the same where |x / X| <= maxnorm, else deq = ±maxnorm * X (saturation).
TEST_P(MxProperties, MatchesModelAndErrorBound) {
  const PropCase p = GetParam();
  const auto& sp = spec_of(p.recipe);
  const float maxnorm = maxnorm_of(p.recipe);
  const int m = sp.man_bits, emin = 1 - sp.bias;
  const bool ceil = p.rounding == ScaleRounding::kCeil;
  const struct { int64_t r, c; } shapes[] = {{37, 100}, {129, 65}};
  int saturated = 0;
  for (auto s : shapes) {
    const auto x = make_data(s.r * s.c, 1000 + s.r + static_cast<int>(p.dist), p.dist, p.magnitude);
    for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
      SCOPED_TRACE(d == Direction::kRowwise ? "rowwise" : "columnwise");
      const QuantizedMatrix q = quantize(x, s.r, s.c, p.recipe, p.rounding, d);
      // The stored matrix as input of the rowwise model.
      const int64_t R = d == Direction::kRowwise ? s.r : s.c, C = d == Direction::kRowwise ? s.c : s.r;
      std::vector<float> xs(x.size());
      for (int64_t i = 0; i < s.r; ++i)
        for (int64_t j = 0; j < s.c; ++j)
          (d == Direction::kRowwise ? xs[i * s.c + j] : xs[j * s.r + i]) = x[i * s.c + j];
      std::vector<uint32_t> codes;
      std::vector<uint8_t> scales;
      model(xs, R, C, p.recipe, ceil, &codes, &scales);
      ASSERT_EQ(q.rows, R);
      ASSERT_EQ(q.cols, C);
      ASSERT_EQ(q.scales, scales);
      std::vector<double> deq;
      ASSERT_TRUE(bf::dequantize_exact(q, &deq).is_ok());
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) {
          ASSERT_EQ(bf::element_code(q, i, j), codes[i * C + j]) << "at " << i << "," << j;
          const int e = static_cast<int>(scales[i * ((C + 31) / 32) + j / 32]) - 127;
          const double v = xs[i * C + j], y = std::ldexp(std::fabs(v), -e);
          const double got = deq[i * C + j];
          if (ceil) ASSERT_LE(y, maxnorm) << "ceil saturated at " << i << "," << j;
          if (y <= maxnorm) {
            const double bound = std::max(std::fabs(v) * std::ldexp(1.0, -(m + 1)),
                                          std::ldexp(1.0, e + emin - m - 1));
            ASSERT_LE(std::fabs(got - v), bound) << "x=" << v << " deq=" << got << " e=" << e;
          } else {
            ++saturated;
            ASSERT_EQ(got, std::copysign(std::ldexp(static_cast<double>(maxnorm), e), v));
          }
          if (v != 0.0 && got != 0.0) ASSERT_EQ(std::signbit(got), std::signbit(v));
        }
    }
  }
  if (ceil) EXPECT_EQ(saturated, 0);
}

std::vector<PropCase> prop_cases() {
  std::vector<PropCase> v;
  for (Format r : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp6E2M3, Format::kMxfp6E3M2,
                   Format::kMxfp4})
    for (auto rnd : {ScaleRounding::kCeil, ScaleRounding::kFloor}) {
      for (float mag : {1e-30f, 1e-3f, 1.0f, 1e3f, 1e30f}) v.push_back({r, rnd, Dist::kNormal, mag});
      v.push_back({r, rnd, Dist::kCubed, 1.0f});
      v.push_back({r, rnd, Dist::kStudentT, 1.0f});
      v.push_back({r, rnd, Dist::kOutlier, 1e-3f});
      v.push_back({r, rnd, Dist::kNormal, 1e-40f});  // fp32 subnormal inputs
    }
  return v;
}

std::string dist_name(Dist d, double mag) {
  const char* names[] = {"normal", "cubed", "student_t", "outlier"};
  std::string m = std::to_string(static_cast<int>(std::lround(std::log10(mag))));
  for (auto& ch : m) if (ch == '-') ch = 'm';
  return std::string(names[static_cast<int>(d)]) + "_e" + m;
}

std::string prop_name(const ::testing::TestParamInfo<PropCase>& i) {
  return std::string(bf::format_name(i.param.recipe)) +
         (i.param.rounding == ScaleRounding::kCeil ? "_ceil_" : "_floor_") +
         dist_name(i.param.dist, i.param.magnitude);
}

INSTANTIATE_TEST_SUITE_P(Mx, MxProperties, ::testing::ValuesIn(prop_cases()), prop_name);

// A NaN block next to finite ones, with the model treating it as the spec says: scale 0xFF and
// all codes 0; columnwise too. -0 and an outlier in the same matrix.
TEST(MxAdversarial, NanInfZeroAndOutlierBlocks) {
  for (Format r : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp6E2M3, Format::kMxfp6E3M2,
                   Format::kMxfp4}) {
    SCOPED_TRACE(bf::format_name(r));
    auto x = make_data(3 * 96, 7, Dist::kNormal, 1.0f);
    x[5] = kNaN;                                            // row 0 block 0
    x[96 + 40] = std::numeric_limits<float>::infinity();    // row 1 block 1
    x[2 * 96 + 70] = -std::numeric_limits<float>::infinity();  // row 2 block 2
    for (int c = 32; c < 64; ++c) x[c] = (c & 1) ? -0.0f : 0.0f;  // row 0 block 1: amax 0
    x[2 * 96 + 10] = 3e30f;                                  // row 2 block 0: outlier
    for (auto rnd : {ScaleRounding::kCeil, ScaleRounding::kFloor}) {
      const QuantizedMatrix q = quantize(x, 3, 96, r, rnd);
      std::vector<uint32_t> codes;
      std::vector<uint8_t> scales;
      model(x, 3, 96, r, rnd == ScaleRounding::kCeil, &codes, &scales);
      EXPECT_EQ(q.scales, scales);
      EXPECT_EQ(q.scales[0], 0xFF);
      EXPECT_EQ(q.scales[1], 0x00);
      EXPECT_EQ(q.scales[4], 0xFF);
      EXPECT_EQ(q.scales[8], 0xFF);
      EXPECT_TRUE(q.nonfinite_seen);
      const uint32_t neg_zero = r == Format::kMxfp4 ? 0x8 : (r == Format::kMxfp8E4M3 || r == Format::kMxfp8E5M2 ? 0x80 : 0x20);
      for (int c = 32; c < 64; ++c) EXPECT_EQ(bf::element_code(q, 0, c), (c & 1) ? neg_zero : 0u);
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 96; ++j)
          ASSERT_EQ(bf::element_code(q, i, j), codes[i * 96 + j]) << i << "," << j;
    }
  }
}

}  // namespace
