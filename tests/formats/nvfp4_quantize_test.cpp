// Tests of formats/nvfp4_quantize.cpp (with formats/philox.h and formats/hadamard.h): golden
// vectors worked by hand (1D, given tensor amax, 2D tiles), a spec model written here from
// docs/numerics.md (fp32 steps in the order written, SR from Philox, RHT as an independent
// butterfly), error bounds, stochastic-rounding statistics, Philox known-answer vectors and
// Hadamard properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/formats/quantize_test_data.h"
#include "formats/hadamard.h"
#include "formats/philox.h"
#include "formats/quantize.h"

namespace bf = blockscale::formats;
using bf::Direction;
using bf::QuantizedMatrix;
using bf::QuantizeOptions;
using bf::Format;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

QuantizeOptions nv(bool two_d = false) {
  QuantizeOptions o;
  o.recipe = Format::kNvfp4;
  o.nvfp4_2d = two_d;
  return o;
}

QuantizedMatrix quantize(const std::vector<float>& x, int64_t rows, int64_t cols,
                         const QuantizeOptions& o, Direction d = Direction::kRowwise) {
  QuantizedMatrix q;
  auto s = bf::quantize(x.data(), rows, cols, cols, o, d, &q);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return q;
}

// ---- Philox4x32-10 known answers (Random123 kat_vectors) -------------------------------------

TEST(Philox, Random123KnownAnswers) {
  struct Kat { uint32_t ctr[4], key[2], out[4]; };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const bf::Philox4x32 out =
        bf::philox4x32_10(bf::Philox4x32{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], k.out[i]) << "word " << i;
  }
}

// The element word is word i % 4 of Philox(counter = (lo(i/4), hi(i/4), lo(off), hi(off)),
// key = (lo(seed), hi(seed))), as docs/numerics.md writes it.
uint32_t sr_word(uint64_t seed, uint64_t offset, uint64_t i) {
  const uint64_t g = i / 4;
  const bf::Philox4x32 out = bf::philox4x32_10(
      bf::Philox4x32{{uint32_t(g), uint32_t(g >> 32), uint32_t(offset), uint32_t(offset >> 32)}},
      uint32_t(seed), uint32_t(seed >> 32));
  return out.v[i % 4];
}

TEST(Philox, ElementWordMapping) {
  const uint64_t seeds[] = {0, 1, 0xDEADBEEF00000001ull, ~0ull};
  const uint64_t offs[] = {0, 5, 0x100000000ull};
  const uint64_t idx[] = {0, 1, 2, 3, 4, 7, 0x1FFFFFFFFull, 0x400000003ull};
  for (uint64_t s : seeds)
    for (uint64_t o : offs)
      for (uint64_t i : idx) EXPECT_EQ(bf::philox_element_word(s, o, i), sr_word(s, o, i));
}

// ---- Hadamard ----------------------------------------------------------------------------------

