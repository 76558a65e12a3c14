// Tests of quant/fp8_block_quantize.cu (through quant/quantize.h's run()): the GPU's bytes against
// the CPU emulator's, byte for byte. The reference is formats::quantize() (rowwise, and
// columnwise = the transpose) on the input decoded exactly to fp32, its scales_f32 packed with
// formats::pack_gemm_scales (VEC128 for 1x128, BLK128x128 for 128x128); the tensor amax is
// formats' block_amax over the whole input, the flag its nonfinite_seen.
//   - every output (and 32 guard bytes either side) poisoned before each run: an unwritten byte,
//     a write past a buffer, or a write to an output not requested fails;
//   - both recipes (1x128, 128x128) x pow2 off / on x rowwise / columnwise / both x bf16 / fp16 /
//     fp32 input;
//   - data per 128x128 tile (one tile = one 128x128 block, 128 rowwise and 128 columnwise blocks):
//     ordinary, all zero (+0 / -0), tiny (amax below 448 / FLT_MAX: the clamped multiplier; fp16:
//     subnormals only), near the type's largest finite value; inside ordinary tiles one kind per
//     32x32 region: normal at 1e-30..1e30 (fp16: its range), heavy tails, zeros, NaN / Inf / -0 /
//     subnormal / max injected, values on the scale and rounding boundaries (448 * 2^k and one
//     input ulp either side), one large element among tiny ones;
//   - shapes 1x1 .. 16385x7169 (partial blocks both ways), row strides > cols (16-byte rows or
//     not), misaligned input and output pointers (the element-wise load and 8 / 1-byte stores),
//     rows and cols not multiples of 16, and 2048-tile inputs (several tiles per CTA);
//   - the flag is only ever set to 1; fp8_block_scale (the kernel's scale arithmetic) against
//     formats on boundary and sampled amax patterns, on the host and on the GPU.
// The hardware E4M3 encoder is proven equal to formats::encode_minifloat on every finite fp32 by
// tests/quant/mx_device_test (Mxfp8HardwareCvt); it is not swept again here.
// GPU tests skip without a GPU; the host checks run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "formats/block_quantize_internal.h"  // block_amax: formats' tensor amax rule
#include "formats/quantize.h"
#include "formats/scale_layout.h"
#include "quant/fp8_block_quantize.h"
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
using bf::Format;
using bf::Direction;
using bf::DType;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::DeviceInput;
using blockscale_test::GuardedOutput;
using blockscale_test::HostInput;
using blockscale_test::check_output;
using blockscale_test::guarded_outputs;
using blockscale_test::name;
using blockscale_test::to_bits;
using blockscale_test::upload_input;

// Outputs of this test are poisoned with 0xC5 and 32 guard bytes either side.
constexpr uint8_t kPoison = 0xC5;
constexpr int64_t kGuard = 32;
::testing::AssertionResult poisoned(GuardedOutput* g, int64_t bytes, int64_t offset) {
  return blockscale_test::alloc_poisoned(g, bytes, offset, kPoison, kGuard);
}

