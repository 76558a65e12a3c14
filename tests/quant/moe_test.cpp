// Tests of quant/moe.h (routing, un-permute + combine) and of the fused gather of the grouped
// quantize (GroupedQuantizeInputs::row_index), against the CPU reference formats/moe.h:
//   - routing: group_ends, row_source, slot_row int32 for int32 equal to formats::moe_route
//     (random routing, dropped slots, empty experts, one expert taking everything, top_k 1..8,
//     1..4096 experts, 0 tokens);
//   - fused gather + quantize: MXFP8 E4M3, MXFP4 and FP8 1x128, rowwise / columnwise / both, byte
//     for byte against formats::quantize (rowwise) and formats::quantize_grouped_columnwise of the
//     gathered matrix (formats::moe_gather), on inputs with NaN / Inf / subnormal / largest-finite /
//     all-zero blocks, odd widths (200, 4160); outputs poisoned, guard bytes around them; with
//     dropped slots the rowwise rows past the routed total are unspecified and not compared;
//   - out-of-range row_index values read zero rows (run under compute-sanitizer to see no stray read);
//   - combine: bf16 / fp32 out, vector and element paths, equal bit for bit (NaN: both NaN);
//   - argument checks (no GPU needed).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/block_quantize_internal.h"  // block_amax: formats' tensor amax rule
#include "formats/moe.h"
#include "formats/quantize.h"
#include "formats/scale_layout.h"
#include "quant/moe.h"
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"
#include "tests/quant/grouped_test_util.h"

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
using blockscale_test::alloc_poisoned;
using blockscale_test::check_output;
using blockscale_test::expect_error;
using blockscale_test::make_input;
using blockscale_test::upload_input;

// ---- Routings --------------------------------------------------------------------------------

enum class Routing { kRandom, kEmptyExperts, kOneExpert };
const char* name(Routing r) {
  return r == Routing::kRandom ? "random" : r == Routing::kEmptyExperts ? "emptyexperts" : "oneexpert";
}

// expert ids of tokens x top_k slots; `drop`: the share of slots routed nowhere (-1, G or INT_MIN).
std::vector<int32_t> make_ids(int64_t tokens, int top_k, int g, Routing kind, double drop, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * top_k));
  for (auto& e : ids) {
    switch (kind) {
      case Routing::kRandom: e = static_cast<int32_t>(rng() % static_cast<uint64_t>(g)); break;
      case Routing::kEmptyExperts: {
        const int live = std::max(1, g / 3);  // experts 1, 4, 7, ... (or 0 with one expert)
        e = g == 1 ? 0 : static_cast<int32_t>(std::min<int64_t>(g - 1, 1 + 3 * int64_t(rng() % live)));
        break;
      }
      case Routing::kOneExpert: e = g / 2; break;
    }
    if (uni(rng) < drop) {
      const uint64_t z = rng() % 3;
      e = z == 0 ? -1 : z == 1 ? g : std::numeric_limits<int32_t>::min();
    }
  }
  return ids;
}

