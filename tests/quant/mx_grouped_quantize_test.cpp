// Tests of the grouped (MoE) mode, quant/mx_grouped_quantize.cu, through quant/quantize.h's
// grouped run(): the GPU's bytes against the CPU emulator's, byte for byte. The reference is
// formats::quantize_grouped_columnwise() (the columnwise copy, each expert padded with zero rows
// to a multiple of 32, and the padded ends) and the dense formats::quantize() (the rowwise copy),
// followed by formats::pack_swizzled_scales(). The GPU's columnwise copy is cols x capacity with
// row stride capacity (grouped_capacity): its rows hold the reference's cols x padded_total codes,
// then zeros; its scales are those of the cols x capacity/32 scale matrix (zeros past the padded
// total), swizzled.
//   - every output poisoned (0xAB) before each run, with poisoned guard bytes around it: an
//     unwritten byte (the zeros in [padded_total, capacity) included), a write outside a buffer,
//     or a write to an output not requested fails;
//   - MXFP8 E4M3 / E5M2 and MXFP4, ceil and floor, rowwise / columnwise / both, bf16 / fp16 / fp32;
//   - expert layouts: one expert, all tokens in one of many, empty experts (first, middle, last,
//     runs of them), experts of 1 token, 1..64 experts, uneven random counts, counts that are
//     multiples of 32 (no padding), one 8-expert 16384 x 4096 tensor; up to 256 experts every
//     warp scans the ends in registers, more go through shared memory; the persistent and the
//     one-CTA-per-tile grids on small shapes;
//   - data with NaN / Inf / subnormal / -0 / all-zero blocks; a row stride > cols and misaligned
//     pointers (the scalar load and byte store paths); an empty matrix (the padded ends alone).
// GPU tests skip without a GPU; the argument checks need none.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
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
#include "quant/mx_quantize.h"  // run_mx_grouped: a chosen grid
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"
#include "tests/quant/grouped_test_util.h"

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
using blockscale_test::name;
using blockscale_test::to_bits;
using blockscale_test::upload_input;
using blockscale_test::Split;
using blockscale_test::describe;
using blockscale_test::make_counts;
using blockscale_test::make_input;

// ---- Reference -------------------------------------------------------------------------------

struct GroupedReference {
  bf::QuantizedMatrix row;        // dense rowwise
  std::vector<uint8_t> row_scales;  // swizzled
  std::vector<uint8_t> col_data;    // cols x capacity (row bytes), the GPU's layout
  std::vector<uint8_t> col_scales;  // swizzled cols x capacity / 32
  std::vector<int32_t> padded_ends;
  int64_t padded_total = 0;
  float amax = 0.0f;
  bool nonfinite = false;
};

int64_t code_bytes(Format r, int64_t n) { return r == Format::kMxfp4 ? (n + 1) / 2 : n; }

GroupedReference make_reference(const HostInput& in, int64_t rows, int64_t cols, int64_t ld,
                                const std::vector<int64_t>& ends, int64_t capacity, Format recipe,
                                ScaleRounding rounding) {
  GroupedReference ref;
  bf::QuantizeOptions o;
  o.recipe = recipe;
  o.rounding = rounding;
  auto s = bf::quantize(in.values.data(), rows, cols, ld, o, bf::Direction::kRowwise, &ref.row);
  EXPECT_TRUE(s.is_ok()) << s.message();
  s = bf::pack_swizzled_scales(ref.row.scales.data(), ref.row.rows, ref.row.scale_cols(), &ref.row_scales);
  EXPECT_TRUE(s.is_ok()) << s.message();
  bf::QuantizedMatrix col;
  std::vector<int64_t> padded;
  s = bf::quantize_grouped_columnwise(in.values.data(), rows, cols, ld, ends, o, &col, &padded);
  EXPECT_TRUE(s.is_ok()) << s.message();
  ref.padded_total = padded.back();
  EXPECT_EQ(col.rows, cols);
  EXPECT_EQ(col.cols, ref.padded_total);
  EXPECT_LE(ref.padded_total, capacity);
  for (int64_t e : padded) ref.padded_ends.push_back(static_cast<int32_t>(e));
  // Widen to the capacity: codes and scales past the padded total are 0.
  const int64_t cap_bytes = code_bytes(recipe, capacity), ref_bytes = col.data_row_bytes();
  ref.col_data.assign(static_cast<size_t>(cols * cap_bytes), 0);
  for (int64_t c = 0; c < cols; ++c)
    std::memcpy(&ref.col_data[static_cast<size_t>(c * cap_bytes)], &col.data[static_cast<size_t>(c * ref_bytes)],
                static_cast<size_t>(ref_bytes));
  const int64_t cap_blocks = capacity / 32, ref_blocks = col.scale_cols();
  std::vector<uint8_t> linear(static_cast<size_t>(cols * cap_blocks), 0);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t b = 0; b < ref_blocks; ++b)
      linear[static_cast<size_t>(c * cap_blocks + b)] = col.scales[static_cast<size_t>(c * ref_blocks + b)];
  s = bf::pack_swizzled_scales(linear.data(), cols, cap_blocks, &ref.col_scales);
  EXPECT_TRUE(s.is_ok()) << s.message();
  ref.amax = bf::detail::block_amax(in.values.data(), ld, 0, rows, 0, cols).amax;
  ref.nonfinite = ref.row.nonfinite_seen;
  EXPECT_EQ(ref.row.nonfinite_seen, col.nonfinite_seen);
  return ref;
}

