// Tests of the grouped (MoE) mode, quant/nvfp4_grouped_quantize.cu (and the grouped RHT amax walk of
// quant/nvfp4_amax.cu) through quant/quantize.h's grouped run(): the GPU's bytes against the CPU
// emulator's, byte for byte. The reference is formats::quantize_grouped_columnwise() (the
// columnwise copy: each expert's tokens padded with zero rows to a multiple of 16, quantized as
// one padded matrix with the same options, so the RHT transforms the zero-padded blocks, the
// measured tensor amax of the RHT copy is that of the transformed padded blocks and the SR
// counters index the padded cols x padded_total copy; and the padded ends) and the dense
// formats::quantize() (the rowwise copy), followed by formats::pack_swizzled_scales(). The GPU's
// columnwise copy is cols x capacity (grouped_capacity) with row stride capacity / 2 bytes: its
// rows hold the reference's cols x padded_total codes, then zeros; its scales are those of the
// cols x capacity/16 scale matrix (zeros past the padded total), swizzled.
//   - every output poisoned (0xAB) before each run, with poisoned guard bytes around it (an
//     unwritten byte, the zeros in [padded_total, capacity) included, a write outside a buffer or
//     to an output not requested fails); the workspace filled with garbage;
//   - rowwise / columnwise / both, bf16 / fp16 / fp32, SR on / off, RHT on / off, measured and
//     given tensor amax: the true one, a smaller one that saturates block scales, zero;
//   - expert layouts: one expert, all tokens in one of many, empty experts (first, middle, last,
//     runs of them), experts of 1 token, uneven random counts, counts that are multiples of 16
//     (no padding), up to 64 experts (and 4096), one 8-expert 4096 x 2048 tensor;
//   - data: per 16x16 region a random kind (normal at magnitudes across the type's range, heavy
//     tails, +-0 blocks, injected NaN / Inf / -0 / subnormals, subnormal-only blocks, E2M1 ties,
//     the largest finite values, whose RHT overflows), all-zero tensors; row strides > cols
//     (16-byte rows or not) and misaligned pointers (scalar loads, byte stores);
//   - outputs amax, columnwise_amax (the padded RHT amax), both scale_dec values, padded ends and
//     the non-finite flag; an empty matrix (the padded ends alone).
// GPU tests skip without a GPU; the argument checks need none. A failure prints the case, the
// expert token counts and, per buffer, the first mismatching bytes (position, got, want).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
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
#include "formats/quantize.h"
#include "formats/scale_layout.h"
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"
#include "tests/quant/nvfp4_test_input.h"  // defines: Nvfp4Pattern, nvfp4_input, input_amax
#include "tests/quant/grouped_test_util.h"  // defines: Split, make_counts

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
using bf::Format;
using bf::Direction;
using bf::DType;
using bq::TensorAmax;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::DeviceInput;
using blockscale_test::GuardedOutput;
using blockscale_test::HostInput;
using blockscale_test::Split;
using blockscale_test::alloc_poisoned;
using blockscale_test::check_output;
using blockscale_test::expect_error;
using blockscale_test::from_bits;
using blockscale_test::input_amax;
using blockscale_test::nvfp4_input;
using blockscale_test::name;
using blockscale_test::to_bits;
using blockscale_test::upload_input;

constexpr char kReportIndent[] = "  ";

// ---- Inputs ----------------------------------------------------------------------------------

using Pattern = blockscale_test::Nvfp4Pattern;

// ---- Reference -------------------------------------------------------------------------------

// formats' amax of the input, and of the RHT of each expert's tokens zero-padded to 16-row blocks
// (what the grouped RHT columnwise copy measures).
float padded_rht_amax(const HostInput& in, int64_t cols, int64_t ld, const std::vector<int64_t>& ends) {
  float m = 0.0f;
  float v[16];
  int64_t start = 0;
  for (int64_t end : ends) {
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = start; r < end; r += 16) {
        for (int i = 0; i < 16; ++i) v[i] = r + i < end ? in.values[static_cast<size_t>((r + i) * ld + c)] : 0.0f;
        bf::hadamard16_inplace(v);
        m = std::max(m, bf::detail::block_amax(v, 16, 0, 1, 0, 16).amax);
      }
    start = end;
  }
  return m;
}

