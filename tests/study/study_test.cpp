// The accuracy study's engine: metrics on hand-checkable tensors, chunked quantization against one
// quantize() of the whole tensor, the GEMM error against a direct fp64 computation, inputs.
#include "study/study.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "formats/io/safetensors.h"
#include "formats/quantize.h"

namespace blockscale::study {
namespace {

using formats::QuantizeOptions;
using formats::Format;

TensorSource source(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return memory_source("t", {rows, cols}, rows, cols, v);
}

QuantizeOptions opts(Format r, bool floor = false) {
  QuantizeOptions o;
  o.recipe = r;
  if (floor) o.rounding = formats::ScaleRounding::kFloor;
  return o;
}

RecipeError measure(const std::vector<float>& v, int64_t rows, int64_t cols, const QuantizeOptions& o,
                    int64_t chunk = kStudyChunkElements) {
  RecipeError e;
  const Status s = measure_recipe_error(source(v, rows, cols), o, &e, chunk);
  EXPECT_TRUE(s) << s.message();
  return e;
}

// Values with a wide range, zeros, outliers: every recipe rounds something.
std::vector<float> random_tensor(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> u(-12, 12);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = normal(rng) * std::exp2(u(rng));
    if (i % 97 == 3) v[i] = 0;
    if (i % 1013 == 5) v[i] *= 1000;
  }
  return v;
}

TEST(StudyMetrics, ExactValuesGiveInfiniteSqnr) {
  // Every value is a power of two within E4M3's range of the block's scale: nothing rounds.
  std::vector<float> v(4 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1.0f : 1.0f) * std::exp2(static_cast<float>(i % 9) - 4);
  const RecipeError e = measure(v, 4, 64, opts(Format::kMxfp8E4M3));
  EXPECT_TRUE(std::isinf(e.sqnr_db) && e.sqnr_db > 0);
  EXPECT_EQ(e.rel_fro_error, 0);
  EXPECT_EQ(e.max_abs_error, 0);
  EXPECT_EQ(e.max_rel_error, 0);
  EXPECT_EQ(e.saturated, 0);
  EXPECT_EQ(e.flushed, 0);
  EXPECT_EQ(e.elements, 256);
  EXPECT_EQ(e.blocks, 8);  // 4 rows x 2 blocks of 32
  EXPECT_EQ(e.scale_at_min, 0);
  EXPECT_EQ(e.scale_at_max, 0);
}

TEST(StudyMetrics, SqnrAndRelativeErrorOfOneRoundedValue) {
  // 1 + 2^-4 lies halfway between E4M3 neighbours 1 and 1.125 (scale 2^0 from amax 256): ties to
  // even give 1, an error of 2^-4 in a block whose other values are exact.
  std::vector<float> v(32, 0.0f);
  v[0] = 256.0f;
  v[1] = 1.0625f;
  const RecipeError e = measure(v, 1, 32, opts(Format::kMxfp8E4M3));
  const double signal = 256.0 * 256.0 + 1.0625 * 1.0625, noise = 0.0625 * 0.0625;
  EXPECT_DOUBLE_EQ(e.sqnr_db, 10 * std::log10(signal / noise));
  EXPECT_DOUBLE_EQ(e.rel_fro_error, std::sqrt(noise / signal));
  EXPECT_EQ(e.max_abs_error, 0.0625);
  EXPECT_DOUBLE_EQ(e.max_rel_error, 0.0625 / 1.0625);
}

TEST(StudyMetrics, FlushedValuesCount) {
  // amax 448 gives scale 2^0; 2^-11 is below half of E4M3's smallest subnormal 2^-9: flushed.
  std::vector<float> v(64, 1.0f);
  v[0] = 448.0f;
  v[1] = std::exp2(-11.0f);
  v[2] = -std::exp2(-12.0f);
  v[3] = 0.0f;  // zero inputs are not counted as flushed
  const RecipeError e = measure(v, 1, 64, opts(Format::kMxfp8E4M3));
  EXPECT_DOUBLE_EQ(e.flushed, 2.0 / 63.0);
  EXPECT_EQ(e.max_rel_error, 1.0);  // a flushed value has relative error 1
  EXPECT_EQ(e.saturated, 0);
}

TEST(StudyMetrics, FloorRoundingSaturatesAndCeilDoesNot) {
  // amax 500: floor gives scale 2^(8 - 8) = 1, so 500 > 448 clips to 448; ceil takes 2^1.
  std::vector<float> v(32, 3.0f);
  v[5] = 500.0f;
  EXPECT_DOUBLE_EQ(measure(v, 1, 32, opts(Format::kMxfp8E4M3, true)).saturated, 1.0 / 32);
  EXPECT_EQ(measure(v, 1, 32, opts(Format::kMxfp8E4M3)).saturated, 0);
  EXPECT_EQ(measure(v, 1, 32, opts(Format::kMxfp8E4M3, true)).max_abs_error, 52.0);
}

TEST(StudyMetrics, E8M0ScaleAtItsMinimum) {
  // A block of 2^-126: ceil wants 2^-134, clamped to the E8M0 minimum 2^-127 (code 0x00).
  std::vector<float> v(4 * 32, 1.0f);
  for (int c = 0; c < 32; ++c) v[32 + c] = std::exp2(-126.0f);
  for (int c = 0; c < 32; ++c) v[64 + c] = 0.0f;  // an all-zero block is not counted
  const RecipeError e = measure(v, 4, 32, opts(Format::kMxfp8E4M3));
  EXPECT_EQ(e.blocks, 3);
  EXPECT_DOUBLE_EQ(e.scale_at_min, 1.0 / 3);
  EXPECT_EQ(e.scale_at_max, 0);
  EXPECT_TRUE(e.scale_limits);
}

TEST(StudyMetrics, E8M0MaximumIsBeyondFiniteInputs) {
  // FLT_MAX needs at most 2^126 (E2M1, E2M3: emax 2), so scale@max stays 0 for every MX recipe
  // (what --help says).
  std::vector<float> v(32, 1.0f);
  v[0] = 3.4028235e38f;
  for (Format r : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp6E2M3, Format::kMxfp6E3M2, Format::kMxfp4})
    for (bool floor : {false, true}) {
      formats::QuantizedMatrix q;
      ASSERT_TRUE(formats::quantize(v.data(), 1, 32, 32, opts(r, floor), formats::Direction::kRowwise, &q));
      EXPECT_LE(q.scales[0], 0xFD) << formats::format_name(r);
      EXPECT_EQ(measure(v, 1, 32, opts(r, floor)).scale_at_max, 0);
    }
}