HostInput make_input(int64_t rows, int64_t cols, int64_t ld, DType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const blockscale_test::DTypeBits tb = blockscale_test::type_bits(t);
  const bool fp16 = t == DType::kF16;
  double log_lo, log_hi;
  blockscale_test::magnitude_range(t, &log_lo, &log_hi);
  HostInput in;
  const size_t esize = bf::dtype_size(t);
  in.bytes.assign(static_cast<size_t>(rows * ld) * esize, 0xEE);  // stride padding: garbage
  in.values.assign(static_cast<size_t>(rows * ld), std::nanf(""));
  auto put = [&](int64_t r, int64_t c, uint32_t bits) {
    const size_t i = static_cast<size_t>(r * ld + c);
    std::memcpy(&in.bytes[i * esize], &bits, esize);
    in.values[i] = blockscale_test::from_bits(bits, t);
  };
  const double bases[] = {448.0, 1.0, 1.5, 1.0625, 1.125, 0.875, 464.0, 432.0, 3.0};
  for (int64_t tr = 0; tr < rows; tr += 128) {
    for (int64_t tc = 0; tc < cols; tc += 128) {
      const int tile_kind = static_cast<int>(uni(rng) * 100);
      for (int64_t rr = tr; rr < std::min(rows, tr + 128); rr += 32) {
        for (int64_t rc = tc; rc < std::min(cols, tc + 128); rc += 32) {
          const int kind = static_cast<int>(uni(rng) * 100);
          const double mag = std::pow(10.0, log_lo + (log_hi - log_lo) * uni(rng));
          const int k_base = static_cast<int>(uni(rng) * (fp16 ? 16 : 160)) - (fp16 ? 12 : 80);
          for (int64_t r = rr; r < std::min(rows, rr + 32); ++r) {
            for (int64_t c = rc; c < std::min(cols, rc + 32); ++c) {
              uint32_t bits;
              if (tile_kind < 6) {  // all zero, both signs
                bits = (rng() & 1) ? tb.sign : 0u;
              } else if (tile_kind < 14) {  // tiny: below 448 / FLT_MAX; fp16: its subnormals
                bits = fp16 ? static_cast<uint32_t>(rng() % tb.min_normal)
                            : to_bits(static_cast<float>(std::ldexp(normal(rng), -122 - static_cast<int>(rng() % 24))), t);
                if (rng() & 1) bits |= tb.sign;
              } else if (tile_kind < 18) {  // the largest finite values and their neighbours
                bits = (tb.max_finite - static_cast<uint32_t>(rng() % 6)) | ((rng() & 1) ? tb.sign : 0u);
              } else if (kind < 40) {  // normal at the region's magnitude
                bits = to_bits(static_cast<float>(normal(rng) * mag), t);
              } else if (kind < 55) {  // heavy tail
                const double u = std::max(uni(rng), 1e-4);
                bits = to_bits(static_cast<float>(normal(rng) / (u * u) * mag * 1e-3), t);
              } else if (kind < 62) {  // zeros
                bits = (rng() & 1) ? tb.sign : 0u;
              } else if (kind < 66) {  // specials sprinkled in a normal region
                bits = to_bits(static_cast<float>(normal(rng) * mag), t);
                switch (rng() % 48) {
                  case 0: bits = tb.inf | 1u | ((rng() & 1) ? tb.sign : 0u); break;  // NaN
                  case 1: bits = tb.inf; break;
                  case 2: bits = tb.inf | tb.sign; break;
                  case 3: bits = tb.sign; break;                                        // -0
                  case 4: bits = 1u | ((rng() & 1) ? tb.sign : 0u); break;              // min subnormal
                  case 5: bits = tb.max_finite; break;
                  default: break;
                }
              } else if (kind < 74) {  // subnormals of the input type
                bits = static_cast<uint32_t>(rng() % tb.min_normal) | ((rng() & 1) ? tb.sign : 0u);
              } else if (kind < 90) {  // boundaries: base * 2^k, one input ulp either side
                const double base = bases[rng() % (sizeof(bases) / sizeof(bases[0]))];
                bits = to_bits(static_cast<float>(std::ldexp(base, k_base + static_cast<int>(rng() % 3))), t);
                const uint32_t a = bits & ~tb.sign;
                if (a > 0 && a < tb.max_finite) bits += static_cast<uint32_t>(static_cast<int>(rng() % 3) - 1);
                if (rng() & 1) bits ^= tb.sign;
              } else {  // one large element among tiny ones
                const double f = (r * 7 + c) % 29 == 0 ? 1e5 : 1e-5;
                bits = to_bits(static_cast<float>(normal(rng) * mag * f), t);
              }
              put(r, c, bits);
            }
          }
        }
      }
    }
  }
  return in;
}

// ---- Reference: formats::quantize + the GEMM-layout packing, as bytes.
struct Expected {
  std::vector<uint8_t> row_data, row_scales, col_data, col_scales;
  bool nonfinite = false;
};

bf::QuantizedMatrix emulate(const HostInput& in, int64_t rows, int64_t cols, int64_t ld, Format recipe,
                            bool pow2, bf::Direction dir) {
  bf::QuantizeOptions o;
  o.recipe = recipe;
  o.pow2_scales = pow2;
  bf::QuantizedMatrix q;
  const auto s = bf::quantize(in.values.data(), rows, cols, ld, o, dir, &q);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return q;
}