// docs/numerics.md: y = (1/4) H16 (d ∘ x) as the butterfly (a + b, a - b) over strides 1, 2, 4, 8.
void rht16(float* v) {
  for (int i = 0; i < 16; ++i)
    if ((bf::kHadamardSignBits >> i) & 1u) v[i] = -v[i];
  for (int h = 1; h < 16; h *= 2)
    for (int i = 0; i < 16; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
  for (int i = 0; i < 16; ++i) v[i] *= 0.25f;
}

std::vector<float> rand_vec(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(nd(rng) * scale);
  return v;
}

TEST(Hadamard, ButterflyMatchesSylvesterAndHeader) {
  EXPECT_EQ(bf::kHadamardSize, 16);
  const int neg = __builtin_popcount(bf::kHadamardSignBits & 0xFFFFu);
  EXPECT_GT(neg, 0);
  EXPECT_LT(neg, 16);
  for (int t = 0; t < 200; ++t) {
    auto x = rand_vec(16, 500 + t, t % 2 ? 1e-3 : 1e3);
    float a[16], b[16];
    std::copy(x.begin(), x.end(), a);
    std::copy(x.begin(), x.end(), b);
    rht16(a);
    bf::hadamard16_inplace(b);
    double l1 = 0, n2x = 0, n2y = 0;
    for (int i = 0; i < 16; ++i) { l1 += std::fabs(x[i]); n2x += double(x[i]) * x[i]; }
    for (int i = 0; i < 16; ++i) {
      ASSERT_EQ(fbits(a[i]), fbits(b[i])) << "element " << i;  // same fp32 operations, same bits
      double y = 0;  // exact H[i][j] = (-1)^popcount(i & j)
      for (int j = 0; j < 16; ++j) {
        const double dj = ((bf::kHadamardSignBits >> j) & 1u) ? -1.0 : 1.0;
        y += ((__builtin_popcount(unsigned(i & j)) & 1) ? -1.0 : 1.0) * dj * x[j];
      }
      y *= 0.25;
      EXPECT_LE(std::fabs(a[i] - y), 1e-6 * l1);
      n2y += double(a[i]) * a[i];
    }
    EXPECT_NEAR(std::sqrt(n2y), std::sqrt(n2x), 1e-6 * std::sqrt(n2x));  // orthogonal
    // Inverse: x = d ∘ ((1/4) H16 y) = d ∘ hadamard16(d ∘ y); (H/4)^2 = I since H16 H16 = 16 I.
    for (int i = 0; i < 16; ++i)
      if ((bf::kHadamardSignBits >> i) & 1u) b[i] = -b[i];
    bf::hadamard16_inplace(b);
    for (int i = 0; i < 16; ++i) {
      if ((bf::kHadamardSignBits >> i) & 1u) b[i] = -b[i];
      EXPECT_NEAR(b[i], x[i], 1e-6 * l1) << i;
    }
  }
}

// ---- golden vectors, by hand -----------------------------------------------------------------
// fl(1/6) = 0x3E2AAAAB = 11184811 * 2^-26 = (1 + 2^-25) / 6.
// fl(1/448) = fl(1/7) * 2^-6 = 9586981 * 2^-32, and 448 * fl(1/448) = 1 + 3*2^-26.

void expect_bytes(const QuantizedMatrix& q, const std::vector<uint8_t>& scales,
                  const std::vector<uint8_t>& bytes) {
  EXPECT_EQ(q.scales, scales);
  ASSERT_EQ(q.data.size(), bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(q.data[i], bytes[i]) << "byte " << i;
}

TEST(Nvfp4Golden, OneDimensionalBlocks) {
  // amax_t = 2688: S_enc = 2688/2688 = 1, S_dec = 1.
  // Block 0 (amax 2688): 2688*fl(1/6) = 448.0000134 -> fp32 448 (half ulp 2^-16) -> s_b 448 (0x7E);
  //   enc_b = fl(1/448). x*enc_b = v*(1 + 3*2^-26) with v = x/448, rounded to fp32:
  //   2688: 6 + 18*2^-26 -> 6 + 2^-21 -> saturates to 6: code 7.  -1000: -2.232 -> -2: 0xC.
  //   1120: 2.5 + 7.5*2^-26 -> 2.5 (ulp 2^-22 = 16*2^-26) -> tie -> 2: code 4.
  //   1568: 3.5 + 10.5*2^-26 -> 3.5 + 2^-22 -> above the tie -> 4: code 6.
  //   2240: 5 + 15*2^-26 -> 5.0 (ulp 32*2^-26) -> tie 4 / 6 -> 4: code 6.
  //   -0 -> -0*enc_b = -0: code 8.  100: 0.2232 -> 0: code 0.
  // Block 1 (amax 6): 6*fl(1/6) = 1 + 2^-25 -> 1.0 -> s_b 1 (0x38), enc_b = 1/(1*1) = 1:
  //   6 -> 7, -2.5 -> tie -> -2: 0xC, 0.75 -> tie -> 1: 2, 0.25 -> tie -> 0, 0.2 -> 0,
  //   3.5 -> tie -> 4: 6, -5 -> tie -> -4: 0xE.
  // Block 2 (zeros, one -0): s_b = UE4M3(0) = 0x00, enc_b = 1/0 = Inf -> FLT_MAX; ±0 keep signs.
  // Block 3 (amax 3): 3*fl(1/6) = 0.5 + 2^-26 -> 0.5 (0x30), enc_b = 2:
  //   3 -> 6: 7, -1.25 -> -2.5 -> -2: 0xC, 0.3 -> 0.6 -> 0.5: 1, 0.75 -> 1.5: 3, 0.1 -> 0.2 -> 0.
  std::vector<float> x(64, 0.0f);
  const float b0[] = {2688, -1000, 1120, 1568, 2240, -0.0f, 100};
  const float b1[] = {6, -2.5f, 0.75f, 0.25f, 0.2f, 3.5f, -5};
  const float b3[] = {3, -1.25f, 0.3f, 0.75f, 0.1f};
  for (int i = 0; i < 7; ++i) { x[i] = b0[i]; x[16 + i] = b1[i]; }
  for (int i = 0; i < 5; ++i) x[48 + i] = b3[i];
  x[33] = -0.0f;
  std::vector<uint8_t> bytes(32, 0);
  bytes[0] = 0xC7; bytes[1] = 0x64; bytes[2] = 0x86;       // block 0
  bytes[8] = 0xC7; bytes[9] = 0x02; bytes[10] = 0x60; bytes[11] = 0x0E;  // block 1
  bytes[16] = 0x80;                                        // block 2: col 33 = -0 (high nibble)
  bytes[24] = 0xC7; bytes[25] = 0x31;                      // block 3
  const QuantizedMatrix q = quantize(x, 1, 64, nv());
  expect_bytes(q, {0x7E, 0x38, 0x00, 0x30}, bytes);
  EXPECT_EQ(q.global_scale_dec, 1.0f);
  EXPECT_FALSE(q.nonfinite_seen);
  std::vector<float> d;
  ASSERT_TRUE(bf::dequantize(q, &d).is_ok());
  EXPECT_EQ(d[2], 896.0f);   // (2 * 448) * 1
  EXPECT_EQ(d[3], 1792.0f);  // (4 * 448) * 1
  EXPECT_EQ(d[50], 0.25f);   // (0.5 * 0.5) * 1
  EXPECT_TRUE(std::signbit(d[33]));
}

TEST(Nvfp4Golden, RoundedTensorScaleAndScaleRoundingDown) {
  // amax_t = 1000: S_enc = fl(2688/1000) = 2.688 (0x402C0831), S_dec = fl(1/S_enc) = 0.37202382
  //   (0x3EBE79E8), S_enc*fl(1/6) = 0.448 (0x3EE56042).
  // Block 0 (amax 1000): 1000*0.448 -> 448.0 -> 0x7E; 448*S_dec = 166.66667 (0x4326AAAB),
  //   enc_b = 0.0059999996 (0x3BC49BA5): 1000 -> 5.9999995 -> 6: 7; -333 -> -1.998 -> 0xC;
  //   77.7 -> 0.4662 -> 0.5: 1; 0.5 -> 0.003 -> 0.
  // Block 1 (amax 1): 0.448 -> UE4M3 between 0.4375 (0x2E) and 0.46875 -> 0.4375 (rounds down);
  //   0.4375*S_dec = 0.16276042, enc_b = 6.1439996: 1 -> 6.144 saturates: 7; -0.3 -> -1.8432 ->
  //   -2: 0xC; 0.05 -> 0.3072 -> 0.5: 1.
  std::vector<float> x(32, 0.0f);
  x[0] = 1000; x[1] = -333; x[2] = 77.7f; x[3] = 0.5f;
  x[16] = 1; x[17] = -0.3f; x[18] = 0.05f;
  std::vector<uint8_t> bytes(16, 0);
  bytes[0] = 0xC7; bytes[1] = 0x01; bytes[8] = 0xC7; bytes[9] = 0x01;
  const QuantizedMatrix q = quantize(x, 1, 32, nv());
  expect_bytes(q, {0x7E, 0x2E}, bytes);
  EXPECT_EQ(fbits(q.global_scale_dec), 0x3EBE79E8u);
}

TEST(Nvfp4Golden, ScaleProductOrderMatters) {
  // amax_t = 12: S_enc = 224 exactly, S_dec = fl(1/224) = 0x3B924925.
  //   S_enc * fl(1/6) = 7 * 11184811 * 2^-21 -> 24 bits: 9786710 * 2^-18 = 37.333336.
  // Block 0 (amax 12): 12 * 37.333336 = 448.00003 -> UE4M3 448 (0x7E); 448 * S_dec = 2(1+3*2^-26)
  //   -> 2.0, enc_b = 0.5: 12 -> 6: 7; -4 -> -2: 0xC; 2.4 -> 1.2 -> 1: 2; 0.5 -> 0.25 -> tie -> 0.
  // Block 1 (amax 9): 9 * 37.333336 = 88080390 * 2^-18 -> 11010049 * 2^-15 = 336.00003, just above
  //   the UE4M3 midpoint 336 between 320 and 352 -> 352 (0x7B). (Evaluated as (9 * 224) * fl(1/6)
  //   = 336(1 + 2^-25) -> 336.0, a tie -> 320 (0x7A): the order of the products matters.)
  //   352 * S_dec = 1.5714287, enc_b = 0.6363636 (0x3F22E8BA): 9 -> 5.727 -> 6: 7;
  //   -4 -> -2.545 -> -3: 0xD; 2.4 -> 1.527 -> 1.5: 3; 0.5 -> 0.318 -> 0.5: 1.
  std::vector<float> x(32, 0.0f);
  const float b0[] = {12, -4, 2.4f, 0.5f}, b1[] = {9, -4, 2.4f, 0.5f};
  for (int i = 0; i < 4; ++i) { x[i] = b0[i]; x[16 + i] = b1[i]; }
  std::vector<uint8_t> bytes(16, 0);
  bytes[0] = 0xC7; bytes[1] = 0x02; bytes[8] = 0xD7; bytes[9] = 0x13;
  const QuantizedMatrix q = quantize(x, 1, 32, nv());
  expect_bytes(q, {0x7E, 0x7B}, bytes);
  EXPECT_EQ(fbits(q.global_scale_dec), 0x3B924925u);
}

TEST(Nvfp4Golden, GivenTensorAmax) {
  // tensor_amax = 5376: S_enc = 0.5, S_dec = 2. Block (amax 6): 6*(0.5*fl(1/6)) = 0.5(1+2^-25)
  //   -> 0.5 (0x30); enc_b = 1/(0.5*2) = 1; codes as E2M1(x) (same data as block 1 above).
  // tensor_amax = 1344: S_enc = 2, S_dec = 0.5. Block (amax 2688): 2688*(2*fl(1/6)) -> 896 ->
  //   UE4M3 saturates to 448 (0x7E); enc_b = fl(1/224) = 9586981*2^-31 = (1 + 3*2^-26)/224:
  //   2688 -> 12(..) -> 7; -1000 -> -4.464 -> -4: 0xE; 1120 -> 5+15*2^-26 -> 5.0 -> tie -> 4: 6;
  //   1568 -> 7(..) -> 6: 7; 2240 -> 10 -> 7; -0 -> 8; 100 -> 0.4464 -> 0.5: 1.
  QuantizeOptions o = nv();
  o.has_tensor_amax = true;
  o.tensor_amax = 5376;
  const std::vector<float> a = {6, -2.5f, 0.75f, 0.25f, 0.2f, 3.5f, -5, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  QuantizedMatrix q = quantize(a, 1, 16, o);
  expect_bytes(q, {0x30}, {0xC7, 0x02, 0x60, 0x0E, 0, 0, 0, 0});
  EXPECT_EQ(q.global_scale_dec, 2.0f);
  std::vector<float> d;
  ASSERT_TRUE(bf::dequantize(q, &d).is_ok());
  EXPECT_EQ(d[0], 6.0f);  // (6 * 0.5) * 2
  o.tensor_amax = 1344;
  const std::vector<float> b = {2688, -1000, 1120, 1568, 2240, -0.0f, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  q = quantize(b, 1, 16, o);
  expect_bytes(q, {0x7E}, {0xE7, 0x76, 0x87, 0x01, 0, 0, 0, 0});
  EXPECT_EQ(q.global_scale_dec, 0.5f);
}

TEST(Nvfp4Golden, ZeroTensorAndTinyTensor) {
  // amax_t = 0: S_enc = 1 (S_dec 1), every s_b = 0x00, codes keep the zeros' signs.
  std::vector<float> z(20, 0.0f);
  z[3] = -0.0f;
  QuantizedMatrix q = quantize(z, 1, 20, nv());
  expect_bytes(q, {0x00, 0x00}, {0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(q.global_scale_dec, 1.0f);
  // amax_t = 2^-140: 2688*2^140 overflows -> S_enc = FLT_MAX; S_dec = fl(1/FLT_MAX) = 2^-128.
  std::vector<float> t(16, 0.0f);
  t[0] = std::ldexp(1.0f, -140);
  q = quantize(t, 1, 16, nv());
  EXPECT_EQ(q.global_scale_dec, std::ldexp(1.0f, -128));
}

TEST(Nvfp4Golden, TwoDimensionalTiles) {
  // 16x32, tensor_amax 2688 (S_enc = 1). Tile 0 (cols 0-15) amax 6 -> s 1 (0x38), enc 1:
  //   (0,0) 6 -> 7; (5,3) 1.5 -> 3; (5,4) -0.75 -> tie -> -1: 0xA; (15,15) 2.5 -> tie -> 2: 4.
  //   (A 1x16 block would give row 5 amax 1.5 -> s 0.25, enc 4, and 1.5 -> code 7 instead.)
  // Tile 1 (cols 16-31) amax 3 -> s 0.5 (0x30), enc 2: (7,20) 3 -> 7; (0,16) -1.25 -> -2.5 ->
  //   -2: 0xC; (15,31) 0.3 -> 0.6 -> 0.5: 1.
  std::vector<float> x(16 * 32, 0.0f);
  auto at = [&](int r, int c) -> float& { return x[r * 32 + c]; };
  at(0, 0) = 6; at(5, 3) = 1.5f; at(5, 4) = -0.75f; at(15, 15) = 2.5f;
  at(7, 20) = 3; at(0, 16) = -1.25f; at(15, 31) = 0.3f;
  QuantizeOptions o = nv(true);
  o.has_tensor_amax = true;
  o.tensor_amax = 2688;
  const QuantizedMatrix row = quantize(x, 16, 32, o, Direction::kRowwise);
  std::vector<uint8_t> bytes(16 * 16, 0);
  bytes[0] = 0x07; bytes[8] = 0x0C; bytes[5 * 16 + 1] = 0x30; bytes[5 * 16 + 2] = 0x0A;
  bytes[7 * 16 + 10] = 0x07; bytes[15 * 16 + 7] = 0x40; bytes[15 * 16 + 15] = 0x10;
  expect_bytes(row, {0x38, 0x30}, bytes);
  EXPECT_EQ(row.block_rows, 16);
  // The columnwise copy (32x16) shares the tiles: same scales (transposed: 2x1), same codes
  // transposed, identical dequantized values.
  const QuantizedMatrix col = quantize(x, 16, 32, o, Direction::kColumnwise);
  EXPECT_EQ(col.scales, (std::vector<uint8_t>{0x38, 0x30}));
  std::vector<float> dr, dc;
  ASSERT_TRUE(bf::dequantize(row, &dr).is_ok());
  ASSERT_TRUE(bf::dequantize(col, &dc).is_ok());
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 32; ++c) {
      ASSERT_EQ(bf::element_code(col, c, r), bf::element_code(row, r, c)) << r << "," << c;
      ASSERT_EQ(fbits(dc[c * 16 + r]), fbits(dr[r * 32 + c])) << r << "," << c;
    }
}

// W and W^T hold identical values for 2D blocks on random data and odd shapes too.
TEST(Nvfp4TwoD, RowwiseAndColumnwiseCopiesAgree) {
  for (auto [R, C] : {std::pair<int64_t, int64_t>{64, 48}, {31, 17}, {130, 65}, {1, 1}}) {
    const auto x = rand_vec(R * C, 900 + R, 2.0);
    const QuantizedMatrix row = quantize(x, R, C, nv(true), Direction::kRowwise);
    const QuantizedMatrix col = quantize(x, R, C, nv(true), Direction::kColumnwise);
    std::vector<float> dr, dc;
    ASSERT_TRUE(bf::dequantize(row, &dr).is_ok());
    ASSERT_TRUE(bf::dequantize(col, &dc).is_ok());
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(fbits(dc[c * R + r]), fbits(dr[r * C + c]));
  }
}

// ---- spec model --------------------------------------------------------------------------------

const float kGrid[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

// The stored R x C matrix s (contiguous, already transformed when RHT is on) -> codes, scales,
// S_dec, written from docs/numerics.md line by line.
struct Model { std::vector<uint32_t> codes; std::vector<uint8_t> scales; float s_dec; };

// Inf -> FLT_MAX, tested on the bits: GCC 13.3 at -O3 (the GPU host's compiler) miscompiled the
// float-compare form `if (v > FLT_MAX) v = FLT_MAX; if (amax == 0 || v == 0) v = 1;`.
float inf_to_flt_max(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x7FFFFFFFu) == 0x7F800000u ? FLT_MAX : v;
}
bool is_zero_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x7FFFFFFFu) == 0;
}

Model model(const std::vector<float>& s, int64_t R, int64_t C, const QuantizeOptions& o) {
  Model m;
  float amax_t = 0;
  if (o.has_tensor_amax) amax_t = o.tensor_amax;
  else for (float v : s) if (!std::isnan(v)) amax_t = std::max(amax_t, std::fabs(v));
  float s_enc = inf_to_flt_max(2688.0f / amax_t);
  if (is_zero_bits(amax_t) || is_zero_bits(s_enc)) s_enc = 1.0f;
  const float s_dec = 1.0f / s_enc;
  m.s_dec = s_dec;
  const float sixth = 1.0f / 6.0f;
  const int br = o.nvfp4_2d ? 16 : 1;
  const int64_t sr = (R + br - 1) / br, sc = (C + 15) / 16;
  m.codes.assign(static_cast<size_t>(R * C), 0);
  m.scales.assign(static_cast<size_t>(sr * sc), 0);
  for (int64_t bi = 0; bi < sr; ++bi)
    for (int64_t bj = 0; bj < sc; ++bj) {
      const int64_t r0 = bi * br, r1 = std::min(R, r0 + br), c0 = bj * 16, c1 = std::min(C, c0 + 16);
      float amax = 0;
      bool bad = false;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float v = s[r * C + c];
          if (!std::isfinite(v)) bad = true; else amax = std::max(amax, std::fabs(v));
        }
      if (bad) { m.scales[bi * sc + bj] = 0x7F; continue; }
      const uint8_t sb = bf::encode_ue4m3(amax * (s_enc * sixth));
      m.scales[bi * sc + bj] = sb;
      const float enc = inf_to_flt_max(1.0f / (bf::decode_ue4m3(sb) * s_dec));
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float y = s[r * C + c] * enc;
          uint32_t code;
          if (!o.stochastic_rounding) {
            code = bf::encode_e2m1(y);
          } else {
            const float a = std::min(std::fabs(y), 6.0f);
            int k = 7;
            while (kGrid[k] > a) --k;
            double frac = k == 7 ? 0.0 : (double(a) - kGrid[k]) / (double(kGrid[k + 1]) - kGrid[k]);
            const uint32_t rnd = sr_word(o.sr_seed, o.sr_offset, uint64_t(r * C + c));
            if (double(rnd) < frac * 4294967296.0) ++k;
            code = uint32_t(k) | (std::signbit(y) ? 8u : 0u);
          }
          m.codes[r * C + c] = code;
        }
    }
  return m;
}

// The stored orientation of x (R x C input): the transpose for columnwise; RHT applied along the
// stored rows (the block dimension).
std::vector<float> stored(const std::vector<float>& x, int64_t R, int64_t C, Direction d, bool rht) {
  std::vector<float> s(x.size());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j)
      (d == Direction::kRowwise ? s[i * C + j] : s[j * R + i]) = x[i * C + j];
  if (rht)
    for (size_t k = 0; k < s.size(); k += 16) rht16(&s[k]);
  return s;
}