TEST(StudyMetrics, Ue4m3ScaleLimits) {
  // NVFP4: the block holding the tensor amax gets UE4M3 448 (0x7E) by construction; a block
  // 2^-20 below it falls under UE4M3's smallest subnormal (scale 0: the block flushes).
  std::vector<float> v(3 * 16, 0.5f);
  v[0] = 6.0f;
  for (int c = 0; c < 16; ++c) v[16 + c] = 6.0f * std::exp2(-20.0f);
  const RecipeError e = measure(v, 1, 48, opts(Format::kNvfp4));
  EXPECT_EQ(e.blocks, 3);
  EXPECT_DOUBLE_EQ(e.scale_at_max, 1.0 / 3);
  EXPECT_DOUBLE_EQ(e.scale_at_min, 1.0 / 3);
  EXPECT_DOUBLE_EQ(e.flushed, 16.0 / 48);
  EXPECT_EQ(e.saturated, 0);  // a flushed value is not also counted as saturated
}

TEST(StudyMetrics, Fp8BlockwiseHasNoScaleLimits) {
  const std::vector<float> v = random_tensor(2 * 256, 3);
  for (Format r : {Format::kFp8Block1x128, Format::kFp8Block128x128}) {
    const RecipeError e = measure(v, 2, 256, opts(r));
    EXPECT_FALSE(e.scale_limits);
    EXPECT_EQ(e.blocks, 0);
    EXPECT_GT(e.sqnr_db, 20);
  }
}

