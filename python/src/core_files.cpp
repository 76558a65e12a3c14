// blockscale._core: the quantized safetensors schema (docs/file-format.md) through formats/io, the
// code `blockscale quantize` writes with and `blockscale dequantize` reads with, so a file written
// here is the CLI's, byte for byte, and a file either wrote reads back with every check.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/io/quantized_file.h"
#include "formats/io/safetensors.h"
#include "python/src/core_args.h"

using namespace nanobind::literals;

namespace blockscale::python {
namespace {

// Entries: dicts of a quantized copy's parts plus name, shape, direction, rounding, hadamard.
void save(const std::string& path, const std::vector<nb::dict>& entries) {
  std::vector<std::unique_ptr<io::QuantizedTensor>> kept;  // add_quantized_tensor keeps views into them
  std::vector<std::pair<std::string, io::TensorView>> tensors;
  std::map<std::string, std::string> metadata;
  for (const nb::dict& e : entries) {
    auto t = std::make_unique<io::QuantizedTensor>();
    t->name = nb::cast<std::string>(e["name"]);
    const std::string what = "tensors['" + t->name + "']";
    t->q = from_dict(e, what);
    t->shape = nb::cast<std::vector<int64_t>>(e["shape"]);
    t->direction = nb::cast<std::string>(e["direction"]) == "columnwise" ? formats::Direction::kColumnwise
                                                                           : formats::Direction::kRowwise;
    t->rounding = nb::cast<std::string>(e["rounding"]) == "floor" ? formats::ScaleRounding::kFloor
                                                                    : formats::ScaleRounding::kCeil;
    t->hadamard = nb::cast<bool>(e["hadamard"]);
    const Status added = io::add_quantized_tensor(*t, &tensors, &metadata);
    if (!added) throw nb::value_error((what + ": " + added.message()).c_str());
    kept.push_back(std::move(t));
  }
  Status written = Status::ok();
  {
    nb::gil_scoped_release release;
    written = io::write_safetensors(path, tensors, metadata);
  }
  if (!written) throw nb::value_error(("path: " + written.message()).c_str());
}

// Every entry of the file (sorted by name), each a dict as save() takes it.
std::vector<nb::dict> load(const std::string& path) {
  io::SafetensorsFile file;
  if (const Status opened = io::SafetensorsFile::open(path, &file); !opened)
    throw nb::value_error(("path: " + opened.message()).c_str());
  std::vector<nb::dict> out;
  for (const std::string& name : io::quantized_tensor_names(file)) {
    io::QuantizedTensor t;
    check(io::read_quantized_tensor(file, name, &t));
    nb::dict d = to_dict(t.q);
    d["name"] = name;
    d["shape"] = t.shape;
    d["direction"] = t.direction == formats::Direction::kColumnwise ? "columnwise" : "rowwise";
    d["rounding"] = !formats::is_mx(t.q.recipe) ? "rn" : t.rounding == formats::ScaleRounding::kFloor ? "floor" : "ceil";
    d["hadamard"] = t.hadamard;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

void bind_files(nb::module_& m) {
  m.def("save", &save, "path"_a, "entries"_a);
  m.def("load", &load, "path"_a);
}

}  // namespace blockscale::python
