// Tests of quant/nvfp4_quantize.cu (through quant/quantize.h): the GPU's bytes against the CPU
// emulator's, byte for byte. The reference is formats::quantize() (recipe nvfp4 with the same
// options; the columnwise copy with `hadamard` when the RHT is on; the given tensor amax as
// `tensor_amax`) + formats::pack_gemm_scales() (2D: the tile scale repeated on each of its 16
// rows), on the input decoded exactly to fp32.
//   - the argument checks of the NVFP4 options and the workspace size (no GPU needed);
//   - GPU end to end: every output poisoned (0xAB) with poisoned guard bytes around it, the
//     workspace filled with garbage; 1D / 2D, SR on / off, RHT on / off on the columnwise copy,
//     measured / given tensor amax (the true amax, a smaller one that saturates block scales,
//     zero), rowwise / columnwise / both, bf16 / fp16 / fp32; per 16x16 region a random kind of
//     data (normal at magnitudes across the type's range, heavy tails, +-0 blocks, injected NaN /
//     Inf / -0 / subnormals, subnormal-only blocks, E2M1 rounding ties with an exact power-of-two
//     encode factor, the largest finite values (the RHT overflows them), one large element among
//     tiny ones); shapes 1x1 .. 16385x7169, row strides > cols (aligned or not), misaligned
//     pointers; amax, columnwise_amax, both scale_dec values and the non-finite flag.
// The device arithmetic (encoders, Philox words, RHT, scale codes) alone: nvfp4_device_test.cu.
// GPU tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "formats/block_quantize_internal.h"  // block_amax: formats' amax rule
#include "formats/hadamard.h"
#include "formats/nvfp4_scalar.h"
#include "formats/philox.h"
#include "formats/quantize.h"
#include "formats/scale_layout.h"
#include "quant/nvfp4_device.cuh"
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"
#include "tests/quant/nvfp4_test_input.h"  // defines: Nvfp4Pattern, nvfp4_input, input_amax

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
namespace nv = blockscale::quant::detail::nvfp4;
using bf::Format;
using bf::Direction;
using bf::DType;
using bq::TensorAmax;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::DeviceInput;
using blockscale_test::GuardedOutput;
using blockscale_test::HostInput;
using blockscale_test::alloc_poisoned;
using blockscale_test::check_output;
using blockscale_test::expect_error;
using blockscale_test::from_bits;
using blockscale_test::input_amax;
using blockscale_test::nvfp4_input;
using blockscale_test::name;
using blockscale_test::to_bits;
using blockscale_test::upload_input;

constexpr char kReportIndent[] = "  ";  // check_output's report lines, indented under the failure line

// ---- Argument checks and sizes of the NVFP4 options (no GPU needed) ----------------------------

TEST(Nvfp4Api, OptionsChecksAndWorkspace) {
  bq::QuantizeProblem p;
  p.recipe = Format::kNvfp4, p.rows = 64, p.cols = 48, p.ld = 48, p.directions = Direction::kBoth;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  EXPECT_EQ(bq::workspace_size(p), 8192u) << "kMeasure keeps 2 x 1024 partial maxima";
  p.tensor_amax = TensorAmax::kGiven;
  EXPECT_EQ(bq::workspace_size(p), 0u);
  p.hadamard_columnwise = true;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  p.rows = 40;
  expect_error(bq::can_implement(p), "problem.hadamard_columnwise");
  p.rows = 64, p.nvfp4_2d = true;
  expect_error(bq::can_implement(p), "nvfp4_2d");
  p.nvfp4_2d = false, p.directions = Direction::kRowwise;
  expect_error(bq::can_implement(p), "columnwise");
  bq::QuantizeProblem empty = p;
  empty.rows = 0, empty.hadamard_columnwise = false, empty.tensor_amax = TensorAmax::kMeasure;
  EXPECT_EQ(bq::workspace_size(empty), 0u) << "an empty problem needs no workspace";
}

// ==== Inputs ========================================================================================

using Pattern = blockscale_test::Nvfp4Pattern;