TEST(StudyMetrics, NonFiniteInputsAreCountedAndExcluded) {
  std::vector<float> v = random_tensor(2 * 64, 4);
  v[3] = NAN;
  v[70] = -INFINITY;
  const RecipeError e = measure(v, 2, 64, opts(Format::kMxfp8E4M3));
  EXPECT_EQ(e.nonfinite, 2);
  EXPECT_EQ(e.excluded, 64);  // two blocks of 32 dequantize to NaN
  EXPECT_TRUE(std::isfinite(e.sqnr_db));
  // The same metrics as the tensor without those two blocks.
  std::vector<float> rest;
  for (int i = 0; i < 128; ++i)
    if (i / 32 != 0 && i / 32 != 2) rest.push_back(v[i]);
  const RecipeError r = measure(rest, 2, 32, opts(Format::kMxfp8E4M3));
  EXPECT_DOUBLE_EQ(e.sqnr_db, r.sqnr_db);
  EXPECT_EQ(e.max_abs_error, r.max_abs_error);
  // One 128x128 tile holds everything: nothing is left to measure.
  const RecipeError none = measure(v, 2, 64, opts(Format::kFp8Block128x128));
  EXPECT_EQ(none.excluded, 128);
  EXPECT_TRUE(std::isnan(none.sqnr_db) && std::isnan(none.rel_fro_error) && std::isnan(none.flushed));
}

// ---- chunked quantization == one quantize() of the whole tensor ------------------------------

std::vector<QuantizeOptions> every_config() {
  std::vector<QuantizeOptions> v;
  for (const StudyConfig& c : study_configs(formats::all_formats(), formats::ScaleRounding::kBoth)) v.push_back(c.options);
  QuantizeOptions nv2d = opts(Format::kNvfp4);
  nv2d.nvfp4_2d = true;
  v.push_back(nv2d);
  return v;
}

// Reassembles the chunks' dequantized values into a rows x cols tensor.
std::vector<float> chunked_dequantized(const std::vector<float>& x, int64_t rows, int64_t cols,
                                       const QuantizeOptions& o, int64_t chunk, int* chunks) {
  std::vector<float> out(x.size(), -7.0f);  // poisoned: an unwritten element fails
  *chunks = 0;
  const Status s = quantize_in_chunks(
      source(x, rows, cols), o, chunk,
      [&](int64_t r0, int64_t c0, const float*, const formats::QuantizedMatrix& q, const std::vector<float>& d) {
        ++*chunks;
        for (int64_t r = 0; r < q.rows; ++r)
          std::memcpy(&out[(r0 + r) * cols + c0], &d[r * q.cols], q.cols * sizeof(float));
        return Status::ok();
      });
  EXPECT_TRUE(s) << s.message();
  return out;
}

TEST(StudyChunks, ChunkedBytesEqualWholeTensorQuantize) {
  const int64_t rows = 300, cols = 400;  // partial blocks at both edges
  std::vector<float> x = random_tensor(rows * cols, 5);
  x[rows * cols - 3] = 3.0e5f;  // the tensor amax sits in the last chunk
  for (const QuantizeOptions& o : every_config()) {
    formats::QuantizedMatrix q;
    ASSERT_TRUE(formats::quantize(x.data(), rows, cols, cols, o, formats::Direction::kRowwise, &q));
    std::vector<float> whole;
    ASSERT_TRUE(formats::dequantize(q, &whole));
    int chunks = 0;
    const std::vector<float> parts = chunked_dequantized(x, rows, cols, o, 4096, &chunks);
    EXPECT_GT(chunks, 4) << formats::format_name(o.recipe);
    EXPECT_EQ(std::memcmp(parts.data(), whole.data(), whole.size() * sizeof(float)), 0)
        << formats::format_name(o.recipe) << (o.nvfp4_2d ? " 2d" : "");
  }
}

TEST(StudyChunks, Nvfp4WithInfMatchesWholeTensor) {
  // A measured amax of Inf gives S_enc = 1; the chunked pass must reproduce it.
  const int64_t rows = 64, cols = 96;
  std::vector<float> x = random_tensor(rows * cols, 6);
  x[40 * cols + 17] = INFINITY;
  x[2] = NAN;
  const QuantizeOptions o = opts(Format::kNvfp4);
  formats::QuantizedMatrix q;
  ASSERT_TRUE(formats::quantize(x.data(), rows, cols, cols, o, formats::Direction::kRowwise, &q));
  EXPECT_EQ(q.global_scale_dec, 1.0f);
  std::vector<float> whole;
  ASSERT_TRUE(formats::dequantize(q, &whole));
  int chunks = 0;
  const std::vector<float> parts = chunked_dequantized(x, rows, cols, o, 512, &chunks);
  EXPECT_GT(chunks, 8);
  EXPECT_EQ(std::memcmp(parts.data(), whole.data(), whole.size() * sizeof(float)), 0);
}

