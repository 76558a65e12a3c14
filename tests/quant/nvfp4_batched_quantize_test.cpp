// Tests of quant/nvfp4_batched_quantize.cu (BatchedQuantizeProblem with NVFP4: a MoE layer's
// expert weights in one amax pass and one quantize launch): each matrix's rowwise copy, decode
// scale and the amax over all, byte for byte as formats::quantize() of that matrix alone (its own
// tensor amax) + formats::pack_gemm_scales(), outputs poisoned with guard bytes, the workspace
// filled with garbage. The matrices differ in kind (mixed data with NaN / Inf, all zero, narrow,
// finite), so their tensor scales differ and a CTA's tiles change matrix; 1D and 2D blocks,
// bf16 / fp16 / fp32, a row stride past cols, a misaligned input. The argument checks run
// everywhere; the GPU tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "formats/scale_layout.h"
#include "quant/quantize.h"
#include "tests/quant/gpu_test_util.h"
#include "tests/quant/nvfp4_test_input.h"  // defines: Nvfp4Pattern, nvfp4_input, input_amax

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
using bf::Direction;
using bf::DType;
using bf::Format;
using bq::TensorAmax;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::DeviceInput;
using blockscale_test::GuardedOutput;
using blockscale_test::HostInput;
using blockscale_test::alloc_poisoned;
using blockscale_test::check_output;
using blockscale_test::expect_error;
using blockscale_test::input_amax;
using blockscale_test::nvfp4_input;
using blockscale_test::upload_input;
using Pattern = blockscale_test::Nvfp4Pattern;

bq::BatchedQuantizeProblem batched_problem(int64_t batches, int64_t rows, int64_t cols, int64_t ld, DType t, bool two_d) {
  bq::BatchedQuantizeProblem p;
  p.matrix.recipe = Format::kNvfp4, p.matrix.input_type = t;
  p.matrix.rows = rows, p.matrix.cols = cols, p.matrix.ld = ld;
  p.matrix.directions = Direction::kRowwise, p.matrix.nvfp4_2d = two_d;
  p.batches = batches;
  return p;
}

// ---- Argument checks (no GPU needed) --------------------------------------------------------------

TEST(Nvfp4QuantizeBatched, ChecksNameTheRule) {
  bq::BatchedQuantizeProblem p = batched_problem(8, 256, 64, 64, DType::kF32, true);
  EXPECT_TRUE(bq::can_implement(p).is_ok());
  EXPECT_EQ(bq::workspace_size(p), 8u * 8192u) << "each matrix's amax pass: 2 x 1024 partial maxima";
  p.matrix.directions = Direction::kBoth;
  expect_error(bq::can_implement(p), "kRowwise");
  p.matrix.directions = Direction::kRowwise, p.matrix.tensor_amax = TensorAmax::kGiven;
  expect_error(bq::can_implement(p), "kMeasure");
  p.matrix.tensor_amax = TensorAmax::kMeasure, p.matrix.nvfp4_2d = false, p.matrix.stochastic_rounding = true;
  expect_error(bq::can_implement(p), "stochastic rounding");
  p.matrix.stochastic_rounding = false, p.matrix.rows = 200;
  expect_error(bq::can_implement(p), "multiple of 128");
  p.matrix.rows = 128, p.batches = 70000;
  expect_error(bq::can_implement(p), "problem.batches");
}

// ---- GPU: byte for byte against each matrix quantized on its own -------------------------------------

struct BatchedLayout {
  int64_t batches, rows, cols, ld;
  DType type;
  bool misaligned;  // the input one element off 16-byte alignment
};

// The stacked input: matrix b of kind kinds[b % 4] (so tensor scales differ, one matrix all zero).
HostInput stacked_input(const BatchedLayout& l, uint64_t seed) {
  const Pattern kinds[] = {Pattern::kMixed, Pattern::kZero, Pattern::kNarrow, Pattern::kFinite};
  HostInput all;
  for (int64_t b = 0; b < l.batches; ++b) {
    HostInput m = nvfp4_input(l.rows, l.cols, l.ld, l.type, kinds[b % 4], seed + 101 * static_cast<uint64_t>(b));
    if (kinds[b % 4] == Pattern::kZero) {  // every element +0 (the pattern's -0s too): amax 0
      std::fill(m.bytes.begin(), m.bytes.end(), uint8_t{0});
      for (int64_t r = 0; r < l.rows; ++r)
        std::fill(m.values.begin() + r * l.ld, m.values.begin() + r * l.ld + l.cols, 0.0f);
    }
    all.bytes.insert(all.bytes.end(), m.bytes.begin(), m.bytes.end());
    all.values.insert(all.values.end(), m.values.begin(), m.values.end());
  }
  return all;
}

std::vector<uint8_t> float_bytes(float f) {
  std::vector<uint8_t> v(4);
  std::memcpy(v.data(), &f, 4);
  return v;
}