// ---- GPU run and comparison ------------------------------------------------------------------

using Case = blockscale_test::GroupedCase;

// One grouped run on the GPU against the reference (grid: run()'s, or a chosen one through
// run_mx_grouped); returns the number of bad bytes.
int64_t run_and_compare(const Case& c, const DeviceInput& x, const DeviceBuffer& ends_dev, const GroupedReference& ref,
                        Format recipe, ScaleRounding rounding, Direction dirs,
                        bq::detail::GridPolicy grid = bq::detail::GridPolicy::kAuto) {
  bq::GroupedQuantizeProblem p;
  p.dense.recipe = recipe;
  p.dense.rounding = rounding;
  p.dense.input_type = c.type;
  p.dense.rows = c.rows;
  p.dense.cols = c.cols;
  p.dense.ld = c.ld;
  p.dense.directions = Direction::kBoth;  // sizes of every buffer
  p.num_groups = c.groups;
  const int64_t off = c.misaligned ? 1 : 0;
  GuardedOutput row_data, row_scales, col_data, col_scales, amax, padded;
  EXPECT_TRUE(alloc_poisoned(&row_data, bq::rowwise_data_bytes(p.dense), off));
  EXPECT_TRUE(alloc_poisoned(&row_scales, bq::rowwise_scale_bytes(p.dense), off));
  EXPECT_TRUE(alloc_poisoned(&col_data, bq::grouped_columnwise_data_bytes(p), off));
  EXPECT_TRUE(alloc_poisoned(&col_scales, bq::grouped_columnwise_scale_bytes(p), off));
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
  in.group_ends = ends_dev.as<int32_t>();
  const blockscale::Status s = grid == bq::detail::GridPolicy::kAuto
                                  ? bq::run(p, in, out, nullptr, 0, nullptr)
                                  : bq::detail::run_mx_grouped(p, in, out, nullptr, grid);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_CUDA(cudaDeviceSynchronize());

  const bool row = dirs != Direction::kColumnwise, col = dirs != Direction::kRowwise;
  std::string report;
  int64_t bad = 0;
  bad += check_output(row_data, row ? &ref.row.data : nullptr, ref.row.data_row_bytes(), "rowwise data", &report);
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
  if (got_flag != (ref.nonfinite ? 1 : 0)) {
    ++bad;
    report += "nonfinite flag: got " + std::to_string(got_flag) + "\n";
  }
  EXPECT_EQ(bad, 0) << describe(c) << " " << bf::format_name(recipe) << " "
                    << (rounding == ScaleRounding::kCeil ? "ceil" : "floor") << " " << name(dirs) << ": " << bad
                    << " bad bytes\n" << report;
  return bad;
}

struct Prepared {
  HostInput in;
  DeviceInput x;
  DeviceBuffer ends_dev;
  std::vector<int64_t> ends;
  int64_t capacity = 0;
};

::testing::AssertionResult prepare(const Case& c, uint64_t seed, Prepared* pr) {
  pr->in = make_input(c.rows, c.cols, c.ld, c.type, c.finite, seed);
  const std::vector<int64_t> n = make_counts(c.rows, c.groups, c.split, seed * 7 + 1);
  std::vector<int32_t> ends32;
  int64_t acc = 0;
  for (int64_t v : n) {
    acc += v;
    pr->ends.push_back(acc);
    ends32.push_back(static_cast<int32_t>(acc));
  }
  if (acc != c.rows) return ::testing::AssertionFailure() << "counts sum to " << acc;
  bq::GroupedQuantizeProblem p;
  p.dense.rows = c.rows, p.dense.cols = c.cols, p.dense.ld = c.ld, p.num_groups = c.groups;
  pr->capacity = bq::grouped_capacity(p);
  const ::testing::AssertionResult uploaded = upload_input(pr->in, c.type, c.misaligned, &pr->x);
  if (!uploaded) return uploaded;
  const blockscale::Status s = pr->ends_dev.upload(ends32, "group ends");
  if (!s) return ::testing::AssertionFailure() << s.message();
  return ::testing::AssertionSuccess();
}

