// Tests of quant/quantize.cpp: the output sizes of every recipe and the argument checks of the
// dense, grouped and dequantize entry points (each error names the argument and the rule). No GPU
// needed: the checks run before anything touches the device, on fake addresses.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "formats/scale_layout.h"
#include "quant/quantize.h"
#include "tests/status_test.h"  // defines: expect_error

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
using bf::Format;
using bf::Direction;
using bf::ScaleRounding;
using blockscale_test::expect_error;

bq::QuantizeProblem problem(Format r, int64_t rows, int64_t cols, Direction d = Direction::kBoth) {
  bq::QuantizeProblem p;
  p.recipe = r, p.rows = rows, p.cols = cols, p.ld = cols, p.directions = d;
  return p;
}

// Fake, well-separated, 16-byte aligned device addresses (never dereferenced by the checks).
template <typename T = uint8_t>
T* at(uintptr_t a) { return reinterpret_cast<T*>(a); }

bq::QuantizeOutputs outputs_for(const bq::QuantizeProblem& p) {
  bq::QuantizeOutputs o;
  o.rowwise_data = at(0x1000000), o.rowwise_scales = at(0x2000000);
  o.columnwise_data = at(0x3000000), o.columnwise_scales = at(0x4000000);
  if (p.recipe == Format::kNvfp4) o.rowwise_scale_dec = at<float>(0x5000000), o.columnwise_scale_dec = at<float>(0x5000010);
  return o;
}
const bq::QuantizeInputs kInputs{at(0x100000), at<float>(0x6000000), at<float>(0x6000000)};

TEST(QuantizeSizes, EveryRecipe) {
  // MX: one byte per element (E2M1: two per byte), E8M0 scales swizzled per 32 elements.
  auto p = problem(Format::kMxfp8E4M3, 300, 1000);
  EXPECT_EQ(bq::rowwise_data_bytes(p), 300 * 1000);
  EXPECT_EQ(bq::rowwise_scale_bytes(p), bf::swizzled_scale_bytes(300, 32));
  EXPECT_EQ(bq::columnwise_scale_bytes(p), bf::swizzled_scale_bytes(1000, 10));
  p = problem(Format::kMxfp4, 301, 999);
  EXPECT_EQ(bq::rowwise_data_bytes(p), 301 * 500);
  EXPECT_EQ(bq::columnwise_data_bytes(p), 999 * 151);
  // NVFP4: 16-element blocks, 1D and 2D alike (2D scales are written per row, as the GEMM reads).
  p = problem(Format::kNvfp4, 33, 47);
  EXPECT_EQ(bq::rowwise_scale_bytes(p), bf::swizzled_scale_bytes(33, 3));
  p.nvfp4_2d = true;
  EXPECT_EQ(bq::rowwise_scale_bytes(p), bf::swizzled_scale_bytes(33, 3));
  EXPECT_EQ(bq::columnwise_scale_bytes(p), bf::swizzled_scale_bytes(47, 3));
  // FP8 blockwise: fp32 scales in the cuBLASLt layouts.
  p = problem(Format::kFp8Block1x128, 130, 300);
  EXPECT_EQ(bq::rowwise_scale_bytes(p), bf::vec128_scale_floats(130, 3) * 4);
  EXPECT_EQ(bq::columnwise_scale_bytes(p), bf::vec128_scale_floats(300, 2) * 4);
  p = problem(Format::kFp8Block128x128, 130, 300);
  EXPECT_EQ(bq::rowwise_scale_bytes(p), bf::blk128_scale_floats(2, 3) * 4);
  EXPECT_EQ(bq::columnwise_scale_bytes(p), bf::blk128_scale_floats(3, 2) * 4);
  // Directions not requested and empty shapes take no bytes.
  p = problem(Format::kMxfp8E4M3, 64, 64, Direction::kRowwise);
  EXPECT_EQ(bq::columnwise_data_bytes(p), 0);
  EXPECT_EQ(bq::columnwise_scale_bytes(p), 0);
  p = problem(Format::kMxfp8E4M3, 0, 64);
  EXPECT_EQ(bq::rowwise_data_bytes(p), 0);
  EXPECT_EQ(bq::rowwise_scale_bytes(p), 0);
}

