#include "formats/io/input_file.h"

#include "formats/io/quantized_file.h"  // defines: matrix_view

namespace blockscale::io {

bool has_extension(const std::string& path, const std::string& ext) {
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

Status matrix_of(const InputTensor& t, int64_t* rows, int64_t* cols) {
  if (!dtype_is_float(t.view.dtype))
    return Status::error(std::string("dtype ") + dtype_name(t.view.dtype) + " is not a floating-point dtype");
  return matrix_view(t.view.shape, rows, cols);
}

Status InputFile::open(const std::string& path, const std::string& flag, InputFile* out) {
  InputFile f;
  f.path_ = path;
  if (has_extension(path, ".npy")) {
    f.is_npy_ = true;
    Status s = read_npy(path, &f.npy_);
    if (!s) return Status::error(flag + " '" + path + "': " + s.message());
    f.tensors_.push_back({"x", f.npy_.view()});
  } else if (has_extension(path, ".safetensors")) {
    Status s = SafetensorsFile::open(path, &f.safetensors_);
    if (!s) return Status::error(flag + " '" + path + "': " + s.message());
    for (const std::string& name : f.safetensors_.names()) {
      TensorView v;
      BS_RETURN_IF_ERROR(f.safetensors_.tensor(name, &v));
      f.tensors_.push_back({name, v});
    }
  } else {
    return Status::error(flag + " '" + path + "': the file name must end in .npy or .safetensors");
  }
  *out = std::move(f);
  return Status::ok();
}

}  // namespace blockscale::io
