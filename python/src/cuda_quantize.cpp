// blockscale._cuda's quantize bindings over quant/quantize.h: dense and grouped (MoE) quantize,
// their output sizes, and dequantize. The caller (blockscale/torch.py) allocates every output
// from the sizes these functions report, so nothing is allocated here and nothing synchronises:
// each call checks its arguments, then enqueues on the caller's stream.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "python/src/cuda_args.h"
#include "quant/quantize.h"

namespace blockscale::python {
namespace {

using namespace nb::literals;

// The recipe options every quantize call takes, as the Python layer passes them.
quant::QuantizeProblem make_problem(const std::string& format, const std::string& direction, const std::string& rounding,
                                    bool pow2, bool block_2d, std::optional<uint64_t> sr_seed, uint64_t sr_offset,
                                    bool hadamard, int64_t rows, int64_t cols) {
  quant::QuantizeProblem p;
  p.recipe = format_arg("format", format);
  p.directions = direction_arg(direction);
  if (rounding == "ceil") {
    p.rounding = formats::ScaleRounding::kCeil;
  } else if (rounding == "floor") {
    p.rounding = formats::ScaleRounding::kFloor;
  } else {
    fail("rounding: '" + rounding + "' is not one of ceil, floor");
  }
  if (rows < 0 || cols < 0)
    fail("shape: rows and cols must be >= 0 (got " + std::to_string(rows) + ", " + std::to_string(cols) + ")");
  p.pow2_scales = pow2;
  p.nvfp4_2d = block_2d;
  p.stochastic_rounding = sr_seed.has_value();
  p.sr_seed = sr_seed.value_or(0);
  p.sr_offset = sr_offset;
  p.hadamard_columnwise = hadamard;
  p.rows = rows;
  p.cols = cols;
  p.ld = cols;
  return p;
}

// x: the dtypes the quantize kernels read.
formats::DType input_dtype(const Array& x) {
  return require_dtype("x", x, {formats::DType::kBf16, formats::DType::kF16, formats::DType::kF32});
}

// The dtype of a recipe's scale buffers: fp32 for FP8 blockwise, E8M0 / UE4M3 bytes otherwise.
formats::DType scale_dtype(formats::Format f) { return formats::is_fp8_block(f) ? formats::DType::kF32 : formats::DType::kU8; }

bool is_nvfp4(formats::Format f) { return f == formats::Format::kNvfp4; }

nb::dict sizes_dict(const quant::QuantizeProblem& p, int64_t columnwise_data, int64_t columnwise_scales, size_t workspace) {
  nb::dict d;
  d["rowwise_data"] = quant::rowwise_data_bytes(p);
  d["rowwise_scales"] = quant::rowwise_scale_bytes(p);
  d["columnwise_data"] = columnwise_data;
  d["columnwise_scales"] = columnwise_scales;
  d["workspace"] = workspace;
  d["scale_dtype"] = torch_dtype_name(scale_dtype(p.recipe));
  d["packed_fp4"] = formats::is_fp4(p.recipe);
  return d;
}

// Checks the outputs of the requested copies and fills `out` with their pointers.
struct Outputs {
  Array rowwise_data, rowwise_scales, rowwise_scale_dec, columnwise_data, columnwise_scales, columnwise_scale_dec;
};

quant::QuantizeOutputs check_outputs(CallDevice& dev, const quant::QuantizeProblem& p, const Outputs& o,
                                     int64_t columnwise_data_bytes, int64_t columnwise_scale_bytes,
                                     int64_t batches = 1) {
  quant::QuantizeOutputs out;
  const bool row = p.directions != formats::Direction::kColumnwise;
  const bool col = p.directions != formats::Direction::kRowwise;
  const formats::DType sd = scale_dtype(p.recipe);
  const char* sized = "quantized_sizes";
  auto data = [&](const char* name, const Array& t, int64_t bytes) {
    dev.require(name, t);
    require_dtype(name, t, {formats::DType::kU8});
    require_bytes(name, t, bytes, sized);
    return static_cast<uint8_t*>(t.data());
  };
  auto scales = [&](const char* name, const Array& t, int64_t bytes) {
    dev.require(name, t);
    require_dtype(name, t, {sd});
    require_bytes(name, t, bytes, sized);
    return t.data();
  };
  auto dec = [&](const char* name, const Array& t) -> float* {
    if (!is_nvfp4(p.recipe)) return nullptr;  // only NVFP4 has a tensor scale
    dev.require(name, t);
    require_dtype(name, t, {formats::DType::kF32});
    require_bytes(name, t, 4, "one float");
    return static_cast<float*>(t.data());
  };
  if (row) {
    out.rowwise_data = data("rowwise_data", o.rowwise_data, batches * quant::rowwise_data_bytes(p));
    out.rowwise_scales = scales("rowwise_scales", o.rowwise_scales, batches * quant::rowwise_scale_bytes(p));
    out.rowwise_scale_dec = dec("rowwise_scale_dec", o.rowwise_scale_dec);
  }
  if (col) {
    out.columnwise_data = data("columnwise_data", o.columnwise_data, columnwise_data_bytes);
    out.columnwise_scales = scales("columnwise_scales", o.columnwise_scales, columnwise_scale_bytes);
    out.columnwise_scale_dec = dec("columnwise_scale_dec", o.columnwise_scale_dec);
  }
  return out;
}

void* check_workspace(CallDevice& dev, const Array& w, size_t need) {
  if (need == 0) return nullptr;
  dev.require("workspace", w);
  require_dtype("workspace", w, {formats::DType::kU8});
  require_bytes("workspace", w, static_cast<int64_t>(need), "quantized_sizes()['workspace']");
  return w.data();
}

nb::dict quantized_sizes(const std::string& format, int64_t rows, int64_t cols, const std::string& direction,
                         const std::string& rounding, bool pow2, bool block_2d, std::optional<uint64_t> sr_seed,
                         bool hadamard, int64_t num_groups) {
  quant::QuantizeProblem p = make_problem(format, direction, rounding, pow2, block_2d, sr_seed, 0, hadamard, rows, cols);
  if (num_groups <= 0) {
    check_arg(quant::can_implement(p));
    return sizes_dict(p, quant::columnwise_data_bytes(p), quant::columnwise_scale_bytes(p), quant::workspace_size(p));
  }
  quant::GroupedQuantizeProblem g;
  g.dense = p;
  g.num_groups = static_cast<int>(num_groups);
  check_arg(quant::can_implement(g));
  nb::dict d = sizes_dict(p, quant::grouped_columnwise_data_bytes(g), quant::grouped_columnwise_scale_bytes(g),
                          quant::workspace_size(g));
  d["capacity"] = quant::grouped_capacity(g);
  return d;
}

void quantize(const Array& x, const std::string& format, const std::string& direction, const std::string& rounding,
              bool pow2, bool block_2d, std::optional<uint64_t> sr_seed, uint64_t sr_offset, bool hadamard,
              const Outputs& o, const Array& workspace, uintptr_t stream) {
  CallDevice dev;
  dev.require("x", x);
  const formats::DType type = input_dtype(x);
  const int64_t ld = require_rows("x", x);
  quant::QuantizeProblem p = make_problem(format, direction, rounding, pow2, block_2d, sr_seed, sr_offset, hadamard,
                                          static_cast<int64_t>(x.shape(0)), static_cast<int64_t>(x.shape(1)));
  p.input_type = type;
  p.ld = ld;
  check_arg(quant::can_implement(p));
  const quant::QuantizeOutputs out =
      check_outputs(dev, p, o, quant::columnwise_data_bytes(p), quant::columnwise_scale_bytes(p));
  const size_t ws = quant::workspace_size(p);
  void* w = check_workspace(dev, workspace, ws);
  DeviceGuard guard(dev.id());
  quant::QuantizeInputs in;
  in.x = x.data();
  check_arg(quant::can_implement(p, in, out));
  check_run(quant::run(p, in, out, w, ws, stream_arg(stream)));
}

// `batches` matrices of equal shape stacked along x's rows (a MoE layer's expert weights), each
// quantized on its own, in one launch; every output holds `batches` one-matrix buffers back to back.
void quantize_batched(const Array& x, int64_t batches, const std::string& format, const std::string& direction,
                      const std::string& rounding, bool pow2, const Outputs& o, uintptr_t stream) {
  CallDevice dev;
  dev.require("x", x);
  const formats::DType type = input_dtype(x);
  const int64_t ld = require_rows("x", x);
  const int64_t rows = static_cast<int64_t>(x.shape(0));
  if (batches < 1 || rows % batches != 0)
    fail("batches: must be >= 1 and divide x's rows (" + std::to_string(rows) + "), got " + std::to_string(batches));
  quant::BatchedQuantizeProblem b;
  b.matrix = make_problem(format, direction, rounding, pow2, false, std::nullopt, 0, false, rows / batches,
                          static_cast<int64_t>(x.shape(1)));
  b.matrix.input_type = type;
  b.matrix.ld = ld;
  b.batches = batches;
  check_arg(quant::can_implement(b));
  const quant::QuantizeOutputs out = check_outputs(dev, b.matrix, o, batches * quant::columnwise_data_bytes(b.matrix),
                                                   batches * quant::columnwise_scale_bytes(b.matrix), batches);
  DeviceGuard guard(dev.id());
  quant::QuantizeInputs in;
  in.x = x.data();
  check_arg(quant::can_implement(b, in, out));
  check_run(quant::run(b, in, out, stream_arg(stream)));
}

void quantize_grouped(const Array& x, const Array& group_ends, const std::string& format, const std::string& direction,
                      const std::string& rounding, std::optional<uint64_t> sr_seed, uint64_t sr_offset, bool hadamard,
                      const Outputs& o, const Array& padded_group_ends, const Array& workspace, uintptr_t stream) {
  CallDevice dev;
  dev.require("x", x);
  const formats::DType type = input_dtype(x);
  const int64_t ld = require_rows("x", x);
  dev.require("group_ends", group_ends);
  require_dtype("group_ends", group_ends, {formats::DType::kI32});
  require_ndim("group_ends", group_ends, 1);
  require_contiguous("group_ends", group_ends);
  quant::GroupedQuantizeProblem g;
  g.dense = make_problem(format, direction, rounding, false, false, sr_seed, sr_offset, hadamard,
                         static_cast<int64_t>(x.shape(0)), static_cast<int64_t>(x.shape(1)));
  g.dense.input_type = type;
  g.dense.ld = ld;
  g.num_groups = static_cast<int>(group_ends.shape(0));
  check_arg(quant::can_implement(g));
  quant::GroupedQuantizeOutputs out;
  out.dense = check_outputs(dev, g.dense, o, quant::grouped_columnwise_data_bytes(g), quant::grouped_columnwise_scale_bytes(g));
  dev.require("padded_group_ends", padded_group_ends);
  require_dtype("padded_group_ends", padded_group_ends, {formats::DType::kI32});
  require_ndim("padded_group_ends", padded_group_ends, 1);
  if (padded_group_ends.shape(0) != group_ends.shape(0))
    fail("padded_group_ends: length (" + std::to_string(padded_group_ends.shape(0)) + ") must equal group_ends' (" +
         std::to_string(group_ends.shape(0)) + ")");
  require_contiguous("padded_group_ends", padded_group_ends);
  out.padded_group_ends = static_cast<int32_t*>(padded_group_ends.data());
  const size_t ws = quant::workspace_size(g);
  void* w = check_workspace(dev, workspace, ws);
  DeviceGuard guard(dev.id());
  quant::GroupedQuantizeInputs in;
  in.x = x.data();
  in.group_ends = static_cast<const int32_t*>(group_ends.data());
  check_arg(quant::can_implement(g, in, out));
  check_run(quant::run(g, in, out, w, ws, stream_arg(stream)));
}

// out (rows x cols fp32) = the values of one quantized copy (rows x cols in its stored orientation).
void dequantize(const Array& data, const Array& scales, const Array& scale_dec, const std::string& format, int64_t rows,
                int64_t cols, const Array& out, uintptr_t stream) {
  CallDevice dev;
  quant::DequantizeProblem p;
  p.recipe = format_arg("format", format);
  p.rows = rows;
  p.cols = cols;
  quant::QuantizeProblem q = make_problem(format, "rowwise", "ceil", false, false, std::nullopt, 0, false, rows, cols);
  dev.require("data", data);
  require_dtype("data", data, {formats::DType::kU8});
  require_bytes("data", data, quant::rowwise_data_bytes(q), "rows x row bytes");
  dev.require("scales", scales);
  require_dtype("scales", scales, {scale_dtype(p.recipe)});
  require_bytes("scales", scales, quant::rowwise_scale_bytes(q), "the recipe's GEMM scale layout");
  quant::DequantizeInputs in;
  in.data = static_cast<const uint8_t*>(data.data());
  in.scales = scales.data();
  if (is_nvfp4(p.recipe)) {
    dev.require("scale_dec", scale_dec);
    require_dtype("scale_dec", scale_dec, {formats::DType::kF32});
    require_bytes("scale_dec", scale_dec, 4, "one float");
    in.scale_dec = static_cast<const float*>(scale_dec.data());
  }
  dev.require("out", out);
  require_dtype("out", out, {formats::DType::kF32});
  require_bytes("out", out, 4 * rows * cols, "rows x cols floats");
  DeviceGuard guard(dev.id());
  check_run(quant::dequantize(p, in, static_cast<float*>(out.data()), stream_arg(stream)));
}

}  // namespace

void register_quantize(nb::module_& m) {
  m.def("quantized_sizes", &quantized_sizes, "format"_a, "rows"_a, "cols"_a, "direction"_a = "rowwise",
        "rounding"_a = "ceil", "pow2"_a = false, "block_2d"_a = false, "sr_seed"_a = nb::none(), "hadamard"_a = false,
        "num_groups"_a = 0,
        "Bytes of each output (and the workspace) of a quantize of rows x cols; num_groups > 0: the grouped "
        "(MoE) quantize, with the columnwise copy's token capacity.");
  m.def(
      "quantize",
      [](const Array& x, const std::string& format, const std::string& direction, const std::string& rounding, bool pow2,
         bool block_2d, std::optional<uint64_t> sr_seed, uint64_t sr_offset, bool hadamard, const Array& rowwise_data,
         const Array& rowwise_scales, const Array& rowwise_scale_dec, const Array& columnwise_data,
         const Array& columnwise_scales, const Array& columnwise_scale_dec, const Array& workspace, uintptr_t stream) {
        quantize(x, format, direction, rounding, pow2, block_2d, sr_seed, sr_offset, hadamard,
                 Outputs{rowwise_data, rowwise_scales, rowwise_scale_dec, columnwise_data, columnwise_scales,
                         columnwise_scale_dec},
                 workspace, stream);
      },
      "x"_a.none(), "format"_a, "direction"_a, "rounding"_a, "pow2"_a, "block_2d"_a, "sr_seed"_a.none(), "sr_offset"_a,
      "hadamard"_a, "rowwise_data"_a.none(), "rowwise_scales"_a.none(), "rowwise_scale_dec"_a.none(),
      "columnwise_data"_a.none(), "columnwise_scales"_a.none(), "columnwise_scale_dec"_a.none(), "workspace"_a.none(),
      "stream"_a);
  m.def(
      "quantize_batched",
      [](const Array& x, int64_t batches, const std::string& format, const std::string& direction,
         const std::string& rounding, bool pow2, const Array& rowwise_data, const Array& rowwise_scales,
         const Array& columnwise_data, const Array& columnwise_scales, uintptr_t stream) {
        quantize_batched(x, batches, format, direction, rounding, pow2,
                         Outputs{rowwise_data, rowwise_scales, Array(), columnwise_data, columnwise_scales, Array()},
                         stream);
      },
      "x"_a.none(), "batches"_a, "format"_a, "direction"_a, "rounding"_a, "pow2"_a, "rowwise_data"_a.none(),
      "rowwise_scales"_a.none(), "columnwise_data"_a.none(), "columnwise_scales"_a.none(), "stream"_a,
      "fp8_block128x128 and MX (rows per matrix a multiple of 128) only; quantize the others one by one");
  m.def(
      "quantize_grouped",
      [](const Array& x, const Array& group_ends, const std::string& format, const std::string& direction,
         const std::string& rounding, std::optional<uint64_t> sr_seed, uint64_t sr_offset, bool hadamard,
         const Array& rowwise_data, const Array& rowwise_scales, const Array& rowwise_scale_dec,
         const Array& columnwise_data, const Array& columnwise_scales, const Array& columnwise_scale_dec,
         const Array& padded_group_ends, const Array& workspace, uintptr_t stream) {
        quantize_grouped(x, group_ends, format, direction, rounding, sr_seed, sr_offset, hadamard,
                         Outputs{rowwise_data, rowwise_scales, rowwise_scale_dec, columnwise_data, columnwise_scales,
                                 columnwise_scale_dec},
                         padded_group_ends, workspace, stream);
      },
      "x"_a.none(), "group_ends"_a.none(), "format"_a, "direction"_a, "rounding"_a, "sr_seed"_a.none(), "sr_offset"_a, "hadamard"_a,
      "rowwise_data"_a.none(), "rowwise_scales"_a.none(), "rowwise_scale_dec"_a.none(), "columnwise_data"_a.none(),
      "columnwise_scales"_a.none(), "columnwise_scale_dec"_a.none(), "padded_group_ends"_a.none(), "workspace"_a.none(),
      "stream"_a);
  m.def("dequantize", &dequantize, "data"_a.none(), "scales"_a.none(), "scale_dec"_a.none(), "format"_a, "rows"_a,
        "cols"_a, "out"_a.none(), "stream"_a);
}

}  // namespace blockscale::python