TEST(QuantizeChecks, RecipeOptions) {
  auto p = problem(Format::kMxfp6E2M3, 64, 64);
  expect_error(bq::can_implement(p), "problem.recipe");
  p = problem(Format::kNvfp4, 64, 64), p.rounding = bf::ScaleRounding::kFloor;
  expect_error(bq::can_implement(p), "problem.rounding");
  p = problem(Format::kMxfp8E4M3, 64, 64), p.pow2_scales = true;
  expect_error(bq::can_implement(p), "problem.pow2_scales");
  p = problem(Format::kMxfp4, 64, 64), p.nvfp4_2d = true;
  expect_error(bq::can_implement(p), "problem.nvfp4_2d");
  p = problem(Format::kFp8Block1x128, 64, 64), p.stochastic_rounding = true;
  expect_error(bq::can_implement(p), "problem.stochastic_rounding");
  p = problem(Format::kMxfp8E4M3, 64, 64), p.hadamard_columnwise = true;
  expect_error(bq::can_implement(p), "problem.hadamard_columnwise");
  p = problem(Format::kMxfp8E4M3, 64, 64), p.tensor_amax = bq::TensorAmax::kGiven;
  expect_error(bq::can_implement(p), "problem.tensor_amax");
  p = problem(Format::kNvfp4, 64, 64), p.hadamard_columnwise = true, p.nvfp4_2d = true;
  expect_error(bq::can_implement(p), "nvfp4_2d");
  p = problem(Format::kNvfp4, 64, 64, Direction::kRowwise), p.hadamard_columnwise = true;
  expect_error(bq::can_implement(p), "needs the columnwise copy");
  p = problem(Format::kNvfp4, 40, 64), p.hadamard_columnwise = true;
  expect_error(bq::can_implement(p), "multiple of 16");
  p = problem(Format::kNvfp4, 48, 64), p.hadamard_columnwise = true, p.stochastic_rounding = true;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  p = problem(Format::kMxfp8E4M3, -1, 64);
  expect_error(bq::can_implement(p), "problem.rows");
  p = problem(Format::kMxfp8E4M3, 64, 64), p.ld = 63;
  expect_error(bq::can_implement(p), "problem.ld");
}

// The kernels read BF16, F16 and F32 input; every other dtype is refused by name.
TEST(QuantizeChecks, InputDtype) {
  for (bf::DType t : {bf::DType::kBf16, bf::DType::kF16, bf::DType::kF32}) {
    auto p = problem(Format::kNvfp4, 64, 64);
    p.input_type = t;
    EXPECT_TRUE(bq::can_implement(p).is_ok()) << bf::dtype_name(t);
  }
  auto p = problem(Format::kMxfp8E4M3, 64, 64);
  p.input_type = bf::DType::kI32;
  expect_error(bq::can_implement(p), "problem.input_type: x's dtype must be BF16, F16 or F32, got I32");
  p.input_type = bf::DType::kF64;
  expect_error(bq::can_implement(p), "got F64");
  bq::GroupedQuantizeProblem g{problem(Format::kMxfp8E4M3, 100, 64), 8};
  g.dense.input_type = bf::DType::kU8;
  expect_error(bq::can_implement(g), "x's dtype must be BF16, F16 or F32, got U8");
}

// formats' options carry over field by field; the shape is dense (ld = cols).
TEST(QuantizeApi, ProblemFromOptions) {
  bf::QuantizeOptions o;
  o.recipe = Format::kNvfp4, o.rounding = ScaleRounding::kFloor, o.pow2_scales = true, o.nvfp4_2d = true;
  o.stochastic_rounding = true, o.sr_seed = 7, o.sr_offset = 9, o.hadamard = true;
  const bq::QuantizeProblem p = bq::problem_from_options(o, bf::DType::kF16, 48, 64, Direction::kColumnwise);
  EXPECT_EQ(p.recipe, Format::kNvfp4);
  EXPECT_EQ(p.rounding, ScaleRounding::kFloor);
  EXPECT_EQ(p.input_type, bf::DType::kF16);
  EXPECT_EQ(p.rows, 48);
  EXPECT_EQ(p.cols, 64);
  EXPECT_EQ(p.ld, 64);
  EXPECT_EQ(p.directions, Direction::kColumnwise);
  EXPECT_TRUE(p.pow2_scales);
  EXPECT_TRUE(p.nvfp4_2d);
  EXPECT_TRUE(p.stochastic_rounding);
  EXPECT_EQ(p.sr_seed, 7u);
  EXPECT_EQ(p.sr_offset, 9u);
  EXPECT_TRUE(p.hadamard_columnwise);
  EXPECT_EQ(p.tensor_amax, bq::TensorAmax::kMeasure);
}

