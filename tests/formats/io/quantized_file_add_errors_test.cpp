// Tests of formats/io/quantized_file.h, add_quantized_tensor's checks: each bad entry is refused
// with a message naming the field, and leaves the caller's tensors and metadata unchanged.
#include "tests/formats/io/quantized_file_test_helpers.h"

#include <gtest/gtest.h>

#include <string>

namespace blockscale::io {
namespace {

using namespace quantized_file_testing;

class QuantizedFileAddErrors : public testing::Test {
 protected:
  void SetUp() override { build(&e_, Format::kMxfp8E4M3, {3, 40}); }
  // Adds t to a fresh pair of containers holding one unrelated entry; they must be unchanged.
  Status add(const QuantizedTensor& t) {
    Tensors tensors = e_.tensors;
    Meta meta = e_.meta;
    const Status s = add_quantized_tensor(t, &tensors, &meta);
    if (!s) {
      EXPECT_EQ(tensors.size(), e_.tensors.size()) << "an error changed tensors";
      EXPECT_EQ(meta, e_.meta) << "an error changed metadata";
    }
    return s;
  }
  QuantizedTensor fresh(Format r, bool nvfp4_2d = false, f::Direction d = f::Direction::kRowwise) {
    Entry e;
    build(&e, r, {32, 48}, d, nvfp4_2d, "v");
    return e.t;
  }
  Entry e_;
};

TEST_F(QuantizedFileAddErrors, AValidEntryIsAccepted) { EXPECT_TRUE(add(fresh(Format::kNvfp4))); }

TEST_F(QuantizedFileAddErrors, EmptyName) {
  QuantizedTensor t = fresh(Format::kMxfp4);
  t.name = "";
  EXPECT_TRUE(mentions(add(t), "name: the entry name must not be empty"));
}

TEST_F(QuantizedFileAddErrors, ShapeMismatch) {
  QuantizedTensor t = fresh(Format::kMxfp4);
  t.shape = {32, 49};
  EXPECT_TRUE(mentions(add(t), "shape [32,49]"));
  t.shape = {48, 32};  // the transpose: only right for a columnwise copy
  EXPECT_TRUE(mentions(add(t), "rowwise copy stores [rows, cols]"));
  t.direction = f::Direction::kColumnwise;
  EXPECT_TRUE(add(t));
  t.shape = {32, 48};
  EXPECT_TRUE(mentions(add(t), "columnwise copy stores [cols, rows]"));
  t.shape = {2, 16, 48};  // rank 3 with the same 2D view
  t.direction = f::Direction::kRowwise;
  EXPECT_TRUE(add(t));
  t.direction = f::Direction::kBoth;  // a stored tensor is one copy
  EXPECT_TRUE(mentions(add(t), "direction: a stored copy is rowwise or columnwise"));
}

TEST_F(QuantizedFileAddErrors, ScalarAndEmptyShapes) {
  QuantizedTensor t = fresh(Format::kMxfp4);
  t.shape = {};
  EXPECT_TRUE(mentions(add(t), "rank 0"));
  t.shape = {0, 48};
  EXPECT_TRUE(mentions(add(t), "empty tensor"));
}

TEST_F(QuantizedFileAddErrors, OptionsThatDoNotBelongToTheRecipe) {
  QuantizedTensor t = fresh(Format::kNvfp4);
  t.rounding = f::ScaleRounding::kFloor;
  EXPECT_TRUE(mentions(add(t), "rounding: floor applies to MX recipes only, not nvfp4"));
  QuantizedTensor b = fresh(Format::kMxfp8E4M3);
  b.rounding = f::ScaleRounding::kBoth;  // a stored tensor has one rule
  EXPECT_TRUE(mentions(add(b), "rounding: a stored copy has one rule, ceil or floor"));
  QuantizedTensor m = fresh(Format::kMxfp8E4M3);
  m.hadamard = true;
  EXPECT_TRUE(mentions(add(m), "hadamard: applies to nvfp4"));
  QuantizedTensor two_d = fresh(Format::kNvfp4, true);
  two_d.hadamard = true;
  EXPECT_TRUE(mentions(add(two_d), "hadamard: applies to nvfp4 with 1x16 blocks only"));
  QuantizedTensor g = fresh(Format::kFp8Block1x128);
  g.q.global_scale_dec = 2.0f;
  EXPECT_TRUE(mentions(add(g), "q.global_scale_dec"));
  QuantizedTensor n = fresh(Format::kNvfp4);
  n.q.global_scale_dec = 0.0f;
  EXPECT_TRUE(mentions(add(n), "q.global_scale_dec"));
}

TEST_F(QuantizedFileAddErrors, InvalidMatrix) {
  QuantizedTensor t = fresh(Format::kMxfp8E4M3);
  t.q.data.pop_back();
  EXPECT_TRUE(mentions(add(t), "q.data"));
  t = fresh(Format::kMxfp8E4M3);
  t.q.block_cols = 16;
  EXPECT_TRUE(mentions(add(t), "block shape"));
}

TEST_F(QuantizedFileAddErrors, KeysAlreadyPresent) {
  QuantizedTensor t = fresh(Format::kMxfp4);
  t.name = "w";  // e_ is entry "w"
  EXPECT_TRUE(mentions(add(t), "metadata key 'w.recipe' is already in the file"));
  // A foreign tensor under one of the entry's names: the write refuses the duplicate.
  Tensors tensors = {{"v.scale", TensorView{DType::kU8, {1}, e_.t.q.data.data(), 1}}};
  Meta meta;
  const QuantizedTensor v = fresh(Format::kMxfp4);
  ASSERT_TRUE(add_quantized_tensor(v, &tensors, &meta));
  TempDir dir;
  EXPECT_TRUE(mentions(write_safetensors(dir.file("q.safetensors"), tensors, meta), "duplicate name 'v.scale'"));
  EXPECT_FALSE(fs::exists(dir.file("q.safetensors")));
  tensors.clear();
  meta = {{"v.shape", "[1]"}};
  EXPECT_TRUE(mentions(add_quantized_tensor(fresh(Format::kMxfp4), &tensors, &meta), "'v.shape'"));
  EXPECT_TRUE(mentions(add_quantized_tensor(fresh(Format::kMxfp4), nullptr, &meta), "null"));
}

}  // namespace
}  // namespace blockscale::io