TEST(StudyChunks, ChunkedMetricsEqualUnchunked) {
  const int64_t rows = 260, cols = 300;
  const std::vector<float> x = random_tensor(rows * cols, 7);
  for (const QuantizeOptions& o : every_config()) {
    const RecipeError a = measure(x, rows, cols, o, 2048), b = measure(x, rows, cols, o, int64_t{1} << 30);
    const std::string what = formats::format_name(o.recipe);
    EXPECT_NEAR(a.sqnr_db, b.sqnr_db, 1e-9) << what;
    EXPECT_NEAR(a.rel_fro_error, b.rel_fro_error, 1e-12 * b.rel_fro_error) << what;
    EXPECT_EQ(a.max_abs_error, b.max_abs_error) << what;
    EXPECT_EQ(a.max_rel_error, b.max_rel_error) << what;
    EXPECT_EQ(a.saturated, b.saturated) << what;
    EXPECT_EQ(a.flushed, b.flushed) << what;
    EXPECT_EQ(a.blocks, b.blocks) << what;
    EXPECT_EQ(a.scale_at_min, b.scale_at_min) << what;
    EXPECT_EQ(a.scale_at_max, b.scale_at_max) << what;
  }
}

TEST(StudyChunks, RefusesPositionDependentOptions) {
  const std::vector<float> x(64, 1.0f);
  RecipeError e;
  QuantizeOptions o = opts(Format::kNvfp4);
  o.stochastic_rounding = true;
  EXPECT_NE(measure_recipe_error(source(x, 1, 64), o, &e).message().find("stochastic_rounding"),
            std::string::npos);
  o = opts(Format::kNvfp4);
  o.hadamard = true;
  EXPECT_NE(measure_recipe_error(source(x, 1, 64), o, &e).message().find("hadamard"), std::string::npos);
}

// ---- GEMM ------------------------------------------------------------------------------------

TEST(StudyGemm, ErrorMatchesDirectFp64) {
  const int64_t m = 24, n = 20, k = 96;
  const std::vector<float> a = random_tensor(m * k, 8), b = random_tensor(n * k, 9);
  GemmReference ref;
  ASSERT_TRUE(gemm_reference(a, m, b, n, k, &ref));
  for (Format r : {Format::kMxfp8E4M3, Format::kMxfp4, Format::kNvfp4, Format::kFp8Block128x128}) {
    GemmError e;
    ASSERT_TRUE(measure_gemm(ref, opts(r), &e));
    // Direct: quantize both, dequantize exactly, triple loop in fp64.
    formats::QuantizedMatrix qa, qb;
    ASSERT_TRUE(formats::quantize(a.data(), m, k, k, opts(r), formats::Direction::kRowwise, &qa));
    ASSERT_TRUE(formats::quantize(b.data(), n, k, k, opts(r), formats::Direction::kRowwise, &qb));
    std::vector<double> da, db;
    ASSERT_TRUE(formats::dequantize_exact(qa, &da));
    ASSERT_TRUE(formats::dequantize_exact(qb, &db));
    double num = 0, den = 0, max_abs = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double q = 0, exact = 0;
        for (int64_t t = 0; t < k; ++t) {
          q += da[i * k + t] * db[j * k + t];
          exact += static_cast<double>(a[i * k + t]) * b[j * k + t];
        }
        num += (q - exact) * (q - exact);
        den += exact * exact;
        max_abs = std::max(max_abs, std::fabs(q - exact));
      }
    const double rel = std::sqrt(num / den);
    EXPECT_NEAR(e.rel_fro_error, rel, 1e-6 * rel) << formats::format_name(r);
    EXPECT_NEAR(e.max_abs_error, max_abs, 1e-6 * max_abs) << formats::format_name(r);
    EXPECT_NEAR(e.sqnr_db, -20 * std::log10(rel), 1e-6);
    EXPECT_GT(e.rel_fro_error, 0);
  }
}

// ---- configs, the suite, inputs, the driver --------------------------------------------------