TEST(QuantizeChecks, Pointers) {
  const auto nv = problem(Format::kNvfp4, 64, 64);
  EXPECT_TRUE(bq::can_implement(nv, kInputs, outputs_for(nv)).is_ok());
  auto o = outputs_for(nv);
  o.columnwise_scale_dec = nullptr;
  expect_error(bq::can_implement(nv, kInputs, o), "outputs.columnwise_scale_dec");
  o = outputs_for(nv), o.rowwise_scale_dec = at<float>(0x5000002);
  expect_error(bq::can_implement(nv, kInputs, o), "outputs.rowwise_scale_dec: must be 4-byte aligned");
  o = outputs_for(nv), o.columnwise_amax = at<float>(0x7000000);
  expect_error(bq::can_implement(nv, kInputs, o), "outputs.columnwise_amax");
  // A given amax must be there, and apart from every output.
  auto given = nv;
  given.tensor_amax = bq::TensorAmax::kGiven;
  bq::QuantizeInputs in = kInputs;
  in.columnwise_tensor_amax = nullptr;
  expect_error(bq::can_implement(given, in, outputs_for(given)), "inputs.columnwise_tensor_amax");
  in = kInputs, in.rowwise_tensor_amax = at<float>(0x1000000);
  expect_error(bq::can_implement(given, in, outputs_for(given)), "inputs.rowwise_tensor_amax: overlaps");
  // fp32 scales need 4-byte alignment.
  const auto fp8 = problem(Format::kFp8Block1x128, 64, 256);
  o = outputs_for(fp8), o.columnwise_scales = at(0x4000002);
  expect_error(bq::can_implement(fp8, kInputs, o), "outputs.columnwise_scales: fp32 scales");
  EXPECT_TRUE(bq::can_implement(fp8, kInputs, outputs_for(fp8)).is_ok());
  // run() refuses a missing workspace before launching anything.
  if (bq::workspace_size(nv) > 0)
    expect_error(bq::run(nv, kInputs, outputs_for(nv), nullptr, 0, nullptr), "workspace");
}

TEST(QuantizeChecks, Grouped) {
  bq::GroupedQuantizeProblem g{problem(Format::kMxfp8E4M3, 100, 64), 8};
  EXPECT_EQ(bq::grouped_capacity(g), (100 + 8 * 31) / 32 * 32);
  EXPECT_EQ(bq::grouped_columnwise_data_bytes(g), 64 * bq::grouped_capacity(g));
  EXPECT_EQ(bq::grouped_columnwise_scale_bytes(g), bf::swizzled_scale_bytes(64, bq::grouped_capacity(g) / 32));
  g.dense.recipe = Format::kMxfp4;
  EXPECT_EQ(bq::grouped_columnwise_data_bytes(g), 64 * (bq::grouped_capacity(g) / 2));
  EXPECT_TRUE(bq::can_implement(g).is_ok());
  g.num_groups = 0;
  expect_error(bq::can_implement(g), "problem.num_groups");
  g.num_groups = 8, g.dense.recipe = Format::kFp8Block1x128;
  EXPECT_TRUE(bq::can_implement(g).is_ok()) << "the activations' 1x128 blocks have a grouped mode";
  EXPECT_EQ(bq::grouped_capacity(g), (100 + 8 * 127) / 128 * 128);
  g.dense.recipe = Format::kFp8Block128x128;
  expect_error(bq::can_implement(g), "problem.dense.recipe");
  g.dense.recipe = Format::kNvfp4;
  EXPECT_TRUE(bq::can_implement(g).is_ok()) << bq::can_implement(g).message();
  g.dense.nvfp4_2d = true;
  expect_error(bq::can_implement(g), "problem.dense.nvfp4_2d");
  g.dense.nvfp4_2d = false;
  g.dense.recipe = Format::kMxfp8E4M3;
  bq::GroupedQuantizeInputs in{at(0x100000), nullptr};
  bq::GroupedQuantizeOutputs out{outputs_for(g.dense), at<int32_t>(0x8000000)};
  expect_error(bq::can_implement(g, in, out), "inputs.group_ends");
  in.group_ends = at<int32_t>(0x9000000);
  EXPECT_TRUE(bq::can_implement(g, in, out).is_ok());
  out.padded_group_ends = nullptr;
  expect_error(bq::can_implement(g, in, out), "outputs.padded_group_ends");
  out.padded_group_ends = at<int32_t>(0x9000004);  // inside group_ends
  expect_error(bq::can_implement(g, in, out), "outputs.padded_group_ends: overlaps inputs.group_ends");
}

