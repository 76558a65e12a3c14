// Tests of quant/mx_quantize.cu (dense mode; the grouped mode: mx_grouped_quantize_test.cpp)
// and quant/dequantize.cu: the GPU's bytes against the CPU emulator's, byte for byte. The reference is formats::quantize() +
// formats::pack_gemm_scales() on the input decoded exactly to fp32 (the tensor amax:
// formats' block_amax over the whole input; dequantize: formats::dequantize()).
//   - every output poisoned (0xAB) before each run, with poisoned guard bytes around it: an
//     unwritten byte, a write outside a buffer, or a write to an output not requested fails;
//   - MXFP8 E4M3 and E5M2 and MXFP4 E2M1 (odd rows / cols exercise the nibble packing), ceil and floor,
//     rowwise / columnwise / both, bf16 / fp16 / fp32 input;
//   - per 32x32 region of the input a random kind of data: normal values at magnitudes 1e-30..1e30
//     (the input type's range), heavy tails, all-zero blocks (+0 / -0), injected NaN / Inf /
//     subnormal / -0, subnormal-only blocks, values on the scale and rounding boundaries;
//   - shapes 1x1 .. 1000x4096, one 16385x7169 (bf16), 4096x8192 (many whole tiles per CTA), row
//     stride > cols (aligned or not), misaligned pointers (the scalar fallback paths);
// The element encoders and the block scale on every fp32 pattern: mx_device_test.cu; the
// argument checks: quantize_test.cpp.
// GPU tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "formats/block_quantize_internal.h"  // block_amax: formats' tensor amax rule
#include "formats/quantize.h"
#include "formats/scale_layout.h"
#include "quant/mx_quantize.h"
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
using bf::Format;
using bf::ScaleRounding;
using bf::Direction;
using bf::DType;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::DeviceInput;
using blockscale_test::GuardedOutput;
using blockscale_test::HostInput;
using blockscale_test::alloc_poisoned;
using blockscale_test::check_output;
using blockscale_test::expect_error;
using blockscale_test::from_bits;
using blockscale_test::guarded_outputs;
using blockscale_test::name;
using blockscale_test::to_bits;
using blockscale_test::upload_input;

// ---- Inputs --------------------------------------------------------------------------------

enum class Pattern { kMixed, kFinite };
const char* name(Pattern p) { return p == Pattern::kMixed ? "mixed" : "finite"; }