using blockscale_test::Dist;
using blockscale_test::make_data;

struct NvCase { const char* name; QuantizeOptions opt; Dist dist; double mag; };
void PrintTo(const NvCase& c, std::ostream* os) { *os << c.name << " dist " << int(c.dist) << " x" << c.mag; }

class Nvfp4Model : public ::testing::TestWithParam<NvCase> {};

// Bytes, scales and S_dec equal the model's. Error bound, per element (dequantize_exact), with
// D = float(s_b) * S_dec and S_enc unclamped:
//   |x| <= 6D:  |deq - x| <= max(|x|/4, D/4)   (half an E2M1 step: relative 1/4 in [1,6], 1/4
//               absolute below 1, in units of D), times (1 + 2^-18) for the fp32 steps;
//   |x| >  6D:  deq = ±6D (saturation) and |x| - 6D <= max(amax_b/16, 6 * 2^-10 * S_dec): s_b is
//               at most 2^-4 relatively (normal) or 2^-10 absolutely (subnormal) below
//               amax_b * S_enc / 6, so 6D >= amax_b (1 - 2^-4) or amax_b - 6 * 2^-10 * S_dec;
//   s_b = 0:    deq = 0 and amax_b * S_enc / 6 <= 2^-10.
TEST_P(Nvfp4Model, MatchesModelAndErrorBound) {
  const NvCase p = GetParam();
  const struct { int64_t r, c; } shapes[] = {{48, 96}, {33, 50}};
  for (auto s : shapes) {
    if (p.opt.hadamard && (s.r % 16 || s.c % 16)) continue;
    const auto x = make_data(s.r * s.c, 77 + s.r, p.dist, p.mag);
    for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
      SCOPED_TRACE(d == Direction::kRowwise ? "rowwise" : "columnwise");
      const int64_t R = d == Direction::kRowwise ? s.r : s.c, C = d == Direction::kRowwise ? s.c : s.r;
      const auto xs = stored(x, s.r, s.c, d, p.opt.hadamard);
      const Model m = model(xs, R, C, p.opt);
      const QuantizedMatrix q = quantize(x, s.r, s.c, p.opt, d);
      ASSERT_EQ(q.rows, R);
      ASSERT_EQ(q.scales, m.scales);
      ASSERT_EQ(fbits(q.global_scale_dec), fbits(m.s_dec));
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j)
          ASSERT_EQ(bf::element_code(q, i, j), m.codes[i * C + j]) << i << "," << j << " x=" << xs[i * C + j];
      if (p.opt.stochastic_rounding || p.opt.has_tensor_amax || 1.0 / m.s_dec > 1e38)
        continue;  // bounds below assume RNE and a measured, unclamped tensor scale
      std::vector<double> deq;
      ASSERT_TRUE(bf::dequantize_exact(q, &deq).is_ok());
      const int br = p.opt.nvfp4_2d ? 16 : 1;
      const double s_enc = 1.0 / m.s_dec, slack = 1 + std::ldexp(1.0, -18);
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) {
          const int64_t si = (i / br) * ((C + 15) / 16) + j / 16;
          double amax_b = 0;
          for (int64_t r = (i / br) * br; r < std::min(R, (i / br) * br + br); ++r)
            for (int64_t c = j / 16 * 16; c < std::min(C, j / 16 * 16 + 16); ++c)
              amax_b = std::max(amax_b, double(std::fabs(xs[r * C + c])));
          const double v = xs[i * C + j], D = double(bf::decode_ue4m3(q.scales[si])) * m.s_dec;
          const double got = deq[i * C + j], av = std::fabs(v);
          if (D == 0) {
            ASSERT_EQ(got, 0.0);
            ASSERT_LE(amax_b * s_enc / 6, std::ldexp(1.0, -10) * slack);
          } else if (av <= 6 * D) {
            ASSERT_LE(std::fabs(got - v), std::max(av / 4, D / 4) * slack) << "x=" << v << " D=" << D;
          } else {
            ASSERT_EQ(got, std::copysign(6 * D, v));
            ASSERT_LE(av - 6 * D, std::max(amax_b / 16, 6 * std::ldexp(1.0, -10) * m.s_dec) * slack);
          }
        }
    }
  }
}

