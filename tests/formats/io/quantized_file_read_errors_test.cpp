// Tests of formats/io/quantized_file.h, read_quantized_tensor's checks: one test per rule the
// reader enforces (metadata keys and values, tensor dtypes and shapes, scales and element codes
// quantize never writes), each error naming the key or tensor at fault.
#include "tests/formats/io/quantized_file_test_helpers.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace blockscale::io {
namespace {

using namespace quantized_file_testing;

TEST(QuantizedFileReadErrors, MissingMetadataKey) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  for (const char* suffix : {".recipe", ".rounding", ".direction", ".shape", ".block", ".transform"}) {
    Meta meta = e.meta;
    ASSERT_EQ(meta.erase(std::string("w") + suffix), 1u);
    const Status s = write_and_read(e.tensors, meta);
    EXPECT_TRUE(mentions(s, "'w" + std::string(suffix) + "': missing metadata key")) << s.message();
  }
  EXPECT_TRUE(mentions(write_and_read(e.tensors, e.meta, "x"), "'x.recipe': missing metadata key"));
}

TEST(QuantizedFileReadErrors, MissingTensor) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  for (const char* key : {"w.data", "w.scale"}) {
    Tensors tensors = e.tensors;
    erase(&tensors, key);
    EXPECT_TRUE(mentions(write_and_read(tensors, e.meta), "'" + std::string(key) + "': missing tensor"));
  }
}

TEST(QuantizedFileReadErrors, UnknownValues) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  EXPECT_TRUE(mentions(read_with_meta(e, "w.recipe", "mxfp9"), "'w.recipe': unknown recipe 'mxfp9'"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.rounding", "up"), "'w.rounding': unknown rounding 'up'"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.direction", "both"), "'w.direction': unknown direction 'both'"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.direction", "Rowwise"), "'w.direction'"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.transform", "rht8"), "'w.transform': unknown transform 'rht8'"));
}

TEST(QuantizedFileReadErrors, RoundingMustBelongToTheRecipe) {
  Entry mx, nv;
  build(&mx, Format::kMxfp8E4M3, {3, 33});
  build(&nv, Format::kNvfp4, {3, 32});
  EXPECT_TRUE(mentions(read_with_meta(mx, "w.rounding", "rn"), "'w.rounding': 'rn' does not belong to recipe mxfp8"));
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.rounding", "ceil"), "'w.rounding': 'ceil' does not belong to recipe nvfp4"));
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.rounding", "floor"), "expected rn"));
  EXPECT_TRUE(read_with_meta(mx, "w.rounding", "floor")) << "floor is an MX rounding";
}

TEST(QuantizedFileReadErrors, TransformMustBelongToTheRecipe) {
  Entry mx, nv2d, nv_odd;
  build(&mx, Format::kMxfp8E4M3, {3, 32});
  build(&nv2d, Format::kNvfp4, {16, 32}, f::Direction::kRowwise, true);
  build(&nv_odd, Format::kNvfp4, {3, 33});
  for (const Entry* e : {&mx, &nv2d, &nv_odd})
    EXPECT_TRUE(mentions(read_with_meta(*e, "w.transform", "rht16"), "'w.transform': rht16 applies to nvfp4 with 1x16"));
  Entry nv;
  build(&nv, Format::kNvfp4, {3, 32});
  QuantizedTensor back;
  Meta meta = nv.meta;
  meta["w.transform"] = "rht16";
  ASSERT_TRUE(write_and_read(nv.tensors, meta, "w", &back));
  EXPECT_TRUE(back.hadamard);
}

TEST(QuantizedFileReadErrors, MalformedShape) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  for (const char* bad : {"", "3,33", "[3,,33]", "[3,33", "[3,-33]", "[a]", "[3.0,33]", "[03,33]",
                          "[3,33]x", "(3, 33)", "[+3,33]", "[99999999999999999999,1]", "[3 33]"}) {
    const Status s = read_with_meta(e, "w.shape", bad);
    EXPECT_TRUE(mentions(s, "'w.shape': ") && mentions(s, "is not a JSON list")) << bad << ": " << s.message();
  }
  EXPECT_TRUE(read_with_meta(e, "w.shape", " [ 3 , 33 ] ")) << "JSON whitespace is allowed";
  EXPECT_TRUE(read_with_meta(e, "w.shape", "[1,3,33]")) << "the same 2D view";
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[]"), "'w.shape': shape []: rank 0"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[0,33]"), "'w.shape': shape [0,33]: empty tensor"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[4294967296,4294967296]"), "overflows"));
  std::string deep = "[";
  for (int k = 0; k < 65; ++k) deep += k ? ",1" : "1";
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", deep + "]"), "'w.shape': rank exceeds"));
}