// One 32x32 region of the input gets one kind of data (each rowwise block and each columnwise
// block lies in one region).
HostInput make_input(int64_t rows, int64_t cols, int64_t ld, DType t, Pattern pattern,
                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  double lo, hi;
  blockscale_test::magnitude_range(t, &lo, &hi);
  const int64_t esize = static_cast<int64_t>(bf::dtype_size(t));
  HostInput in;
  in.bytes.assign(static_cast<size_t>(rows * ld * esize), 0);
  in.values.assign(static_cast<size_t>(rows * ld), std::nanf(""));
  // Boundary bases: E4M3 / E5M2 / E2M1 maxnorm and rounding ties at several scales.
  const double bases[] = {448.0, 57344.0, 1.0, 1.5, 1.0625, 1.1875, 1.125, 1.375, 0.75, 480.0, 61440.0,
                          6.0, 5.0, 7.0, 2.5, 3.5, 1.25, 1.75, 0.25};
  const blockscale_test::DTypeBits tb = blockscale_test::type_bits(t);
  const uint32_t smax = tb.max_finite;
  for (int64_t rr = 0; rr < rows; rr += 32) {
    for (int64_t rc = 0; rc < cols; rc += 32) {
      const int kind = static_cast<int>(uni(rng) * 100);
      const double mag = std::pow(10.0, lo + (hi - lo) * uni(rng));
      const int scale_k = static_cast<int>(uni(rng) * (t == DType::kF16 ? 20 : 200)) -
                          (t == DType::kF16 ? 14 : 100);
      for (int64_t r = rr; r < std::min(rows, rr + 32); ++r) {
        for (int64_t c = rc; c < std::min(cols, rc + 32); ++c) {
          uint32_t bits;
          if (kind < 35) {  // normal at this region's magnitude
            bits = to_bits(static_cast<float>(normal(rng) * mag), t);
          } else if (kind < 50) {  // heavy tail: normal / uniform^2 (Cauchy-like and worse)
            const double u = std::max(uni(rng), 1e-4);
            bits = to_bits(static_cast<float>(normal(rng) / (u * u) * mag * 1e-3), t);
          } else if (kind < 58) {  // all zero, both signs
            bits = (rng() & 1) ? tb.sign : 0u;
          } else if (kind < 70) {  // sprinkled specials
            bits = to_bits(static_cast<float>(normal(rng) * mag), t);
            const uint64_t z = rng() % 64;
            const uint32_t inf = tb.inf;
            if (z == 0) bits = inf | 1u;                              // NaN
            if (z == 1) bits = inf;                                   // +Inf
            if (z == 2) bits = inf | tb.sign;                         // -Inf
            if (z == 3) bits = tb.sign;                               // -0
            if (z == 4) bits = 1u | ((rng() & 1) ? tb.sign : 0u);     // smallest subnormal
            if (z == 5) bits = smax;                                  // largest finite
          } else if (kind < 78) {  // subnormals of the input type only
            bits = static_cast<uint32_t>(rng() % tb.min_normal) | ((rng() & 1) ? tb.sign : 0u);
          } else if (kind < 88) {  // boundary values: base * 2^k and one input ulp either side
            const double base = bases[rng() % (sizeof(bases) / sizeof(bases[0]))];
            const int k = scale_k + static_cast<int>(rng() % 5) - 2;
            bits = to_bits(static_cast<float>(std::ldexp(base, k)), t);
            const int delta = static_cast<int>(rng() % 3) - 1;
            if ((bits & ~tb.sign) < smax && (bits & ~tb.sign) > 0) bits += delta;
            if (rng() & 1) bits ^= tb.sign;
          } else if (kind < 94) {  // the largest finite values and their neighbours
            bits = smax - static_cast<uint32_t>(rng() % 4);
            if (rng() & 1) bits ^= tb.sign;
          } else {  // one lone element large, the rest tiny: extreme in-block dynamic range
            bits = to_bits(static_cast<float>(normal(rng) * mag * ((r + c) % 31 == 0 ? 1e6 : 1e-6)), t);
          }
          // finite pattern: nothing non-finite (rounding into the type may overflow too)
          if (pattern == Pattern::kFinite && !std::isfinite(from_bits(bits, t)))
            bits = smax | (bits & tb.sign);
          const size_t i = static_cast<size_t>(r * ld + c);
          std::memcpy(&in.bytes[i * esize], &bits, static_cast<size_t>(esize));  // little endian
          in.values[i] = from_bits(bits, t);
        }
      }
    }
  }
  return in;
}

// ---- Reference -----------------------------------------------------------------------------

struct Reference {
  bf::QuantizedMatrix row, col;
  std::vector<uint8_t> row_scales, col_scales;  // swizzled
  float amax = 0.0f;
};

Reference make_reference(const HostInput& in, int64_t rows, int64_t cols, int64_t ld, Format recipe,
                         ScaleRounding rounding) {
  Reference ref;
  bf::QuantizeOptions o;
  o.recipe = recipe;
  o.rounding = rounding;
  auto s = bf::quantize(in.values.data(), rows, cols, ld, o, bf::Direction::kRowwise, &ref.row);
  EXPECT_TRUE(s.is_ok()) << s.message();
  s = bf::quantize(in.values.data(), rows, cols, ld, o, bf::Direction::kColumnwise, &ref.col);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_OK(bf::pack_gemm_scales(ref.row, &ref.row_scales));
  EXPECT_OK(bf::pack_gemm_scales(ref.col, &ref.col_scales));
  ref.amax = bf::detail::block_amax(in.values.data(), ld, 0, rows, 0, cols).amax;
  return ref;
}

// ---- GPU run and comparison ----------------------------------------------------------------