TEST(StudyConfigs, LabelsAndRounding) {
  const auto both = study_configs({Format::kNvfp4, Format::kMxfp8E4M3}, formats::ScaleRounding::kBoth);
  ASSERT_EQ(both.size(), 3u);  // all_formats() order: mxfp8, mxfp8/floor, nvfp4
  EXPECT_EQ(both[0].label, "mxfp8");
  EXPECT_EQ(both[1].label, "mxfp8/floor");
  EXPECT_EQ(both[1].options.rounding, formats::ScaleRounding::kFloor);
  EXPECT_EQ(both[2].label, "nvfp4");
  const auto floor = study_configs({Format::kMxfp4, Format::kFp8Block1x128}, formats::ScaleRounding::kFloor);
  ASSERT_EQ(floor.size(), 2u);
  EXPECT_EQ(floor[0].label, "mxfp4/floor");
  EXPECT_EQ(floor[1].label, "fp8_block128");
  EXPECT_EQ(study_configs(formats::all_formats(), formats::ScaleRounding::kBoth).size(), 13u);
}

TEST(StudySuite, ShapesAndDeterminism) {
  std::vector<StudyInput> suite;
  ASSERT_TRUE(synthetic_suite(256, 1, &suite));
  ASSERT_EQ(suite.size(), 5u);
  EXPECT_EQ(suite[0].name, "attn.qkv.weight");
  EXPECT_EQ(suite[0].shape, (std::vector<int64_t>{768, 256}));
  EXPECT_EQ(suite[1].shape, (std::vector<int64_t>{768, 256}));  // ffn: 2.75 x 256 -> 768
  EXPECT_EQ(suite[2].shape, (std::vector<int64_t>{128, 256}));  // tokens: 256 / 2
  EXPECT_EQ(suite[4].shape, (std::vector<int64_t>{128, 768}));
  std::vector<StudyInput> again, other;
  ASSERT_TRUE(synthetic_suite(256, 1, &again));
  ASSERT_TRUE(synthetic_suite(256, 2, &other));
  for (size_t i = 0; i < suite.size(); ++i) {
    TensorSource s1, s2, s3;
    ASSERT_TRUE(suite[i].open(&s1));
    ASSERT_TRUE(again[i].open(&s2));
    ASSERT_TRUE(other[i].open(&s3));
    std::vector<float> v1(s1.rows * s1.cols), v2(v1.size()), v3(v1.size());
    ASSERT_TRUE(s1.read(0, s1.rows, 0, s1.cols, v1.data()));
    ASSERT_TRUE(s2.read(0, s2.rows, 0, s2.cols, v2.data()));
    ASSERT_TRUE(s3.read(0, s3.rows, 0, s3.cols, v3.data()));
    EXPECT_EQ(v1, v2) << suite[i].name;
    EXPECT_NE(v1, v3) << suite[i].name;
  }
  EXPECT_FALSE(synthetic_suite(100, 1, &suite));  // not a multiple of 16
}

TEST(StudySuite, GradientsHitTheUe4m3Floor) {
  // The wide per-row range of mlp.down.grad is what NVFP4's tensor scale cannot cover.
  std::vector<StudyInput> suite;
  ASSERT_TRUE(synthetic_suite(128, 1, &suite));
  TensorSource grad;
  ASSERT_TRUE(suite[4].open(&grad));
  RecipeError nv, mx;
  ASSERT_TRUE(measure_recipe_error(grad, opts(Format::kNvfp4), &nv));
  ASSERT_TRUE(measure_recipe_error(grad, opts(Format::kMxfp8E4M3), &mx));
  EXPECT_GT(nv.scale_at_min, 0.01);
  EXPECT_GT(nv.flushed, 0.01);
  EXPECT_EQ(mx.scale_at_min, 0);
  EXPECT_EQ(mx.flushed, 0);
}

class StudyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("study_files_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(StudyFiles, SafetensorsTensorsAreReadOrSkipped) {
  std::vector<uint16_t> bf16(2 * 3 * 64);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = formats::float_to_bf16_bits_rn(0.01f * (i % 50) - 0.2f);
  std::vector<float> f32(40, 1.5f);
  std::vector<int32_t> ids(6, 1);
  float scalar = 2.0f;
  using formats::DType;
  ASSERT_TRUE(io::write_safetensors(
      path("m.safetensors"),
      {{"w", io::TensorView{DType::kBf16, {2, 3, 64}, reinterpret_cast<uint8_t*>(bf16.data()), bf16.size() * 2}},
       {"v", io::TensorView{DType::kF32, {40}, reinterpret_cast<uint8_t*>(f32.data()), 160}},
       {"ids", io::TensorView{DType::kI32, {2, 3}, reinterpret_cast<uint8_t*>(ids.data()), 24}},
       {"s", io::TensorView{DType::kF32, {}, reinterpret_cast<uint8_t*>(&scalar), 4}}}));
  std::vector<StudyInput> in;
  std::vector<Skipped> skipped;
  ASSERT_TRUE(open_study_files({path("m.safetensors")}, "--in", &in, &skipped));
  ASSERT_EQ(in.size(), 2u);
  ASSERT_EQ(skipped.size(), 2u);
  for (const StudyInput& i : in) {
    TensorSource s;
    ASSERT_TRUE(i.open(&s));
    if (i.name == "w") {
      EXPECT_EQ(s.rows, 6);  // [2 * 3, 64]
      EXPECT_EQ(s.cols, 64);
      std::vector<float> got(5 * 32);
      ASSERT_TRUE(s.read(1, 5, 32, 32, got.data()));
      for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 32; ++c)
          EXPECT_EQ(got[r * 32 + c], formats::bf16_bits_to_float(bf16[(1 + r) * 64 + 32 + c]));
      EXPECT_FALSE(s.read(2, 5, 0, 64, got.data()));  // past the last row
    } else {
      EXPECT_EQ(i.name, "v");
      EXPECT_EQ(s.rows, 1);  // rank 1: [1, n]
      EXPECT_EQ(s.cols, 40);
    }
  }
  // Two files: names are prefixed with the stem; the same stem twice is an error.
  ASSERT_TRUE(std::filesystem::copy_file(path("m.safetensors"), path("n.safetensors")));
  ASSERT_TRUE(open_study_files({path("m.safetensors"), path("n.safetensors")}, "--in", &in, &skipped));
  ASSERT_EQ(in.size(), 4u);
  EXPECT_EQ(in[2].name.substr(0, 2), "n/");
  std::filesystem::create_directories(dir_ / "sub");
  std::filesystem::copy_file(path("m.safetensors"), path("sub/m.safetensors"));
  const Status clash = open_study_files({path("m.safetensors"), path("sub/m.safetensors")}, "--in", &in, &skipped);
  EXPECT_NE(clash.message().find("both give a tensor named"), std::string::npos) << clash.message();
  EXPECT_NE(open_study_files({path("x.txt")}, "--in", &in, &skipped).message().find("--in"), std::string::npos);
}

TEST(StudyRun, ChecksGemmPairsFirst) {
  std::vector<StudyInput> suite;
  ASSERT_TRUE(synthetic_suite(64, 1, &suite));
  StudyOptions o;
  o.configs = study_configs({Format::kMxfp8E4M3}, formats::ScaleRounding::kCeil);
  StudyResult r;
  o.gemms = {{"mlp.input", "nope"}};
  EXPECT_NE(run_study(suite, o, &r).message().find("no tensor named 'nope'"), std::string::npos);
  o.gemms = {{"mlp.input", "mlp.down.grad"}};  // K = 64 vs 256
  const std::string msg = run_study(suite, o, &r).message();
  EXPECT_NE(msg.find("'mlp.input' has 64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'mlp.down.grad' has 256"), std::string::npos) << msg;
  EXPECT_TRUE(r.tensors.empty());  // nothing was studied before the check
}

TEST(StudyRun, ResultsAreIndependentOfThreads) {
  std::vector<StudyInput> suite;
  ASSERT_TRUE(synthetic_suite(64, 3, &suite));
  StudyOptions o;
  o.configs = study_configs(formats::all_formats(), formats::ScaleRounding::kBoth);
  o.gemms = synthetic_gemms();
  StudyResult one, many;
  o.threads = 1;
  ASSERT_TRUE(run_study(suite, o, &one));
  o.threads = 5;
  ASSERT_TRUE(run_study(suite, o, &many));
  ASSERT_EQ(one.tensors.size(), 5u);
  ASSERT_EQ(one.gemms.size(), 1u);
  for (size_t t = 0; t < 5; ++t)
    for (size_t c = 0; c < o.configs.size(); ++c)
      EXPECT_EQ(one.tensors[t].errors[c].sqnr_db, many.tensors[t].errors[c].sqnr_db);
  for (size_t c = 0; c < o.configs.size(); ++c)
    EXPECT_EQ(one.gemms[0].errors[c].rel_fro_error, many.gemms[0].errors[c].rel_fro_error);
}

}  // namespace
}  // namespace blockscale::study
