// Tests of formats/scale_layout.h: the swizzled 128x4 byte layout and the cuBLASLt fp32 layouts.
#include "formats/scale_layout.h"
#include "tests/status_test.h"  // defines: mentions

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace blockscale::formats {
namespace {

using blockscale_test::mentions;

struct Shape {
  int64_t rows;
  int64_t cols;
};

std::string shape_name(const testing::TestParamInfo<Shape>& info) {
  return std::to_string(info.param.rows) + "x" + std::to_string(info.param.cols);
}

// Random bytes 1..255 so that a 0 in the packed buffer can only be padding.
std::vector<uint8_t> random_bytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(1, 255);
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (auto& b : v) b = static_cast<uint8_t>(dist(rng));
  return v;
}

// Random fp32 scales, never 0, so that a 0 in the packed buffer can only be padding.
std::vector<float> random_scales(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.001f, 100.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// ---- Swizzled 128x4 -------------------------------------------------------------------------

TEST(SwizzledScaleOffset, HandComputedOffsets) {
  // offset = ((i/128)*ceil(cols/4) + j/4)*512 + (i%32)*16 + ((i%128)/32)*4 + j%4
  EXPECT_EQ(swizzled_scale_offset(0, 0, 1), 0);
  EXPECT_EQ(swizzled_scale_offset(1, 0, 4), 16);  // rows 0..31 step 16 bytes
  EXPECT_EQ(swizzled_scale_offset(31, 0, 4), 496);
  EXPECT_EQ(swizzled_scale_offset(32, 0, 4), 4);      // rows 32..63 sit 4 bytes further
  EXPECT_EQ(swizzled_scale_offset(127, 3, 4), 511);   // last byte of the first tile
  EXPECT_EQ(swizzled_scale_offset(128, 0, 4), 512);   // next row tile
  EXPECT_EQ(swizzled_scale_offset(33, 5, 8), 533);    // tile 1 (512) + 16 + 4 + 1
  EXPECT_EQ(swizzled_scale_offset(200, 6, 9), 2186);  // tile 1*3+1 (2048) + 8*16 + 2*4 + 2
}

TEST(SwizzledScaleBytes, PadsTo128RowsAnd4Cols) {
  EXPECT_EQ(swizzled_scale_bytes(1, 1), 512);
  EXPECT_EQ(swizzled_scale_bytes(127, 3), 512);
  EXPECT_EQ(swizzled_scale_bytes(128, 4), 512);
  EXPECT_EQ(swizzled_scale_bytes(129, 5), 256 * 8);
  EXPECT_EQ(swizzled_scale_bytes(300, 9), 384 * 12);
  EXPECT_EQ(swizzled_scale_bytes(0, 5), 0);
  EXPECT_EQ(swizzled_scale_bytes(5, 0), 0);
  EXPECT_EQ(swizzled_scale_bytes(-1, 5), 0);
}

class SwizzledShapes : public testing::TestWithParam<Shape> {};

// Over the padded domain the offsets are a permutation of [0, bytes): no two scales collide.
TEST_P(SwizzledShapes, OffsetIsABijectionOnThePaddedDomain) {
  const Shape s = GetParam();
  const int64_t bytes = swizzled_scale_bytes(s.rows, s.cols);
  std::vector<int> hits(static_cast<size_t>(bytes), 0);
  for (int64_t i = 0; i < round_up(s.rows, 128); ++i) {
    for (int64_t j = 0; j < round_up(s.cols, 4); ++j) {
      const int64_t off = swizzled_scale_offset(i, j, s.cols);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, bytes) << "i=" << i << " j=" << j;
      ++hits[off];
    }
  }
  for (int64_t o = 0; o < bytes; ++o) ASSERT_EQ(hits[o], 1) << "offset " << o;
}

TEST_P(SwizzledShapes, PackUnpackRoundTripAndPadding) {
  const Shape s = GetParam();
  const std::vector<uint8_t> linear = random_bytes(s.rows * s.cols, 7 + s.rows * 131 + s.cols);
  std::vector<uint8_t> packed(3, 0xAB);  // poisoned: must be replaced entirely
  ASSERT_TRUE(pack_swizzled_scales(linear.data(), s.rows, s.cols, &packed).is_ok());
  ASSERT_EQ(static_cast<int64_t>(packed.size()), swizzled_scale_bytes(s.rows, s.cols));

  std::vector<bool> used(packed.size(), false);
  for (int64_t i = 0; i < s.rows; ++i) {
    for (int64_t j = 0; j < s.cols; ++j) {
      const int64_t off = swizzled_scale_offset(i, j, s.cols);
      ASSERT_EQ(packed[off], linear[i * s.cols + j]) << "i=" << i << " j=" << j;
      used[off] = true;
    }
  }
  for (size_t o = 0; o < packed.size(); ++o)
    if (!used[o]) ASSERT_EQ(packed[o], 0) << "padding byte " << o << " not zero";

  std::vector<uint8_t> back(5, 0xCD);
  ASSERT_TRUE(unpack_swizzled_scales(packed.data(), packed.size(), s.rows, s.cols, &back).is_ok());
  EXPECT_EQ(back, linear);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwizzledShapes,
                         testing::Values(Shape{1, 1}, Shape{127, 3}, Shape{128, 4}, Shape{129, 5},
                                         Shape{300, 9}, Shape{1, 33}, Shape{256, 8}, Shape{513, 2}),
                         shape_name);

TEST(SwizzledScales, ZeroSizedShapesGiveEmptyBuffers) {
  std::vector<uint8_t> out(4, 1);
  ASSERT_TRUE(pack_swizzled_scales(nullptr, 0, 7, &out).is_ok());
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(unpack_swizzled_scales(nullptr, 0, 7, 0, &out).is_ok());
  EXPECT_TRUE(out.empty());
}

TEST(SwizzledScales, BadArgumentsAreRejectedAndOutputUntouched) {
  const std::vector<uint8_t> linear = random_bytes(6, 1);
  const std::vector<uint8_t> keep = {9, 9, 9};
  std::vector<uint8_t> out = keep;
  EXPECT_TRUE(mentions(pack_swizzled_scales(nullptr, 2, 3, &out), "linear"));
  EXPECT_TRUE(mentions(pack_swizzled_scales(linear.data(), -1, 3, &out), "rows"));
  EXPECT_TRUE(mentions(pack_swizzled_scales(linear.data(), 2, -3, &out), "cols"));
  EXPECT_TRUE(
      mentions(pack_swizzled_scales(linear.data(), 2, (int64_t{1} << 31) + 1, &out), "cols"));
  EXPECT_TRUE(mentions(pack_swizzled_scales(linear.data(), 2, 3, nullptr), "out"));
  EXPECT_EQ(out, keep);

  std::vector<uint8_t> packed;
  ASSERT_TRUE(pack_swizzled_scales(linear.data(), 2, 3, &packed).is_ok());
  EXPECT_TRUE(mentions(unpack_swizzled_scales(packed.data(), packed.size() - 1, 2, 3, &out),
                       "swizzled_bytes"));
  EXPECT_TRUE(mentions(unpack_swizzled_scales(packed.data(), packed.size(), 129, 3, &out),
                       "swizzled_bytes"));  // wrong shape for this buffer
  EXPECT_TRUE(mentions(unpack_swizzled_scales(nullptr, packed.size(), 2, 3, &out), "swizzled"));
  EXPECT_TRUE(
      mentions(unpack_swizzled_scales(packed.data(), packed.size(), 2, 3, nullptr), "linear"));
  EXPECT_EQ(out, keep);
}

// ---- VEC128_32F -----------------------------------------------------------------------------

TEST(Vec128Scales, HandComputedOffsetsAndSizes) {
  // M-major: scale (r, kb) at kb * round_up(rows, 4) + r.
  EXPECT_EQ(vec128_scale_ld(1), 4);
  EXPECT_EQ(vec128_scale_ld(5), 8);
  EXPECT_EQ(vec128_scale_ld(8), 8);
  EXPECT_EQ(vec128_scale_offset(3, 2, 5), 19);
  EXPECT_EQ(vec128_scale_offset(4, 0, 5), 4);
  EXPECT_EQ(vec128_scale_offset(0, 1, 8), 8);
  EXPECT_EQ(vec128_scale_floats(5, 3), 24);
  EXPECT_EQ(vec128_scale_floats(256, 7), 256 * 7);
  EXPECT_EQ(vec128_scale_floats(0, 3), 0);
}

class Vec128Shapes : public testing::TestWithParam<Shape> {};

TEST_P(Vec128Shapes, PackUnpackRoundTripAndPadding) {
  const Shape s = GetParam();  // rows x k_blocks
  const std::vector<float> linear = random_scales(s.rows * s.cols, 11 + s.rows + s.cols);
  std::vector<float> packed(2, -1.0f);
  ASSERT_TRUE(pack_vec128_scales(linear.data(), s.rows, s.cols, &packed).is_ok());
  ASSERT_EQ(static_cast<int64_t>(packed.size()), vec128_scale_floats(s.rows, s.cols));
  const int64_t ld = round_up(s.rows, 4);
  for (int64_t kb = 0; kb < s.cols; ++kb) {
    for (int64_t r = 0; r < ld; ++r) {
      const float expect = r < s.rows ? linear[r * s.cols + kb] : 0.0f;  // rows >= M: padding
      ASSERT_EQ(packed[kb * ld + r], expect) << "r=" << r << " kb=" << kb;
    }
  }
  std::vector<float> back;
  ASSERT_TRUE(unpack_vec128_scales(packed.data(), packed.size(), s.rows, s.cols, &back).is_ok());
  EXPECT_EQ(back, linear);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Vec128Shapes,
                         testing::Values(Shape{1, 1}, Shape{3, 2}, Shape{4, 5}, Shape{127, 3},
                                         Shape{129, 9}, Shape{300, 1}),
                         shape_name);

TEST(Vec128Scales, BadArgumentsAreRejected) {
  const std::vector<float> linear = random_scales(6, 2);
  std::vector<float> out = {1.0f};
  EXPECT_TRUE(mentions(pack_vec128_scales(nullptr, 2, 3, &out), "linear"));
  EXPECT_TRUE(mentions(pack_vec128_scales(linear.data(), -2, 3, &out), "rows"));
  EXPECT_TRUE(mentions(pack_vec128_scales(linear.data(), 2, -3, &out), "k_blocks"));
  EXPECT_TRUE(mentions(pack_vec128_scales(linear.data(), 2, 3, nullptr), "out"));
  std::vector<float> packed;
  ASSERT_TRUE(pack_vec128_scales(linear.data(), 2, 3, &packed).is_ok());
  EXPECT_EQ(packed.size(), 12u);
  EXPECT_TRUE(mentions(unpack_vec128_scales(packed.data(), 6, 2, 3, &out), "packed_floats"));
  EXPECT_TRUE(mentions(unpack_vec128_scales(nullptr, 12, 2, 3, &out), "packed"));
  EXPECT_TRUE(mentions(unpack_vec128_scales(packed.data(), 12, 2, 3, nullptr), "linear"));
  EXPECT_EQ(out, std::vector<float>{1.0f});
}

// ---- BLK128x128_32F -------------------------------------------------------------------------

TEST(Blk128Scales, HandComputedOffsetsAndSizes) {
  // K-block index contiguous: scale (rb, kb) at rb * round_up(k_blocks, 4) + kb.
  EXPECT_EQ(blk128_scale_ld(1), 4);
  EXPECT_EQ(blk128_scale_ld(4), 4);
  EXPECT_EQ(blk128_scale_ld(5), 8);
  EXPECT_EQ(blk128_scale_offset(1, 4, 5), 12);
  EXPECT_EQ(blk128_scale_offset(2, 0, 3), 8);
  EXPECT_EQ(blk128_scale_floats(2, 5), 16);
  EXPECT_EQ(blk128_scale_floats(3, 8), 24);
  EXPECT_EQ(blk128_scale_floats(3, 0), 0);
}

class Blk128Shapes : public testing::TestWithParam<Shape> {};

TEST_P(Blk128Shapes, PackUnpackRoundTripAndPadding) {
  const Shape s = GetParam();  // row_blocks x k_blocks
  const std::vector<float> linear = random_scales(s.rows * s.cols, 23 + s.rows * 7 + s.cols);
  std::vector<float> packed;
  ASSERT_TRUE(pack_blk128_scales(linear.data(), s.rows, s.cols, &packed).is_ok());
  ASSERT_EQ(static_cast<int64_t>(packed.size()), blk128_scale_floats(s.rows, s.cols));
  const int64_t ld = round_up(s.cols, 4);
  for (int64_t rb = 0; rb < s.rows; ++rb) {
    for (int64_t kb = 0; kb < ld; ++kb) {
      const float expect = kb < s.cols ? linear[rb * s.cols + kb] : 0.0f;  // K blocks: padding
      ASSERT_EQ(packed[rb * ld + kb], expect) << "rb=" << rb << " kb=" << kb;
    }
  }
  std::vector<float> back;
  ASSERT_TRUE(unpack_blk128_scales(packed.data(), packed.size(), s.rows, s.cols, &back).is_ok());
  EXPECT_EQ(back, linear);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Blk128Shapes,
                         testing::Values(Shape{1, 1}, Shape{1, 4}, Shape{2, 5}, Shape{3, 9},
                                         Shape{17, 2}),
                         shape_name);

TEST(Blk128Scales, BadArgumentsAreRejected) {
  const std::vector<float> linear = random_scales(6, 3);
  std::vector<float> out = {2.0f};
  EXPECT_TRUE(mentions(pack_blk128_scales(nullptr, 2, 3, &out), "linear"));
  EXPECT_TRUE(mentions(pack_blk128_scales(linear.data(), -1, 3, &out), "row_blocks"));
  EXPECT_TRUE(mentions(pack_blk128_scales(linear.data(), 2, -1, &out), "k_blocks"));
  EXPECT_TRUE(mentions(pack_blk128_scales(linear.data(), 2, 3, nullptr), "out"));
  std::vector<float> packed;
  ASSERT_TRUE(pack_blk128_scales(linear.data(), 2, 3, &packed).is_ok());
  EXPECT_EQ(packed.size(), 8u);
  EXPECT_TRUE(mentions(unpack_blk128_scales(packed.data(), 6, 2, 3, &out), "packed_floats"));
  EXPECT_TRUE(mentions(unpack_blk128_scales(nullptr, 8, 2, 3, &out), "packed"));
  EXPECT_TRUE(mentions(unpack_blk128_scales(packed.data(), 8, 2, 3, nullptr), "linear"));
  EXPECT_EQ(out, std::vector<float>{2.0f});
}

// ---- pack_gemm_scales: a QuantizedMatrix's scales in its recipe's GEMM layout ----------------

QuantizedMatrix scaled_matrix(Format r, int64_t rows, int64_t cols, int block_rows, uint32_t seed) {
  QuantizedMatrix q;
  q.recipe = r, q.rows = rows, q.cols = cols;
  q.block_rows = block_rows, q.block_cols = default_block_cols(r);
  if (is_fp8_block(r))
    q.scales_f32 = random_scales(q.scale_rows() * q.scale_cols(), seed);
  else
    q.scales = random_bytes(q.scale_rows() * q.scale_cols(), seed);
  return q;
}

TEST(GemmScales, EachRecipeGetsItsLayout) {
  std::vector<uint8_t> got;
  std::vector<float> want_f32;
  const QuantizedMatrix v = scaled_matrix(Format::kFp8Block1x128, 130, 384, 1, 71);
  ASSERT_TRUE(pack_gemm_scales(v, &got).is_ok());
  ASSERT_TRUE(pack_vec128_scales(v.scales_f32.data(), 130, 3, &want_f32).is_ok());
  ASSERT_EQ(got.size(), want_f32.size() * 4);
  EXPECT_EQ(std::memcmp(got.data(), want_f32.data(), got.size()), 0);

  const QuantizedMatrix b = scaled_matrix(Format::kFp8Block128x128, 300, 640, 128, 72);
  ASSERT_TRUE(pack_gemm_scales(b, &got).is_ok());
  ASSERT_TRUE(pack_blk128_scales(b.scales_f32.data(), 3, 5, &want_f32).is_ok());
  ASSERT_EQ(got.size(), want_f32.size() * 4);
  EXPECT_EQ(std::memcmp(got.data(), want_f32.data(), got.size()), 0);

  std::vector<uint8_t> want;
  const QuantizedMatrix mx = scaled_matrix(Format::kMxfp8E4M3, 130, 96, 1, 73);
  ASSERT_TRUE(pack_gemm_scales(mx, &got).is_ok());
  ASSERT_TRUE(pack_swizzled_scales(mx.scales.data(), 130, 3, &want).is_ok());
  EXPECT_EQ(got, want);
}

// NVFP4 2D: one scale per 16 x 16 tile, written on each of the tile's rows (the last tile short).
TEST(GemmScales, TileScalesAreRepeatedOverTheirRows) {
  const QuantizedMatrix q = scaled_matrix(Format::kNvfp4, 40, 64, 16, 74);
  std::vector<uint8_t> got;
  ASSERT_TRUE(pack_gemm_scales(q, &got).is_ok());
  ASSERT_EQ(got.size(), static_cast<size_t>(swizzled_scale_bytes(40, 4)));
  for (int64_t r = 0; r < 40; ++r)
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_EQ(got[static_cast<size_t>(swizzled_scale_offset(r, j, 4))],
                q.scales[static_cast<size_t>((r / 16) * 4 + j)])
          << "row " << r << ", column " << j;
}

TEST(GemmScales, BadArgumentsAreRejected) {
  QuantizedMatrix q = scaled_matrix(Format::kMxfp8E4M3, 8, 64, 1, 75);
  EXPECT_TRUE(mentions(pack_gemm_scales(q, nullptr), "out"));
  std::vector<uint8_t> out;
  q.scales.pop_back();
  EXPECT_TRUE(mentions(pack_gemm_scales(q, &out), "holds 15 scales"));
  q = scaled_matrix(Format::kFp8Block1x128, 8, 256, 1, 76);
  q.scales_f32.clear();
  EXPECT_TRUE(mentions(pack_gemm_scales(q, &out), "needs 16"));
  q.block_rows = 0;
  EXPECT_TRUE(mentions(pack_gemm_scales(q, &out), "block"));
}

}  // namespace
}  // namespace blockscale::formats