template <typename T>
std::vector<T> download(const void* ptr, size_t n) {
  std::vector<T> v(n);
  EXPECT_CUDA(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// ---- Argument checks (no GPU) ----------------------------------------------------------------

int32_t* fake(uintptr_t a) { return reinterpret_cast<int32_t*>(a); }

TEST(MoeRoutingChecks, NameTheArgumentAndRule) {
  bq::RoutingProblem p;
  p.tokens = 10, p.top_k = 2, p.num_experts = 8;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  auto bad = p;
  bad.top_k = 0;
  expect_error(bq::can_implement(bad), "problem.top_k");
  bad = p, bad.num_experts = 4097;
  expect_error(bq::can_implement(bad), "problem.num_experts");
  bad = p, bad.tokens = int64_t{1} << 30;
  expect_error(bq::can_implement(bad), "2^31");
  bq::RoutingInputs in{fake(0x10000)};
  bq::RoutingOutputs out{fake(0x20000), fake(0x30000), fake(0x40000)};
  EXPECT_TRUE(bq::can_implement(p, in, out).is_ok());
  auto o2 = out;
  o2.slot_row = nullptr;
  expect_error(bq::can_implement(p, in, o2), "outputs.slot_row: must not be null");
  o2 = out, o2.row_source = fake(0x20002);
  expect_error(bq::can_implement(p, in, o2), "outputs.row_source: must be 4-byte aligned");
  o2 = out, o2.row_source = fake(0x10040);  // overlaps expert_ids (80 bytes)
  expect_error(bq::can_implement(p, in, o2), "overlaps inputs.expert_ids");
  EXPECT_GT(bq::workspace_size(p), 0u);
  expect_error(bq::run(p, in, out, nullptr, 0, nullptr), "workspace: needs");
}

TEST(MoeCombineChecks, NameTheArgumentAndRule) {
  bq::CombineProblem p;
  p.tokens = 4, p.top_k = 2, p.cols = 64, p.y_rows = 8, p.ld_y = 64, p.ld_out = 64;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  auto bad = p;
  bad.ld_y = 63;
  expect_error(bq::can_implement(bad), "problem.ld_y");
  bad = p, bad.top_k = 2000;
  expect_error(bq::can_implement(bad), "problem.top_k");
  bad = p, bad.out_type = static_cast<bq::CombineOutputType>(7);
  expect_error(bq::can_implement(bad), "problem.out_type");
  bq::CombineInputs in{fake(0x100000), reinterpret_cast<const float*>(fake(0x200000)), fake(0x300000)};
  bq::CombineOutputs out{fake(0x400000)};
  EXPECT_TRUE(bq::can_implement(p, in, out).is_ok());
  auto o2 = out;
  o2.out = fake(0x100010);
  expect_error(bq::can_implement(p, in, o2), "overlaps");
  auto i2 = in;
  i2.gates = nullptr;
  expect_error(bq::can_implement(p, i2, out), "inputs.gates: must not be null");
  i2 = in, i2.y = reinterpret_cast<const void*>(0x100001);
  expect_error(bq::can_implement(p, i2, out), "inputs.y: must be 2-byte aligned");
  i2 = in, i2.y = fake(0x200000);  // inputs may overlap each other
  EXPECT_TRUE(bq::can_implement(p, i2, out).is_ok());
}

TEST(MoeGatherChecks, NvFp4RefusedAndRowIndexChecked) {
  bq::GroupedQuantizeProblem p;
  p.dense.recipe = Format::kNvfp4;
  p.dense.rows = 64, p.dense.cols = 64, p.dense.ld = 64, p.dense.directions = Direction::kRowwise;
  p.num_groups = 2, p.input_rows = 32;
  bq::GroupedQuantizeInputs in;
  in.x = fake(0x100000), in.group_ends = fake(0x200000), in.row_index = fake(0x300000);
  bq::GroupedQuantizeOutputs out;
  out.dense.rowwise_data = reinterpret_cast<uint8_t*>(0x400000);
  out.dense.rowwise_scales = fake(0x500000);
  out.dense.rowwise_scale_dec = reinterpret_cast<float*>(0x600000);
  out.padded_group_ends = fake(0x700000);
  expect_error(bq::can_implement(p, in, out), "inputs.row_index: the gathered grouped quantize supports");
  p.dense.recipe = Format::kMxfp8E4M3;
  EXPECT_TRUE(bq::can_implement(p, in, out).is_ok());
  auto i2 = in;
  i2.row_index = fake(0x300002);
  expect_error(bq::can_implement(p, i2, out), "inputs.row_index: must be 4-byte aligned");
  i2 = in, i2.row_index = fake(0x400010);
  expect_error(bq::can_implement(p, i2, out), "overlaps");
  auto p2 = p;
  p2.input_rows = -1;
  expect_error(bq::can_implement(p2), "problem.input_rows");
}

// ---- Routing on the GPU ----------------------------------------------------------------------

struct RouteCase {
  int64_t tokens;
  int top_k, groups;
  Routing kind;
  double drop;
};

void check_route(const RouteCase& c) {
  const std::vector<int32_t> ids = make_ids(c.tokens, c.top_k, c.groups, c.kind, c.drop, 77 * c.tokens + c.groups);
  bf::MoeRouting ref;
  ASSERT_TRUE(bf::moe_route(ids.data(), c.tokens, c.top_k, c.groups, &ref).is_ok());
  bq::RoutingProblem p{c.tokens, c.top_k, c.groups};
  const int64_t slots = c.tokens * c.top_k;
  DeviceBuffer ids_dev, ends, rows, slot_row, ws;
  ASSERT_OK(ids_dev.upload(ids, "ids_dev"));
  ASSERT_OK(ends.alloc(4 * c.groups, "ends"));
  ASSERT_OK(rows.alloc(4 * slots, "rows"));
  ASSERT_OK(slot_row.alloc(4 * slots, "slot_row"));
  ASSERT_OK(ws.alloc(bq::workspace_size(p), "ws"));
  for (int rep = 0; rep < 2; ++rep) {  // twice, different poison: the same bytes (deterministic)
    ASSERT_CUDA(cudaMemset(ends.data(), 0xA5 + rep, 4 * c.groups));
    ASSERT_CUDA(cudaMemset(rows.data(), 0xA5 + rep, 4 * slots));
    ASSERT_CUDA(cudaMemset(slot_row.data(), 0xA5 + rep, 4 * slots));
    const blockscale::Status s = bq::run(p, bq::RoutingInputs{ids_dev.as<int32_t>()},
                                         bq::RoutingOutputs{ends.as<int32_t>(),
                                                            rows.as<int32_t>(),
                                                            slot_row.as<int32_t>()},
                                         ws.data(), ws.size(), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(download<int32_t>(ends.data(), c.groups), ref.group_ends);
    EXPECT_EQ(download<int32_t>(rows.data(), slots), ref.row_source);
    EXPECT_EQ(download<int32_t>(slot_row.data(), slots), ref.slot_row);
  }
  std::printf("moe_test route: %lld tokens top_k %d, %d experts %s drop %.2f: routed %d\n",
              static_cast<long long>(c.tokens), c.top_k, c.groups, name(c.kind), c.drop,
              ref.group_ends.back());
}

TEST(MoeRoute, MatchesTheReference) {
  SKIP_WITHOUT_GPU();
  const RouteCase cases[] = {
      {0, 2, 8, Routing::kRandom, 0.0},          {1, 1, 1, Routing::kRandom, 0.0},
      {37, 3, 5, Routing::kRandom, 0.2},         {1000, 2, 8, Routing::kEmptyExperts, 0.05},
      {1000, 8, 64, Routing::kRandom, 0.1},      {4096, 2, 8, Routing::kOneExpert, 0.0},
      {4096, 1, 32, Routing::kRandom, 0.5},      {3000, 4, 4096, Routing::kRandom, 0.0},
      {5000, 2, 1000, Routing::kEmptyExperts, 0.0}, {32768, 2, 8, Routing::kRandom, 0.01},
      {200, 2, 16, Routing::kRandom, 1.0},  // everything dropped
  };
  for (const RouteCase& c : cases) check_route(c);
}

// ---- Fused gather + grouped quantize ---------------------------------------------------------

std::vector<uint8_t> float_bytes(const std::vector<float>& f) {
  std::vector<uint8_t> b(f.size() * 4);
  if (!b.empty()) std::memcpy(b.data(), f.data(), b.size());
  return b;
}

bool mx_recipe(Format r) { return r != Format::kFp8Block1x128; }
int64_t code_bytes(Format r, int64_t n) { return r == Format::kMxfp4 ? (n + 1) / 2 : n; }
int64_t block_of(Format r) { return mx_recipe(r) ? 32 : 128; }

// The reference bytes of a gathered grouped run: rows (all sorted rows) x cols; the experts end
// at `ends` (last = the routed total R <= rows).
struct GatherReference {
  std::vector<uint8_t> row_data, row_scales, col_data, col_scales;
  std::vector<int32_t> padded_ends;
  float amax = 0.0f;
  bool nonfinite = false;
};

std::vector<uint8_t> packed_scales(Format r, const bf::QuantizedMatrix& q, int64_t rows, int64_t blocks,
                                   const std::vector<uint8_t>* linear8, const std::vector<float>* linear32) {
  if (mx_recipe(r)) {
    std::vector<uint8_t> out;
    EXPECT_TRUE(bf::pack_swizzled_scales(linear8 ? linear8->data() : q.scales.data(), rows, blocks, &out).is_ok());
    return out;
  }
  std::vector<float> out;
  EXPECT_TRUE(bf::pack_vec128_scales(linear32 ? linear32->data() : q.scales_f32.data(), rows, blocks, &out).is_ok());
  return float_bytes(out);
}

GatherReference make_reference(const std::vector<float>& gathered, int64_t rows, int64_t cols,
                               const std::vector<int64_t>& ends, int64_t capacity, Format recipe) {
  GatherReference ref;
  bf::QuantizeOptions o;
  o.recipe = recipe;
  bf::QuantizedMatrix row;
  EXPECT_TRUE(bf::quantize(gathered.data(), rows, cols, cols, o, bf::Direction::kRowwise, &row).is_ok());
  ref.row_data = row.data;
  ref.row_scales = packed_scales(recipe, row, row.scale_rows(), row.scale_cols(), nullptr, nullptr);
  const int64_t routed = ends.back();
  bf::QuantizedMatrix col;
  std::vector<int64_t> padded;
  const blockscale::Status s = bf::quantize_grouped_columnwise(gathered.data(), routed, cols, cols, ends, o, &col, &padded);
  EXPECT_TRUE(s.is_ok()) << s.message();
  const int64_t padded_total = padded.back();
  for (int64_t e : padded) ref.padded_ends.push_back(static_cast<int32_t>(e));
  // Widen to the capacity: codes and scales past the padded total are 0.
  const int64_t cap_bytes = code_bytes(recipe, capacity), ref_bytes = col.data_row_bytes();
  ref.col_data.assign(static_cast<size_t>(cols * cap_bytes), 0);
  for (int64_t c = 0; c < cols; ++c)
    std::memcpy(&ref.col_data[c * cap_bytes], &col.data[c * ref_bytes], static_cast<size_t>(ref_bytes));
  const int64_t cap_blocks = capacity / block_of(recipe), ref_blocks = col.scale_cols();
  EXPECT_EQ(ref_blocks * block_of(recipe), padded_total);
  std::vector<uint8_t> lin8(static_cast<size_t>(cols * cap_blocks), 0);
  std::vector<float> lin32(static_cast<size_t>(cols * cap_blocks), 0.0f);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t b = 0; b < ref_blocks; ++b) {
      if (mx_recipe(recipe)) lin8[c * cap_blocks + b] = col.scales[c * ref_blocks + b];
      else lin32[c * cap_blocks + b] = col.scales_f32[c * ref_blocks + b];
    }
  ref.col_scales = packed_scales(recipe, col, cols, cap_blocks, &lin8, &lin32);
  ref.amax = bf::detail::block_amax(gathered.data(), cols, 0, rows, 0, cols).amax;
  ref.nonfinite = row.nonfinite_seen;
  return ref;
}

// Rows [routed, rows) of the rowwise copy are unspecified with a columnwise copy: take the GPU's
// bytes there (their data rows and their scales; swizzle / VEC128 padding is still compared).
void accept_unrouted_rows(Format recipe, int64_t rows, int64_t cols, int64_t routed, const GuardedOutput& data,
                          const GuardedOutput& scales, GatherReference* ref) {
  const int64_t rb = code_bytes(recipe, cols);
  const auto got_data = download<uint8_t>(data.ptr(), ref->row_data.size());
  const auto got_scales = download<uint8_t>(scales.ptr(), ref->row_scales.size());
  std::copy(got_data.begin() + routed * rb, got_data.end(), ref->row_data.begin() + routed * rb);
  const int64_t blocks = (cols + block_of(recipe) - 1) / block_of(recipe);
  const int64_t stored = mx_recipe(recipe) ? (blocks + 3) / 4 * 4 : blocks;  // MX: the 4-column padding too
  for (int64_t r = routed; r < rows; ++r)
    for (int64_t j = 0; j < stored; ++j) {
      if (mx_recipe(recipe)) {
        const int64_t o = bf::swizzled_scale_offset(r, j, blocks);
        ref->row_scales[o] = got_scales[o];
      } else {
        const int64_t o = 4 * bf::vec128_scale_offset(r, j, rows);
        std::copy(got_scales.begin() + o, got_scales.begin() + o + 4, ref->row_scales.begin() + o);
      }
    }
}

struct GatherCase {
  int64_t tokens;
  int top_k, groups;
  int64_t cols, ld;
  DType type;
  Routing kind;
  double drop;
};

std::string describe(const GatherCase& c) {
  char s[200];
  std::snprintf(s, sizeof s, "%lld tokens x %lld (ld %lld) top_k %d, %d experts %s drop %.2f %s",
                static_cast<long long>(c.tokens), static_cast<long long>(c.cols), static_cast<long long>(c.ld),
                c.top_k, c.groups, name(c.kind), c.drop, bf::dtype_name(c.type));
  return s;
}

// One gathered grouped run against the reference; returns bad bytes. row_index: device, rows entries.
int64_t run_gather(const GatherCase& c, const DeviceInput& x, const int32_t* row_index, const int32_t* ends_dev,
                   int64_t rows, GatherReference ref, int64_t routed, Format recipe, Direction dirs) {
  bq::GroupedQuantizeProblem p;
  p.dense.recipe = recipe;
  p.dense.input_type = c.type;
  p.dense.rows = rows, p.dense.cols = c.cols, p.dense.ld = c.ld;
  p.dense.directions = Direction::kBoth;  // sizes of every buffer
  p.num_groups = c.groups;
  p.input_rows = c.tokens;
  GuardedOutput row_data, row_scales, col_data, col_scales, amax, padded;
  EXPECT_TRUE(alloc_poisoned(&row_data, bq::rowwise_data_bytes(p.dense), 0));
  EXPECT_TRUE(alloc_poisoned(&row_scales, bq::rowwise_scale_bytes(p.dense), 0));
  EXPECT_TRUE(alloc_poisoned(&col_data, bq::grouped_columnwise_data_bytes(p), 0));
  EXPECT_TRUE(alloc_poisoned(&col_scales, bq::grouped_columnwise_scale_bytes(p), 0));
  EXPECT_TRUE(alloc_poisoned(&amax, 4, 0));
  EXPECT_TRUE(alloc_poisoned(&padded, 4 * int64_t{c.groups}, 0));
  DeviceBuffer flag;
  EXPECT_OK(flag.alloc(sizeof(int), "flag"));
  EXPECT_CUDA(cudaMemset(flag.data(), 0, sizeof(int)));
  p.dense.directions = dirs;
  bq::GroupedQuantizeOutputs out;
  out.dense.rowwise_data = row_data.ptr();
  out.dense.rowwise_scales = row_scales.ptr();
  out.dense.columnwise_data = col_data.ptr();
  out.dense.columnwise_scales = col_scales.ptr();
  out.dense.amax = reinterpret_cast<float*>(amax.ptr());
  out.dense.nonfinite = flag.as<int>();
  out.padded_group_ends = reinterpret_cast<int32_t*>(padded.ptr());
  bq::GroupedQuantizeInputs in;
  in.x = x.ptr();
  in.group_ends = ends_dev;
  in.row_index = row_index;
  const blockscale::Status s = bq::run(p, in, out, nullptr, 0, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_CUDA(cudaDeviceSynchronize());

  const bool row = dirs != Direction::kColumnwise, col = dirs != Direction::kRowwise;
  if (row && col && routed < rows) accept_unrouted_rows(recipe, rows, c.cols, routed, row_data, row_scales, &ref);
  std::string report;
  int64_t bad = 0;
  bad += check_output(row_data, row ? &ref.row_data : nullptr, code_bytes(recipe, c.cols), "rowwise data", &report);
  bad += check_output(row_scales, row ? &ref.row_scales : nullptr, 16, "rowwise scales", &report);
  const int64_t cap_bytes = code_bytes(recipe, bq::grouped_capacity(p));
  bad += check_output(col_data, col ? &ref.col_data : nullptr, cap_bytes, "columnwise data", &report);
  bad += check_output(col_scales, col ? &ref.col_scales : nullptr, 16, "columnwise scales", &report);
  std::vector<uint8_t> amax_bytes(4), padded_bytes(ref.padded_ends.size() * 4);
  std::memcpy(amax_bytes.data(), &ref.amax, 4);
  std::memcpy(padded_bytes.data(), ref.padded_ends.data(), padded_bytes.size());
  bad += check_output(amax, &amax_bytes, 4, "amax", &report);
  bad += check_output(padded, &padded_bytes, 4, "padded_group_ends", &report);
  int got_flag = -1;
  EXPECT_CUDA(cudaMemcpy(&got_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
  if (got_flag != (ref.nonfinite ? 1 : 0)) ++bad, report += "nonfinite flag: got " + std::to_string(got_flag) + "\n";
  EXPECT_EQ(bad, 0) << describe(c) << " " << bf::format_name(recipe) << " " << blockscale_test::name(dirs) << ": "
                    << bad << " bad bytes\n" << report;
  return bad;
}

// Routes on the CPU (or takes `row_index_override`), then every recipe x direction.
void check_gather(const GatherCase& c, bool gpu_routing = false) {
  const uint64_t seed = 131 * c.tokens + 17 * c.cols + c.groups + 7 * static_cast<uint64_t>(c.kind);
  const std::vector<int32_t> ids = make_ids(c.tokens, c.top_k, c.groups, c.kind, c.drop, seed);
  bf::MoeRouting r;
  ASSERT_TRUE(bf::moe_route(ids.data(), c.tokens, c.top_k, c.groups, &r).is_ok());
  const int64_t rows = c.tokens * c.top_k, routed = r.group_ends.back();
  ASSERT_GT(routed, 0) << "the reference's grouped columnwise quantize needs rows";
  const HostInput in = make_input(c.tokens, c.cols, c.ld, c.type, false, seed);
  DeviceInput x;
  ASSERT_TRUE(upload_input(in, c.type, false, &x));
  DeviceBuffer index_dev, ends_dev, ids_dev, slot_dev, ws;
  if (gpu_routing) {  // the whole chain on the device: routing's outputs feed the quantize
    bq::RoutingProblem rp{c.tokens, c.top_k, c.groups};
    ASSERT_OK(ids_dev.upload(ids, "ids_dev"));
    ASSERT_OK(index_dev.alloc(4 * rows, "index_dev"));
    ASSERT_OK(ends_dev.alloc(4 * c.groups, "ends_dev"));
    ASSERT_OK(slot_dev.alloc(4 * rows, "slot_dev"));
    ASSERT_OK(ws.alloc(bq::workspace_size(rp), "ws"));
    ASSERT_TRUE(bq::run(rp, {ids_dev.as<int32_t>()},
                        {ends_dev.as<int32_t>(), index_dev.as<int32_t>(),
                         slot_dev.as<int32_t>()},
                        ws.data(), ws.size(), nullptr)
                    .is_ok());
  } else {
    ASSERT_OK(index_dev.upload(r.row_source, "index_dev"));
    ASSERT_OK(ends_dev.upload(r.group_ends, "ends_dev"));
  }
  std::vector<float> gathered;
  ASSERT_TRUE(bf::moe_gather(in.values.data(), c.tokens, c.cols, c.ld, r.row_source.data(), rows, &gathered).is_ok());
  std::vector<int64_t> ends(r.group_ends.begin(), r.group_ends.end());
  int64_t bad = 0;
  int runs = 0;
  for (Format recipe : {Format::kMxfp8E4M3, Format::kMxfp4, Format::kFp8Block1x128}) {
    bq::GroupedQuantizeProblem p;
    p.dense.recipe = recipe, p.dense.rows = rows, p.dense.cols = c.cols, p.dense.ld = c.ld;
    p.num_groups = c.groups;
    const GatherReference ref = make_reference(gathered, rows, c.cols, ends, bq::grouped_capacity(p), recipe);
    for (Direction d : {Direction::kRowwise, Direction::kColumnwise, Direction::kBoth}) {
      bad += run_gather(c, x, index_dev.as<int32_t>(), ends_dev.as<int32_t>(), rows, ref, routed, recipe, d);
      ++runs;
    }
  }
  std::printf("moe_test gather: %-70s routed %lld / %lld, %d runs, bad bytes %lld\n", describe(c).c_str(),
              static_cast<long long>(routed), static_cast<long long>(rows), runs, static_cast<long long>(bad));
}

class MoeGatherQuantize : public ::testing::TestWithParam<GatherCase> {};

TEST_P(MoeGatherQuantize, MatchesTheEmulatorOnTheGatheredMatrix) {
  SKIP_WITHOUT_GPU();
  check_gather(GetParam());
}

std::vector<GatherCase> gather_cases() {
  return {
      {100, 2, 8, 200, 200, DType::kBf16, Routing::kRandom, 0.0},
      {300, 2, 8, 4160, 4160, DType::kBf16, Routing::kRandom, 0.0},
      {257, 1, 5, 200, 208, DType::kBf16, Routing::kEmptyExperts, 0.0},
      {500, 2, 4, 256, 256, DType::kBf16, Routing::kOneExpert, 0.0},
      {400, 3, 16, 384, 384, DType::kBf16, Routing::kRandom, 0.15},  // dropped slots
      {129, 2, 3, 130, 131, DType::kBf16, Routing::kRandom, 0.0},    // odd ld: the element-wise loads
      {200, 2, 8, 200, 200, DType::kF16, Routing::kRandom, 0.05},
      {150, 2, 6, 136, 136, DType::kF32, Routing::kEmptyExperts, 0.0},
      {2048, 2, 8, 1024, 1024, DType::kBf16, Routing::kRandom, 0.0},  // whole tiles
      {1000, 8, 64, 128, 128, DType::kBf16, Routing::kRandom, 0.1},   // many experts (binary search)
  };
}

std::string gather_name(const ::testing::TestParamInfo<GatherCase>& info) {
  const GatherCase& c = info.param;
  return std::to_string(info.index) + "_t" + std::to_string(c.tokens) + "_k" + std::to_string(c.top_k) + "_g" +
         std::to_string(c.groups) + "_c" + std::to_string(c.cols) + "_" + name(c.kind) + "_" +
         bf::dtype_name(c.type);
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeGatherQuantize, ::testing::ValuesIn(gather_cases()), gather_name);

TEST(MoeGatherQuantizeChain, GpuRoutingFeedsTheQuantize) {
  SKIP_WITHOUT_GPU();
  check_gather({1024, 2, 8, 512, 512, DType::kBf16, Routing::kRandom, 0.02}, true);
}

// Indices outside [0, tokens) read zero rows: no stray read (compute-sanitizer shows none), the
// bytes of a zero row.
TEST(MoeGatherQuantizeOutOfRange, IndicesOutsideTheInputReadZeroRows) {
  SKIP_WITHOUT_GPU();
  const GatherCase c{64, 1, 2, 256, 256, DType::kBf16, Routing::kRandom, 0.0};
  const int64_t rows = 96;  // more quantized rows than input rows
  std::vector<int32_t> index(rows);
  const int32_t wild[] = {-1, 64, 65, 1 << 20, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  for (int64_t r = 0; r < rows; ++r) index[r] = r % 3 == 0 ? wild[(r / 3) % 6] : static_cast<int32_t>((r * 7) % 64);
  const std::vector<int32_t> ends32 = {40, static_cast<int32_t>(rows)};
  const HostInput in = make_input(c.tokens, c.cols, c.ld, c.type, false, 99);
  DeviceInput x;
  ASSERT_TRUE(upload_input(in, c.type, false, &x));
  DeviceBuffer index_dev, ends_dev;
  ASSERT_OK(index_dev.upload(index, "index_dev"));
  ASSERT_OK(ends_dev.upload(ends32, "ends_dev"));
  std::vector<float> gathered;
  ASSERT_TRUE(bf::moe_gather(in.values.data(), c.tokens, c.cols, c.ld, index.data(), rows, &gathered).is_ok());
  for (Format recipe : {Format::kMxfp8E4M3, Format::kFp8Block1x128}) {
    bq::GroupedQuantizeProblem p;
    p.dense.recipe = recipe, p.dense.rows = rows, p.dense.cols = c.cols, p.dense.ld = c.ld;
    p.num_groups = 2;
    const GatherReference ref = make_reference(gathered, rows, c.cols, {40, rows}, bq::grouped_capacity(p), recipe);
    for (Direction d : {Direction::kRowwise, Direction::kBoth})
      run_gather(c, x, index_dev.as<int32_t>(), ends_dev.as<int32_t>(), rows, ref, rows, recipe, d);
  }
}

// ---- Un-permute + combine --------------------------------------------------------------------

struct CombineCase {
  int64_t tokens;
  int top_k, groups;
  int64_t cols, ld_y, ld_out;
  bq::CombineOutputType out_type;
  double drop;
};

void check_combine(const CombineCase& c) {
  const std::vector<int32_t> ids = make_ids(c.tokens, c.top_k, c.groups, Routing::kRandom, c.drop, 5 + c.tokens);
  bf::MoeRouting r;
  ASSERT_TRUE(bf::moe_route(ids.data(), c.tokens, c.top_k, c.groups, &r).is_ok());
  const int64_t slots = c.tokens * c.top_k, y_rows = slots;
  std::mt19937_64 rng(c.tokens * 3 + c.cols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> y_bits(static_cast<size_t>(y_rows * c.ld_y));
  std::vector<float> y(y_bits.size());
  for (size_t i = 0; i < y_bits.size(); ++i) {
    const uint64_t z = rng() % 4096;
    float v = std::ldexp(normal(rng), static_cast<int>(rng() % 40) - 20);
    if (z == 0) v = std::numeric_limits<float>::infinity();
    if (z == 1) v = std::nanf("");
    if (z == 2) v = 1e-40f;  // bf16 subnormal
    y_bits[i] = bf::float_to_bf16_bits_rn(v);
    y[i] = bf::bf16_bits_to_float(y_bits[i]);
  }
  std::vector<float> gates(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s)
    gates[s] = r.slot_row[s] < 0 ? std::nanf("") : std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  std::vector<float> ref;
  ASSERT_TRUE(bf::moe_unpermute_combine(y.data(), y_rows, c.cols, c.ld_y, gates.data(), r.slot_row.data(), c.tokens,
                                        c.top_k, &ref).is_ok());
  DeviceBuffer y_dev, g_dev, s_dev, out_dev;
  ASSERT_OK(y_dev.upload(y_bits, "y_dev"));
  ASSERT_OK(g_dev.upload(gates, "g_dev"));
  ASSERT_OK(s_dev.upload(r.slot_row, "s_dev"));
  const bool bf16 = c.out_type == bq::CombineOutputType::kBf16;
  const int64_t esize = bf16 ? 2 : 4, out_bytes = c.tokens * c.ld_out * esize;
  ASSERT_OK(out_dev.alloc(out_bytes, "out_dev"));
  ASSERT_CUDA(cudaMemset(out_dev.data(), 0xAB, out_bytes));
  bq::CombineProblem p{c.tokens, c.top_k, c.cols, y_rows, c.ld_y, c.ld_out, c.out_type};
  const blockscale::Status s = bq::run(p, {y_dev.data(), g_dev.as<float>(),
                                           s_dev.as<int32_t>()},
                                       {out_dev.data()}, nullptr, 0, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = download<uint8_t>(out_dev.data(), static_cast<size_t>(out_bytes));
  int64_t bad = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t col = 0; col < c.ld_out; ++col) {
      const uint8_t* g = &got[(t * c.ld_out + col) * esize];
      if (col >= c.cols) {  // the row stride's gap stays untouched
        for (int64_t b = 0; b < esize; ++b) bad += g[b] != 0xAB;
        continue;
      }
      const float want = ref[t * c.cols + col];
      uint32_t got_bits = 0;
      std::memcpy(&got_bits, g, esize);
      const uint32_t want_bits = bf16 ? bf::float_to_bf16_bits_rn(want) : bf::float_bits(want);
      const float got_value = bf16 ? bf::bf16_bits_to_float(static_cast<uint16_t>(got_bits)) : bf::bits_float(got_bits);
      if (got_bits != want_bits && !(std::isnan(want) && std::isnan(got_value))) {  // NaN payloads: the hardware's
        if (bad < 5) ADD_FAILURE() << "token " << t << " col " << col << ": got 0x" << std::hex << got_bits
                                   << " want 0x" << want_bits;
        ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf("moe_test combine: %lld tokens x %lld top_k %d ld_y %lld ld_out %lld %s drop %.2f: bad %lld\n",
              static_cast<long long>(c.tokens), static_cast<long long>(c.cols), c.top_k,
              static_cast<long long>(c.ld_y), static_cast<long long>(c.ld_out), bf16 ? "bf16" : "fp32", c.drop,
              static_cast<long long>(bad));
}

TEST(MoeCombine, MatchesTheReferenceBitForBit) {
  SKIP_WITHOUT_GPU();
  using O = bq::CombineOutputType;
  const CombineCase cases[] = {
      {1000, 2, 8, 512, 512, 512, O::kBf16, 0.0},  {1000, 2, 8, 512, 512, 520, O::kFp32, 0.1},
      {333, 8, 64, 200, 200, 200, O::kBf16, 0.2},  {100, 1, 4, 4160, 4160, 4168, O::kFp32, 0.0},
      {77, 3, 5, 37, 41, 39, O::kBf16, 0.1},       // element-wise path
      {64, 2, 2, 96, 96, 96, O::kBf16, 1.0},       // every slot dropped: zeros
  };
  for (const CombineCase& c : cases) check_combine(c);
}

}  // namespace