// formats' amax of the input, and of its RHT along the rows (rows % 16 == 0).
float rht_amax(const HostInput& in, int64_t rows, int64_t cols, int64_t ld) {
  float m = 0.0f;
  float v[16];
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; r += 16) {
      for (int i = 0; i < 16; ++i) v[i] = in.values[static_cast<size_t>((r + i) * ld + c)];
      bf::hadamard16_inplace(v);
      m = std::max(m, bf::detail::block_amax(v, 16, 0, 1, 0, 16).amax);
    }
  return m;
}

// ==== One configuration ===========================================================================

struct Config {
  Direction dirs = Direction::kBoth;
  bool two_d = false, sr = false, rht = false;
  TensorAmax mode = TensorAmax::kMeasure;
  float given_scale = 1.0f;  // kGiven: given amax = scale x the true one (0: zero)
  uint64_t seed = 0x1234, offset = 77;
};

std::string describe(const Config& c) {
  char s[160];
  std::snprintf(s, sizeof s, "%s%s%s%s %s", name(c.dirs, true), c.two_d ? " 2d" : "", c.sr ? " sr" : "", c.rht ? " rht" : "",
                c.mode == TensorAmax::kMeasure ? "measure" : ("given x" + std::to_string(c.given_scale)).c_str());
  return s;
}

// The given amax: scale x truth, finite (an Inf truth gives a large finite stand-in).
float given_amax(float truth, const Config& c, DType t) {
  const float base = std::isfinite(truth) ? truth : (t == DType::kF16 ? 60000.0f : 1e30f);
  return c.given_scale * base;
}

struct Reference {
  bf::QuantizedMatrix row, col;
  std::vector<uint8_t> row_scales, col_scales;  // swizzled, one scale per stored row
};

Reference make_reference(const HostInput& in, int64_t rows, int64_t cols, int64_t ld, const Config& c, float given_row,
                         float given_col) {
  Reference ref;
  bf::QuantizeOptions o;
  o.recipe = Format::kNvfp4;
  o.nvfp4_2d = c.two_d;
  o.stochastic_rounding = c.sr;
  o.sr_seed = c.seed;
  o.sr_offset = c.offset;
  o.has_tensor_amax = c.mode == TensorAmax::kGiven;
  if (c.dirs != Direction::kColumnwise) {
    o.tensor_amax = given_row;
    const auto s = bf::quantize(in.values.data(), rows, cols, ld, o, bf::Direction::kRowwise, &ref.row);
    EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_OK(bf::pack_gemm_scales(ref.row, &ref.row_scales));
  }
  if (c.dirs != Direction::kRowwise) {
    o.tensor_amax = given_col;
    o.hadamard = c.rht;
    const auto s = bf::quantize(in.values.data(), rows, cols, ld, o, bf::Direction::kColumnwise, &ref.col);
    EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_OK(bf::pack_gemm_scales(ref.col, &ref.col_scales));
  }
  return ref;
}

std::vector<uint8_t> float_bytes(float f) {
  std::vector<uint8_t> v(4);
  std::memcpy(v.data(), &f, 4);
  return v;
}

struct Layout {
  int64_t rows, cols, ld;
  DType type;
  Pattern pattern;
  bool misaligned;  // input pointer off 16 bytes by one element, outputs by one byte
};

std::string describe(const Layout& l) {
  char s[160];
  std::snprintf(s, sizeof s, "%lldx%lld ld=%lld %s %s%s", static_cast<long long>(l.rows), static_cast<long long>(l.cols),
                static_cast<long long>(l.ld), bf::dtype_name(l.type), name(l.pattern), l.misaligned ? " misaligned" : "");
  return s;
}
void PrintTo(const Layout& l, std::ostream* os) { *os << describe(l); }

struct Truth {
  float amax = 0.0f, rht_amax = 0.0f;
};

