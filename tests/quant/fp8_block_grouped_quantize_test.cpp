// Tests of the grouped (MoE) mode (1x128), quant/fp8_block_grouped_quantize.cu, through
// quant/quantize.h's grouped run(): the GPU's bytes against the CPU emulator's, byte for byte. The
// reference is the dense formats::quantize() (rowwise copy) and formats::quantize_grouped_columnwise() (columnwise
// copy: each expert padded with zero rows to a multiple of 128, and the padded ends), their fp32
// scales packed with formats::pack_vec128_scales(). The GPU's columnwise copy is cols x capacity
// (grouped_capacity): its rows hold the reference's cols x padded_total codes, then zeros; its
// scales are those of the cols x capacity/128 scale matrix, 0.0f past the padded total.
//   - every output poisoned before each run with poisoned guard bytes around it (an unwritten
//     byte, a write outside a buffer or to an output not requested fails);
//   - pow2 on and off, rowwise / columnwise / both, bf16 / fp16 / fp32;
//   - expert layouts: one expert, all tokens in one of many, empty experts (first, middle, last,
//     runs), experts of 1 token, 1..64 experts, uneven counts, multiples of 128 (no padding), one
//     8-expert 16384 x 2048 tensor;
//   - data with NaN / Inf / subnormal / -0 / all-zero blocks; a row stride > cols and misaligned
//     pointers (scalar loads, narrow stores); an empty matrix (the padded ends alone).
// GPU tests skip without a GPU; the argument checks need none.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "formats/block_quantize_internal.h"  // block_amax: formats' tensor amax rule
#include "formats/quantize.h"
#include "formats/scale_layout.h"
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
using blockscale_test::Split;
using blockscale_test::describe;
using blockscale_test::alloc_poisoned;
using blockscale_test::check_output;
using blockscale_test::expect_error;
using blockscale_test::make_counts;
using blockscale_test::make_input;
using blockscale_test::name;
using blockscale_test::upload_input;

constexpr int64_t kBlock = 128;

std::vector<uint8_t> float_bytes(const std::vector<float>& f) {
  std::vector<uint8_t> b(f.size() * 4);
  if (!b.empty()) std::memcpy(b.data(), f.data(), b.size());
  return b;
}

// ---- Reference -------------------------------------------------------------------------------

struct GroupedReference {
  std::vector<uint8_t> row_data, row_scales;  // dense rowwise, VEC128 packed
  std::vector<uint8_t> col_data;              // cols x capacity, the GPU's layout
  std::vector<uint8_t> col_scales;            // VEC128 of the cols x capacity/128 scale matrix
  std::vector<int32_t> padded_ends;
  float amax = 0.0f;
  bool nonfinite = false;
};

GroupedReference make_reference(const HostInput& in, int64_t rows, int64_t cols, int64_t ld,
                                const std::vector<int64_t>& ends, int64_t capacity, bool pow2) {
  GroupedReference ref;
  bf::QuantizeOptions o;
  o.recipe = Format::kFp8Block1x128;
  o.pow2_scales = pow2;
  bf::QuantizedMatrix row;
  auto s = bf::quantize(in.values.data(), rows, cols, ld, o, bf::Direction::kRowwise, &row);
  EXPECT_TRUE(s.is_ok()) << s.message();
  ref.row_data = row.data;
  std::vector<float> packed;
  s = bf::pack_vec128_scales(row.scales_f32.data(), row.scale_rows(), row.scale_cols(), &packed);
  EXPECT_TRUE(s.is_ok()) << s.message();
  ref.row_scales = float_bytes(packed);

  bf::QuantizedMatrix col;
  std::vector<int64_t> padded;
  s = bf::quantize_grouped_columnwise(in.values.data(), rows, cols, ld, ends, o, &col, &padded);
  EXPECT_TRUE(s.is_ok()) << s.message();
  const int64_t padded_total = padded.back();
  EXPECT_EQ(col.rows, cols);
  EXPECT_EQ(col.cols, padded_total);
  EXPECT_LE(padded_total, capacity);
  for (int64_t e : padded) ref.padded_ends.push_back(static_cast<int32_t>(e));
  // Widen to the capacity: codes past the padded total are 0, and so are their scales.
  ref.col_data.assign(static_cast<size_t>(cols * capacity), 0);
  for (int64_t c = 0; c < cols; ++c)
    std::memcpy(&ref.col_data[static_cast<size_t>(c * capacity)], &col.data[static_cast<size_t>(c * padded_total)],
                static_cast<size_t>(padded_total));
  const int64_t cap_blocks = capacity / kBlock, ref_blocks = col.scale_cols();
  std::vector<float> linear(static_cast<size_t>(cols * cap_blocks), 0.0f);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t b = 0; b < ref_blocks; ++b)
      linear[static_cast<size_t>(c * cap_blocks + b)] = col.scales_f32[static_cast<size_t>(c * ref_blocks + b)];
  s = bf::pack_vec128_scales(linear.data(), cols, cap_blocks, &packed);
  EXPECT_TRUE(s.is_ok()) << s.message();
  ref.col_scales = float_bytes(packed);
  ref.amax = bf::detail::block_amax(in.values.data(), ld, 0, rows, 0, cols).amax;
  ref.nonfinite = row.nonfinite_seen;
  EXPECT_EQ(row.nonfinite_seen, col.nonfinite_seen);
  return ref;
}