TEST(QuantizedFileReadErrors, ShapeThatDoesNotMatchTheTensors) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[3,34]"), "'w.data': shape [3,33], expected [3,34]"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[33,3]"), "'w.data': shape [3,33], expected [33,3]"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.direction", "columnwise"), "'w.data': shape [3,33], expected [33,3]"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.shape", "[2,33]"), "'w.data': shape [3,33], expected [2,33]"));
}

TEST(QuantizedFileReadErrors, Block) {
  Entry mx, nv;
  build(&mx, Format::kMxfp8E4M3, {3, 33});
  build(&nv, Format::kNvfp4, {3, 32});
  for (const char* bad : {"", "1by32", "x32", "1x", "1x32 ", "1X32", "-1x32", "1x32x1", "01x32"})
    EXPECT_TRUE(mentions(read_with_meta(mx, "w.block", bad), "'w.block': ")) << bad;
  EXPECT_TRUE(mentions(read_with_meta(mx, "w.block", "1by32"), "is not ROWSxCOLS"));
  EXPECT_TRUE(mentions(read_with_meta(mx, "w.block", "1x16"), "'w.block': '1x16' is not a block of recipe mxfp8 (1x32)"));
  EXPECT_TRUE(mentions(read_with_meta(mx, "w.block", "32x32"), "is not a block of recipe mxfp8"));
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.block", "32x32"), "(1x16 or 16x16)"));
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.block", "99999999999x16"), "is not a block"));
  // A legal block that the tensors were not quantized with: the scale shape says so.
  EXPECT_TRUE(mentions(read_with_meta(nv, "w.block", "16x16"), "'w.scale': shape [3,2], expected [1,2]"));
}

TEST(QuantizedFileReadErrors, DataDtypeAndShape) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  Tensors tensors = e.tensors;
  find(&tensors, "w.data")->dtype = DType::kU8;
  EXPECT_TRUE(mentions(write_and_read(tensors, e.meta), "'w.data': dtype U8, expected F8_E4M3"));
  // The same bytes under another recipe with the same block.
  EXPECT_TRUE(mentions(read_with_meta(e, "w.recipe", "mxfp8_e5m2"), "'w.data': dtype F8_E4M3, expected F8_E5M2"));
  EXPECT_TRUE(mentions(read_with_meta(e, "w.recipe", "mxfp4"), "'w.data': dtype F8_E4M3, expected U8"));
  tensors = e.tensors;
  find(&tensors, "w.data")->shape = {1, 99};
  EXPECT_TRUE(mentions(write_and_read(tensors, e.meta), "'w.data': shape [1,99], expected [3,33]"));
}

TEST(QuantizedFileReadErrors, ScaleDtypeAndShape) {
  Entry mx, fp8;
  build(&mx, Format::kMxfp8E4M3, {3, 33});
  build(&fp8, Format::kFp8Block1x128, {2, 200});
  Tensors tensors = fp8.tensors;
  TensorView* s = find(&tensors, "w.scale");
  s->dtype = DType::kU8;
  s->shape = {2, 8};
  EXPECT_TRUE(mentions(write_and_read(tensors, fp8.meta), "'w.scale': dtype U8, expected F32"));
  tensors = mx.tensors;
  const std::vector<uint8_t> four(24, 1);
  *find(&tensors, "w.scale") = TensorView{DType::kF32, {3, 2}, four.data(), 24};
  EXPECT_TRUE(mentions(write_and_read(tensors, mx.meta), "'w.scale': dtype F32, expected U8"));
  tensors = mx.tensors;
  find(&tensors, "w.scale")->shape = {2, 3};
  EXPECT_TRUE(mentions(write_and_read(tensors, mx.meta), "'w.scale': shape [2,3], expected [3,2]"));
  *find(&tensors, "w.scale") = TensorView{DType::kU8, {3, 3}, four.data(), 9};
  EXPECT_TRUE(mentions(write_and_read(tensors, mx.meta), "'w.scale': shape [3,3], expected [3,2]"));
}

