// Tests of quant/dequantize.cu (through quant/quantize.h's dequantize): the emulator's quantized
// bytes, packed into the layout the GPU kernels write, dequantized on the GPU, must give
// formats::dequantize()'s fp32 values bit for bit (NaN where the emulator has NaN). Every GPU
// recipe and block shape, rowwise and columnwise copies, odd shapes, NaN / Inf / subnormal / zero
// blocks, the output poisoned first. And quant/nvfp4_bf16.cu (nvfp4_block_values_bf16): each bf16
// value times the tensor's S_dec must be formats::dequantize()'s value, bit for bit, for stacked
// matrices of several shapes. GPU tests skip without a GPU; the argument checks run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "formats/scale_layout.h"
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
using bf::Format;
using blockscale::runtime::DeviceBuffer;

struct Case {
  std::string name;
  bf::QuantizeOptions options;
  bf::Direction direction;
  int64_t rows, cols;  // of the input
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// Random values over many magnitudes; some blocks all zero, some holding NaN / Inf / subnormals.
std::vector<float> make_input(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40), pick(0, 99);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float magnitude = std::ldexp(1.0f, exponent(rng));
    for (int64_t c = 0; c < cols; ++c) {
      float v = normal(rng) * magnitude;
      if ((r / 16 + c / 32) % 7 == 3) v = 0.0f;  // all-zero regions
      const int k = pick(rng);
      if (k == 0) v = NAN;
      else if (k == 1) v = -INFINITY;
      else if (k == 2) v = 1e-42f;
      x[static_cast<size_t>(r * cols + c)] = v;
    }
  }
  return x;
}

class DequantizeTest : public ::testing::TestWithParam<Case> {};

TEST_P(DequantizeTest, MatchesFormatsDequantizeBitForBit) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const std::vector<float> x = make_input(c.rows, c.cols, static_cast<uint32_t>(c.rows * 131 + c.cols));
  bf::QuantizedMatrix q;
  ASSERT_TRUE(bf::quantize(x.data(), c.rows, c.cols, c.cols, c.options, c.direction, &q).is_ok());
  std::vector<float> want;
  ASSERT_TRUE(bf::dequantize(q, &want).is_ok());
  std::vector<uint8_t> scales;
  ASSERT_OK(bf::pack_gemm_scales(q, &scales));

  DeviceBuffer data, scale_buf, scale_dec, out;
  ASSERT_OK(data.upload(q.data.data(), q.data.size(), "data"));
  ASSERT_OK(scale_buf.upload(scales.data(), scales.size(), "scale_buf"));
  ASSERT_OK(scale_dec.upload(&q.global_scale_dec, sizeof(float), "scale_dec"));
  ASSERT_OK(out.alloc(want.size() * sizeof(float), "out"));
  ASSERT_CUDA(cudaMemset(out.data(), 0xAB, out.size()));
  bq::DequantizeProblem p;
  p.recipe = q.recipe, p.rows = q.rows, p.cols = q.cols;
  const bq::DequantizeInputs in{data.data(), scale_buf.data(), scale_dec.as<float>()};
  const auto s = bq::dequantize(p, in, out.as<float>(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<float> got(want.size());
  ASSERT_CUDA(cudaMemcpy(got.data(), out.data(), out.size(), cudaMemcpyDeviceToHost));
  int64_t bad = 0, nans = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) {
      ++nans;
      continue;
    }
    if (bf::float_bits(got[i]) == bf::float_bits(want[i])) continue;
    if (bad++ < 5)
      ADD_FAILURE() << c.name << " element " << i << " (" << i / q.cols << ", " << i % q.cols << "): got "
                    << got[i] << " want " << want[i];
  }
  EXPECT_EQ(bad, 0) << c.name;
  if (want.size() >= 1000) EXPECT_GT(nans, 0) << "the input should hold NaN blocks";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  struct Variant {
    const char* name;
    bf::QuantizeOptions o;
  };
  std::vector<Variant> variants;
  auto options = [](Format r) {
    bf::QuantizeOptions o;
    o.recipe = r;
    return o;
  };
  variants.push_back({"mxfp8", options(Format::kMxfp8E4M3)});
  variants.push_back({"mxfp8_e5m2", options(Format::kMxfp8E5M2)});
  variants.push_back({"mxfp4", options(Format::kMxfp4)});
  variants.push_back({"nvfp4", options(Format::kNvfp4)});
  {
    bf::QuantizeOptions o = options(Format::kNvfp4);
    o.nvfp4_2d = true;
    variants.push_back({"nvfp4_2d", o});
  }
  variants.push_back({"fp8_block128", options(Format::kFp8Block1x128)});
  variants.push_back({"fp8_block128x128", options(Format::kFp8Block128x128)});
  {
    bf::QuantizeOptions o = options(Format::kFp8Block1x128);
    o.pow2_scales = true;
    variants.push_back({"fp8_block128_pow2", o});
  }
  for (const Variant& v : variants)
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {33, 17}, {127, 129}, {300, 1024}})
      for (bf::Direction d : {bf::Direction::kRowwise, bf::Direction::kColumnwise})
        out.push_back({std::string(v.name) + "_" + std::to_string(rows) + "x" + std::to_string(cols) +
                           (d == bf::Direction::kRowwise ? "_rowwise" : "_columnwise"),
                       v.o, d, rows, cols});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllRecipes, DequantizeTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// ---- nvfp4_block_values_bf16 ----
