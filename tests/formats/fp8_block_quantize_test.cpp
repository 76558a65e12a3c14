// Tests of formats/fp8_block_quantize.cpp: FP8 blockwise (1x128 and 128x128 blocks, E4M3
// elements, fp32 scales), with and without power-of-two scales. Golden vectors worked by hand,
// a spec model written here from docs/numerics.md, error bounds on random and heavy-tailed data,
// amax == 0 and tiny-amax blocks, FLT_MAX, 128x128 tiles shared by W and W^T.
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

namespace {

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

QuantizedMatrix quantize(const std::vector<float>& x, int64_t rows, int64_t cols, Format r,
                         bool pow2, Direction d = Direction::kRowwise) {
  QuantizeOptions o;
  o.recipe = r;
  o.pow2_scales = pow2;
  QuantizedMatrix q;
  auto s = bf::quantize(x.data(), rows, cols, cols, o, d, &q);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return q;
}

void expect_scales(const QuantizedMatrix& q, const std::vector<float>& want) {
  ASSERT_EQ(q.scales_f32.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(fbits(q.scales_f32[i]), fbits(want[i])) << "scale " << i << ": " << q.scales_f32[i];
}

// ---- golden vectors, by hand ------------------------------------------------------------------

// One row of 300: block 0 = columns 0-127, block 1 = 128-255, block 2 = 256-299 (partial).
std::vector<float> golden_row() {
  std::vector<float> x(300, 0.0f);
  const float b0[] = {1000, 500, -3, 0.1f, 700, -999, -0.0f};
  for (int i = 0; i < 7; ++i) x[i] = b0[i];
  x[130] = -0.0f;                                      // block 1: amax 0
  x[256] = std::numeric_limits<float>::denorm_min();   // block 2: amax 2^-149
  return x;
}

TEST(Fp8BlockGolden, OneBy128) {
  // Block 0, amax 1000: r = fl(448/1000) = 7516193*2^-24 (0x3EE56042), s = fl(1000/448) =
  //   4681143*2^-21 = 2.2321429 (0x400EDB6E).
  //   1000*r = 448.0000019 -> 448: 0x7E.   500*r = 224.000001 -> 224 = 1.75*2^7: 0x76.
  //   -3*r = -1.344 -> -1.375 (step 1/8, midpoint 1.3125): 0xBB.
  //   0.1f*r = 0.0448 -> 11.47 steps of 2^-8 -> 11*2^-8 = 1.375*2^-5: 0x13.
  //   700*r = 313.6 -> 320 = 1.25*2^8 (step 32): 0x7A.  -999*r = -447.55 -> -448: 0xFE.  -0: 0x80.
  // Block 1, amax 0: r = s = 1; -0 -> 0x80.
  // Block 2, amax 2^-149: r = 448*2^149 overflows -> FLT_MAX (blockscale rule); s = 2^-149/448
  //   rounds to +0. 2^-149*FLT_MAX = 2^-21 - 2^-45 -> 0x00, and the zeros stay 0x00 (0*Inf would be
  //   NaN = 0x7F).
  const auto x = golden_row();
  const QuantizedMatrix q = quantize(x, 1, 300, Format::kFp8Block1x128, false);
  EXPECT_EQ(q.block_rows, 1);
  EXPECT_EQ(q.block_cols, 128);
  expect_scales(q, {from_bits(0x400EDB6Eu), 1.0f, 0.0f});
  std::vector<uint8_t> want(300, 0);
  const uint8_t b0[] = {0x7E, 0x76, 0xBB, 0x13, 0x7A, 0xFE, 0x80};
  for (int i = 0; i < 7; ++i) want[i] = b0[i];
  want[130] = 0x80;
  EXPECT_EQ(q.data, want);
  std::vector<float> d;
  ASSERT_TRUE(bf::dequantize(q, &d).is_ok());
  // 448 * s = 1000 + 2^-15: a tie in fp32 (ulp 2^-14) -> 1000 (even). 224 * s = 500 + 2^-16 -> 500.
  EXPECT_EQ(d[0], 1000.0f);
  EXPECT_EQ(d[1], 500.0f);
  EXPECT_EQ(d[2], -1.375f * from_bits(0x400EDB6Eu));
  EXPECT_TRUE(std::signbit(d[130]));
}

TEST(Fp8BlockGolden, OneBy128Pow2) {
  // Block 0, amax 1000 = 1.953*2^9: e = 9-8 = 1, 1.953 > 1.75 -> e = 2: s = 4, r = 0.25.
  //   1000/4 = 250 -> 256 (step 16, midpoint 248): 0x78.  500/4 = 125 -> 128 (midpoint 124): 0x70.
  //   -0.75: 0xB4.  0.1f/4 = 0.025 -> 13*2^-9: 0x0D.  175 -> 176 = 1.375*2^7: 0x73.
  //   -249.75 -> -256: 0xF8.  -0: 0x80.
  // Block 1, amax 0: r = s = 1.  Block 2, amax 2^-149: e = -149-8 clamped to -127: s = 2^-127,
  //   r = 2^127; 2^-149*2^127 = 2^-22 -> 0x00.
  const auto x = golden_row();
  const QuantizedMatrix q = quantize(x, 1, 300, Format::kFp8Block1x128, true);
  expect_scales(q, {4.0f, 1.0f, std::ldexp(1.0f, -127)});
  std::vector<uint8_t> want(300, 0);
  const uint8_t b0[] = {0x78, 0x70, 0xB4, 0x0D, 0x73, 0xF8, 0x80};
  for (int i = 0; i < 7; ++i) want[i] = b0[i];
  want[130] = 0x80;
  EXPECT_EQ(q.data, want);
  std::vector<float> d;
  ASSERT_TRUE(bf::dequantize(q, &d).is_ok());
  EXPECT_EQ(d[0], 1024.0f);
  EXPECT_EQ(d[3], 13 * std::ldexp(1.0f, -9) * 4);
}

TEST(Fp8BlockGolden, FltMax) {
  // amax FLT_MAX: r = fl(448/FLT_MAX) = 0x03E00001, s = fl(FLT_MAX/448) = 0x7B124924;
  //   FLT_MAX*r = 448.0 -> 0x7E; 448*s = FLT_MAX (finite).
  // pow2: e = 127-8+1 = 120 (s = 2^120, r = 2^-120): FLT_MAX*2^-120 = 255.99998 -> 256: 0x78.
  std::vector<float> x(128, 0.0f);
  x[0] = FLT_MAX;
  QuantizedMatrix q = quantize(x, 1, 128, Format::kFp8Block1x128, false);
  expect_scales(q, {from_bits(0x7B124924u)});
  EXPECT_EQ(q.data[0], 0x7E);
  std::vector<float> d;
  ASSERT_TRUE(bf::dequantize(q, &d).is_ok());
  EXPECT_EQ(d[0], FLT_MAX);
  q = quantize(x, 1, 128, Format::kFp8Block1x128, true);
  expect_scales(q, {std::ldexp(1.0f, 120)});
  EXPECT_EQ(q.data[0], 0x78);
}

TEST(Fp8BlockGolden, OneTwentyEightSquared) {
  // 129x129 input, blocks (0,0) 128x128, (0,1) 128x1, (1,0) 1x128, (1,1) 1x1.
  //   (0,0): amax 896 at (5,100): r = 0.5, s = 2. (0,0) = 1 -> 0.5: 0x30; (127,0) = -3 -> -1.5:
  //          0xBC (a 1x128 block would use row 127's own amax 3 instead).
  //   (0,1): amax 448 at (0,128): r = s = 1: 0x7E; (1,128) = -0.001 -> 0.512 of 2^-9 -> -2^-9: 0x81.
  //   (1,0): zeros, (128,0) = -0: amax 0, r = s = 1: 0x80.
  //   (1,1): 0.001f: r = fl(448/0.001f) = 447999.97, s = fl(0.001f/448) = 0x3615CBED;
  //          0.001f*r = 448.0: 0x7E.
  const int64_t n = 129;
  std::vector<float> x(n * n, 0.0f);
  auto at = [&](int r, int c) -> float& { return x[r * n + c]; };
  at(5, 100) = 896; at(0, 0) = 1; at(127, 0) = -3;
  at(0, 128) = 448; at(1, 128) = -0.001f;
  at(128, 0) = -0.0f;
  at(128, 128) = 0.001f;
  const QuantizedMatrix q = quantize(x, n, n, Format::kFp8Block128x128, false);
  EXPECT_EQ(q.block_rows, 128);
  EXPECT_EQ(q.block_cols, 128);
  const float s11 = from_bits(0x3615CBEDu);
  expect_scales(q, {2.0f, 1.0f, 1.0f, s11});
  std::vector<uint8_t> want(n * n, 0);
  want[0] = 0x30; want[5 * n + 100] = 0x7E; want[127 * n] = 0xBC;
  want[128] = 0x7E; want[n + 128] = 0x81;
  want[128 * n] = 0x80;
  want[128 * n + 128] = 0x7E;
  EXPECT_EQ(q.data, want);
  // The columnwise copy shares the tiles: scales transposed, codes transposed.
  const QuantizedMatrix c = quantize(x, n, n, Format::kFp8Block128x128, false, Direction::kColumnwise);
  expect_scales(c, {2.0f, 1.0f, 1.0f, s11});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(c.data[j * n + i], q.data[i * n + j]) << i << "," << j;
}

// ---- spec model and properties ---------------------------------------------------------------

int ceil_exponent(float amax) {  // smallest e in [-127, 127] with amax <= 448 * 2^e, in fp64
  int e = std::ilogb(amax) - 8 - 1;
  while (static_cast<double>(amax) > std::ldexp(448.0, e)) ++e;
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// Rowwise model on the stored R x C matrix with br x 128 blocks.
void model(const std::vector<float>& s, int64_t R, int64_t C, int br, bool pow2,
           std::vector<uint8_t>* codes, std::vector<float>* scales) {
  const int64_t sr = (R + br - 1) / br, sc = (C + 127) / 128;
  codes->assign(static_cast<size_t>(R * C), 0);
  scales->assign(static_cast<size_t>(sr * sc), 0.0f);
  for (int64_t bi = 0; bi < sr; ++bi)
    for (int64_t bj = 0; bj < sc; ++bj) {
      const int64_t r0 = bi * br, r1 = std::min(R, r0 + br), c0 = bj * 128, c1 = std::min(C, c0 + 128);
      float amax = 0;
      bool bad = false;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float v = s[r * C + c];
          if (!std::isfinite(v)) bad = true; else amax = std::max(amax, std::fabs(v));
        }
      float r = 1, sc_ = 1;
      if (bad) {
        (*scales)[bi * sc + bj] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      if (amax != 0 && pow2) {
        const int e = ceil_exponent(amax);
        sc_ = std::ldexp(1.0f, e);
        r = std::ldexp(1.0f, -e);
      } else if (amax != 0) {
        r = 448.0f / amax;
        if (r > FLT_MAX) r = FLT_MAX;
        sc_ = amax / 448.0f;
      }
      (*scales)[bi * sc + bj] = sc_;
      for (int64_t rr = r0; rr < r1; ++rr)
        for (int64_t c = c0; c < c1; ++c) (*codes)[rr * C + c] = bf::encode_e4m3(s[rr * C + c] * r);
    }
}

using blockscale_test::Dist;
using blockscale_test::make_data;

struct Fp8Case { Format recipe; bool pow2; Dist dist; double mag; };
void PrintTo(const Fp8Case& c, std::ostream* os) {
  *os << bf::format_name(c.recipe) << (c.pow2 ? " pow2" : "") << " dist " << int(c.dist) << " x" << c.mag;
}

class Fp8BlockProperties : public ::testing::TestWithParam<Fp8Case> {};

// Bytes and scales equal the model's. Error bound per element (dequantize_exact), s the block's
// scale, 3 mantissa bits and E4M3's smallest subnormal 2^-9:
//   pow2 : x*r is exact and |x*r| <= 448 (ceil), so |deq - x| <= max(|x|/16, 2^-10 * s) exactly;
//   plain: r*s = 1 within 2^-22 and x*r rounds once more, so
//          |deq - x| <= max(|x|/16, 2^-10 * s) * (1 + 2^-20) + |x| * 2^-20.
TEST_P(Fp8BlockProperties, MatchesModelAndErrorBound) {
  const Fp8Case p = GetParam();
  const int br = p.recipe == Format::kFp8Block128x128 ? 128 : 1;
  const struct { int64_t r, c; } shapes[] = {{3, 300}, {130, 257}};
  for (auto s : shapes) {
    const auto x = make_data(s.r * s.c, 31 + s.c, p.dist, p.mag);
    for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
      SCOPED_TRACE(d == Direction::kRowwise ? "rowwise" : "columnwise");
      const int64_t R = d == Direction::kRowwise ? s.r : s.c, C = d == Direction::kRowwise ? s.c : s.r;
      std::vector<float> xs(x.size());
      for (int64_t i = 0; i < s.r; ++i)
        for (int64_t j = 0; j < s.c; ++j)
          (d == Direction::kRowwise ? xs[i * s.c + j] : xs[j * s.r + i]) = x[i * s.c + j];
      std::vector<uint8_t> codes;
      std::vector<float> scales;
      model(xs, R, C, br, p.pow2, &codes, &scales);
      const QuantizedMatrix q = quantize(x, s.r, s.c, p.recipe, p.pow2, d);
      expect_scales(q, scales);
      ASSERT_EQ(q.data, codes);
      std::vector<double> deq;
      ASSERT_TRUE(bf::dequantize_exact(q, &deq).is_ok());
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) {
          const double sc = q.scales_f32[(i / br) * ((C + 127) / 128) + j / 128];
          const double v = xs[i * C + j], av = std::fabs(v), err = std::fabs(deq[i * C + j] - v);
          const double base = std::max(av / 16, std::ldexp(sc, -10));
          if (p.pow2) {
            ASSERT_LE(av / sc, 448.0) << "pow2 saturated";
            ASSERT_LE(err, base) << "x=" << v << " s=" << sc;
          } else {
            ASSERT_LE(err, base * (1 + std::ldexp(1.0, -20)) + av * std::ldexp(1.0, -20))
                << "x=" << v << " s=" << sc;
          }
        }
    }
  }
}

std::vector<Fp8Case> fp8_cases() {
  std::vector<Fp8Case> v;
  for (Format r : {Format::kFp8Block1x128, Format::kFp8Block128x128})
    for (bool pow2 : {false, true}) {
      for (double mag : {1e-30, 1e-3, 1.0, 1e3, 1e30}) v.push_back({r, pow2, Dist::kNormal, mag});
      v.push_back({r, pow2, Dist::kCubed, 1.0});
      v.push_back({r, pow2, Dist::kStudentT, 1.0});
      v.push_back({r, pow2, Dist::kOutlier, 1e-3});
    }
  return v;
}

std::string fp8_name(const ::testing::TestParamInfo<Fp8Case>& i) {
  const char* d[] = {"normal", "cubed", "student_t", "outlier"};
  std::string mag = std::to_string(int(std::lround(std::log10(i.param.mag))));
  for (auto& ch : mag) if (ch == '-') ch = 'm';
  return std::string(bf::format_name(i.param.recipe)) + (i.param.pow2 ? "_pow2_" : "_") +
         d[int(i.param.dist)] + "_e" + mag;
}

INSTANTIATE_TEST_SUITE_P(Fp8Block, Fp8BlockProperties, ::testing::ValuesIn(fp8_cases()), fp8_name);

// Tiny and subnormal block amaxes, where 448/amax overflows: the model's clamp, no NaN codes.
TEST(Fp8BlockAdversarial, SubnormalAmaxBlocks) {
  std::vector<float> x(4 * 128, 0.0f);
  x[0] = std::ldexp(1.0f, -130);              // r clamps to FLT_MAX: 2^-2 - 2^-26 -> 0.25: 0x28
  x[1] = -std::ldexp(1.0f, -131);             // -> -0.125: 0xA0
  x[128] = std::ldexp(1.0f, -118);            // 448*2^118 = 1.5e38 fits: r finite
  x[129] = 1e-45f;
  x[256] = std::numeric_limits<float>::denorm_min();
  x[384 + 7] = -std::numeric_limits<float>::denorm_min();
  for (bool pow2 : {false, true}) {
    for (Format r : {Format::kFp8Block1x128, Format::kFp8Block128x128}) {
      SCOPED_TRACE(std::string(bf::format_name(r)) + (pow2 ? " pow2" : ""));
      const QuantizedMatrix q = quantize(x, 4, 128, r, pow2);
      std::vector<uint8_t> codes;
      std::vector<float> scales;
      model(x, 4, 128, r == Format::kFp8Block128x128 ? 128 : 1, pow2, &codes, &scales);
      expect_scales(q, scales);
      EXPECT_EQ(q.data, codes);
      for (uint8_t c : q.data) ASSERT_NE(c & 0x7F, 0x7F) << "NaN code from a finite input";
      if (!pow2 && r == Format::kFp8Block1x128) {
        EXPECT_EQ(q.data[0], 0x28);
        EXPECT_EQ(q.data[1], 0xA0);
      }
    }
  }
}

}  // namespace