// The references of several (recipe, pow2) configurations, each direction on its own thread.
struct Config {
  Format recipe;
  bool pow2;
};
std::vector<Expected> references(const HostInput& in, int64_t rows, int64_t cols, int64_t ld,
                                 const std::vector<Config>& configs) {
  std::vector<std::future<bf::QuantizedMatrix>> jobs;
  for (const Config& c : configs)
    for (bf::Direction d : {bf::Direction::kRowwise, bf::Direction::kColumnwise})
      jobs.push_back(std::async(std::launch::async, emulate, std::cref(in), rows, cols, ld, c.recipe, c.pow2, d));
  std::vector<Expected> out(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    const bf::QuantizedMatrix row = jobs[2 * i].get(), col = jobs[2 * i + 1].get();
    out[i].row_data = row.data, out[i].col_data = col.data;
    EXPECT_OK(bf::pack_gemm_scales(row, &out[i].row_scales));
    EXPECT_OK(bf::pack_gemm_scales(col, &out[i].col_scales));
    out[i].nonfinite = row.nonfinite_seen;
    EXPECT_EQ(row.nonfinite_seen, col.nonfinite_seen);
  }
  return out;
}

struct Layout {
  int64_t rows, cols, ld;
  DType type;
  bool misaligned;  // input one element off 16 bytes, data outputs one byte off, scales 4 bytes off
};

std::string describe(const Layout& l) {
  char s[128];
  std::snprintf(s, sizeof s, "%lldx%lld ld=%lld %s%s", static_cast<long long>(l.rows),
                static_cast<long long>(l.cols), static_cast<long long>(l.ld), bf::dtype_name(l.type),
                l.misaligned ? " misaligned" : "");
  return s;
}
void PrintTo(const Layout& l, std::ostream* os) { *os << describe(l); }

