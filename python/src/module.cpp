// blockscale._core: the emulator (formats/) for Python. Arrays cross as numpy arrays; the Python layer (blockscale/emulator.py) checks and
// reshapes its arguments, so these functions take exactly the 2D matrices formats/ works on.
// Errors raise ValueError with formats/' message (it names the argument and the rule).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "formats/scale_layout.h"
#include "python/src/core_args.h"

using namespace nanobind::literals;

namespace blockscale::python {

formats::Format format_of(const std::string& name) {
  formats::Format r;
  if (!formats::parse_format(name, &r)) {
    std::string all;
    for (formats::Format x : formats::all_formats()) all += std::string(all.empty() ? "" : ", ") + formats::format_name(x);
    throw nb::value_error(("format: '" + name + "' is not one of " + all).c_str());
  }
  return r;
}

nb::dict to_dict(const formats::QuantizedMatrix& q) {
  nb::dict d;
  d["format"] = formats::format_name(q.recipe);
  d["rows"] = q.rows;
  d["cols"] = q.cols;
  d["block"] = std::make_pair(q.block_rows, q.block_cols);
  d["data"] = to_numpy(q.data, {static_cast<size_t>(q.rows), static_cast<size_t>(q.data_row_bytes())});
  const std::vector<size_t> sshape{static_cast<size_t>(q.scale_rows()), static_cast<size_t>(q.scale_cols())};
  if (formats::is_fp8_block(q.recipe)) {
    d["scales"] = to_numpy(q.scales_f32, sshape);
  } else {
    d["scales"] = to_numpy(q.scales, sshape);
  }
  d["global_scale"] = q.global_scale_dec;
  d["nonfinite_seen"] = q.nonfinite_seen;
  return d;
}

formats::QuantizedMatrix from_parts(const std::string& format, int64_t rows, int64_t cols, std::pair<int, int> block,
                                    U8Matrix data, AnyMatrix scales, float global_scale) {
  formats::QuantizedMatrix q;
  q.recipe = format_of(format);
  q.rows = rows;
  q.cols = cols;
  q.block_rows = block.first;
  q.block_cols = block.second;
  q.data.assign(data.data(), data.data() + data.size());
  const bool f32 = formats::is_fp8_block(q.recipe);
  if (f32 ? scales.dtype() != nb::dtype<float>() : scales.dtype() != nb::dtype<uint8_t>())
    throw nb::value_error(f32 ? "scales: float32 for FP8 blockwise formats" : "scales: uint8 codes for MX and NVFP4");
  const auto* s = static_cast<const uint8_t*>(scales.data());
  if (f32) {
    q.scales_f32.resize(scales.size());
    std::memcpy(q.scales_f32.data(), s, 4 * scales.size());
  } else {
    q.scales.assign(s, s + scales.size());
  }
  q.global_scale_dec = global_scale;
  check(formats::validate(q, "q"));
  return q;
}

formats::QuantizedMatrix from_dict(const nb::dict& parts, const std::string& name) {
  try {
    return from_parts(nb::cast<std::string>(parts["format"]), nb::cast<int64_t>(parts["rows"]),
                      nb::cast<int64_t>(parts["cols"]), nb::cast<std::pair<int, int>>(parts["block"]),
                      nb::cast<U8Matrix>(parts["data"]), nb::cast<AnyMatrix>(parts["scales"]),
                      nb::cast<float>(parts["global_scale"]));
  } catch (const std::exception& e) {  // formats/' rule, or a missing key / a wrong type
    throw nb::value_error((name + ": " + e.what()).c_str());
  }
}

formats::QuantizeOptions quantize_options(const std::string& format, const std::string& rounding, bool stochastic,
                                          uint64_t sr_seed, bool hadamard, bool block_2d, bool pow2) {
  formats::QuantizeOptions o;
  o.recipe = format_of(format);
  o.rounding = rounding == "floor" ? formats::ScaleRounding::kFloor : formats::ScaleRounding::kCeil;
  o.stochastic_rounding = stochastic;
  o.sr_seed = sr_seed;
  o.hadamard = hadamard;
  o.nvfp4_2d = block_2d;
  o.pow2_scales = pow2;
  return o;
}

namespace {

nb::dict quantize(F32Matrix x, const std::string& format, const std::string& rounding, bool columnwise,
                  bool stochastic, uint64_t sr_seed, bool hadamard, bool block_2d, bool pow2) {
  const formats::QuantizeOptions o = quantize_options(format, rounding, stochastic, sr_seed, hadamard, block_2d, pow2);
  formats::QuantizedMatrix q;
  const int64_t rows = static_cast<int64_t>(x.shape(0)), cols = static_cast<int64_t>(x.shape(1));
  {
    nb::gil_scoped_release release;
    check(formats::quantize(x.data(), rows, cols, cols, o,
                            columnwise ? formats::Direction::kColumnwise : formats::Direction::kRowwise, &q));
  }
  return to_dict(q);
}

nb::ndarray<nb::numpy, float> dequantize(const std::string& format, int64_t rows, int64_t cols,
                                         std::pair<int, int> block, U8Matrix data, AnyMatrix scales,
                                         float global_scale) {
  const formats::QuantizedMatrix q = from_parts(format, rows, cols, block, data, scales, global_scale);
  std::vector<float> out;
  check(formats::dequantize(q, &out));
  return to_numpy(out, {static_cast<size_t>(rows), static_cast<size_t>(cols)});
}

// q's scales as bytes in the layout the GEMMs read and the GPU quantize writes (formats/scale_layout.h):
// what blockscale._cuda's scale buffers must hold, byte for byte.
nb::ndarray<nb::numpy, uint8_t> gemm_scales(const std::string& format, int64_t rows, int64_t cols,
                                            std::pair<int, int> block, U8Matrix data, AnyMatrix scales,
                                            float global_scale) {
  const formats::QuantizedMatrix q = from_parts(format, rows, cols, block, data, scales, global_scale);
  std::vector<uint8_t> out;
  check(formats::pack_gemm_scales(q, &out));
  return to_numpy(out, {out.size()});
}

}  // namespace
}  // namespace blockscale::python

NB_MODULE(_core, m) {
  using namespace blockscale::python;
  namespace formats = blockscale::formats;
  m.doc() = "blockscale's bit-exact emulator (formats/) on numpy arrays";
#ifdef BLOCKSCALE_VERSION
  m.attr("__version__") = BLOCKSCALE_VERSION;
#endif
  m.def("formats", [] {
    std::vector<std::string> names;
    for (formats::Format r : formats::all_formats()) names.push_back(formats::format_name(r));
    return names;
  });
  m.def("quantize", &quantize, "x"_a, "format"_a, "rounding"_a, "columnwise"_a, "stochastic"_a, "sr_seed"_a,
        "hadamard"_a, "block_2d"_a, "pow2"_a);
  m.def("gemm_scales", &gemm_scales, "format"_a, "rows"_a, "cols"_a, "block"_a, "data"_a, "scales"_a,
        "global_scale"_a);
  m.def("dequantize", &dequantize, "format"_a, "rows"_a, "cols"_a, "block"_a, "data"_a, "scales"_a,
        "global_scale"_a);
  bind_files(m);
  bind_reference(m);
}