// Runs one configuration and compares every output; returns the number of bad bytes.
int64_t run_and_compare(const Layout& l, const DeviceInput& x, const Config& c, const Reference& ref, const Truth& truth,
                        float given_row, float given_col) {
  bq::QuantizeProblem p;
  p.recipe = Format::kNvfp4;
  p.input_type = l.type;
  p.rows = l.rows, p.cols = l.cols, p.ld = l.ld;
  p.directions = Direction::kBoth;  // sizes of every buffer
  const int64_t off = l.misaligned ? 1 : 0;
  GuardedOutput row_data, row_scales, row_dec, col_data, col_scales, col_dec, amax, col_amax;
  EXPECT_TRUE(alloc_poisoned(&row_data, bq::rowwise_data_bytes(p), off));
  EXPECT_TRUE(alloc_poisoned(&row_scales, bq::rowwise_scale_bytes(p), off));
  EXPECT_TRUE(alloc_poisoned(&col_data, bq::columnwise_data_bytes(p), off));
  EXPECT_TRUE(alloc_poisoned(&col_scales, bq::columnwise_scale_bytes(p), off));
  EXPECT_TRUE(alloc_poisoned(&row_dec, 4, 0));
  EXPECT_TRUE(alloc_poisoned(&col_dec, 4, 0));
  EXPECT_TRUE(alloc_poisoned(&amax, 4, 0));
  EXPECT_TRUE(alloc_poisoned(&col_amax, 4, 0));
  DeviceBuffer flag, given, workspace;
  EXPECT_OK(flag.alloc(sizeof(int), "flag"));
  EXPECT_CUDA(cudaMemset(flag.data(), 0, sizeof(int)));
  EXPECT_OK(given.alloc(2 * sizeof(float), "given"));
  const float given_host[2] = {given_row, given_col};
  EXPECT_CUDA(cudaMemcpy(given.data(), given_host, sizeof given_host, cudaMemcpyHostToDevice));

  p.directions = c.dirs;
  p.nvfp4_2d = c.two_d;
  p.stochastic_rounding = c.sr;
  p.sr_seed = c.seed, p.sr_offset = c.offset;
  p.hadamard_columnwise = c.rht;
  p.tensor_amax = c.mode;
  const size_t ws = bq::workspace_size(p);
  EXPECT_OK(workspace.alloc(ws, "workspace"));
  EXPECT_CUDA(cudaMemset(workspace.data(), 0xCD, std::max<size_t>(ws, 1)));  // never zeroed for the kernels

  bq::QuantizeOutputs out;
  out.rowwise_data = row_data.ptr(), out.rowwise_scales = row_scales.ptr();
  out.rowwise_scale_dec = reinterpret_cast<float*>(row_dec.ptr());
  out.columnwise_data = col_data.ptr(), out.columnwise_scales = col_scales.ptr();
  out.columnwise_scale_dec = reinterpret_cast<float*>(col_dec.ptr());
  out.amax = reinterpret_cast<float*>(amax.ptr());
  out.columnwise_amax = c.rht ? reinterpret_cast<float*>(col_amax.ptr()) : nullptr;
  out.nonfinite = flag.as<int>();
  bq::QuantizeInputs in;
  in.x = x.ptr();
  if (c.mode == TensorAmax::kGiven) {
    in.rowwise_tensor_amax = given.as<float>();
    in.columnwise_tensor_amax = given.as<float>() + 1;
  }
  const blockscale::Status s = bq::run(p, in, out, workspace.data(), ws, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_CUDA(cudaDeviceSynchronize());

  const bool row = c.dirs != Direction::kColumnwise, col = c.dirs != Direction::kRowwise;
  std::string report;
  int64_t bad = 0;
  bad += check_output(row_data, row ? &ref.row.data : nullptr, (l.cols + 1) / 2, "rowwise data", &report, kReportIndent);
  bad += check_output(row_scales, row ? &ref.row_scales : nullptr, 16, "rowwise scales", &report, kReportIndent);
  bad += check_output(col_data, col ? &ref.col.data : nullptr, (l.rows + 1) / 2, "columnwise data", &report, kReportIndent);
  bad += check_output(col_scales, col ? &ref.col_scales : nullptr, 16, "columnwise scales", &report, kReportIndent);
  const std::vector<uint8_t> row_dec_want = float_bytes(row ? ref.row.global_scale_dec : 0.0f);
  const std::vector<uint8_t> col_dec_want = float_bytes(col ? ref.col.global_scale_dec : 0.0f);
  bad += check_output(row_dec, row ? &row_dec_want : nullptr, 4, "rowwise_scale_dec", &report, kReportIndent);
  bad += check_output(col_dec, col ? &col_dec_want : nullptr, 4, "columnwise_scale_dec", &report, kReportIndent);
  const std::vector<uint8_t> amax_want = float_bytes(truth.amax), rht_want = float_bytes(truth.rht_amax);
  bad += check_output(amax, &amax_want, 4, "amax", &report, kReportIndent);
  bad += check_output(col_amax, c.rht ? &rht_want : nullptr, 4, "columnwise_amax", &report, kReportIndent);
  int got_flag = -1;
  EXPECT_CUDA(cudaMemcpy(&got_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
  const int want_flag = ((row && ref.row.nonfinite_seen) || (col && ref.col.nonfinite_seen)) ? 1 : 0;
  if (got_flag != want_flag) {
    ++bad;
    report += "  nonfinite flag: got " + std::to_string(got_flag) + " want " + std::to_string(want_flag) + "\n";
  }
  EXPECT_EQ(bad, 0) << describe(l) << " " << describe(c) << ": " << bad << " bad bytes\n" << report;
  return bad;
}

// Runs `configs` on one layout, sharing references between configurations with equal options.
int64_t check_configs(const Layout& l, uint64_t seed, const std::vector<Config>& configs, const char* label) {
  const HostInput in = nvfp4_input(l.rows, l.cols, l.ld, l.type, l.pattern, seed);
  DeviceInput x;
  EXPECT_TRUE(upload_input(in, l.type, l.misaligned, &x));
  Truth truth;
  truth.amax = input_amax(in, l.rows, l.cols, l.ld);
  const bool rht_ok = l.rows % 16 == 0;
  if (rht_ok) truth.rht_amax = rht_amax(in, l.rows, l.cols, l.ld);
  std::map<std::tuple<int, bool, bool, bool, int, float, float>, Reference> refs;
  int64_t bad = 0;
  int runs = 0;
  for (const Config& c : configs) {
    if (c.rht && (!rht_ok || c.two_d || c.dirs == Direction::kRowwise)) continue;
    const bool given = c.mode == TensorAmax::kGiven;
    const float given_row = given ? given_amax(truth.amax, c, l.type) : 0.0f;
    const float given_col = given ? given_amax(c.rht ? truth.rht_amax : truth.amax, c, l.type) : 0.0f;
    const auto key = std::make_tuple(static_cast<int>(c.dirs), c.two_d, c.sr, c.rht, given ? 1 : 0, given_row, given_col);
    auto it = refs.find(key);
    if (it == refs.end()) it = refs.emplace(key, make_reference(in, l.rows, l.cols, l.ld, c, given_row, given_col)).first;
    bad += run_and_compare(l, x, c, it->second, truth, given_row, given_col);
    ++runs;
  }
  std::printf("nvfp4_quantize_test: %-44s %2d runs (%s), bad bytes %lld\n", describe(l).c_str(), runs, label,
              static_cast<long long>(bad));
  return bad;
}

// Every option combination with both copies, both amax modes; single directions for a few.
std::vector<Config> full_matrix() {
  std::vector<Config> v;
  for (bool two_d : {false, true})
    for (bool sr : {false, true})
      for (bool rht : {false, true}) {
        if (two_d && rht) continue;
        Config c;
        c.two_d = two_d, c.sr = sr, c.rht = rht;
        c.mode = TensorAmax::kMeasure;
        v.push_back(c);
        c.mode = TensorAmax::kGiven;
        c.given_scale = 1.0f;
        v.push_back(c);
        c.given_scale = sr ? 0.0f : 0.25f;  // saturating block scales / S_enc = 1
        v.push_back(c);
      }
  for (Direction d : {Direction::kRowwise, Direction::kColumnwise}) {
    Config c;
    c.dirs = d;
    v.push_back(c);  // 1D measure
    c.rht = d == Direction::kColumnwise;
    c.mode = TensorAmax::kGiven;
    v.push_back(c);
    c.rht = false, c.two_d = true, c.sr = true;
    v.push_back(c);
    c.sr = false, c.mode = TensorAmax::kMeasure;  // a training weight's single copy (2D, measured)
    v.push_back(c);
  }
  return v;
}

// A smaller matrix for the large shapes: the production paths.
std::vector<Config> light_matrix() {
  std::vector<Config> v;
  Config c;
  c.rht = true, c.mode = TensorAmax::kGiven;
  v.push_back(c);  // the speed target's configuration
  c.mode = TensorAmax::kMeasure;
  v.push_back(c);
  Config d;
  d.two_d = true, d.mode = TensorAmax::kGiven, d.given_scale = 0.5f;
  v.push_back(d);
  Config e;
  e.sr = true, e.dirs = Direction::kRowwise;
  v.push_back(e);
  return v;
}

class Nvfp4QuantizeLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(Nvfp4QuantizeLayouts, MatchesTheEmulatorByteForByte) {
  SKIP_WITHOUT_GPU();
  const Layout l = GetParam();
  const bool big = l.rows * l.cols > 300000;
  check_configs(l, 1000003u * static_cast<uint64_t>(l.rows) + 7919u * l.cols + 31u * l.ld + 3u * static_cast<uint64_t>(l.type) +
                       static_cast<uint64_t>(l.pattern) + (l.misaligned ? 5u : 0u),
                big ? light_matrix() : full_matrix(), big ? "light matrix" : "full matrix");
}

std::vector<Layout> layouts() {
  std::vector<Layout> v;
  const DType types[] = {DType::kBf16, DType::kF16, DType::kF32};
  const int64_t shapes[][2] = {{1, 1}, {1, 17}, {3, 33}, {16, 16}, {31, 32}, {32, 48}, {33, 65}, {48, 100}, {127, 129}, {144, 200}, {256, 512}};
  for (const auto& s : shapes)
    for (DType t : types) v.push_back({s[0], s[1], s[1], t, Pattern::kMixed, false});
  for (DType t : types) {
    v.push_back({64, 96, 96, t, Pattern::kTies, false});
    v.push_back({160, 130, 130, t, Pattern::kFinite, false});
    v.push_back({128, 256, 256, t, Pattern::kNarrow, false});
    v.push_back({112, 129, 136, t, Pattern::kMixed, false});   // ld > cols, 16-byte rows
    v.push_back({48, 65, 67, t, Pattern::kMixed, false});      // ld breaks 16-byte loads
    v.push_back({96, 129, 131, t, Pattern::kMixed, true});     // misaligned pointers
    v.push_back({256, 256, 256, t, Pattern::kMixed, true});
    v.push_back({1008, 2048, 2048, t, Pattern::kMixed, false});  // light matrix
  }
  v.push_back({1000, 4096, 4104, DType::kBf16, Pattern::kMixed, false});
  return v;
}

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  const Layout& l = info.param;
  return std::to_string(l.rows) + "x" + std::to_string(l.cols) + "_ld" + std::to_string(l.ld) + "_" + bf::dtype_name(l.type) + "_" +
         name(l.pattern) + (l.misaligned ? "_misaligned" : "");
}

INSTANTIATE_TEST_SUITE_P(Shapes, Nvfp4QuantizeLayouts, ::testing::ValuesIn(layouts()), layout_name);

TEST(Nvfp4QuantizeLarge, Bf16_16385x7169) {
  SKIP_WITHOUT_GPU();
  Config c;  // 1D both, given amax (the true one)
  c.mode = TensorAmax::kGiven;
  check_configs({16385, 7169, 7169, DType::kBf16, Pattern::kMixed, false}, 42, {c}, "both given");
}

TEST(Nvfp4QuantizeLarge, ManyTilesPerCtaEveryInputType) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kBf16, DType::kF16, DType::kF32}) {
    Config a;
    a.rht = true;  // measure
    Config b;
    b.two_d = true, b.sr = true, b.mode = TensorAmax::kGiven;
    check_configs({4096, 4096, 4096, t, Pattern::kMixed, false}, 4242 + static_cast<uint64_t>(t), {a, b}, "rht measure, 2d sr given");
  }
}