std::vector<NvCase> nv_cases() {
  std::vector<NvCase> v;
  QuantizeOptions sr = nv(); sr.stochastic_rounding = true; sr.sr_seed = 0xABCDEF0123456789ull; sr.sr_offset = 3;
  QuantizeOptions rht = nv(); rht.hadamard = true;
  QuantizeOptions rht_sr = sr; rht_sr.hadamard = true;
  QuantizeOptions given = nv(); given.has_tensor_amax = true; given.tensor_amax = 0.7f;
  QuantizeOptions given2d = given; given2d.nvfp4_2d = true;
  const std::pair<const char*, QuantizeOptions> opts[] = {
      {"1d", nv()}, {"2d", nv(true)}, {"sr", sr}, {"rht", rht}, {"rht_sr", rht_sr},
      {"given_amax", given}, {"given_amax_2d", given2d}};
  for (const auto& [name, o] : opts) {
    v.push_back({name, o, Dist::kNormal, 1.0});
    v.push_back({name, o, Dist::kStudentT, 1.0});
  }
  for (const char* name : {"1d", "2d"}) {
    const QuantizeOptions o = nv(std::string(name) == "2d");
    for (double mag : {1e-30, 1e-3, 1e3, 1e30, 1e-40}) v.push_back({name, o, Dist::kNormal, mag});
    v.push_back({name, o, Dist::kCubed, 1.0});
    v.push_back({name, o, Dist::kOutlier, 1e-3});
  }
  return v;
}