struct ValuesCase {
  std::string name;
  bool two_d;
  int64_t batches, rows, cols;  // of each stored matrix
};
std::ostream& operator<<(std::ostream& os, const ValuesCase& c) { return os << c.name; }

class Nvfp4ValuesTest : public ::testing::TestWithParam<ValuesCase> {};

// Each matrix quantized on its own by formats (its own S_dec), stacked as the batched run() does;
// the kernel's bf16 value must be decode(q) * s_b exactly (its fp32 value times S_dec is the
// emulator's dequantized value), and the output's padding-free layout is checked element by element.
TEST_P(Nvfp4ValuesTest, TimesTensorScaleIsFormatsDequantize) {
  SKIP_WITHOUT_GPU();
  const ValuesCase& c = GetParam();
  bf::QuantizeOptions o;
  o.recipe = Format::kNvfp4;
  o.nvfp4_2d = c.two_d;
  std::vector<uint8_t> data, scales;
  std::vector<std::vector<float>> want(static_cast<size_t>(c.batches));
  std::vector<float> dec(static_cast<size_t>(c.batches));
  for (int64_t b = 0; b < c.batches; ++b) {
    const std::vector<float> x = make_input(c.rows, c.cols, static_cast<uint32_t>(b * 7919 + c.rows + c.cols));
    bf::QuantizedMatrix q;
    ASSERT_TRUE(bf::quantize(x.data(), c.rows, c.cols, c.cols, o, bf::Direction::kRowwise, &q).is_ok());
    ASSERT_TRUE(bf::dequantize(q, &want[static_cast<size_t>(b)]).is_ok());
    dec[static_cast<size_t>(b)] = q.global_scale_dec;
    data.insert(data.end(), q.data.begin(), q.data.end());
    std::vector<uint8_t> packed;
    ASSERT_OK(bf::pack_gemm_scales(q, &packed));
    scales.insert(scales.end(), packed.begin(), packed.end());
  }
  DeviceBuffer data_buf, scale_buf, out;
  ASSERT_OK(data_buf.upload(data.data(), data.size(), "data_buf"));
  ASSERT_OK(scale_buf.upload(scales.data(), scales.size(), "scale_buf"));
  const size_t count = static_cast<size_t>(c.batches * c.rows * c.cols);
  ASSERT_OK(out.alloc(count * 2, "out"));
  ASSERT_CUDA(cudaMemset(out.data(), 0xAB, out.size()));
  bq::DequantizeProblem p;
  p.recipe = Format::kNvfp4, p.rows = c.rows, p.cols = c.cols;
  const bq::DequantizeInputs in{data_buf.data(), scale_buf.data(), nullptr};
  const auto s = bq::nvfp4_block_values_bf16(p, c.batches, in, out.as<uint16_t>(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> got(count);
  ASSERT_CUDA(cudaMemcpy(got.data(), out.data(), out.size(), cudaMemcpyDeviceToHost));
  int64_t bad = 0, nans = 0;
  for (size_t i = 0; i < count; ++i) {
    const size_t b = i / static_cast<size_t>(c.rows * c.cols), e = i % static_cast<size_t>(c.rows * c.cols);
    const float w = want[b][e];
    const float value = bf::bits_float(uint32_t{got[i]} << 16);
    if (std::isnan(w) && std::isnan(value)) {
      nans += got[i] == 0x7FC0u;
      continue;
    }
    if (bf::float_bits(bf::mul_rn(value, dec[b])) == bf::float_bits(w)) continue;
    if (bad++ < 5)
      ADD_FAILURE() << c.name << " matrix " << b << " element " << e << ": bf16 " << value << " x S_dec "
                    << dec[b] << " want " << w;
  }
  EXPECT_EQ(bad, 0) << c.name;
  if (count >= 1000) EXPECT_GT(nans, 0) << "the input should hold NaN blocks (as canonical bf16 NaN)";
}

INSTANTIATE_TEST_SUITE_P(Shapes, Nvfp4ValuesTest,
                         ::testing::Values(ValuesCase{"one_1x1", false, 1, 1, 1},
                                           ValuesCase{"one_33x17", false, 1, 33, 17},
                                           ValuesCase{"one_300x1024", false, 1, 300, 1024},
                                           ValuesCase{"two_d_256x128", true, 1, 256, 128},
                                           ValuesCase{"stacked3_130x48", false, 3, 130, 48},
                                           ValuesCase{"stacked4_2d_128x272", true, 4, 128, 272},
                                           ValuesCase{"stacked2_odd_17x31", false, 2, 17, 31}),
                         [](const ::testing::TestParamInfo<ValuesCase>& i) { return i.param.name; });

// Every code byte (two values) against every UE4M3 scale code, NaN (0x7F) included: byte k of
// each row holds k, block j of row r has scale code (32 r + j) mod 128. The output once aligned
// (the vector kernel) and once one element off (the scalar kernel).
TEST(Nvfp4ValuesExhaustive, EveryCodeTimesEveryScale) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 128, kCols = 512, kBlocks = kCols / 16;
  std::vector<uint8_t> data(static_cast<size_t>(kRows * kCols / 2)), linear(static_cast<size_t>(kRows * kBlocks));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i % 256);
  for (size_t i = 0; i < linear.size(); ++i) linear[i] = static_cast<uint8_t>(i % 128);
  std::vector<uint8_t> scales;
  ASSERT_OK(bf::pack_swizzled_scales(linear.data(), kRows, kBlocks, &scales));
  DeviceBuffer data_buf, scale_buf, out;
  ASSERT_OK(data_buf.upload(data.data(), data.size(), "data_buf"));
  ASSERT_OK(scale_buf.upload(scales.data(), scales.size(), "scale_buf"));
  const size_t count = static_cast<size_t>(kRows * kCols);
  ASSERT_OK(out.alloc(2 * (count + 8), "out"));
  bq::DequantizeProblem p;
  p.recipe = Format::kNvfp4, p.rows = kRows, p.cols = kCols;
  for (const size_t offset : {size_t{0}, size_t{1}}) {
    ASSERT_CUDA(cudaMemset(out.data(), 0xAB, out.size()));
    uint16_t* dst = out.as<uint16_t>() + offset;
    ASSERT_OK(bq::nvfp4_block_values_bf16(p, 1, {data_buf.data(), scale_buf.data(), nullptr}, dst, nullptr));
    std::vector<uint16_t> got(count);
    ASSERT_CUDA(cudaMemcpy(got.data(), dst, 2 * count, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t e = 0; e < kCols; ++e) {
        const uint32_t code = (data[static_cast<size_t>(r * kCols + e) / 2] >> (4 * (e % 2))) & 0xFu;
        const uint8_t sc = linear[static_cast<size_t>(r * kBlocks + e / 16)];
        const uint16_t want =
            sc == 0x7F ? uint16_t{0x7FC0}
                       : static_cast<uint16_t>(bf::float_bits(bf::mul_rn(bf::decode_e2m1(code), bf::decode_ue4m3(sc))) >> 16);
        const uint16_t g = got[static_cast<size_t>(r * kCols + e)];
        if (g != want && bad++ < 5)
          ADD_FAILURE() << "offset " << offset << " row " << r << " value " << e << " code " << code << " scale code "
                        << int{sc} << ": got 0x" << std::hex << g << " want 0x" << want << std::dec;
      }
    EXPECT_EQ(bad, 0) << "offset " << offset;
  }
}

TEST(Nvfp4ValuesArgs, RefusedWithTheRule) {
  bq::DequantizeProblem p;
  p.recipe = Format::kMxfp8E4M3, p.rows = 16, p.cols = 16;
  uint8_t fake = 0;
  uint16_t out = 0;
  const bq::DequantizeInputs in{&fake, &fake, nullptr};
  auto s = bq::nvfp4_block_values_bf16(p, 1, in, &out, nullptr);
  EXPECT_NE(s.message().find("problem.recipe: must be nvfp4"), std::string::npos) << s.message();
  p.recipe = Format::kNvfp4;
  s = bq::nvfp4_block_values_bf16(p, -1, in, &out, nullptr);
  EXPECT_NE(s.message().find("batches: must be in"), std::string::npos) << s.message();
  s = bq::nvfp4_block_values_bf16(p, 1, bq::DequantizeInputs{nullptr, &fake, nullptr}, &out, nullptr);
  EXPECT_NE(s.message().find("inputs.data: must not be null"), std::string::npos) << s.message();
  s = bq::nvfp4_block_values_bf16(p, 1, in, nullptr, nullptr);
  EXPECT_NE(s.message().find("out: must not be null"), std::string::npos) << s.message();
  p.rows = 0;  // an empty problem does nothing, pointers unread
  EXPECT_TRUE(bq::nvfp4_block_values_bf16(p, 1, bq::DequantizeInputs{}, nullptr, nullptr).is_ok());
}

}  // namespace
