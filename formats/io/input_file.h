// A .npy or .safetensors file opened for reading, as a list of tensors (what the CLI's quantize
// and dequantize and the accuracy study read). A .npy file holds one tensor, named "x"; a
// .safetensors file is memory-mapped, so its tensors cost no memory until a caller converts one.
#pragma once

#include <string>
#include <vector>

#include "formats/io/npy.h"
#include "formats/io/safetensors.h"
#include "formats/status.h"

namespace blockscale::io {

struct InputTensor {
  std::string name;
  TensorView view;  // valid while the InputFile lives
};

class InputFile {
 public:
  // Opens `path` by its extension (.npy or .safetensors); errors name `flag` (e.g. "--in").
  static Status open(const std::string& path, const std::string& flag, InputFile* out);

  const std::string& path() const { return path_; }
  const std::vector<InputTensor>& tensors() const { return tensors_; }
  const SafetensorsFile* safetensors() const { return is_npy_ ? nullptr : &safetensors_; }

 private:
  std::string path_;
  bool is_npy_ = false;
  NpyArray npy_;
  SafetensorsFile safetensors_;
  std::vector<InputTensor> tensors_;
};

// Whether `t` can be quantized, and its 2D view [rows, cols]: an error saying why not (an integer
// dtype, a scalar, an empty tensor) for the tensors the callers skip with a warning.
Status matrix_of(const InputTensor& t, int64_t* rows, int64_t* cols);

// True when `path` ends in `ext` (e.g. ".npy").
bool has_extension(const std::string& path, const std::string& ext);

}  // namespace blockscale::io