struct Config {
  Direction dirs = Direction::kBoth;
  bool sr = false, rht = false;
  TensorAmax mode = TensorAmax::kMeasure;
  float given_scale = 1.0f;  // kGiven: given amax = scale x the true one (0: zero)
  uint64_t seed = 0x1234, offset = 77;
};

std::string describe(const Config& c) {
  char s[160];
  std::snprintf(s, sizeof s, "%s%s%s %s", name(c.dirs, true), c.sr ? " sr" : "", c.rht ? " rht" : "",
                c.mode == TensorAmax::kMeasure ? "measure" : ("given x" + std::to_string(c.given_scale)).c_str());
  return s;
}

// The given amax: scale x truth, finite (an Inf truth gives a large finite stand-in).
float given_amax(float truth, const Config& c, DType t) {
  const float base = std::isfinite(truth) ? truth : (t == DType::kF16 ? 60000.0f : 1e30f);
  return c.given_scale * base;
}

struct GroupedReference {
  bf::QuantizedMatrix row;          // dense rowwise (when requested)
  std::vector<uint8_t> row_scales;  // swizzled
  bf::QuantizedMatrix col;          // formats' padded columnwise copy: cols x padded_total
  std::vector<uint8_t> col_data;    // cols x capacity / 2 bytes: the GPU's layout
  std::vector<uint8_t> col_scales;  // swizzled cols x capacity / 16
  std::vector<int32_t> padded_ends;
};

GroupedReference make_reference(const HostInput& in, int64_t rows, int64_t cols, int64_t ld,
                                const std::vector<int64_t>& ends, int64_t capacity, const Config& c, float given_row,
                                float given_col) {
  GroupedReference ref;
  bf::QuantizeOptions o;
  o.recipe = Format::kNvfp4;
  o.stochastic_rounding = c.sr;
  o.sr_seed = c.seed;
  o.sr_offset = c.offset;
  o.has_tensor_amax = c.mode == TensorAmax::kGiven;
  if (c.dirs != Direction::kColumnwise) {
    o.tensor_amax = given_row;
    auto s = bf::quantize(in.values.data(), rows, cols, ld, o, bf::Direction::kRowwise, &ref.row);
    EXPECT_TRUE(s.is_ok()) << s.message();
    s = bf::pack_swizzled_scales(ref.row.scales.data(), ref.row.rows, ref.row.scale_cols(), &ref.row_scales);
    EXPECT_TRUE(s.is_ok()) << s.message();
  }
  // The padded ends come from the emulator in every direction (rowwise-only runs write them too).
  o.tensor_amax = given_col;
  o.hadamard = c.rht;
  std::vector<int64_t> padded;
  auto s = bf::quantize_grouped_columnwise(in.values.data(), rows, cols, ld, ends, o, &ref.col, &padded);
  EXPECT_TRUE(s.is_ok()) << s.message();
  for (int64_t e : padded) ref.padded_ends.push_back(static_cast<int32_t>(e));
  const int64_t padded_total = padded.back();
  EXPECT_EQ(ref.col.rows, cols);
  EXPECT_EQ(ref.col.cols, padded_total);
  EXPECT_LE(padded_total, capacity);
  if (c.dirs == Direction::kRowwise) return ref;
  // Widen to the capacity: codes and scales past the padded total are 0.
  const int64_t cap_bytes = capacity / 2, ref_bytes = ref.col.data_row_bytes();
  ref.col_data.assign(static_cast<size_t>(cols * cap_bytes), 0);
  for (int64_t r = 0; r < cols; ++r)
    std::memcpy(&ref.col_data[static_cast<size_t>(r * cap_bytes)], &ref.col.data[static_cast<size_t>(r * ref_bytes)],
                static_cast<size_t>(ref_bytes));
  const int64_t cap_blocks = capacity / 16, ref_blocks = ref.col.scale_cols();
  std::vector<uint8_t> linear(static_cast<size_t>(cols * cap_blocks), 0);
  for (int64_t r = 0; r < cols; ++r)
    for (int64_t b = 0; b < ref_blocks; ++b)
      linear[static_cast<size_t>(r * cap_blocks + b)] = ref.col.scales[static_cast<size_t>(r * ref_blocks + b)];
  s = bf::pack_swizzled_scales(linear.data(), cols, cap_blocks, &ref.col_scales);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return ref;
}

