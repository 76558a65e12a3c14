// Tests of the argument checks of quant/mx_bf16.h (can_implement and run): every rule's error
// names its argument, the checks run in order, and a valid problem passes on a GPU. No GPU needed
// but for the last test: every check fails before any device access. The GPU's values:
// mx_bf16_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "formats/recipe.h"
#include "quant/mx_bf16.h"
#include "tests/quant/gpu_test_util.h"

namespace {

namespace bq = blockscale::quant;
using blockscale::formats::Format;
using blockscale::formats::ScaleRounding;

// ---- Argument checks (no GPU needed) -----------------------------------------------------------

// The argument an error message names: the word after "mx_bf16: " up to the next ':' or ' ', with
// any qualifier ("problem.rows": "rows") dropped; "" when the message does not start so.
std::string named_argument(const std::string& m) {
  const std::string prefix = "mx_bf16: ";
  if (m.compare(0, prefix.size(), prefix) != 0) return "";
  const size_t end = m.find_first_of(": ", prefix.size());
  const std::string named = m.substr(prefix.size(), end == std::string::npos ? std::string::npos : end - prefix.size());
  const size_t dot = named.rfind('.');
  return dot == std::string::npos ? named : named.substr(dot + 1);
}
// "" when s is ok or names no argument (without a GPU, a valid problem still fails can_implement's
// kernel image check).
std::string named_argument(const blockscale::Status& s) { return s.is_ok() ? "" : named_argument(s.message()); }

// s must be an error starting "mx_bf16: " followed by `arg` (optionally qualified: "problem.rows").
void expect_mx_error(const blockscale::Status& s, const std::string& arg) {
  ASSERT_FALSE(s.is_ok()) << "expected an error naming " << arg;
  EXPECT_EQ(s.message().rfind("mx_bf16: ", 0), 0u) << s.message();
  EXPECT_EQ(named_argument(s), arg) << "expected the error to name " << arg << ": " << s.message();
}

// The arguments the rules name.
bool is_argument(const std::string& named) {
  for (const char* a : {"recipe", "rows", "cols", "batches", "num_groups", "input_rows", "x", "group_ends", "outputs",
                        "rowwise", "columnwise"})
    if (named == a) return true;
  return false;
}

// Fake, never dereferenced device addresses 16 MiB apart: every check below fails before any device
// access.
template <typename T>
T* at(uintptr_t a) {
  return reinterpret_cast<T*>(a);
}
constexpr uintptr_t kX = 0x1000000, kEnds = 0x2000000, kIndex = 0x3000000, kRow = 0x4000000, kCol = 0x5000000;

bq::MxBf16Problem good_problem() {
  bq::MxBf16Problem p;
  p.rows = 64, p.cols = 64;
  return p;
}
bq::MxBf16Inputs good_inputs() {
  bq::MxBf16Inputs in;
  in.x = at<const float>(kX);
  return in;
}
bq::MxBf16Outputs good_outputs() {
  bq::MxBf16Outputs out;
  out.rowwise = at<uint16_t>(kRow), out.columnwise = at<uint16_t>(kCol);
  return out;
}

// can_implement and run give the same error (run checks first, so never touches the device).
void expect_both(const bq::MxBf16Problem& p, const bq::MxBf16Inputs& in, const bq::MxBf16Outputs& out,
                 const std::string& arg) {
  SCOPED_TRACE("expecting " + arg);
  expect_mx_error(bq::can_implement(p, in, out), arg);
  expect_mx_error(bq::run(p, in, out, nullptr), arg);
}

TEST(MxBf16Api, RecipeMustBeMxfp8) {
  const bq::MxBf16Inputs in = good_inputs();
  const bq::MxBf16Outputs out = good_outputs();
  for (Format r : {Format::kMxfp4, Format::kNvfp4, Format::kMxfp6E2M3, Format::kMxfp6E3M2, Format::kFp8Block1x128,
                   Format::kFp8Block128x128}) {
    bq::MxBf16Problem p = good_problem();
    p.recipe = r;
    expect_both(p, in, out, "recipe");
    p.rounding = ScaleRounding::kFloor;
    expect_both(p, in, out, "recipe");
  }
  // E5M2 and floor pass the argument rules (a later rule fails here: no outputs).
  bq::MxBf16Problem p = good_problem();
  p.recipe = Format::kMxfp8E5M2, p.rounding = ScaleRounding::kFloor;
  expect_both(p, in, bq::MxBf16Outputs{}, "outputs");
}

TEST(MxBf16Api, ShapesAndBatches) {
  const bq::MxBf16Inputs in = good_inputs();
  const bq::MxBf16Outputs out = good_outputs();
  bq::MxBf16Problem p = good_problem();
  p.rows = -1;
  expect_both(p, in, out, "rows");
  p = good_problem(), p.cols = -32;
  expect_both(p, in, out, "cols");
  p = good_problem(), p.batches = 0;
  expect_both(p, in, out, "batches");
  p = good_problem(), p.batches = -2;
  expect_both(p, in, out, "batches");
  p = good_problem(), p.rows = 100, p.batches = 3;
  expect_both(p, in, out, "batches");
  p = good_problem(), p.rows = 120, p.batches = 3;  // 40 rows each (not whole 32-row blocks): valid
  expect_both(p, in, bq::MxBf16Outputs{}, "outputs");
  p = good_problem(), p.rows = 0, p.batches = 5;  // 0 % 5 == 0
  expect_both(p, in, bq::MxBf16Outputs{}, "outputs");
  bq::MxBf16Inputs grouped = in;
  grouped.group_ends = at<const int32_t>(kEnds);
  p = good_problem(), p.num_groups = 4, p.batches = 2;  // grouped needs batches == 1
  expect_both(p, grouped, out, "batches");
}

TEST(MxBf16Api, GroupsAndInputRows) {
  bq::MxBf16Inputs in = good_inputs();
  in.group_ends = at<const int32_t>(kEnds);
  const bq::MxBf16Outputs out = good_outputs();
  bq::MxBf16Problem p = good_problem();
  p.num_groups = -1;
  expect_both(p, in, out, "num_groups");
  p.num_groups = 4097;
  expect_both(p, in, out, "num_groups");
  p.num_groups = 4096;  // the most: passes (a later rule fails here)
  expect_both(p, in, bq::MxBf16Outputs{}, "outputs");
  p.num_groups = 8;
  in.row_index = at<const int32_t>(kIndex);
  p.input_rows = -1;
  expect_both(p, in, out, "input_rows");
  p.input_rows = 0;  // every index reads a zero row: valid
  expect_both(p, in, bq::MxBf16Outputs{}, "outputs");
  in.row_index = nullptr;  // input_rows matters only with row_index
  p.input_rows = -1;
  expect_both(p, in, bq::MxBf16Outputs{}, "outputs");
}

TEST(MxBf16Api, PointersMustBeGiven) {
  const bq::MxBf16Outputs out = good_outputs();
  bq::MxBf16Problem p = good_problem();
  expect_both(p, bq::MxBf16Inputs{}, out, "x");
  p.num_groups = 3;
  expect_both(p, bq::MxBf16Inputs{}, out, "x");
  bq::MxBf16Inputs in = good_inputs();
  expect_both(p, in, out, "group_ends");
  in.row_index = at<const int32_t>(kIndex), p.input_rows = 50;
  expect_both(p, in, out, "group_ends");
  in.group_ends = at<const int32_t>(kEnds);
  expect_both(p, in, bq::MxBf16Outputs{}, "outputs");
  // An empty problem needs no x (the outputs rule is the first to fail here).
  for (const auto& shape : {std::pair<int64_t, int64_t>{0, 64}, {64, 0}, {0, 0}}) {
    p = good_problem(), p.rows = shape.first, p.cols = shape.second;
    expect_both(p, bq::MxBf16Inputs{}, bq::MxBf16Outputs{}, "outputs");
  }
  // Either output alone passes the pointer rules: what fails (without a GPU) is no argument's.
  bq::MxBf16Outputs row_only = out, col_only = out;
  row_only.columnwise = nullptr, col_only.rowwise = nullptr;
  p = good_problem();
  for (const bq::MxBf16Outputs& o : {row_only, col_only}) {
    const blockscale::Status s = bq::can_implement(p, good_inputs(), o);
    EXPECT_FALSE(is_argument(named_argument(s))) << s.message();
  }
}

TEST(MxBf16Api, OutputsMustNotOverlap) {
  const bq::MxBf16Problem p = good_problem();  // 64 x 64: x 16 KiB, each output 8 KiB
  const bq::MxBf16Inputs in = good_inputs();
  bq::MxBf16Outputs o = good_outputs();
  o.rowwise = at<uint16_t>(kX + 64 * 64 * 4 - 2);  // on x's last element
  expect_both(p, in, o, "rowwise");
  o = good_outputs(), o.rowwise = at<uint16_t>(kX - 64 * 64 * 2 + 2);  // its last element on x's first
  expect_both(p, in, o, "rowwise");
  o = good_outputs(), o.columnwise = at<uint16_t>(kX + 1000);
  expect_both(p, in, o, "columnwise");
  o = good_outputs(), o.columnwise = o.rowwise + 100;  // inside the rowwise copy
  for (const blockscale::Status& s : {bq::can_implement(p, in, o), bq::run(p, in, o, nullptr)}) {
    ASSERT_FALSE(s.is_ok());
    const std::string named = named_argument(s);
    EXPECT_TRUE(named == "rowwise" || named == "columnwise") << s.message();
  }
  o = good_outputs(), o.rowwise = o.columnwise;  // the same buffer twice
  EXPECT_FALSE(bq::can_implement(p, in, o).is_ok());
  // An overlapping output that is not requested is no overlap; one only adjacent to x neither.
  o = good_outputs(), o.rowwise = nullptr, o.columnwise = at<uint16_t>(kX + 64 * 64 * 4);
  blockscale::Status s = bq::can_implement(p, in, o);
  EXPECT_FALSE(is_argument(named_argument(s))) << s.message();
  o.rowwise = at<uint16_t>(kX - 64 * 64 * 2);  // rowwise just before x, columnwise just after
  s = bq::can_implement(p, in, o);
  EXPECT_FALSE(is_argument(named_argument(s))) << s.message();
  // With row_index, x has input_rows rows: an output past rows x cols but inside them overlaps.
  bq::MxBf16Problem g = p;
  g.num_groups = 2, g.input_rows = 200;
  bq::MxBf16Inputs gi = in;
  gi.group_ends = at<const int32_t>(kEnds), gi.row_index = at<const int32_t>(kIndex);
  o = good_outputs(), o.rowwise = at<uint16_t>(kX + 150 * 64 * 4);
  expect_both(g, gi, o, "rowwise");
  o = good_outputs(), o.columnwise = at<uint16_t>(kX + 200 * 64 * 4 - 2);
  expect_both(g, gi, o, "columnwise");
}

// The rules apply in the order of quant/mx_bf16.h: recipe, rows / cols, batches, num_groups,
// input_rows, x, group_ends, outputs, then the overlaps.
TEST(MxBf16Api, ChecksInOrder) {
  bq::MxBf16Problem p = good_problem();
  p.recipe = Format::kNvfp4, p.rows = -1, p.batches = 0, p.num_groups = -1;
  bq::MxBf16Inputs none;
  none.row_index = at<const int32_t>(kIndex);
  p.input_rows = -1;
  const bq::MxBf16Outputs no_out;
  expect_both(p, none, no_out, "recipe");
  p.recipe = Format::kMxfp8E4M3;
  expect_both(p, none, no_out, "rows");
  p.rows = 64;
  expect_both(p, none, no_out, "batches");
  p.batches = 1;
  expect_both(p, none, no_out, "num_groups");
  p.num_groups = 2;
  expect_both(p, none, no_out, "input_rows");
  p.input_rows = 64;
  expect_both(p, none, no_out, "x");
  bq::MxBf16Inputs in = none;
  in.x = at<const float>(kX);
  expect_both(p, in, no_out, "group_ends");
  in.group_ends = at<const int32_t>(kEnds);
  expect_both(p, in, no_out, "outputs");
  bq::MxBf16Outputs o;
  o.rowwise = at<uint16_t>(kX);
  expect_both(p, in, o, "rowwise");
}

// A valid problem passes can_implement on a GPU (the kernel image is there).
TEST(MxBf16Api, ValidProblemsPassOnTheGpu) {
  SKIP_WITHOUT_GPU();
  bq::MxBf16Problem p;
  p.rows = 64, p.cols = 64;
  bq::MxBf16Inputs in = good_inputs();
  bq::MxBf16Outputs out = good_outputs();
  blockscale::Status s = bq::can_implement(p, in, out);
  EXPECT_TRUE(s.is_ok()) << s.message();
  p.recipe = Format::kMxfp8E5M2, p.rounding = ScaleRounding::kFloor, p.batches = 2;
  s = bq::can_implement(p, in, out);
  EXPECT_TRUE(s.is_ok()) << s.message();
  p.batches = 1, p.num_groups = 4096;
  in.group_ends = at<const int32_t>(kEnds);
  s = bq::can_implement(p, in, out);
  EXPECT_TRUE(s.is_ok()) << s.message();
  p.input_rows = 10;
  in.row_index = at<const int32_t>(kIndex);
  out.rowwise = nullptr;
  s = bq::can_implement(p, in, out);
  EXPECT_TRUE(s.is_ok()) << s.message();
}

}  // namespace