std::string nv_name(const ::testing::TestParamInfo<NvCase>& i) {
  const char* d[] = {"normal", "cubed", "student_t", "outlier"};
  std::string mag = std::to_string(int(std::lround(std::log10(i.param.mag))));
  for (auto& ch : mag) if (ch == '-') ch = 'm';
  return std::string(i.param.name) + "_" + d[int(i.param.dist)] + "_e" + mag;
}

INSTANTIATE_TEST_SUITE_P(Nvfp4, Nvfp4Model, ::testing::ValuesIn(nv_cases()), nv_name);

// ---- RHT: quantize(x, hadamard) == quantize(T(x)), the transform done here ------------------

TEST(Nvfp4Rht, EqualsQuantizingTheTransformedInput) {
  const int64_t R = 32, C = 64;
  auto x = make_data(R * C, 4242, Dist::kCubed, 1.0);
  x[100] = kNaN;        // its 16-run becomes all NaN: a NaN block in the transformed matrix
  x[1000] = kInf;       // Inf in the run: Inf and NaN after the butterfly, amax_t counts Inf
  for (bool sr : {false, true}) {
    QuantizeOptions o = nv();
    o.hadamard = true;
    o.stochastic_rounding = sr;
    o.sr_seed = 99;
    QuantizeOptions plain = o;
    plain.hadamard = false;
    for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
      const auto xs = stored(x, R, C, d, true);  // T(x) in the stored orientation
      const int64_t SR = d == Direction::kRowwise ? R : C, SC = d == Direction::kRowwise ? C : R;
      const QuantizedMatrix a = quantize(x, R, C, o, d);
      const QuantizedMatrix b = quantize(xs, SR, SC, plain, Direction::kRowwise);
      EXPECT_EQ(a.data, b.data);
      EXPECT_EQ(a.scales, b.scales);
      EXPECT_EQ(fbits(a.global_scale_dec), fbits(b.global_scale_dec));
      EXPECT_TRUE(a.nonfinite_seen);
    }
  }
}