TEST(QuantizedFileReadErrors, GlobalScaleIffNvfp4) {
  Entry nv, mx;
  build(&nv, Format::kNvfp4, {3, 32});
  build(&mx, Format::kMxfp8E4M3, {3, 33});
  Tensors tensors = nv.tensors;
  erase(&tensors, "w.global_scale");
  EXPECT_TRUE(mentions(write_and_read(tensors, nv.meta), "'w.global_scale': missing tensor"));
  const float g = 0.5f;
  tensors = mx.tensors;
  tensors.push_back({"w.global_scale", TensorView{DType::kF32, {}, reinterpret_cast<const uint8_t*>(&g), 4}});
  EXPECT_TRUE(mentions(write_and_read(tensors, mx.meta), "'w.global_scale': only nvfp4 entries have a global scale"));
  tensors = nv.tensors;
  find(&tensors, "w.global_scale")->shape = {1};
  EXPECT_TRUE(mentions(write_and_read(tensors, nv.meta), "'w.global_scale': shape [1], expected []"));
  tensors = nv.tensors;
  find(&tensors, "w.global_scale")->dtype = DType::kI32;
  EXPECT_TRUE(mentions(write_and_read(tensors, nv.meta), "'w.global_scale': dtype I32, expected F32"));
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    tensors = nv.tensors;
    find(&tensors, "w.global_scale")->data = reinterpret_cast<const uint8_t*>(&bad);
    EXPECT_TRUE(mentions(write_and_read(tensors, nv.meta), "'w.global_scale': ")) << bad;
  }
}

TEST(QuantizedFileReadErrors, ScalesQuantizeNeverWrites) {
  Entry fp8, nv;
  build(&fp8, Format::kFp8Block1x128, {3, 300});
  build(&nv, Format::kNvfp4, {3, 32});
  // The views point into t.q: a scale changed there is what the file holds.
  for (float bad : {-0.5f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()}) {
    fp8.t.q.scales_f32[4] = bad;  // block (1, 1) of a 3 x 3 grid
    EXPECT_TRUE(mentions(write_and_read(fp8.tensors, fp8.meta), "'w.scale': scale (1, 1) is ")) << bad;
    EXPECT_TRUE(mentions(write_and_read(fp8.tensors, fp8.meta), "finite values >= 0 (or NaN")) << bad;
  }
  fp8.t.q.scales_f32[4] = std::numeric_limits<float>::quiet_NaN();  // a block that held NaN
  EXPECT_TRUE(write_and_read(fp8.tensors, fp8.meta));
  nv.t.q.scales[3] = 0x85;  // block (1, 1) of 3 x 2
  EXPECT_TRUE(mentions(write_and_read(nv.tensors, nv.meta), "'w.scale': scale (1, 1) is code 0x85"));
}

TEST(QuantizedFileReadErrors, ElementCodesTheDecodersWouldMisread) {
  Entry fp4, fp6;
  build(&fp4, Format::kMxfp4, {3, 33});
  build(&fp6, Format::kMxfp6E3M2, {3, 33});
  fp4.t.q.data[2 * 17 + 16] |= 0x10;  // row 2's padding nibble (the views point into t.q)
  EXPECT_TRUE(mentions(write_and_read(fp4.tensors, fp4.meta), "'w.data': row 2 has a non-zero padding nibble"));
  fp6.t.q.data[40] |= 0x40;
  EXPECT_TRUE(mentions(write_and_read(fp6.tensors, fp6.meta), "'w.data': element (1, 7) is not a 6-bit code"));
}

TEST(QuantizedFileReadErrors, ArgumentsAndAnErrorLeavesOutUnchanged) {
  Entry e;
  build(&e, Format::kMxfp8E4M3, {3, 33});
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("q.safetensors"), e.tensors, e.meta));
  SafetensorsFile file;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("q.safetensors"), &file));
  EXPECT_TRUE(mentions(read_quantized_tensor(file, "w", nullptr), "out: must not be null"));
  QuantizedTensor out;
  out.name = "untouched";
  EXPECT_TRUE(mentions(read_quantized_tensor(file, "", &out), "name: the entry name must not be empty"));
  EXPECT_TRUE(mentions(read_quantized_tensor(file, "v", &out), "'v.recipe'"));
  EXPECT_EQ(out.name, "untouched");
  EXPECT_TRUE(out.q.data.empty());
}

}  // namespace
}  // namespace blockscale::io
