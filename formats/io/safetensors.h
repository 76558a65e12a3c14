// .safetensors files (https://github.com/huggingface/safetensors, README "Format"): an 8-byte
// little-endian header length N, N bytes of UTF-8 JSON, then the byte buffer. The header maps
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
// buffer) and may hold "__metadata__", a string -> string map.
//
// Reading maps the file read-only: open() parses and validates the header only, and tensor()
// returns a view into the mapping, so a multi-GB file costs no memory until its pages are used.
// The validation is the reference implementation's, made explicit: header length <= 100 MB
// (kMaxSafetensorsHeader) and within the file; a JSON object of the schema above, nested no
// deeper than it (anything else is rejected as soon as it opens, so no input recurses or
// allocates beyond the header's size); no duplicate names or keys, no unknown keys; a known dtype;
// rank <= kMaxRank; shape product x dtype size without int64 overflow and equal to end - begin;
// begin <= end; and the tensors, sorted by offset, tile the byte buffer exactly (no overlap, no
// hole, no trailing byte). Errors are a Status naming the tensor and the rule; no exception
// escapes. A file truncated by another process while mapped can still raise SIGBUS on access.
//
// Writing is streamed and atomic: SafetensorsWriter takes every tensor's name, dtype and shape up
// front (the header holds all offsets), writes the header, then takes each tensor's bytes in
// file order, in as many chunks as the caller likes, into a temporary file next to the target;
// finish() fsyncs and renames it over the target. Any error, or a writer destroyed before
// finish(), removes the temporary file. File order is the reference writer's: dtype by
// decreasing alignment (formats::DType's order, descending), then name; with the header padded
// with spaces to a multiple of 8 bytes this aligns every tensor to its element size, and the
// bytes equal safetensors' own serialize() for the same tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/io/tensor_view.h"
#include "formats/status.h"

namespace blockscale::io {

inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;  // the reference's limit

class SafetensorsFile {
 public:
  SafetensorsFile();
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  // Maps `path` read-only and validates its header. No tensor data is read.
  static Status open(const std::string& path, SafetensorsFile* out);
  // Validates a file held in memory; `bytes` is not copied and must outlive `out`'s views.
  static Status parse(const uint8_t* bytes, size_t size, SafetensorsFile* out);

  size_t num_tensors() const;
  std::vector<std::string> names() const;  // in file (offset) order
  bool contains(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const;

  // A view of tensor `name`'s bytes inside the mapping; valid while this object lives.
  Status tensor(const std::string& name, TensorView* out) const;
  // Tensor `name` widened to fp32 (io::to_float): one tensor's worth of memory.
  Status tensor_as_float(const std::string& name, std::vector<float>* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TensorSpec {
  std::string name;
  formats::DType dtype = formats::DType::kF32;
  std::vector<int64_t> shape;
};

class SafetensorsWriter {
 public:
  SafetensorsWriter();
  ~SafetensorsWriter();  // removes the temporary file unless finish() succeeded
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Checks the specs (unique valid-UTF-8 names other than "__metadata__", valid shapes) and
  // metadata, creates the temporary file and writes the header.
  Status open(const std::string& path, std::vector<TensorSpec> tensors,
              const std::map<std::string, std::string>& metadata = {});
  // The tensors in file order: the order write() takes their data in.
  const std::vector<TensorSpec>& order() const;
  // Appends `nbytes` of tensor `name`, which must be the first tensor in order() not yet
  // complete (empty tensors complete themselves). A tensor may arrive in several chunks.
  Status write(const std::string& name, const void* data, size_t nbytes);
  // Checks every tensor is complete, fsyncs, renames over the target.
  Status finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes `tensors` (views, any order) and `metadata` with a SafetensorsWriter.
Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, TensorView>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace blockscale::io