uint64_t seed_of(const Case& c) {
  return 1000003u * static_cast<uint64_t>(c.rows) + 7919u * static_cast<uint64_t>(c.cols) + 31u * c.ld +
         101u * static_cast<uint64_t>(c.groups) + 13u * static_cast<uint64_t>(c.split) +
         3u * static_cast<uint64_t>(c.type) + (c.misaligned ? 5u : 0u);
}

// Every recipe x rounding x directions on one case.
void check_case(const Case& c) {
  Prepared pr;
  ASSERT_TRUE(prepare(c, seed_of(c), &pr));
  int runs = 0;
  int64_t bad = 0;
  for (Format recipe : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp4}) {
    for (ScaleRounding rounding : {ScaleRounding::kCeil, ScaleRounding::kFloor}) {
      const GroupedReference ref =
          make_reference(pr.in, c.rows, c.cols, c.ld, pr.ends, pr.capacity, recipe, rounding);
      for (Direction d : {Direction::kRowwise, Direction::kColumnwise, Direction::kBoth}) {
        bad += run_and_compare(c, pr.x, pr.ends_dev, ref, recipe, rounding, d);
        ++runs;
      }
    }
  }
  std::printf("mx_grouped_quantize_test: %-52s capacity %lld, %2d runs, bad bytes %lld\n", describe(c).c_str(),
              static_cast<long long>(pr.capacity), runs, static_cast<long long>(bad));
}

class MxGroupedQuantize : public ::testing::TestWithParam<Case> {};

TEST_P(MxGroupedQuantize, MatchesTheEmulatorByteForByte) {
  SKIP_WITHOUT_GPU();
  check_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, MxGroupedQuantize, ::testing::ValuesIn(blockscale_test::grouped_cases(40)),
                         blockscale_test::case_name);

// One large MoE tensor: 8 experts with uneven counts over 16384 x 4096 bf16 (many tiles per CTA,
// expert boundaries inside tiles, zero rows up to the capacity).
TEST(MxGroupedQuantizeLarge, EightExperts16384x4096) {
  SKIP_WITHOUT_GPU();
  const Case c{16384, 4096, 4096, 8, Split::kUneven, DType::kBf16, false, false};
  Prepared pr;
  ASSERT_TRUE(prepare(c, 16384, &pr));
  int64_t bad = 0;
  {
    const GroupedReference ref =
        make_reference(pr.in, c.rows, c.cols, c.ld, pr.ends, pr.capacity, Format::kMxfp8E4M3, ScaleRounding::kCeil);
    bad += run_and_compare(c, pr.x, pr.ends_dev, ref, Format::kMxfp8E4M3, ScaleRounding::kCeil, Direction::kBoth);
  }
  {
    const GroupedReference ref =
        make_reference(pr.in, c.rows, c.cols, c.ld, pr.ends, pr.capacity, Format::kMxfp4, ScaleRounding::kCeil);
    bad += run_and_compare(c, pr.x, pr.ends_dev, ref, Format::kMxfp4, ScaleRounding::kCeil, Direction::kBoth);
  }
  std::string counts;
  for (size_t g = 0; g < pr.ends.size(); ++g)
    counts += (g ? "," : "") + std::to_string(pr.ends[g] - (g ? pr.ends[g - 1] : 0));
  std::printf("mx_grouped_quantize_test: %s (tokens %s): e4m3 ceil both, e2m1 ceil both: bad bytes %lld\n",
              describe(c).c_str(), counts.c_str(), static_cast<long long>(bad));
}

