// blockscale._cuda's argument checks: every tensor the GPU bindings take is checked here, before
// any launch, and a broken rule raises ValueError naming the Python argument and the rule
// ("b_data: columns (4095) must equal a_data's columns (4096)"). The library's own checks
// (can_implement) run after these as a second line, and name the C++ field instead.
//
// Tensors arrive as unconstrained nb::ndarray<> (DLPack: torch tensors, CuPy arrays, ...): a
// typed ndarray would make nanobind refuse a wrong dtype or device with a TypeError that names
// neither the argument nor the rule.
#pragma once

#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "formats/dtype.h"
#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::python {

namespace nb = nanobind;
using Array = nb::ndarray<>;

[[noreturn]] void fail(const std::string& message);  // raises ValueError(message)
void check_arg(const Status& s);                      // a library check that failed: ValueError
void check_run(const Status& s);                      // a launch or CUDA error: RuntimeError

// A dtype as torch names it ("bfloat16", "float32"): the spelling Python users see in messages.
const char* torch_dtype_name(formats::DType d);
std::string shape_string(const Array& t);  // "(4, 128)"
int64_t numel(const Array& t);
int64_t nbytes(const Array& t);

// The device every tensor of one call must share: the first CUDA tensor checked fixes it.
class CallDevice {
 public:
  // name must be a CUDA tensor (and on the device of the tensors checked before it).
  void require(const char* name, const Array& t);
  int id() const { return id_; }

 private:
  int id_ = -1;
  std::string first_;
};

// name must be a valid (not None) array.
void require_present(const char* name, const Array& t);
// t's dtype must be one of `allowed`; returns it. A torch float8_e4m3fn tensor counts as U8 (it
// may hold quantized codes).
formats::DType require_dtype(const char* name, const Array& t, std::initializer_list<formats::DType> allowed);
void require_ndim(const char* name, const Array& t, size_t ndim);
// Row-major with unit stride along the last dimension; returns the row stride in elements (ld).
int64_t require_rows(const char* name, const Array& t);
// Every dimension packed (C order), so the array is one block of nbytes(t) bytes.
void require_contiguous(const char* name, const Array& t);
// A contiguous output of at least `bytes` bytes (sized by quantized_sizes / workspace sizes).
void require_bytes(const char* name, const Array& t, int64_t bytes, const char* sized_by);

formats::Format format_arg(const char* name, const std::string& value);
formats::Direction direction_arg(const std::string& value);

// Makes `device` current for the call (the library launches on the current device) and restores
// the caller's device on exit. A machine without a usable GPU raises RuntimeError here.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The caller's stream as an integer (torch.cuda.current_stream().cuda_stream; 0 = legacy default).
inline cudaStream_t stream_arg(uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

}  // namespace blockscale::python