std::vector<uint8_t> float_bytes(float f) {
  std::vector<uint8_t> v(4);
  std::memcpy(v.data(), &f, 4);
  return v;
}

// ---- One case: a layout of the input and its experts -------------------------------------------

struct Case {
  int64_t rows, cols, ld;
  int groups;
  Split split;
  DType type;
  Pattern pattern;
  bool misaligned;  // input off 16-byte alignment by one element, outputs by one byte
};

std::string describe(const Case& c) {
  char s[200];
  std::snprintf(s, sizeof s, "%lldx%lld ld=%lld %d experts %s %s %s%s", static_cast<long long>(c.rows),
                static_cast<long long>(c.cols), static_cast<long long>(c.ld), c.groups, name(c.split), bf::dtype_name(c.type),
                name(c.pattern), c.misaligned ? " misaligned" : "");
  return s;
}
void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

struct Prepared {
  HostInput in;
  DeviceInput x;
  DeviceBuffer ends_dev;
  std::vector<int64_t> ends;
  int64_t capacity = 0;
  float amax = 0.0f, rht_amax = 0.0f;
  std::string counts;  // the token counts, for failure messages
};

::testing::AssertionResult prepare(const Case& c, uint64_t seed, Prepared* pr) {
  pr->in = nvfp4_input(c.rows, c.cols, c.ld, c.type, c.pattern, seed);
  const std::vector<int64_t> n = blockscale_test::make_counts(c.rows, c.groups, c.split, seed * 7 + 1, 16);
  std::vector<int32_t> ends32;
  int64_t acc = 0;
  for (size_t g = 0; g < n.size(); ++g) {
    acc += n[g];
    pr->ends.push_back(acc);
    ends32.push_back(static_cast<int32_t>(acc));
    if (g < 24) pr->counts += (g ? "," : "") + std::to_string(n[g]);
  }
  if (n.size() > 24) pr->counts += ",... (" + std::to_string(n.size()) + " experts)";
  if (acc != c.rows) return ::testing::AssertionFailure() << "counts sum to " << acc;
  bq::GroupedQuantizeProblem p;
  p.dense.recipe = Format::kNvfp4;
  p.dense.rows = c.rows, p.dense.cols = c.cols, p.dense.ld = c.ld, p.num_groups = c.groups;
  pr->capacity = bq::grouped_capacity(p);
  pr->amax = input_amax(pr->in, c.rows, c.cols, c.ld);
  pr->rht_amax = padded_rht_amax(pr->in, c.cols, c.ld, pr->ends);
  const ::testing::AssertionResult uploaded = upload_input(pr->in, c.type, c.misaligned, &pr->x);
  if (!uploaded) return uploaded;
  const blockscale::Status s = pr->ends_dev.upload(ends32, "group ends");
  if (!s) return ::testing::AssertionFailure() << s.message();
  return ::testing::AssertionSuccess();
}