int64_t check_batched(const BatchedLayout& l, const HostInput& in, const DeviceInput& x, bool two_d) {
  const bq::BatchedQuantizeProblem p = batched_problem(l.batches, l.rows, l.cols, l.ld, l.type, two_d);
  // The want: each matrix alone through formats, back to back.
  std::vector<uint8_t> want_data, want_scales, want_dec;
  bool nonfinite = false;
  for (int64_t b = 0; b < l.batches; ++b) {
    bf::QuantizeOptions o;
    o.recipe = Format::kNvfp4, o.nvfp4_2d = two_d;
    bf::QuantizedMatrix q;
    std::vector<uint8_t> scales;
    const float* values = in.values.data() + b * l.rows * l.ld;
    EXPECT_OK(bf::quantize(values, l.rows, l.cols, l.ld, o, Direction::kRowwise, &q));
    EXPECT_OK(bf::pack_gemm_scales(q, &scales));
    want_data.insert(want_data.end(), q.data.begin(), q.data.end());
    want_scales.insert(want_scales.end(), scales.begin(), scales.end());
    const std::vector<uint8_t> dec = float_bytes(q.global_scale_dec);
    want_dec.insert(want_dec.end(), dec.begin(), dec.end());
    nonfinite = nonfinite || q.nonfinite_seen;
  }
  const std::vector<uint8_t> want_amax = float_bytes(input_amax(in, l.batches * l.rows, l.cols, l.ld));

  GuardedOutput data, scales, dec, amax;
  EXPECT_TRUE(alloc_poisoned(&data, l.batches * bq::rowwise_data_bytes(p.matrix), 0));
  EXPECT_TRUE(alloc_poisoned(&scales, l.batches * bq::rowwise_scale_bytes(p.matrix), 0));
  EXPECT_TRUE(alloc_poisoned(&dec, 4 * l.batches, 0));
  EXPECT_TRUE(alloc_poisoned(&amax, 4, 0));
  DeviceBuffer flag, workspace;
  EXPECT_OK(flag.alloc(sizeof(int), "flag"));
  EXPECT_CUDA(cudaMemset(flag.data(), 0, sizeof(int)));
  const size_t ws = bq::workspace_size(p);
  EXPECT_OK(workspace.alloc(ws, "workspace"));
  EXPECT_CUDA(cudaMemset(workspace.data(), 0xCD, ws));  // never zeroed for the kernels
  bq::QuantizeOutputs out;
  out.rowwise_data = data.ptr(), out.rowwise_scales = scales.ptr();
  out.rowwise_scale_dec = reinterpret_cast<float*>(dec.ptr());
  out.amax = reinterpret_cast<float*>(amax.ptr());
  out.nonfinite = flag.as<int>();
  bq::QuantizeInputs xin;
  xin.x = x.ptr();
  const blockscale::Status s = bq::run(p, xin, out, workspace.data(), ws, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_CUDA(cudaDeviceSynchronize());

  std::string report;
  int64_t bad = 0;
  bad += check_output(data, &want_data, (l.cols + 1) / 2, "rowwise data", &report, "  ");
  bad += check_output(scales, &want_scales, 16, "rowwise scales", &report, "  ");
  bad += check_output(dec, &want_dec, 4, "rowwise_scale_dec (one per matrix)", &report, "  ");
  bad += check_output(amax, &want_amax, 4, "amax", &report, "  ");
  int got_flag = -1;
  EXPECT_CUDA(cudaMemcpy(&got_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
  if (got_flag != (nonfinite ? 1 : 0)) {
    ++bad;
    report += "  nonfinite flag: got " + std::to_string(got_flag) + "\n";
  }
  EXPECT_EQ(bad, 0) << l.batches << " x " << l.rows << "x" << l.cols << " " << bf::dtype_name(l.type)
                    << (two_d ? " 2d" : " 1d") << ": " << bad << " bad bytes\n"
                    << report;
  return bad;
}

TEST(Nvfp4QuantizeBatched, MatchesEachMatrixQuantizedAlone) {
  SKIP_WITHOUT_GPU();
  const BatchedLayout layouts[] = {{8, 256, 384, 384, DType::kF32, false},  {5, 128, 300, 304, DType::kBf16, false},
                                   {4, 128, 200, 203, DType::kF16, true},   {3, 384, 136, 136, DType::kBf16, true},
                                   {8, 1408, 256, 256, DType::kF32, false}, {2, 128, 16, 16, DType::kF32, false}};
  for (const BatchedLayout& l : layouts) {
    const HostInput in = stacked_input(l, 7919u * static_cast<uint64_t>(l.cols) + static_cast<uint64_t>(l.rows));
    DeviceInput x;
    ASSERT_TRUE(upload_input(in, l.type, l.misaligned, &x));
    int64_t bad = 0;
    for (bool two_d : {false, true}) bad += check_batched(l, in, x, two_d);
    std::printf("nvfp4_batched_quantize_test: %lld x %lldx%lld ld=%lld %s%s: 1d and 2d, bad bytes %lld\n",
                static_cast<long long>(l.batches), static_cast<long long>(l.rows), static_cast<long long>(l.cols),
                static_cast<long long>(l.ld), bf::dtype_name(l.type), l.misaligned ? " misaligned" : "",
                static_cast<long long>(bad));
  }
}

}  // namespace