TEST(DequantizeChecks, Arguments) {
  bq::DequantizeProblem p;
  p.recipe = Format::kNvfp4, p.rows = 16, p.cols = 32;
  const bq::DequantizeInputs in{at(0x1000000), at(0x2000000), nullptr};
  expect_error(bq::dequantize(p, in, at<float>(0x3000000), nullptr), "inputs.scale_dec");
  p.recipe = Format::kFp8Block128x128;
  const bq::DequantizeInputs odd{at(0x1000000), at(0x2000001), nullptr};
  expect_error(bq::dequantize(p, odd, at<float>(0x3000000), nullptr), "inputs.scales");
  expect_error(bq::dequantize(p, in, at<float>(0x3000002), nullptr), "out: must be 4-byte aligned");
  expect_error(bq::dequantize(p, in, at<float>(0x1000004), nullptr), "out: overlaps inputs.data");
  p.recipe = Format::kMxfp6E3M2;
  expect_error(bq::dequantize(p, in, at<float>(0x3000000), nullptr), "problem.recipe");
}

// ---- Argument checks (no GPU needed: errors are found before any device access) -------------

bq::QuantizeProblem good_problem() {
  bq::QuantizeProblem p;
  p.rows = 64, p.cols = 64, p.ld = 64, p.directions = Direction::kBoth;
  return p;
}

TEST(QuantizeApi, CanImplementNamesTheArgument) {
  bq::QuantizeProblem p = good_problem();
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  p.rows = -1;
  expect_error(bq::can_implement(p), "problem.rows");
  p = good_problem(), p.cols = -3;
  expect_error(bq::can_implement(p), "problem.cols");
  p = good_problem(), p.ld = 63;
  expect_error(bq::can_implement(p), "problem.ld");
  p = good_problem(), p.recipe = Format::kMxfp6E3M2;
  expect_error(bq::can_implement(p), "problem.recipe");
  p = good_problem(), p.rows = 0;
  EXPECT_TRUE(bq::can_implement(p).is_ok()) << "an empty problem is valid";
  p = good_problem(), p.rounding = ScaleRounding::kFloor, p.recipe = Format::kMxfp8E5M2;
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  EXPECT_EQ(bq::workspace_size(good_problem()), 0u);
}

TEST(QuantizeApi, PointerChecksNameTheArgument) {
  // Fake, never dereferenced addresses far apart: every check below fails before device access.
  auto at = [](uintptr_t a) { return reinterpret_cast<uint8_t*>(a); };
  const bq::QuantizeProblem p = good_problem();
  bq::QuantizeInputs in;
  in.x = at(0x100000);
  bq::QuantizeOutputs out;
  out.rowwise_data = at(0x200000), out.rowwise_scales = at(0x300000);
  out.columnwise_data = at(0x400000), out.columnwise_scales = at(0x500000);

  bq::QuantizeInputs no_x;
  expect_error(bq::can_implement(p, no_x, out), "inputs.x");
  bq::QuantizeOutputs o = out;
  o.rowwise_data = nullptr;
  expect_error(bq::can_implement(p, in, o), "outputs.rowwise_data");
  o = out, o.columnwise_scales = nullptr;
  expect_error(bq::can_implement(p, in, o), "outputs.columnwise_scales");
  o = out, o.columnwise_data = out.rowwise_data + 100;  // inside rowwise data
  expect_error(bq::can_implement(p, in, o), "overlaps");
  o = out, o.rowwise_scales = at(0x100000 + 64 * 64 * 2 - 1);  // last byte of the input
  expect_error(bq::can_implement(p, in, o), "outputs.rowwise_scales: overlaps inputs.x");
  o = out, o.amax = reinterpret_cast<float*>(at(0x600002));
  expect_error(bq::can_implement(p, in, o), "outputs.amax");
  o = out, o.nonfinite = reinterpret_cast<int*>(at(0x600001));
  expect_error(bq::can_implement(p, in, o), "outputs.nonfinite");
  bq::QuantizeInputs odd;
  odd.x = at(0x100001);  // bf16 needs 2-byte alignment
  expect_error(bq::can_implement(p, odd, out), "inputs.x");
  // Buffers of a direction not requested may be null.
  bq::QuantizeProblem row_only = p;
  row_only.directions = Direction::kRowwise;
  o = out, o.columnwise_data = nullptr, o.columnwise_scales = nullptr, o.rowwise_data = nullptr;
  expect_error(bq::can_implement(row_only, in, o), "outputs.rowwise_data");

  bq::DequantizeProblem d;
  d.rows = 4, d.cols = 32;
  expect_error(bq::dequantize(d, bq::DequantizeInputs{nullptr, at(0x300000), nullptr},
                               reinterpret_cast<float*>(at(0x400000)), nullptr),
               "inputs.data");
  d.recipe = Format::kMxfp6E2M3;
  expect_error(bq::dequantize(d, bq::DequantizeInputs{at(0x200000), at(0x300000), nullptr},
                               reinterpret_cast<float*>(at(0x400000)), nullptr),
               "problem.recipe");
}


}  // namespace