struct Layout {
  int64_t rows, cols, ld;
  DType type;
  Pattern pattern;
  bool misaligned;  // input pointer off 16-byte alignment by one element, outputs by one byte
};

std::string describe(const Layout& l) {
  char s[160];
  std::snprintf(s, sizeof s, "%lldx%lld ld=%lld %s %s%s", static_cast<long long>(l.rows),
                static_cast<long long>(l.cols), static_cast<long long>(l.ld), bf::dtype_name(l.type),
                name(l.pattern), l.misaligned ? " misaligned" : "");
  return s;
}

void PrintTo(const Layout& l, std::ostream* os) { *os << describe(l); }  // readable ctest names

// Runs one configuration on the GPU and compares every output with the reference. Returns the
// number of bad bytes (0: pass); failures are reported through gtest.
int64_t run_and_compare(const Layout& l, const DeviceInput& x, const Reference& ref, Format recipe,
                        ScaleRounding rounding, Direction dirs,
                        bq::detail::GridPolicy grid = bq::detail::GridPolicy::kAuto) {
  bq::QuantizeProblem p;
  p.recipe = recipe;
  p.rounding = rounding;
  p.input_type = l.type;
  p.rows = l.rows;
  p.cols = l.cols;
  p.ld = l.ld;
  p.directions = Direction::kBoth;  // sizes of every buffer
  const int64_t out_off = l.misaligned ? 1 : 0;
  GuardedOutput row_data, row_scales, col_data, col_scales, amax;
  EXPECT_TRUE(alloc_poisoned(&row_data, bq::rowwise_data_bytes(p), out_off));
  EXPECT_TRUE(alloc_poisoned(&row_scales, bq::rowwise_scale_bytes(p), out_off));
  EXPECT_TRUE(alloc_poisoned(&col_data, bq::columnwise_data_bytes(p), out_off));
  EXPECT_TRUE(alloc_poisoned(&col_scales, bq::columnwise_scale_bytes(p), out_off));
  EXPECT_TRUE(alloc_poisoned(&amax, 4, 0));
  DeviceBuffer flag;
  bq::QuantizeOutputs out;
  EXPECT_TRUE(guarded_outputs(row_data, row_scales, col_data, col_scales, &amax, &flag, &out));

  p.directions = dirs;
  bq::QuantizeInputs in;
  in.x = x.ptr();
  const blockscale::Status s = bq::detail::run_mx(p, in, out, nullptr, grid);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_CUDA(cudaDeviceSynchronize());

  const bool row = dirs != Direction::kColumnwise, col = dirs != Direction::kRowwise;
  std::string report;
  int64_t bad = 0;
  bad += check_output(row_data, row ? &ref.row.data : nullptr, ref.row.data_row_bytes(), "rowwise data", &report);
  bad += check_output(row_scales, row ? &ref.row_scales : nullptr, 16, "rowwise scales", &report);
  bad += check_output(col_data, col ? &ref.col.data : nullptr, ref.col.data_row_bytes(), "columnwise data", &report);
  bad += check_output(col_scales, col ? &ref.col_scales : nullptr, 16, "columnwise scales", &report);
  std::vector<uint8_t> amax_bytes(4);
  std::memcpy(amax_bytes.data(), &ref.amax, 4);
  bad += check_output(amax, &amax_bytes, 4, "amax", &report);
  int got_flag = -1;
  EXPECT_CUDA(cudaMemcpy(&got_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
  const int want_flag = ref.row.nonfinite_seen ? 1 : 0;
  EXPECT_EQ(ref.row.nonfinite_seen, ref.col.nonfinite_seen);
  if (got_flag != want_flag) {
    ++bad;
    report += "nonfinite flag: got " + std::to_string(got_flag) + " want " + std::to_string(want_flag) + "\n";
  }
  EXPECT_EQ(bad, 0) << describe(l) << " " << bf::format_name(recipe) << " "
                    << (rounding == ScaleRounding::kCeil ? "ceil" : "floor") << " " << name(dirs)
                    << ": " << bad << " bad bytes\n" << report;
  return bad;
}

// Every recipe x rounding (one reference each) x directions (MXFP8 through the hardware cvt).
void check_layout(const Layout& l, uint64_t seed) {
  const HostInput in = make_input(l.rows, l.cols, l.ld, l.type, l.pattern, seed);
  DeviceInput x;
  ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
  int runs = 0;
  int64_t bad = 0;
  bool nonfinite = false;
  for (Format recipe : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp4}) {
    for (ScaleRounding rounding : {ScaleRounding::kCeil, ScaleRounding::kFloor}) {
      const Reference ref = make_reference(in, l.rows, l.cols, l.ld, recipe, rounding);
      nonfinite = ref.row.nonfinite_seen;
      for (Direction d : {Direction::kRowwise, Direction::kColumnwise, Direction::kBoth}) {
        bad += run_and_compare(l, x, ref, recipe, rounding, d);
        ++runs;
      }
    }
  }
  std::printf("mx_quantize_test: %-40s %2d runs (e4m3/e5m2/e2m1 x ceil/floor x row/col/both), "
              "input %s non-finite, bad bytes %lld\n",
              describe(l).c_str(), runs, nonfinite ? "has" : "no", static_cast<long long>(bad));
}

class MxQuantizeLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(MxQuantizeLayouts, MatchesTheEmulatorByteForByte) {
  SKIP_WITHOUT_GPU();
  const Layout l = GetParam();
  check_layout(l, 1000003u * static_cast<uint64_t>(l.rows) + 7919u * l.cols + 31u * l.ld +
                      static_cast<uint64_t>(l.type) * 3u + static_cast<uint64_t>(l.pattern));
}

std::vector<Layout> layouts() {
  std::vector<Layout> v;
  const DType types[] = {DType::kBf16, DType::kF16, DType::kF32};
  const int64_t shapes[][2] = {{1, 1}, {1, 33}, {31, 32}, {33, 65}, {127, 129}, {256, 1024}, {1000, 4096}};
  for (const auto& s : shapes)
    for (DType t : types) v.push_back({s[0], s[1], s[1], t, Pattern::kMixed, false});
  for (DType t : types) {
    v.push_back({33, 65, 65, t, Pattern::kFinite, false});
    v.push_back({256, 1024, 1024, t, Pattern::kFinite, false});
    v.push_back({127, 129, 136, t, Pattern::kMixed, false});       // ld > cols, 16-byte rows
    v.push_back({1000, 4096, 4104, t, Pattern::kMixed, false});
    v.push_back({33, 65, 67, t, Pattern::kMixed, false});          // ld breaks vector loads
    v.push_back({127, 129, 131, t, Pattern::kMixed, true});        // misaligned pointers
    v.push_back({256, 1024, 1024, t, Pattern::kMixed, true});
    v.push_back({64, 256, 256, t, Pattern::kMixed, false});        // whole tiles only
  }
  return v;
}

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  const Layout& l = info.param;
  return std::to_string(l.rows) + "x" + std::to_string(l.cols) + "_ld" + std::to_string(l.ld) + "_" +
         bf::dtype_name(l.type) + "_" + name(l.pattern) + (l.misaligned ? "_misaligned" : "");
}