// The grids run() does not pick for these shapes: a persistent grid over short scans (each tile
// looked up again in registers) and one CTA per tile (as large inputs with up to 256 experts
// run), over the shared-memory tables too (4096 experts).
TEST(MxGroupedQuantizeGrids, PersistentAndOneTilePerCta) {
  SKIP_WITHOUT_GPU();
  const Case cases[] = {{300, 256, 256, 8, Split::kUneven, DType::kBf16, false, false},
                        {700, 300, 300, 17, Split::kEmptyEdges, DType::kF32, false, false},
                        {1000, 512, 512, 64, Split::kOnes, DType::kF16, false, false},
                        {700, 300, 300, 300, Split::kUneven, DType::kBf16, true, false},
                        {2048, 64, 64, 4096, Split::kUneven, DType::kBf16, false, false}};
  for (const Case& c : cases) {
    Prepared pr;
    ASSERT_TRUE(prepare(c, seed_of(c), &pr));
    int64_t bad = 0;
    for (Format recipe : {Format::kMxfp8E4M3, Format::kMxfp4}) {
      const GroupedReference ref =
          make_reference(pr.in, c.rows, c.cols, c.ld, pr.ends, pr.capacity, recipe, ScaleRounding::kCeil);
      for (auto grid : {bq::detail::GridPolicy::kPersistent, bq::detail::GridPolicy::kOneTilePerCta})
        for (Direction d : {Direction::kColumnwise, Direction::kBoth})
          bad += run_and_compare(c, pr.x, pr.ends_dev, ref, recipe, ScaleRounding::kCeil, d, grid);
    }
    std::printf("mx_grouped_quantize_test: %-52s persistent and one tile per CTA: bad bytes %lld\n",
                describe(c).c_str(), static_cast<long long>(bad));
  }
}

// An empty matrix still gets its padded ends (rows == 0: all zero; cols == 0: from the counts),
// and nothing else is written.
TEST(MxGroupedQuantizeEmpty, WritesThePaddedEndsAlone) {
  SKIP_WITHOUT_GPU();
  for (const auto& shape : {std::pair<int64_t, int64_t>{0, 64}, {70, 0}}) {
    for (Direction d : {Direction::kRowwise, Direction::kBoth}) {
      const int g = 3;
      const std::vector<int32_t> ends = shape.first == 0 ? std::vector<int32_t>{0, 0, 0}
                                                         : std::vector<int32_t>{33, 33, 70};
      const std::vector<int32_t> want = shape.first == 0 ? std::vector<int32_t>{0, 0, 0}
                                                         : std::vector<int32_t>{64, 64, 128};
      DeviceBuffer ends_dev, x;
      ASSERT_OK(ends_dev.alloc(4 * g, "ends_dev"));
      ASSERT_CUDA(cudaMemcpy(ends_dev.data(), ends.data(), 4 * g, cudaMemcpyHostToDevice));
      ASSERT_OK(x.alloc(256, "x"));
      GuardedOutput padded, amax;
      ASSERT_TRUE(alloc_poisoned(&padded, 4 * g, 0));
      ASSERT_TRUE(alloc_poisoned(&amax, 4, 0));
      bq::GroupedQuantizeProblem p;
      p.dense.rows = shape.first, p.dense.cols = shape.second, p.dense.ld = std::max<int64_t>(shape.second, 1);
      p.dense.directions = d;
      p.num_groups = g;
      bq::GroupedQuantizeOutputs out;
      out.padded_group_ends = reinterpret_cast<int32_t*>(padded.ptr());
      out.dense.amax = reinterpret_cast<float*>(amax.ptr());
      bq::GroupedQuantizeInputs in;
      in.x = x.data();
      in.group_ends = ends_dev.as<int32_t>();
      const auto s = bq::run(p, in, out, nullptr, 0, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.message();
      ASSERT_CUDA(cudaDeviceSynchronize());
      std::string report;
      std::vector<uint8_t> want_bytes(4 * g), zero(4, 0);
      std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
      EXPECT_EQ(check_output(padded, &want_bytes, 4, "padded_group_ends", &report), 0) << report;
      EXPECT_EQ(check_output(amax, &zero, 4, "amax", &report), 0) << report;
    }
  }
}

// ---- Argument checks (no GPU needed) -----------------------------------------------------------

TEST(GroupedQuantizeApi, CapacityAndChecks) {
  bq::GroupedQuantizeProblem p;
  p.dense.rows = 100, p.dense.cols = 64, p.dense.ld = 64, p.dense.directions = Direction::kBoth;
  p.num_groups = 4;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  EXPECT_EQ(bq::grouped_capacity(p), (100 + 4 * 31) / 32 * 32);
  EXPECT_EQ(bq::grouped_columnwise_data_bytes(p), 64 * bq::grouped_capacity(p));
  p.dense.recipe = Format::kMxfp4;
  EXPECT_EQ(bq::grouped_columnwise_data_bytes(p), 64 * bq::grouped_capacity(p) / 2);
  p.num_groups = 0;
  expect_error(bq::can_implement(p), "problem.num_groups");
  p.num_groups = 4, p.dense.recipe = Format::kFp8Block128x128;
  expect_error(bq::can_implement(p), "problem.dense.recipe");
  p.dense.recipe = Format::kNvfp4, p.dense.nvfp4_2d = true;
  expect_error(bq::can_implement(p), "problem.dense.nvfp4_2d");
  p.dense.nvfp4_2d = false;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
}

}  // namespace