// One run of the public API on poisoned outputs, compared with the reference; returns bad bytes.
int64_t run_one(const Layout& l, const DeviceInput& x, const Expected& want, float want_amax, Config c,
                Direction dirs) {
  bq::QuantizeProblem p;
  p.recipe = c.recipe;
  p.pow2_scales = c.pow2;
  p.input_type = l.type;
  p.rows = l.rows, p.cols = l.cols, p.ld = l.ld;
  p.directions = Direction::kBoth;  // sizes every buffer; those not requested must stay poisoned
  const int64_t data_off = l.misaligned ? 1 : 0, scale_off = l.misaligned ? 4 : 0;
  GuardedOutput rd, rs, cd, cs, amax;
  EXPECT_TRUE(poisoned(&rd, bq::rowwise_data_bytes(p), data_off));
  EXPECT_TRUE(poisoned(&rs, bq::rowwise_scale_bytes(p), scale_off));
  EXPECT_TRUE(poisoned(&cd, bq::columnwise_data_bytes(p), data_off));
  EXPECT_TRUE(poisoned(&cs, bq::columnwise_scale_bytes(p), scale_off));
  EXPECT_TRUE(poisoned(&amax, 4, 0));
  DeviceBuffer flag;
  bq::QuantizeOutputs out;
  EXPECT_TRUE(guarded_outputs(rd, rs, cd, cs, &amax, &flag, &out));

  p.directions = dirs;
  bq::QuantizeInputs in;
  in.x = x.ptr();
  const blockscale::Status s = bq::run(p, in, out, nullptr, 0, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_CUDA(cudaDeviceSynchronize());

  const bool row = dirs != Direction::kColumnwise, col = dirs != Direction::kRowwise;
  const int64_t row_scale_len = c.recipe == Format::kFp8Block1x128 ? bf::vec128_scale_ld(l.rows) * 4
                                                                     : bf::blk128_scale_ld((l.cols + 127) / 128) * 4;
  const int64_t col_scale_len = c.recipe == Format::kFp8Block1x128 ? bf::vec128_scale_ld(l.cols) * 4
                                                                     : bf::blk128_scale_ld((l.rows + 127) / 128) * 4;
  std::string report;
  int64_t bad = 0;
  bad += check_output(rd, row ? &want.row_data : nullptr, l.cols, "rowwise data", &report);
  bad += check_output(rs, row ? &want.row_scales : nullptr, row_scale_len, "rowwise scales", &report);
  bad += check_output(cd, col ? &want.col_data : nullptr, l.rows, "columnwise data", &report);
  bad += check_output(cs, col ? &want.col_scales : nullptr, col_scale_len, "columnwise scales", &report);
  std::vector<uint8_t> amax_bytes(4);
  std::memcpy(amax_bytes.data(), &want_amax, 4);
  bad += check_output(amax, &amax_bytes, 4, "amax", &report);
  int got_flag = -1;
  EXPECT_CUDA(cudaMemcpy(&got_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
  if (got_flag != (want.nonfinite ? 1 : 0)) {
    ++bad;
    report += "nonfinite flag: got " + std::to_string(got_flag) + "\n";
  }
  EXPECT_EQ(bad, 0) << describe(l) << " " << bf::format_name(c.recipe) << (c.pow2 ? " pow2 " : " ")
                    << name(dirs, /*abbreviated=*/true) << ": " << bad << " bad bytes\n"
                    << report;
  return bad;
}

const std::vector<Config> kAllConfigs = {{Format::kFp8Block1x128, false},
                                         {Format::kFp8Block1x128, true},
                                         {Format::kFp8Block128x128, false},
                                         {Format::kFp8Block128x128, true}};

uint64_t seed_of(const Layout& l) {
  return 1000003ull * static_cast<uint64_t>(l.rows) + 7919ull * static_cast<uint64_t>(l.cols) +
         31ull * static_cast<uint64_t>(l.ld) + 3ull * static_cast<uint64_t>(l.type) + (l.misaligned ? 1 : 0);
}

// Runs `configs` x `dirs` on one layout; prints one summary line.
void check(const Layout& l, const std::vector<Config>& configs, const std::vector<Direction>& dirs) {
  const HostInput in = make_input(l.rows, l.cols, l.ld, l.type, seed_of(l));
  DeviceInput x;
  ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
  const std::vector<Expected> want = references(in, l.rows, l.cols, l.ld, configs);
  const float amax = bf::detail::block_amax(in.values.data(), l.ld, 0, l.rows, 0, l.cols).amax;
  int64_t bad = 0;
  int runs = 0;
  for (size_t i = 0; i < configs.size(); ++i)
    for (Direction d : dirs) bad += run_one(l, x, want[i], amax, configs[i], d), ++runs;
  std::printf("fp8_block_quantize_test: %-34s %2d runs, input %s non-finite, bad bytes %lld\n",
              describe(l).c_str(), runs, want[0].nonfinite ? "has" : "no", static_cast<long long>(bad));
}

const std::vector<Direction> kAllDirs = {Direction::kRowwise, Direction::kColumnwise, Direction::kBoth};

class Fp8BlockQuantizeLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(Fp8BlockQuantizeLayouts, MatchesTheEmulatorByteForByte) {
  SKIP_WITHOUT_GPU();
  check(GetParam(), kAllConfigs, kAllDirs);
}

std::vector<Layout> layouts() {
  std::vector<Layout> v;
  const int64_t shapes[][2] = {{1, 1},     {1, 129},   {3, 128},   {127, 129}, {128, 128},
                               {129, 257}, {256, 384}, {200, 1000}, {1000, 2176}};
  for (DType t : {DType::kBf16, DType::kF16, DType::kF32}) {
    for (const auto& s : shapes) v.push_back({s[0], s[1], s[1], t, false});
    v.push_back({127, 129, 136, t, false});   // ld > cols, 16-byte rows (bf16 / fp16: 272 bytes)
    v.push_back({300, 520, 600, t, false});   // ld > cols, 16-byte rows
    v.push_back({136, 264, 264, t, false});   // rows, cols = 8 mod 16: 8-byte stores
    v.push_back({33, 200, 203, t, false});    // odd ld: element-wise loads
    v.push_back({127, 129, 131, t, true});    // misaligned pointers
    v.push_back({256, 1024, 1024, t, true});  // misaligned, whole tiles
  }
  return v;
}

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  const Layout& l = info.param;
  return std::to_string(l.rows) + "x" + std::to_string(l.cols) + "_ld" + std::to_string(l.ld) + "_" +
         bf::dtype_name(l.type) + (l.misaligned ? "_misaligned" : "");
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8BlockQuantizeLayouts, ::testing::ValuesIn(layouts()), layout_name);

// Several tiles per CTA (2048 tiles): the double-buffered (16-bit) and single-buffered (fp32)
// pipelines over many rounds, whole tiles only.
TEST(Fp8BlockQuantizeLarge, ManyTilesPerCta) {
  SKIP_WITHOUT_GPU();
  check({4096, 8192, 8192, DType::kF16, false}, {{Format::kFp8Block1x128, true}, {Format::kFp8Block128x128, false}},
        {Direction::kBoth});
  check({4096, 8192, 8192, DType::kF32, false}, {{Format::kFp8Block1x128, false}, {Format::kFp8Block128x128, true}},
        {Direction::kBoth, Direction::kRowwise});
}

// One large bf16 tensor, partial tiles along both edges.
TEST(Fp8BlockQuantizeLarge, Bf16_16385x7169) {
  SKIP_WITHOUT_GPU();
  check({16385, 7169, 7169, DType::kBf16, false}, {{Format::kFp8Block1x128, false}, {Format::kFp8Block128x128, true}},
        {Direction::kBoth});
}

// ---- The flag: set to 1 on NaN / Inf input, never written otherwise.
TEST(Fp8BlockQuantizeFlags, NonfiniteFlagIsOnlyEverSetToOne) {
  SKIP_WITHOUT_GPU();
  for (Format recipe : {Format::kFp8Block1x128, Format::kFp8Block128x128}) {
    for (int poison : {0, 1, 2}) {  // finite, one NaN, one -Inf
      std::vector<float> x(200 * 300);
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
      if (poison == 1) x[150 * 300 + 299] = std::nanf("");
      if (poison == 2) x[7 * 300 + 11] = -INFINITY;
      DeviceBuffer dx, data, scales, flag, amax;
      ASSERT_OK(dx.upload(x.data(), x.size() * 4, "dx"));
      bq::QuantizeProblem p;
      p.recipe = recipe, p.input_type = DType::kF32, p.rows = 200, p.cols = 300, p.ld = 300;
      p.directions = Direction::kColumnwise;
      ASSERT_OK(data.alloc(static_cast<size_t>(bq::columnwise_data_bytes(p)), "data"));
      ASSERT_OK(scales.alloc(static_cast<size_t>(bq::columnwise_scale_bytes(p)), "scales"));
      ASSERT_OK(flag.alloc(4, "flag"));
      ASSERT_OK(amax.alloc(4, "amax"));
      const int start = 7;
      ASSERT_CUDA(cudaMemcpy(flag.data(), &start, 4, cudaMemcpyHostToDevice));
      bq::QuantizeInputs in;
      in.x = dx.data();
      bq::QuantizeOutputs out;
      out.columnwise_data = data.data(), out.columnwise_scales = scales.data();
      out.nonfinite = flag.as<int>(), out.amax = amax.as<float>();
      const auto s = bq::run(p, in, out, nullptr, 0, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.message();
      int got = 0;
      float got_amax = 0;
      ASSERT_CUDA(cudaMemcpy(&got, flag.data(), 4, cudaMemcpyDeviceToHost));
      ASSERT_CUDA(cudaMemcpy(&got_amax, amax.data(), 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, poison ? 1 : start) << bf::format_name(recipe) << " poison " << poison;
      const float want_amax = bf::detail::block_amax(x.data(), 300, 0, 200, 0, 300).amax;
      EXPECT_EQ(bf::float_bits(got_amax), bf::float_bits(want_amax)) << "NaN ignored, Inf counts";
      if (poison == 2) EXPECT_TRUE(std::isinf(got_amax));
    }
  }
}

// ---- fp8_block_scale (the kernel's scale arithmetic) against formats.

// Boundary amax patterns, plus a stride through every finite one.
std::vector<uint32_t> amax_patterns(uint32_t stride) {
  std::vector<uint32_t> v = {0u, 1u, 2u, 3u, 0x007FFFFFu, 0x00800000u, 0x00800001u, 0x7F7FFFFFu, 0x7F7FFFFEu};
  for (int e = -149; e <= 127; ++e) {  // 448 * 2^e neighbourhoods and 448 / FLT_MAX
    const uint32_t b = bf::float_bits(std::ldexp(448.0f, std::max(e, -140)));
    for (int d = -2; d <= 2; ++d) v.push_back(b + static_cast<uint32_t>(d));
    const uint32_t p = bf::float_bits(std::ldexp(1.0f, e));
    for (int d = -1; d <= 1; ++d) v.push_back(p + static_cast<uint32_t>(d));
  }
  const uint32_t edge = bf::float_bits(448.0f / 3.40282346638528859811704183484516925e+38f);
  for (int d = -8; d <= 8; ++d) v.push_back(edge + static_cast<uint32_t>(d));
  for (uint32_t a = 5; a < 0x7F800000u; a += stride) v.push_back(a);
  v.erase(std::remove_if(v.begin(), v.end(), [](uint32_t a) { return a >= 0x7F800000u; }), v.end());
  return v;
}

// The scale formats writes for a 1x2 block {amax, -amax / 3}, and the codes: through quantize().
TEST(Fp8BlockScale, HostFunctionMatchesFormatsQuantize) {
  int64_t checked = 0, bad = 0;
  for (bool pow2 : {false, true}) {
    for (uint32_t a : amax_patterns(1000003u)) {
      const float x[2] = {bf::bits_float(a), -bf::bits_float(a) / 3.0f};
      bf::QuantizeOptions o;
      o.recipe = Format::kFp8Block1x128, o.pow2_scales = pow2;
      bf::QuantizedMatrix q;
      ASSERT_TRUE(bf::quantize(x, 1, 2, 2, o, bf::Direction::kRowwise, &q).is_ok());
      const bq::detail::Fp8BlockScale s = bq::detail::fp8_block_scale(a, pow2);
      const uint32_t c0 = bf::encode_e4m3(bf::mul_rn(x[0], s.mult)), c1 = bf::encode_e4m3(bf::mul_rn(x[1], s.mult));
      ++checked;
      if (s.nonfinite || bf::float_bits(s.scale) != bf::float_bits(q.scales_f32[0]) || c0 != q.data[0] ||
          c1 != q.data[1]) {
        if (bad++ < 5)
          ADD_FAILURE() << "amax bits 0x" << std::hex << a << (pow2 ? " pow2" : "") << ": scale 0x"
                        << bf::float_bits(s.scale) << " formats 0x" << bf::float_bits(q.scales_f32[0]);
      }
    }
  }
  // Non-finite: NaN scale bits 0x7FC00000, as formats writes.
  for (uint32_t a : {0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu}) {
    const auto s = bq::detail::fp8_block_scale(a, false);
    EXPECT_TRUE(s.nonfinite);
    EXPECT_EQ(bf::float_bits(s.scale), 0x7FC00000u);
  }
  EXPECT_EQ(bad, 0);
  std::printf("fp8_block_quantize_test: fp8_block_scale (host) vs formats::quantize: %lld amax patterns, "
              "mismatches %lld\n", static_cast<long long>(checked), static_cast<long long>(bad));
}

__global__ void scale_kernel(const uint32_t* amax, int n, bool pow2, uint32_t* mult, uint32_t* scale) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bq::detail::Fp8BlockScale s = bq::detail::fp8_block_scale(amax[i], pow2);
    mult[i] = __float_as_uint(s.mult);
    scale[i] = __float_as_uint(s.scale) | (s.nonfinite ? 1u : 0u);
  }
}

// The device build of fp8_block_scale (__fdiv_rn) against the host build (IEEE division).
TEST(Fp8BlockScale, DeviceMatchesHost) {
  SKIP_WITHOUT_GPU();
  const std::vector<uint32_t> amax = amax_patterns(4099u);
  const int n = static_cast<int>(amax.size());
  DeviceBuffer d_amax, d_mult, d_scale;
  ASSERT_OK(d_amax.upload(amax.data(), amax.size() * 4, "d_amax"));
  ASSERT_OK(d_mult.alloc(amax.size() * 4, "d_mult"));
  ASSERT_OK(d_scale.alloc(amax.size() * 4, "d_scale"));
  int64_t bad = 0;
  for (bool pow2 : {false, true}) {
    scale_kernel<<<512, 256>>>(d_amax.as<uint32_t>(), n, pow2,
                               d_mult.as<uint32_t>(), d_scale.as<uint32_t>());
    ASSERT_CUDA(cudaGetLastError());
    std::vector<uint32_t> mult(amax.size()), scale(amax.size());
    ASSERT_CUDA(cudaMemcpy(mult.data(), d_mult.data(), mult.size() * 4, cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(scale.data(), d_scale.data(), scale.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < amax.size(); ++i) {
      const auto h = bq::detail::fp8_block_scale(amax[i], pow2);
      if (mult[i] == bf::float_bits(h.mult) && scale[i] == bf::float_bits(h.scale)) continue;
      if (bad++ < 5)
        ADD_FAILURE() << "amax 0x" << std::hex << amax[i] << (pow2 ? " pow2" : "") << ": device r 0x" << mult[i]
                      << " s 0x" << scale[i] << ", host r 0x" << bf::float_bits(h.mult) << " s 0x"
                      << bf::float_bits(h.scale);
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf("fp8_block_quantize_test: fp8_block_scale device vs host: %d amax patterns x 2, mismatches %lld\n", n,
              static_cast<long long>(bad));
}

// ---- Batched (BatchedQuantizeProblem: a MoE layer's expert weights in one launch): every
// matrix's bytes, at its offset in each buffer, are the emulator's for that matrix alone.
struct BatchedLayout {
  int64_t batches, rows, cols, ld;
  DType type;
  bool misaligned;
};

void check_batched(const BatchedLayout& l, bool pow2, Direction dirs) {
  const Layout stacked{l.batches * l.rows, l.cols, l.ld, l.type, l.misaligned};
  const HostInput in = make_input(stacked.rows, l.cols, l.ld, l.type, seed_of(stacked) + 17);
  DeviceInput x;
  ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
  Expected want;
  for (int64_t b = 0; b < l.batches; ++b) {
    HostInput one;  // matrix b alone
    one.values.assign(in.values.begin() + b * l.rows * l.ld, in.values.begin() + (b + 1) * l.rows * l.ld);
    const Expected e = references(one, l.rows, l.cols, l.ld, {{Format::kFp8Block128x128, pow2}})[0];
    want.row_data.insert(want.row_data.end(), e.row_data.begin(), e.row_data.end());
    want.row_scales.insert(want.row_scales.end(), e.row_scales.begin(), e.row_scales.end());
    want.col_data.insert(want.col_data.end(), e.col_data.begin(), e.col_data.end());
    want.col_scales.insert(want.col_scales.end(), e.col_scales.begin(), e.col_scales.end());
    want.nonfinite |= e.nonfinite;
  }
  bq::BatchedQuantizeProblem p;
  p.matrix.recipe = Format::kFp8Block128x128;
  p.matrix.pow2_scales = pow2;
  p.matrix.input_type = l.type;
  p.matrix.rows = l.rows, p.matrix.cols = l.cols, p.matrix.ld = l.ld;
  p.matrix.directions = Direction::kBoth;  // sizes every buffer; those not requested must stay poisoned
  p.batches = l.batches;
  const int64_t data_off = l.misaligned ? 1 : 0, scale_off = l.misaligned ? 4 : 0;
  GuardedOutput rd, rs, cd, cs;
  ASSERT_TRUE(poisoned(&rd, l.batches * bq::rowwise_data_bytes(p.matrix), data_off));
  ASSERT_TRUE(poisoned(&rs, l.batches * bq::rowwise_scale_bytes(p.matrix), scale_off));
  ASSERT_TRUE(poisoned(&cd, l.batches * bq::columnwise_data_bytes(p.matrix), data_off));
  ASSERT_TRUE(poisoned(&cs, l.batches * bq::columnwise_scale_bytes(p.matrix), scale_off));
  DeviceBuffer flag;
  bq::QuantizeOutputs out;
  ASSERT_TRUE(guarded_outputs(rd, rs, cd, cs, nullptr, &flag, &out));
  p.matrix.directions = dirs;
  bq::QuantizeInputs qin;
  qin.x = x.ptr();
  const blockscale::Status st = bq::run(p, qin, out, nullptr);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_CUDA(cudaDeviceSynchronize());

  const bool row = dirs != Direction::kColumnwise, col = dirs != Direction::kRowwise;
  std::string report;
  int64_t bad = 0;
  bad += check_output(rd, row ? &want.row_data : nullptr, l.cols, "rowwise data", &report);
  bad += check_output(rs, row ? &want.row_scales : nullptr, bf::blk128_scale_ld((l.cols + 127) / 128) * 4,
                      "rowwise scales", &report);
  bad += check_output(cd, col ? &want.col_data : nullptr, l.rows, "columnwise data", &report);
  bad += check_output(cs, col ? &want.col_scales : nullptr, bf::blk128_scale_ld((l.rows + 127) / 128) * 4,
                      "columnwise scales", &report);
  int got_flag = -1;
  ASSERT_CUDA(cudaMemcpy(&got_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
  if (got_flag != (want.nonfinite ? 1 : 0)) ++bad, report += "nonfinite flag: got " + std::to_string(got_flag) + "\n";
  EXPECT_EQ(bad, 0) << l.batches << " x " << describe(Layout{l.rows, l.cols, l.ld, l.type, l.misaligned})
                    << (pow2 ? " pow2 " : " ") << name(dirs, true) << ": " << bad << " bad bytes\n" << report;
  std::printf("fp8_block_quantize_test: batched %lld x %-30s %s%s, input %s non-finite, bad bytes %lld\n",
              static_cast<long long>(l.batches), describe(Layout{l.rows, l.cols, l.ld, l.type, l.misaligned}).c_str(),
              name(dirs, true), pow2 ? " pow2" : "", want.nonfinite ? "has" : "no", static_cast<long long>(bad));
}

// Whole tiles (the experts' shapes, scaled down), partial tiles on both edges (a matrix's last
// tile row ends inside it, so tile rows never straddle two matrices), row strides > cols, odd
// strides, misaligned pointers, one matrix, and enough tiles for several per CTA.
TEST(Fp8BlockQuantizeBatched, MatchesTheEmulatorPerMatrix) {
  SKIP_WITHOUT_GPU();
  const BatchedLayout layouts[] = {{8, 256, 384, 384, DType::kF32, false},
                                   {3, 200, 300, 300, DType::kF32, false},
                                   {5, 129, 257, 264, DType::kBf16, false},
                                   {4, 130, 200, 203, DType::kF16, false},
                                   {3, 127, 129, 131, DType::kF32, true},
                                   {1, 300, 520, 600, DType::kBf16, false},
                                   {8, 1408, 1024, 1024, DType::kF32, false}};
  for (const BatchedLayout& l : layouts)
    for (Direction d : kAllDirs) check_batched(l, /*pow2=*/l.rows % 2 == 1, d);
}

// ---- Host-side API facts this kernel relies on (no GPU).
TEST(Fp8BlockQuantizeApi, BatchedChecks) {
  bq::BatchedQuantizeProblem p;
  p.matrix.recipe = Format::kFp8Block128x128, p.matrix.input_type = DType::kF32;
  p.matrix.rows = 256, p.matrix.cols = 128, p.matrix.ld = 128, p.matrix.directions = Direction::kBoth;
  p.batches = 4;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  auto expect_error = [&](const char* field) {
    const auto s = bq::can_implement(p);
    ASSERT_FALSE(s.is_ok()) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  };
  p.batches = 0;
  expect_error("problem.batches");
  p.batches = 4;
  p.matrix.recipe = Format::kFp8Block1x128;
  expect_error("problem.matrix.recipe");
  p.matrix.recipe = Format::kFp8Block128x128;
  p.matrix.ld = 64;
  expect_error("problem.ld");
  p.matrix.ld = 128;
  // Pointers: each buffer holds `batches` copies, so a buffer one matrix long overlaps the next.
  bq::QuantizeInputs in;
  in.x = reinterpret_cast<const void*>(uintptr_t{1} << 40);
  bq::QuantizeOutputs out;
  auto at = [](uint64_t offset) { return reinterpret_cast<uint8_t*>((uintptr_t{1} << 41) + offset); };
  const int64_t rd = bq::rowwise_data_bytes(p.matrix), rs = bq::rowwise_scale_bytes(p.matrix);
  const int64_t cd = bq::columnwise_data_bytes(p.matrix);
  out.rowwise_data = at(0), out.rowwise_scales = at(4 * rd), out.columnwise_data = at(4 * rd + 4 * rs);
  out.columnwise_scales = at(4 * rd + 4 * rs + 4 * cd);
  EXPECT_TRUE(bq::can_implement(p, in, out).is_ok());
  out.rowwise_scales = at(rd);  // inside matrix 1's rowwise data
  const auto s = bq::can_implement(p, in, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("outputs.rowwise_data"), std::string::npos) << s.message();
}


TEST(Fp8BlockQuantizeApi, SizesAndOptions) {
  bq::QuantizeProblem p;
  p.recipe = Format::kFp8Block128x128, p.rows = 300, p.cols = 129, p.ld = 130, p.directions = Direction::kBoth;
  p.pow2_scales = true;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  EXPECT_EQ(bq::rowwise_scale_bytes(p), bf::blk128_scale_floats(3, 2) * 4);
  EXPECT_EQ(bq::columnwise_scale_bytes(p), bf::blk128_scale_floats(2, 3) * 4);
  EXPECT_EQ(bq::columnwise_data_bytes(p), 129 * 300);
  p.recipe = Format::kFp8Block1x128;
  EXPECT_EQ(bq::rowwise_scale_bytes(p), bf::vec128_scale_floats(300, 2) * 4);
  EXPECT_EQ(bq::columnwise_scale_bytes(p), bf::vec128_scale_floats(129, 3) * 4);
  EXPECT_EQ(bq::workspace_size(p), 0u);
  p.recipe = Format::kMxfp8E4M3;
  const auto s = bq::can_implement(p);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("problem.pow2_scales"), std::string::npos) << s.message();
}

}  // namespace
