// What blockscale._core's bindings share: formats/' errors as ValueError, format names, numpy
// arrays made from vectors, and a quantized copy crossing from Python as its parts (the fields of
// blockscale.QuantizedTensor) or back as a dict of them.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>
#include <utility>
#include <vector>

#include "formats/quantize.h"
#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::python {

namespace nb = nanobind;

using F32Matrix = nb::ndarray<const float, nb::numpy, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using U8Matrix = nb::ndarray<const uint8_t, nb::numpy, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using AnyMatrix = nb::ndarray<nb::numpy, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

inline void check(const Status& s) {
  if (!s) throw nb::value_error(s.message().c_str());
}

formats::Format format_of(const std::string& name);

// A new numpy array of `shape` owning a copy of `v`.
template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(const std::vector<T>& v, std::vector<size_t> shape) {
  auto* copy = new std::vector<T>(v);
  nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(copy->data(), shape.size(), shape.data(), owner);
}

// The matrix fields of a quantized copy as a dict: format, rows, cols, block, data, scales,
// global_scale, nonfinite_seen.
nb::dict to_dict(const formats::QuantizedMatrix& q);

// A quantized copy from its parts, checked (formats::validate); errors name `name`.
formats::QuantizedMatrix from_parts(const std::string& format, int64_t rows, int64_t cols, std::pair<int, int> block,
                                    U8Matrix data, AnyMatrix scales, float global_scale);
// The same from a dict of the parts (blockscale/emulator.py's _parts).
formats::QuantizedMatrix from_dict(const nb::dict& parts, const std::string& name);

// The quantize options of the emulator's keyword arguments.
formats::QuantizeOptions quantize_options(const std::string& format, const std::string& rounding, bool stochastic,
                                          uint64_t sr_seed, bool hadamard, bool block_2d, bool pow2);

void bind_files(nb::module_& m);      // core_files.cpp: the quantized safetensors schema
void bind_reference(nb::module_& m);  // core_reference.cpp: reference GEMMs, the study's error metrics

}  // namespace blockscale::python