// ==== Flags and special tensors ====================================================================

TEST(Nvfp4QuantizeSpecial, AllZeroTensorAndEmptyProblem) {
  SKIP_WITHOUT_GPU();
  // All zeros: S_enc = 1, every scale and code 0 (+0) or 8 (-0); amax 0.
  for (DType t : {DType::kBf16, DType::kF32}) {
    const Layout l{48, 80, 80, t, Pattern::kMixed, false};
    HostInput in;
    in.bytes.assign(static_cast<size_t>(l.rows * l.ld * static_cast<int64_t>(bf::dtype_size(t))), 0);
    in.values.assign(static_cast<size_t>(l.rows * l.ld), 0.0f);
    for (int64_t i = 0; i < l.rows * l.ld; i += 7) {  // some -0
      const uint32_t s = blockscale_test::type_bits(t).sign;
      std::memcpy(&in.bytes[static_cast<size_t>(i * static_cast<int64_t>(bf::dtype_size(t)))], &s, bf::dtype_size(t));
      in.values[static_cast<size_t>(i)] = -0.0f;
    }
    DeviceInput x;
    ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
    for (TensorAmax mode : {TensorAmax::kMeasure, TensorAmax::kGiven}) {
      Config c;
      c.rht = true, c.mode = mode;
      const Reference ref = make_reference(in, l.rows, l.cols, l.ld, c, 0.0f, 0.0f);
      EXPECT_EQ(ref.row.global_scale_dec, 1.0f);
      EXPECT_EQ(run_and_compare(l, x, c, ref, Truth{}, 0.0f, 0.0f), 0);
    }
  }
  // Empty: writes amax 0 and nothing else.
  GuardedOutput amax;
  ASSERT_TRUE(alloc_poisoned(&amax, 4, 0));
  bq::QuantizeProblem p;
  p.recipe = Format::kNvfp4, p.rows = 0, p.cols = 5, p.ld = 5, p.directions = Direction::kBoth;
  bq::QuantizeOutputs out;
  out.amax = reinterpret_cast<float*>(amax.ptr());
  ASSERT_TRUE(bq::run(p, bq::QuantizeInputs{}, out, nullptr, 0, nullptr).is_ok());
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::string report;
  const std::vector<uint8_t> zero(4, 0);
  EXPECT_EQ(check_output(amax, &zero, 4, "amax", &report, kReportIndent), 0) << report;
}