INSTANTIATE_TEST_SUITE_P(Shapes, MxQuantizeLayouts, ::testing::ValuesIn(layouts()), layout_name);

// ---- Batched (BatchedQuantizeProblem: a MoE layer's expert weights in one launch): matrix b's
// bytes, at its offset in each buffer, are the emulator's for matrix b alone; amax is the
// maximum over all of them, the non-finite flag set by any.
struct BatchedLayout {
  int64_t batches;
  Layout matrix;
};

int64_t check_batched(const BatchedLayout& bl, const HostInput& in, const DeviceInput& x, Format recipe,
                      ScaleRounding rounding, Direction dirs) {
  const Layout& l = bl.matrix;
  Reference want;
  std::vector<uint8_t> row_data, row_scales, col_data, col_scales;
  bool nonfinite = false;
  for (int64_t b = 0; b < bl.batches; ++b) {
    HostInput one;  // matrix b alone
    one.values.assign(in.values.begin() + b * l.rows * l.ld, in.values.begin() + (b + 1) * l.rows * l.ld);
    const Reference r = make_reference(one, l.rows, l.cols, l.ld, recipe, rounding);
    row_data.insert(row_data.end(), r.row.data.begin(), r.row.data.end());
    row_scales.insert(row_scales.end(), r.row_scales.begin(), r.row_scales.end());
    col_data.insert(col_data.end(), r.col.data.begin(), r.col.data.end());
    col_scales.insert(col_scales.end(), r.col_scales.begin(), r.col_scales.end());
    nonfinite = nonfinite || r.row.nonfinite_seen;
    if (b == 0) want = r;
  }
  const float amax = bf::detail::block_amax(in.values.data(), l.ld, 0, bl.batches * l.rows, 0, l.cols).amax;
  bq::BatchedQuantizeProblem p;
  p.matrix.recipe = recipe;
  p.matrix.rounding = rounding;
  p.matrix.input_type = l.type;
  p.matrix.rows = l.rows, p.matrix.cols = l.cols, p.matrix.ld = l.ld;
  p.matrix.directions = Direction::kBoth;  // sizes every buffer; those not requested must stay poisoned
  p.batches = bl.batches;
  const int64_t out_off = l.misaligned ? 1 : 0;
  GuardedOutput rd, rs, cd, cs, amax_out;
  EXPECT_TRUE(alloc_poisoned(&rd, bl.batches * bq::rowwise_data_bytes(p.matrix), out_off));
  EXPECT_TRUE(alloc_poisoned(&rs, bl.batches * bq::rowwise_scale_bytes(p.matrix), out_off));
  EXPECT_TRUE(alloc_poisoned(&cd, bl.batches * bq::columnwise_data_bytes(p.matrix), out_off));
  EXPECT_TRUE(alloc_poisoned(&cs, bl.batches * bq::columnwise_scale_bytes(p.matrix), out_off));
  EXPECT_TRUE(alloc_poisoned(&amax_out, 4, 0));
  DeviceBuffer flag;
  bq::QuantizeOutputs out;
  EXPECT_TRUE(guarded_outputs(rd, rs, cd, cs, &amax_out, &flag, &out));
  p.matrix.directions = dirs;
  bq::QuantizeInputs qin;
  qin.x = x.ptr();
  const blockscale::Status st = bq::run(p, qin, out, nullptr);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_CUDA(cudaDeviceSynchronize());

  const bool row = dirs != Direction::kColumnwise, col = dirs != Direction::kRowwise;
  std::string report;
  int64_t bad = 0;
  bad += check_output(rd, row ? &row_data : nullptr, want.row.data_row_bytes(), "rowwise data", &report);
  bad += check_output(rs, row ? &row_scales : nullptr, 16, "rowwise scales", &report);
  bad += check_output(cd, col ? &col_data : nullptr, want.col.data_row_bytes(), "columnwise data", &report);
  bad += check_output(cs, col ? &col_scales : nullptr, 16, "columnwise scales", &report);
  std::vector<uint8_t> amax_bytes(4);
  std::memcpy(amax_bytes.data(), &amax, 4);
  bad += check_output(amax_out, &amax_bytes, 4, "amax", &report);
  int got_flag = -1;
  EXPECT_CUDA(cudaMemcpy(&got_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
  if (got_flag != (nonfinite ? 1 : 0)) ++bad, report += "nonfinite flag: got " + std::to_string(got_flag) + "\n";
  EXPECT_EQ(bad, 0) << bl.batches << " x " << describe(l) << " " << bf::format_name(recipe) << " "
                    << (rounding == ScaleRounding::kCeil ? "ceil" : "floor") << " " << name(dirs) << ": " << bad
                    << " bad bytes\n" << report;
  return bad;
}

// Whole 128-row tiles per matrix (the rule), partial column tiles, row strides > cols, odd
// strides, misaligned pointers, one matrix, and enough tiles for several per CTA; every recipe
// and rounding, each direction.
TEST(MxQuantizeBatched, MatchesTheEmulatorPerMatrix) {
  SKIP_WITHOUT_GPU();
  const BatchedLayout layouts[] = {{8, {256, 384, 384, DType::kF32, Pattern::kMixed, false}},
                                   {3, {128, 300, 300, DType::kF32, Pattern::kMixed, false}},
                                   {5, {256, 129, 136, DType::kBf16, Pattern::kMixed, false}},
                                   {4, {128, 200, 203, DType::kF16, Pattern::kMixed, false}},
                                   {3, {128, 129, 131, DType::kF32, Pattern::kMixed, true}},
                                   {1, {384, 520, 600, DType::kBf16, Pattern::kMixed, false}},
                                   {8, {1408, 256, 256, DType::kF32, Pattern::kFinite, false}}};
  for (const BatchedLayout& bl : layouts) {
    const Layout& l = bl.matrix;
    const HostInput in = make_input(bl.batches * l.rows, l.cols, l.ld, l.type, l.pattern, 7919u * l.cols + l.rows);
    DeviceInput x;
    ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
    int runs = 0;
    int64_t bad = 0;
    for (Format recipe : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp4})
      for (ScaleRounding rounding : {ScaleRounding::kCeil, ScaleRounding::kFloor})
        for (Direction d : {Direction::kRowwise, Direction::kColumnwise, Direction::kBoth}) {
          bad += check_batched(bl, in, x, recipe, rounding, d);
          ++runs;
        }
    std::printf("mx_quantize_test: batched %lld x %-36s %2d runs, bad bytes %lld\n",
                static_cast<long long>(bl.batches), describe(l).c_str(), runs, static_cast<long long>(bad));
  }
}

// Host-side checks: MX recipes batch only whole 128-row tiles per matrix.
TEST(MxQuantizeBatched, RowsMustBeWholeTiles) {
  bq::BatchedQuantizeProblem p;
  p.matrix.recipe = Format::kMxfp8E4M3, p.matrix.input_type = DType::kF32;
  p.matrix.rows = 256, p.matrix.cols = 64, p.matrix.ld = 64, p.matrix.directions = Direction::kBoth;
  p.batches = 3;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  p.matrix.rows = 200;
  const blockscale::Status s = bq::can_implement(p);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("problem.matrix.rows"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("multiple of 128"), std::string::npos) << s.message();
  p.matrix.rows = 256, p.matrix.recipe = Format::kNvfp4;
  EXPECT_FALSE(bq::can_implement(p).is_ok()) << "NVFP4 batches the rowwise copy alone";
}

// One large bf16 tensor (not a multiple of the tile in either dimension).
TEST(Mxfp8QuantizeLarge, Bf16_16385x7169) {
  SKIP_WITHOUT_GPU();
  const Layout l{16385, 7169, 7169, DType::kBf16, Pattern::kMixed, false};
  const HostInput in = make_input(l.rows, l.cols, l.ld, l.type, l.pattern, 42);
  DeviceInput x;
  ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
  int64_t bad = 0;
  {
    const Reference ref = make_reference(in, l.rows, l.cols, l.ld, Format::kMxfp8E4M3, ScaleRounding::kCeil);
    bad += run_and_compare(l, x, ref, Format::kMxfp8E4M3, ScaleRounding::kCeil, Direction::kBoth);
  }
  {
    const Reference ref = make_reference(in, l.rows, l.cols, l.ld, Format::kMxfp8E5M2, ScaleRounding::kFloor);
    bad += run_and_compare(l, x, ref, Format::kMxfp8E5M2, ScaleRounding::kFloor, Direction::kBoth);
  }
  std::printf("mx_quantize_test: %s: e4m3 ceil both, e5m2 floor both: bad bytes %lld\n",
              describe(l).c_str(), static_cast<long long>(bad));
}

// Whole tiles only and many tiles per CTA: the production path (no bounds checks, 16-byte
// stores, the double-buffered pipeline and the one-tile-late scale stores) over several rounds.
TEST(Mxfp8QuantizeLarge, ManyTilesPerCtaEveryInputType) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kBf16, DType::kF16, DType::kF32}) {
    const Layout l{4096, 8192, 8192, t, Pattern::kMixed, false};
    const HostInput in = make_input(l.rows, l.cols, l.ld, l.type, l.pattern, 4242 + static_cast<uint64_t>(t));
    DeviceInput x;
    ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
    int64_t bad = 0;
    {
      const Reference ref = make_reference(in, l.rows, l.cols, l.ld, Format::kMxfp8E4M3, ScaleRounding::kCeil);
      bad += run_and_compare(l, x, ref, Format::kMxfp8E4M3, ScaleRounding::kCeil, Direction::kBoth);
      // The benchmark's fixed grids write the same bytes.
      for (auto grid : {bq::detail::GridPolicy::kPersistent, bq::detail::GridPolicy::kOneTilePerCta})
        bad += run_and_compare(l, x, ref, Format::kMxfp8E4M3, ScaleRounding::kCeil, Direction::kBoth, grid);
    }
    {
      const Reference ref = make_reference(in, l.rows, l.cols, l.ld, Format::kMxfp8E5M2, ScaleRounding::kFloor);
      for (Direction d : {Direction::kRowwise, Direction::kColumnwise})
        bad += run_and_compare(l, x, ref, Format::kMxfp8E5M2, ScaleRounding::kFloor, d);
    }
    if (t == DType::kBf16) {
      const Reference ref = make_reference(in, l.rows, l.cols, l.ld, Format::kMxfp4, ScaleRounding::kCeil);
      bad += run_and_compare(l, x, ref, Format::kMxfp4, ScaleRounding::kCeil, Direction::kBoth);
    }
    std::printf("mx_quantize_test: %s: e4m3 ceil both (auto, persistent and one-tile-per-CTA grids), e5m2 floor row and col%s: bad bytes %lld\n",
                describe(l).c_str(), t == DType::kBf16 ? ", e2m1 ceil both" : "", static_cast<long long>(bad));
  }
}