// ---- stochastic rounding ---------------------------------------------------------------------

TEST(Nvfp4Sr, ReproducibleAndKeyedBySeedAndOffset) {
  const auto x = make_data(40 * 64, 5, Dist::kNormal, 1.0);
  QuantizeOptions o = nv();
  o.stochastic_rounding = true;
  o.sr_seed = 1;
  o.sr_offset = 0;
  const QuantizedMatrix a = quantize(x, 40, 64, o);
  EXPECT_EQ(quantize(x, 40, 64, o).data, a.data);
  for (auto [seed, off] : {std::pair<uint64_t, uint64_t>{2, 0}, {1, 1}, {1 + (1ull << 32), 0},
                           {1, 1ull << 32}}) {
    QuantizeOptions p = o;
    p.sr_seed = seed;
    p.sr_offset = off;
    const QuantizedMatrix b = quantize(x, 40, 64, p);
    EXPECT_NE(b.data, a.data) << "seed " << seed << " offset " << off;
    EXPECT_EQ(b.scales, a.scales);  // SR changes elements only
  }
}

// Many copies of a value between two E2M1 neighbours, in blocks whose scale is exactly 1
// (each block holds a 6, tensor_amax 2688: s_b = 1, enc_b = 1): every result is one of the two
// neighbours, and the mean is the value within 5 standard errors (exactly, on grid points).
TEST(Nvfp4Sr, UnbiasedAndOnlyNeighbours) {
  const int64_t R = 64, C = 1024;
  const float values[] = {2.3f, 0.6f, 4.5f, 1.1f, 0.05f, 5.9f, -2.75f, -0.26f, 1.0f + 1.0f / 1024,
                          3.0f, -0.5f};  // the last two lie on the grid: never rounded
  for (float v : values) {
    std::vector<float> x(static_cast<size_t>(R * C), v);
    for (int64_t i = 0; i < R * C; i += 16) x[i] = 6.0f;
    QuantizeOptions o = nv();
    o.stochastic_rounding = true;
    o.sr_seed = 0x5EED;
    o.has_tensor_amax = true;
    o.tensor_amax = 2688;
    const QuantizedMatrix q = quantize(x, R, C, o);
    ASSERT_TRUE(std::all_of(q.scales.begin(), q.scales.end(), [](uint8_t s) { return s == 0x38; }));
    const float a = std::fabs(v);
    int k = 0;
    while (kGrid[k + 1] <= a) ++k;
    const double lo = kGrid[k], hi = kGrid[k + 1], f = (a - lo) / (hi - lo);
    double sum = 0;
    int64_t n = 0;
    for (int64_t i = 0; i < R * C; ++i) {
      if (i % 16 == 0) continue;
      const uint32_t code = bf::element_code(q, i / C, i % C);
      const double mag = bf::decode_e2m1(code & 7);
      ASSERT_TRUE(mag == lo || mag == hi) << v << " -> " << mag;
      ASSERT_EQ((code & 8) != 0, v < 0);
      sum += mag;
      ++n;
    }
    const double se = (hi - lo) * std::sqrt(f * (1 - f) / n);
    EXPECT_NEAR(sum / n, a, 5 * se + 1e-12) << "value " << v << " fraction " << f;
  }
}

}  // namespace