TEST(Nvfp4QuantizeSpecial, NonfiniteFlagIsOnlyEverSetToOne) {
  SKIP_WITHOUT_GPU();
  const Layout l{64, 64, 64, DType::kBf16, Pattern::kFinite, false};
  for (bool with_nan : {false, true}) {
    HostInput in = nvfp4_input(l.rows, l.cols, l.ld, l.type, Pattern::kNarrow, 5);
    if (with_nan) in.bytes[2 * (10 * 64 + 7) + 1] = 0x7F, in.bytes[2 * (10 * 64 + 7)] = 0xC1;
    DeviceInput x;
    ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
    bq::QuantizeProblem p;
    p.recipe = Format::kNvfp4, p.rows = l.rows, p.cols = l.cols, p.ld = l.ld;
    DeviceBuffer data, scales, dec, flag, ws;
    ASSERT_OK(data.alloc(static_cast<size_t>(bq::rowwise_data_bytes(p)), "data"));
    ASSERT_OK(scales.alloc(static_cast<size_t>(bq::rowwise_scale_bytes(p)), "scales"));
    ASSERT_OK(dec.alloc(4, "dec"));
    ASSERT_OK(flag.alloc(sizeof(int), "flag"));
    ASSERT_OK(ws.alloc(bq::workspace_size(p), "ws"));
    const int start = 7;
    ASSERT_CUDA(cudaMemcpy(flag.data(), &start, sizeof start, cudaMemcpyHostToDevice));
    bq::QuantizeOutputs out;
    out.rowwise_data = data.data(), out.rowwise_scales = scales.data(), out.rowwise_scale_dec = dec.as<float>();
    out.nonfinite = flag.as<int>();
    bq::QuantizeInputs xin;
    xin.x = x.ptr();
    const auto s = bq::run(p, xin, out, ws.data(), ws.size(), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    int got = 0;
    ASSERT_CUDA(cudaMemcpy(&got, flag.data(), sizeof got, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, with_nan ? 1 : start) << (with_nan ? "NaN input" : "finite input");
  }
}

}  // namespace