// MXFP4 on a large matrix with an odd number of rows and columns: the half-filled last byte of
// every row of both copies, partial tiles on both edges, many tiles per CTA.
TEST(Mxfp4QuantizeLarge, OddRowsAndColsBothCopies) {
  SKIP_WITHOUT_GPU();
  const Layout l{2049, 4097, 4097, DType::kBf16, Pattern::kMixed, false};
  const HostInput in = make_input(l.rows, l.cols, l.ld, l.type, l.pattern, 4097);
  DeviceInput x;
  ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
  const Reference ref = make_reference(in, l.rows, l.cols, l.ld, Format::kMxfp4, ScaleRounding::kFloor);
  const int64_t bad = run_and_compare(l, x, ref, Format::kMxfp4, ScaleRounding::kFloor, Direction::kBoth);
  std::printf("mx_quantize_test: %s: e2m1 floor both: bad bytes %lld\n", describe(l).c_str(),
              static_cast<long long>(bad));
}
// ---- The non-finite flag is sticky, never cleared; an empty problem writes amax 0 ----------

TEST(Mxfp8QuantizeFlags, NonfiniteFlagIsOnlyEverSetToOne) {
  SKIP_WITHOUT_GPU();
  const Layout l{64, 64, 64, DType::kBf16, Pattern::kFinite, false};
  for (bool with_nan : {false, true}) {
    HostInput in = make_input(l.rows, l.cols, l.ld, l.type, l.pattern, 5);
    if (with_nan) in.bytes[2 * (10 * 64 + 7) + 1] = 0x7F, in.bytes[2 * (10 * 64 + 7)] = 0xC1;  // NaN
    DeviceInput x;
    ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
    DeviceBuffer data, scales, flag;
    bq::QuantizeProblem p;
    p.rows = l.rows, p.cols = l.cols, p.ld = l.ld;
    ASSERT_OK(data.alloc(static_cast<size_t>(bq::rowwise_data_bytes(p)), "data"));
    ASSERT_OK(scales.alloc(static_cast<size_t>(bq::rowwise_scale_bytes(p)), "scales"));
    ASSERT_OK(flag.alloc(sizeof(int), "flag"));
    const int start = 7;
    ASSERT_CUDA(cudaMemcpy(flag.data(), &start, sizeof start, cudaMemcpyHostToDevice));
    bq::QuantizeOutputs out;
    out.rowwise_data = data.data(), out.rowwise_scales = scales.data();
    out.nonfinite = flag.as<int>();
    bq::QuantizeInputs xin;
    xin.x = x.ptr();
    const auto s = bq::run(p, xin, out, nullptr, 0, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    int got = 0;
    ASSERT_CUDA(cudaMemcpy(&got, flag.data(), sizeof got, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, with_nan ? 1 : start) << (with_nan ? "NaN input" : "finite input");
  }
}

TEST(Mxfp8QuantizeFlags, EmptyProblemWritesAmaxZeroAndNothingElse) {
  SKIP_WITHOUT_GPU();
  GuardedOutput amax;
  ASSERT_TRUE(alloc_poisoned(&amax, 4, 0));
  bq::QuantizeProblem p;
  p.rows = 0, p.cols = 5, p.ld = 5, p.directions = Direction::kBoth;
  bq::QuantizeOutputs out;
  out.amax = reinterpret_cast<float*>(amax.ptr());
  const auto s = bq::run(p, bq::QuantizeInputs{}, out, nullptr, 0, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::string report;
  const std::vector<uint8_t> zero(4, 0);
  EXPECT_EQ(check_output(amax, &zero, 4, "amax", &report), 0) << report;
}

// ---- Dequantize: the emulator's bytes in, formats::dequantize's values out --------------------

TEST(Mxfp8Dequantize, MatchesFormatsDequantize) {
  SKIP_WITHOUT_GPU();
  for (Format recipe : {Format::kMxfp8E4M3, Format::kMxfp8E5M2}) {
    for (const auto& shape : {std::pair<int64_t, int64_t>{127, 129}, {1, 33}, {300, 1024}}) {
      const int64_t rows = shape.first, cols = shape.second;
      const HostInput in = make_input(rows, cols, cols, DType::kF32, Pattern::kMixed, 77 + rows);
      const Reference ref = make_reference(in, rows, cols, cols, recipe, ScaleRounding::kCeil);
      std::vector<float> want;
      ASSERT_TRUE(bf::dequantize(ref.row, &want).is_ok());
      DeviceBuffer data, scales, out;
      ASSERT_OK(data.upload(ref.row.data.data(), ref.row.data.size(), "data"));
      ASSERT_OK(scales.upload(ref.row_scales.data(), ref.row_scales.size(), "scales"));
      ASSERT_OK(out.alloc(want.size() * sizeof(float), "out"));
      ASSERT_CUDA(cudaMemset(out.data(), blockscale_test::kDefaultPoison, out.size()));
      bq::DequantizeProblem p;
      p.recipe = recipe, p.rows = rows, p.cols = cols;
      const auto s =
          bq::dequantize(p, bq::DequantizeInputs{data.data(), scales.data(), nullptr}, out.as<float>(), nullptr);
      ASSERT_TRUE(s.is_ok()) << s.message();
      std::vector<float> got(want.size());
      ASSERT_CUDA(cudaMemcpy(got.data(), out.data(), out.size(), cudaMemcpyDeviceToHost));
      int64_t bad = 0, nans = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
        nans += both_nan;
        if (both_nan || bf::float_bits(got[i]) == bf::float_bits(want[i])) continue;
        if (bad++ < 4)
          ADD_FAILURE() << bf::format_name(recipe) << " " << rows << "x" << cols << " element " << i
                        << ": got " << got[i] << " want " << want[i];
      }
      EXPECT_EQ(bad, 0);
      if (rows * cols > 10000) EXPECT_GT(nans, 0) << "the mixed input should hold NaN blocks";
      std::printf("mx_quantize_test: dequantize %s %lldx%lld: %zu values (%lld NaN), mismatches %lld\n",
                  bf::format_name(recipe), static_cast<long long>(rows), static_cast<long long>(cols),
                  want.size(), static_cast<long long>(nans), static_cast<long long>(bad));
    }
  }
}

}  // namespace