// One grouped run on the GPU against the reference; returns the number of bad bytes.
int64_t run_and_compare(const Case& cs, const Prepared& pr, const Config& c, const GroupedReference& ref,
                        float given_row, float given_col) {
  bq::GroupedQuantizeProblem p;
  p.dense.recipe = Format::kNvfp4;
  p.dense.input_type = cs.type;
  p.dense.rows = cs.rows, p.dense.cols = cs.cols, p.dense.ld = cs.ld;
  p.dense.directions = Direction::kBoth;  // sizes of every buffer
  p.num_groups = cs.groups;
  const int64_t off = cs.misaligned ? 1 : 0;
  GuardedOutput row_data, row_scales, row_dec, col_data, col_scales, col_dec, amax, col_amax, padded;
  EXPECT_TRUE(alloc_poisoned(&row_data, bq::rowwise_data_bytes(p.dense), off));
  EXPECT_TRUE(alloc_poisoned(&row_scales, bq::rowwise_scale_bytes(p.dense), off));
  EXPECT_TRUE(alloc_poisoned(&col_data, bq::grouped_columnwise_data_bytes(p), off));
  EXPECT_TRUE(alloc_poisoned(&col_scales, bq::grouped_columnwise_scale_bytes(p), off));
  EXPECT_TRUE(alloc_poisoned(&row_dec, 4, 0));
  EXPECT_TRUE(alloc_poisoned(&col_dec, 4, 0));
  EXPECT_TRUE(alloc_poisoned(&amax, 4, 0));
  EXPECT_TRUE(alloc_poisoned(&col_amax, 4, 0));
  EXPECT_TRUE(alloc_poisoned(&padded, 4 * int64_t{cs.groups}, 0));
  DeviceBuffer flag, given, workspace;
  EXPECT_OK(flag.alloc(sizeof(int), "flag"));
  EXPECT_CUDA(cudaMemset(flag.data(), 0, sizeof(int)));
  EXPECT_OK(given.alloc(2 * sizeof(float), "given"));
  const float given_host[2] = {given_row, given_col};
  EXPECT_CUDA(cudaMemcpy(given.data(), given_host, sizeof given_host, cudaMemcpyHostToDevice));

  p.dense.directions = c.dirs;
  p.dense.stochastic_rounding = c.sr;
  p.dense.sr_seed = c.seed, p.dense.sr_offset = c.offset;
  p.dense.hadamard_columnwise = c.rht;
  p.dense.tensor_amax = c.mode;
  const size_t ws = bq::workspace_size(p);
  EXPECT_OK(workspace.alloc(ws, "workspace"));
  EXPECT_CUDA(cudaMemset(workspace.data(), 0xCD, std::max<size_t>(ws, 1)));  // never zeroed for the kernels

  bq::GroupedQuantizeOutputs out;
  out.dense.rowwise_data = row_data.ptr(), out.dense.rowwise_scales = row_scales.ptr();
  out.dense.rowwise_scale_dec = reinterpret_cast<float*>(row_dec.ptr());
  out.dense.columnwise_data = col_data.ptr(), out.dense.columnwise_scales = col_scales.ptr();
  out.dense.columnwise_scale_dec = reinterpret_cast<float*>(col_dec.ptr());
  out.dense.amax = reinterpret_cast<float*>(amax.ptr());
  out.dense.columnwise_amax = c.rht ? reinterpret_cast<float*>(col_amax.ptr()) : nullptr;
  out.dense.nonfinite = flag.as<int>();
  out.padded_group_ends = reinterpret_cast<int32_t*>(padded.ptr());
  bq::GroupedQuantizeInputs in;
  in.x = pr.x.ptr();
  in.group_ends = pr.ends_dev.as<int32_t>();
  if (c.mode == TensorAmax::kGiven)
  {
    in.rowwise_tensor_amax = given.as<float>();
    in.columnwise_tensor_amax = given.as<float>() + 1;
  }
  const blockscale::Status s = bq::run(p, in, out, workspace.data(), ws, nullptr);
  EXPECT_TRUE(s.is_ok()) << describe(cs) << " " << describe(c) << ": run: " << s.message();
  const blockscale::Status sync = blockscale::runtime::cuda_status(cudaDeviceSynchronize(), "run");
  EXPECT_TRUE(sync.is_ok()) << describe(cs) << " " << describe(c) << ": " << sync.message();

  const bool row = c.dirs != Direction::kColumnwise, col = c.dirs != Direction::kRowwise;
  std::string report;
  int64_t bad = 0;
  const int64_t cap_bytes = pr.capacity / 2;
  bad += check_output(row_data, row ? &ref.row.data : nullptr, (cs.cols + 1) / 2, "rowwise data (row = token)", &report,
                      kReportIndent);
  bad += check_output(row_scales, row ? &ref.row_scales : nullptr, 16, "rowwise scales (swizzled, 16-byte rows)", &report,
                      kReportIndent);
  bad += check_output(col_data, col ? &ref.col_data : nullptr, cap_bytes,
                      "columnwise data (row = input column, col = padded token / 2)", &report, kReportIndent);
  bad += check_output(col_scales, col ? &ref.col_scales : nullptr, 16, "columnwise scales (swizzled, 16-byte rows)",
                      &report, kReportIndent);
  const std::vector<uint8_t> row_dec_want = float_bytes(row ? ref.row.global_scale_dec : 0.0f);
  const std::vector<uint8_t> col_dec_want = float_bytes(col ? ref.col.global_scale_dec : 0.0f);
  bad += check_output(row_dec, row ? &row_dec_want : nullptr, 4, "rowwise_scale_dec", &report, kReportIndent);
  bad += check_output(col_dec, col ? &col_dec_want : nullptr, 4, "columnwise_scale_dec", &report, kReportIndent);
  const std::vector<uint8_t> amax_want = float_bytes(pr.amax), rht_want = float_bytes(pr.rht_amax);
  bad += check_output(amax, &amax_want, 4, "amax", &report, kReportIndent);
  bad += check_output(col_amax, c.rht ? &rht_want : nullptr, 4, "columnwise_amax (padded RHT amax)", &report,
                      kReportIndent);
  std::vector<uint8_t> padded_want(ref.padded_ends.size() * 4);
  std::memcpy(padded_want.data(), ref.padded_ends.data(), padded_want.size());
  bad += check_output(padded, &padded_want, 4, "padded_group_ends (row = expert)", &report, kReportIndent);
  int got_flag = -1;
  EXPECT_CUDA(cudaMemcpy(&got_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
  const int want_flag = ((row && ref.row.nonfinite_seen) || (col && ref.col.nonfinite_seen)) ? 1 : 0;
  if (got_flag != want_flag) {
    ++bad;
    report += "  nonfinite flag: got " + std::to_string(got_flag) + " want " + std::to_string(want_flag) + "\n";
  }
  EXPECT_EQ(bad, 0) << describe(cs) << " " << describe(c) << ": " << bad << " bad bytes (capacity "
                    << pr.capacity << ", padded total " << ref.padded_ends.back() << ", tokens per expert "
                    << pr.counts << ")\n"
                    << report;
  return bad;
}

uint64_t seed_of(const Case& c) {
  return 1000003u * static_cast<uint64_t>(c.rows) + 7919u * static_cast<uint64_t>(c.cols) + 31u * c.ld +
         101u * static_cast<uint64_t>(c.groups) + 13u * static_cast<uint64_t>(c.split) +
         3u * static_cast<uint64_t>(c.type) + 17u * static_cast<uint64_t>(c.pattern) + (c.misaligned ? 5u : 0u);
}

// Runs `configs` on one case, sharing references between configurations with equal options.
int64_t check_configs(const Case& cs, uint64_t seed, const std::vector<Config>& configs, const char* label) {
  Prepared pr;
  EXPECT_TRUE(prepare(cs, seed, &pr));
  std::map<std::tuple<int, bool, bool, int, float, float>, GroupedReference> refs;
  int64_t bad = 0;
  int runs = 0;
  for (const Config& c : configs) {
    if (c.rht && c.dirs == Direction::kRowwise) continue;
    const bool given = c.mode == TensorAmax::kGiven;
    const float given_row = given ? given_amax(pr.amax, c, cs.type) : 0.0f;
    const float given_col = given ? given_amax(c.rht ? pr.rht_amax : pr.amax, c, cs.type) : 0.0f;
    const auto key = std::make_tuple(static_cast<int>(c.dirs), c.sr, c.rht, given ? 1 : 0, given_row, given_col);
    auto it = refs.find(key);
    if (it == refs.end())
      it = refs.emplace(key, make_reference(pr.in, cs.rows, cs.cols, cs.ld, pr.ends, pr.capacity, c, given_row,
                                            given_col)).first;
    bad += run_and_compare(cs, pr, c, it->second, given_row, given_col);
    ++runs;
  }
  std::printf("nvfp4_grouped_quantize_test: %-58s capacity %6lld, %2d runs (%s), bad bytes %lld\n",
              describe(cs).c_str(), static_cast<long long>(pr.capacity), runs, label, static_cast<long long>(bad));
  return bad;
}

// Every direction x SR x RHT, measured and given amax (the true one; a quarter of it, which
// saturates block scales; zero, S_enc = 1).
std::vector<Config> full_matrix() {
  std::vector<Config> v;
  for (Direction d : {Direction::kRowwise, Direction::kColumnwise, Direction::kBoth})
    for (bool sr : {false, true})
      for (bool rht : {false, true}) {
        if (rht && d == Direction::kRowwise) continue;
        Config c;
        c.dirs = d, c.sr = sr, c.rht = rht;
        c.mode = TensorAmax::kMeasure;
        v.push_back(c);
        c.mode = TensorAmax::kGiven;
        c.given_scale = 1.0f;
        v.push_back(c);
        c.given_scale = sr ? 0.0f : 0.25f;
        v.push_back(c);
      }
  return v;
}

// The production configurations, for the large shapes.
std::vector<Config> light_matrix() {
  std::vector<Config> v;
  Config c;
  c.rht = true;  // both, RHT, measured: the wgrad operand
  v.push_back(c);
  c.mode = TensorAmax::kGiven;
  v.push_back(c);
  Config d;
  d.sr = true, d.rht = true, d.dirs = Direction::kColumnwise;
  d.offset = 0xFFFFFFFF00000001ull;
  v.push_back(d);
  Config e;
  e.sr = true;  // both, SR, measured
  v.push_back(e);
  return v;
}

class Nvfp4GroupedQuantize : public ::testing::TestWithParam<Case> {};

TEST_P(Nvfp4GroupedQuantize, MatchesTheEmulatorByteForByte) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const bool big = c.rows * c.cols > 300000;
  check_configs(c, seed_of(c), big ? light_matrix() : full_matrix(), big ? "light matrix" : "full matrix");
}

std::vector<Case> cases() {
  std::vector<Case> v;
  const DType types[] = {DType::kBf16, DType::kF16, DType::kF32};
  // Small shapes, every split, a few expert counts.
  const int64_t shapes[][2] = {{1, 1}, {5, 33}, {16, 16}, {40, 64}, {129, 127}, {300, 256}, {700, 300}};
  const Split splits[] = {Split::kUneven, Split::kOneExpert, Split::kEmptyEdges, Split::kOnes, Split::kAligned};
  int k = 0;
  for (const auto& s : shapes) {
    for (Split sp : splits) {
      const int g = (s[0] < 4 && sp != Split::kOneExpert) ? 1 : (k % 4 == 0 ? 1 : k % 4 == 1 ? 3 : k % 4 == 2 ? 8 : 17);
      v.push_back({s[0], s[1], s[1], sp == Split::kOnes ? std::max(g, 5) : g, sp, types[k % 3], Pattern::kMixed, false});
      ++k;
    }
  }
  for (DType t : types) {
    v.push_back({1000, 512, 512, 64, Split::kUneven, t, Pattern::kMixed, false});       // 64 experts
    v.push_back({1000, 512, 512, 64, Split::kEmptyEdges, t, Pattern::kFinite, false});
    v.push_back({777, 300, 310, 7, Split::kUneven, t, Pattern::kMixed, false});         // ld > cols, breaks vector loads
    v.push_back({112, 129, 136, 3, Split::kUneven, t, Pattern::kMixed, false});         // ld > cols, 16-byte rows
    v.push_back({513, 260, 264, 5, Split::kOnes, t, Pattern::kMixed, true});            // misaligned pointers
    v.push_back({600, 256, 256, 6, Split::kAligned, t, Pattern::kNarrow, false});       // no padding, realistic data
    v.push_back({256, 384, 384, 4, Split::kUneven, t, Pattern::kZero, false});          // all +-0
    v.push_back({2048, 1024, 1024, 8, Split::kAligned, t, Pattern::kMixed, false});     // whole tiles (light matrix)
  }
  v.push_back({2048, 64, 64, 4096, Split::kUneven, DType::kBf16, Pattern::kMixed, false});  // the most experts
  return v;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::to_string(info.index) + "_" + std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_ld" +
         std::to_string(c.ld) + "_g" + std::to_string(c.groups) + "_" + name(c.split) + "_" + bf::dtype_name(c.type) + "_" +
         name(c.pattern) + (c.misaligned ? "_misaligned" : "");
}

INSTANTIATE_TEST_SUITE_P(Shapes, Nvfp4GroupedQuantize, ::testing::ValuesIn(cases()), case_name);

// One large MoE tensor: 8 experts with uneven counts over 4096 x 2048 bf16 (many tiles per CTA,
// expert boundaries inside tiles, zero rows up to the capacity).
TEST(Nvfp4GroupedQuantizeLarge, EightExperts4096x2048) {
  SKIP_WITHOUT_GPU();
  check_configs({4096, 2048, 2048, 8, Split::kUneven, DType::kBf16, Pattern::kMixed, false}, 4096,
                light_matrix(), "light matrix");
}

// An empty matrix still gets its padded ends (rows == 0: all zero; cols == 0: from the counts),
// amax 0, and nothing else is written.
TEST(Nvfp4GroupedQuantizeEmpty, WritesThePaddedEndsAlone) {
  SKIP_WITHOUT_GPU();
  for (const auto& shape : {std::pair<int64_t, int64_t>{0, 64}, {70, 0}}) {
    for (Direction d : {Direction::kRowwise, Direction::kColumnwise, Direction::kBoth}) {
      const int g = 3;
      const std::vector<int32_t> ends = shape.first == 0 ? std::vector<int32_t>{0, 0, 0} : std::vector<int32_t>{33, 33, 70};
      const std::vector<int32_t> want = shape.first == 0 ? std::vector<int32_t>{0, 0, 0} : std::vector<int32_t>{48, 48, 96};
      DeviceBuffer ends_dev, x;
      ASSERT_OK(ends_dev.alloc(4 * g, "ends_dev"));
      ASSERT_CUDA(cudaMemcpy(ends_dev.data(), ends.data(), 4 * g, cudaMemcpyHostToDevice));
      ASSERT_OK(x.alloc(256, "x"));
      GuardedOutput padded, amax, col_amax, data, scales, dec;
      ASSERT_TRUE(alloc_poisoned(&padded, 4 * g, 0));
      ASSERT_TRUE(alloc_poisoned(&amax, 4, 0));
      ASSERT_TRUE(alloc_poisoned(&col_amax, 4, 0));
      ASSERT_TRUE(alloc_poisoned(&data, 64, 0));
      ASSERT_TRUE(alloc_poisoned(&scales, 64, 0));
      ASSERT_TRUE(alloc_poisoned(&dec, 8, 0));
      bq::GroupedQuantizeProblem p;
      p.dense.recipe = Format::kNvfp4;
      p.dense.rows = shape.first, p.dense.cols = shape.second, p.dense.ld = std::max<int64_t>(shape.second, 1);
      p.dense.directions = d;
      p.dense.hadamard_columnwise = d != Direction::kRowwise;
      p.num_groups = g;
      bq::GroupedQuantizeOutputs out;
      out.padded_group_ends = reinterpret_cast<int32_t*>(padded.ptr());
      out.dense.amax = reinterpret_cast<float*>(amax.ptr());
      out.dense.columnwise_amax = p.dense.hadamard_columnwise ? reinterpret_cast<float*>(col_amax.ptr()) : nullptr;
      out.dense.rowwise_data = out.dense.columnwise_data = data.ptr();  // sized 0: never written
      out.dense.rowwise_scales = out.dense.columnwise_scales = scales.ptr();
      out.dense.rowwise_scale_dec = reinterpret_cast<float*>(dec.ptr());
      out.dense.columnwise_scale_dec = reinterpret_cast<float*>(dec.ptr() + 4);
      bq::GroupedQuantizeInputs in;
      in.x = x.data();
      in.group_ends = ends_dev.as<int32_t>();
      EXPECT_EQ(bq::workspace_size(p), 0u);
      const auto s = bq::run(p, in, out, nullptr, 0, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.message();
      ASSERT_CUDA(cudaDeviceSynchronize());
      std::string report;
      std::vector<uint8_t> want_bytes(4 * g), zero(4, 0);
      std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
      const char* what = d == Direction::kRowwise ? "rowwise" : d == Direction::kColumnwise ? "columnwise" : "both";
      EXPECT_EQ(check_output(padded, &want_bytes, 4, "padded_group_ends", &report), 0) << what << "\n" << report;
      EXPECT_EQ(check_output(amax, &zero, 4, "amax", &report), 0) << what << "\n" << report;
      EXPECT_EQ(check_output(col_amax, p.dense.hadamard_columnwise ? &zero : nullptr, 4, "columnwise_amax", &report), 0)
          << what << "\n" << report;
      EXPECT_EQ(check_output(data, nullptr, 16, "data", &report), 0) << what << "\n" << report;
      EXPECT_EQ(check_output(scales, nullptr, 16, "scales", &report), 0) << what << "\n" << report;
      EXPECT_EQ(check_output(dec, nullptr, 4, "scale_dec", &report), 0) << what << "\n" << report;
    }
  }
}

// ---- Argument checks and sizes (no GPU needed) -------------------------------------------------

TEST(Nvfp4GroupedQuantizeApi, CapacitySizesOptionsAndWorkspace) {
  bq::GroupedQuantizeProblem p;
  p.dense.recipe = Format::kNvfp4;
  p.dense.rows = 100, p.dense.cols = 64, p.dense.ld = 64, p.dense.directions = Direction::kBoth;
  p.num_groups = 4;
  EXPECT_TRUE(bq::can_implement(p).is_ok()) << bq::can_implement(p).message();
  EXPECT_EQ(bq::grouped_capacity(p), ((100 + 4 * 15) / 16 * 16 + 31) / 32 * 32) << "each expert padded to 16 rows, in all a multiple of 32";
  EXPECT_EQ(bq::grouped_columnwise_data_bytes(p), 64 * bq::grouped_capacity(p) / 2);
  EXPECT_EQ(bq::grouped_columnwise_scale_bytes(p), bf::swizzled_scale_bytes(64, bq::grouped_capacity(p) / 16));
  EXPECT_EQ(bq::workspace_size(p), 8192u) << "a measured amax keeps 2 x 1024 partial maxima";
  p.dense.tensor_amax = TensorAmax::kGiven;
  EXPECT_EQ(bq::workspace_size(p), 0u);
  p.dense.tensor_amax = TensorAmax::kMeasure;
  // The RHT needs no row count multiple of 16 in grouped mode (each expert is padded), unlike dense.
  p.dense.hadamard_columnwise = true;
  EXPECT_TRUE(bq::can_implement(p).is_ok()) << bq::can_implement(p).message();
  expect_error(bq::can_implement(p.dense), "problem.hadamard_columnwise");
  p.dense.stochastic_rounding = true;
  EXPECT_TRUE(bq::can_implement(p).is_ok()) << bq::can_implement(p).message();
  p.dense.hadamard_columnwise = false, p.dense.nvfp4_2d = true;
  expect_error(bq::can_implement(p), "nvfp4_2d");
  p.dense.nvfp4_2d = false, p.num_groups = 0;
  expect_error(bq::can_implement(p), "problem.num_groups");
  p.num_groups = 4097;
  expect_error(bq::can_implement(p), "problem.num_groups");
  bq::GroupedQuantizeProblem empty = p;
  empty.num_groups = 4, empty.dense.rows = 0;
  EXPECT_EQ(bq::workspace_size(empty), 0u) << "an empty problem needs no workspace";
}

}  // namespace