// ---- GPU run and comparison ------------------------------------------------------------------

using Case = blockscale_test::GroupedCase;

struct Prepared {
  HostInput in;
  DeviceInput x;
  DeviceBuffer ends_dev;
  std::vector<int64_t> ends;
  int64_t capacity = 0;
};

bq::GroupedQuantizeProblem problem_of(const Case& c, bool pow2, Direction d) {
  bq::GroupedQuantizeProblem p;
  p.dense.recipe = Format::kFp8Block1x128;
  p.dense.pow2_scales = pow2;
  p.dense.input_type = c.type;
  p.dense.rows = c.rows, p.dense.cols = c.cols, p.dense.ld = c.ld;
  p.dense.directions = d;
  p.num_groups = c.groups;
  return p;
}

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
  pr->capacity = bq::grouped_capacity(problem_of(c, false, Direction::kBoth));
  const ::testing::AssertionResult uploaded = upload_input(pr->in, c.type, c.misaligned, &pr->x);
  if (!uploaded) return uploaded;
  const blockscale::Status s = pr->ends_dev.upload(ends32, "group ends");
  if (!s) return ::testing::AssertionFailure() << s.message();
  return ::testing::AssertionSuccess();
}

// One grouped run on the GPU against the reference; returns the number of bad bytes.
int64_t run_and_compare(const Case& c, const Prepared& pr, const GroupedReference& ref, bool pow2, Direction dirs) {
  bq::GroupedQuantizeProblem p = problem_of(c, pow2, Direction::kBoth);  // sizes of every buffer
  const int64_t off = c.misaligned ? 1 : 0;
  GuardedOutput row_data, row_scales, col_data, col_scales, amax, padded;
  EXPECT_TRUE(alloc_poisoned(&row_data, bq::rowwise_data_bytes(p.dense), off));
  EXPECT_TRUE(alloc_poisoned(&row_scales, bq::rowwise_scale_bytes(p.dense), 4 * off));
  EXPECT_TRUE(alloc_poisoned(&col_data, bq::grouped_columnwise_data_bytes(p), off));
  EXPECT_TRUE(alloc_poisoned(&col_scales, bq::grouped_columnwise_scale_bytes(p), 4 * off));
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
  in.x = pr.x.ptr();
  in.group_ends = pr.ends_dev.as<int32_t>();
  const blockscale::Status s = bq::run(p, in, out, nullptr, 0, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_CUDA(cudaDeviceSynchronize());

  const bool row = dirs != Direction::kColumnwise, col = dirs != Direction::kRowwise;
  std::string report;
  int64_t bad = 0;
  bad += check_output(row_data, row ? &ref.row_data : nullptr, c.cols, "rowwise data", &report);
  bad += check_output(row_scales, row ? &ref.row_scales : nullptr, 4, "rowwise scales", &report);
  bad += check_output(col_data, col ? &ref.col_data : nullptr, pr.capacity, "columnwise data", &report);
  bad += check_output(col_scales, col ? &ref.col_scales : nullptr, 4, "columnwise scales", &report);
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
  EXPECT_EQ(bad, 0) << describe(c) << (pow2 ? " pow2 " : " ") << name(dirs) << ": " << bad << " bad bytes\n"
                    << report;
  return bad;
}

uint64_t seed_of(const Case& c) {
  return 1000003u * static_cast<uint64_t>(c.rows) + 7919u * static_cast<uint64_t>(c.cols) + 31u * c.ld +
         101u * static_cast<uint64_t>(c.groups) + 13u * static_cast<uint64_t>(c.split) +
         3u * static_cast<uint64_t>(c.type) + (c.misaligned ? 5u : 0u);
}

// pow2 on / off x every directions on one case.
void check_case(const Case& c) {
  Prepared pr;
  ASSERT_TRUE(prepare(c, seed_of(c), &pr));
  int runs = 0;
  int64_t bad = 0;
  for (bool pow2 : {false, true}) {
    const GroupedReference ref = make_reference(pr.in, c.rows, c.cols, c.ld, pr.ends, pr.capacity, pow2);
    for (Direction d : {Direction::kRowwise, Direction::kColumnwise, Direction::kBoth}) {
      bad += run_and_compare(c, pr, ref, pow2, d);
      ++runs;
    }
  }
  std::printf("fp8_block_grouped_quantize_test: %-52s capacity %lld, %d runs, bad bytes %lld\n",
              describe(c).c_str(), static_cast<long long>(pr.capacity), runs, static_cast<long long>(bad));
}

class Fp8BlockGroupedQuantize : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8BlockGroupedQuantize, MatchesTheEmulatorByteForByte) {
  SKIP_WITHOUT_GPU();
  check_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8BlockGroupedQuantize, ::testing::ValuesIn(blockscale_test::grouped_cases(130)),
                         blockscale_test::case_name);

// One large MoE tensor: 8 uneven experts over 16384 x 2048 bf16 (many tiles per CTA, zero rows up
// to the capacity).
TEST(Fp8BlockGroupedQuantizeLarge, EightExperts16384x2048) {
  SKIP_WITHOUT_GPU();
  const Case c{16384, 2048, 2048, 8, Split::kUneven, DType::kBf16, false, false};
  Prepared pr;
  ASSERT_TRUE(prepare(c, 16384, &pr));
  const GroupedReference ref = make_reference(pr.in, c.rows, c.cols, c.ld, pr.ends, pr.capacity, false);
  const int64_t bad = run_and_compare(c, pr, ref, false, Direction::kBoth);
  std::string counts;
  for (size_t g = 0; g < pr.ends.size(); ++g)
    counts += (g ? "," : "") + std::to_string(pr.ends[g] - (g ? pr.ends[g - 1] : 0));
  std::printf("fp8_block_grouped_quantize_test: %s (tokens %s): both: bad bytes %lld\n", describe(c).c_str(),
              counts.c_str(), static_cast<long long>(bad));
}

// An empty matrix still gets its padded ends (rows == 0: all zero; cols == 0: from the counts).
TEST(Fp8BlockGroupedQuantizeEmpty, WritesThePaddedEndsAlone) {
  SKIP_WITHOUT_GPU();
  for (const auto& shape : {std::pair<int64_t, int64_t>{0, 64}, {300, 0}}) {
    for (Direction d : {Direction::kRowwise, Direction::kBoth}) {
      const int g = 3;
      const std::vector<int32_t> ends = shape.first == 0 ? std::vector<int32_t>{0, 0, 0}
                                                         : std::vector<int32_t>{129, 129, 300};
      const std::vector<int32_t> want = shape.first == 0 ? std::vector<int32_t>{0, 0, 0}
                                                         : std::vector<int32_t>{256, 256, 512};
      DeviceBuffer ends_dev, x;
      ASSERT_OK(ends_dev.alloc(4 * g, "ends_dev"));
      ASSERT_CUDA(cudaMemcpy(ends_dev.data(), ends.data(), 4 * g, cudaMemcpyHostToDevice));
      ASSERT_OK(x.alloc(256, "x"));
      GuardedOutput padded;
      ASSERT_TRUE(alloc_poisoned(&padded, 4 * g, 0));
      bq::GroupedQuantizeProblem p;
      p.dense.recipe = Format::kFp8Block1x128;
      p.dense.rows = shape.first, p.dense.cols = shape.second, p.dense.ld = std::max<int64_t>(shape.second, 1);
      p.dense.directions = d;
      p.num_groups = g;
      bq::GroupedQuantizeOutputs out;
      out.padded_group_ends = reinterpret_cast<int32_t*>(padded.ptr());
      bq::GroupedQuantizeInputs in;
      in.x = x.data();
      in.group_ends = ends_dev.as<int32_t>();
      const auto s = bq::run(p, in, out, nullptr, 0, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.message();
      ASSERT_CUDA(cudaDeviceSynchronize());
      std::string report;
      std::vector<uint8_t> want_bytes(4 * g);
      std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
      EXPECT_EQ(check_output(padded, &want_bytes, 4, "padded_group_ends", &report), 0) << report;
    }
  }
}

// ---- Argument checks (no GPU needed) -----------------------------------------------------------

TEST(Fp8BlockGroupedQuantizeApi, CapacityAndChecks) {
  bq::GroupedQuantizeProblem p;
  p.dense.recipe = Format::kFp8Block1x128;
  p.dense.rows = 300, p.dense.cols = 64, p.dense.ld = 64, p.dense.directions = Direction::kBoth;
  p.num_groups = 4;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  EXPECT_EQ(bq::grouped_capacity(p), (300 + 4 * 127) / 128 * 128);
  EXPECT_EQ(bq::grouped_columnwise_data_bytes(p), 64 * bq::grouped_capacity(p));
  EXPECT_EQ(bq::grouped_columnwise_scale_bytes(p), bf::vec128_scale_floats(64, bq::grouped_capacity(p) / 128) * 4);
  EXPECT_EQ(bq::workspace_size(p), 0u);
  p.dense.recipe = Format::kFp8Block128x128;
  expect_error(bq::can_implement(p), "problem.dense.recipe: fp8_block128x128 is the weights' recipe");
}

}  // namespace
