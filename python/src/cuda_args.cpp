// blockscale._cuda's argument checks (cuda_args.h).
#include "python/src/cuda_args.h"

#include <string>

namespace blockscale::python {

void fail(const std::string& message) { throw nb::value_error(message.c_str()); }

void check_arg(const Status& s) {
  if (!s) fail(s.message());
}

void check_run(const Status& s) {
  if (!s) throw std::runtime_error(s.message());  // nanobind turns it into RuntimeError
}

// t's dtype among those the bindings take; false for any other.
static bool dtype_of(const Array& t, formats::DType* out) {
  const nb::dlpack::dtype d = t.dtype();
  if (d.lanes != 1) return false;
  using C = nb::dlpack::dtype_code;
  using formats::DType;
  const auto code = static_cast<C>(d.code);
  // float8_e4m3fn codes are bytes like uint8 ones: a torch float8 tensor may hold quantized data.
  if ((code == C::UInt || code == C::Float8_E4M3FN) && d.bits == 8) *out = DType::kU8;
  else if (code == C::Int && d.bits == 32) *out = DType::kI32;
  else if (code == C::Float && d.bits == 32) *out = DType::kF32;
  else if (code == C::Float && d.bits == 16) *out = DType::kF16;
  else if (code == C::Bfloat && d.bits == 16) *out = DType::kBf16;
  else return false;
  return true;
}

const char* torch_dtype_name(formats::DType d) {
  switch (d) {
    case formats::DType::kU8: return "uint8";
    case formats::DType::kI32: return "int32";
    case formats::DType::kF32: return "float32";
    case formats::DType::kBf16: return "bfloat16";
    case formats::DType::kF16: return "float16";
    default: return formats::dtype_name(d);  // none the bindings take
  }
}

std::string shape_string(const Array& t) {
  std::string s = "(";
  for (size_t i = 0; i < t.ndim(); ++i) s += (i ? ", " : "") + std::to_string(t.shape(i));
  return s + (t.ndim() == 1 ? ",)" : ")");
}

int64_t numel(const Array& t) { return static_cast<int64_t>(t.size()); }
int64_t nbytes(const Array& t) { return static_cast<int64_t>(t.nbytes()); }

static std::string device_string(int type, int id) {
  if (type == nb::device::cuda::value) return "cuda:" + std::to_string(id);
  if (type == nb::device::cpu::value) return "cpu";
  return "DLPack device type " + std::to_string(type);
}

void CallDevice::require(const char* name, const Array& t) {
  require_present(name, t);
  if (t.device_type() != nb::device::cuda::value)
    fail(std::string(name) + ": must be a CUDA tensor (got one on " + device_string(t.device_type(), t.device_id()) + ")");
  if (id_ < 0) {
    id_ = t.device_id();
    first_ = name;
  } else if (t.device_id() != id_) {
    fail(std::string(name) + ": is on cuda:" + std::to_string(t.device_id()) + ", must be on " + first_ + "'s device cuda:" +
         std::to_string(id_));
  }
}

void require_present(const char* name, const Array& t) {
  if (!t.is_valid()) fail(std::string(name) + ": required (got None)");
}

// A dtype the checks do not take, named as torch / numpy would name it ("int64", "bool").
static std::string other_dtype_name(const Array& t) {
  const nb::dlpack::dtype d = t.dtype();
  using C = nb::dlpack::dtype_code;
  std::string base;
  switch (static_cast<C>(d.code)) {
    case C::Int: base = "int"; break;
    case C::UInt: base = "uint"; break;
    case C::Float: base = "float"; break;
    case C::Bfloat: base = "bfloat"; break;
    case C::Complex: base = "complex"; break;
    case C::Bool: return "bool";
    default: return "DLPack type code " + std::to_string(d.code) + " of " + std::to_string(d.bits) + " bits";
  }
  return base + std::to_string(d.bits) + (d.lanes != 1 ? " x" + std::to_string(d.lanes) : "");
}

formats::DType require_dtype(const char* name, const Array& t, std::initializer_list<formats::DType> allowed) {
  formats::DType d{};
  const bool known = dtype_of(t, &d);
  std::string list;
  for (formats::DType a : allowed) {
    if (known && a == d) return d;
    list += std::string(list.empty() ? "" : " or ") + torch_dtype_name(a);
  }
  fail(std::string(name) + ": dtype must be " + list + " (got " +
       (known ? std::string(torch_dtype_name(d)) : other_dtype_name(t)) + ")");
}

void require_ndim(const char* name, const Array& t, size_t ndim) {
  if (t.ndim() != ndim)
    fail(std::string(name) + ": must have " + std::to_string(ndim) + " dimensions (got shape " + shape_string(t) + ")");
}

int64_t require_rows(const char* name, const Array& t) {
  require_ndim(name, t, 2);
  const int64_t rows = static_cast<int64_t>(t.shape(0)), cols = static_cast<int64_t>(t.shape(1));
  if (cols > 1 && t.stride(1) != 1)
    fail(std::string(name) + ": the last dimension must be contiguous (stride 1, got " + std::to_string(t.stride(1)) +
         "); pass .contiguous()");
  const int64_t ld = rows > 1 ? t.stride(0) : cols;
  if (ld < cols)
    fail(std::string(name) + ": row stride (" + std::to_string(ld) + ") must be >= its columns (" + std::to_string(cols) +
         "); pass .contiguous()");
  return ld;
}

void require_contiguous(const char* name, const Array& t) {
  int64_t expect = 1;
  for (size_t i = t.ndim(); i-- > 0;) {
    if (t.shape(i) != 1 && t.stride(i) != expect)
      fail(std::string(name) + ": must be contiguous (shape " + shape_string(t) + ", stride " + std::to_string(t.stride(i)) +
           " in dimension " + std::to_string(i) + " where " + std::to_string(expect) + " is needed); pass .contiguous()");
    expect *= static_cast<int64_t>(t.shape(i));
  }
}

void require_bytes(const char* name, const Array& t, int64_t bytes, const char* sized_by) {
  require_contiguous(name, t);
  if (nbytes(t) < bytes)
    fail(std::string(name) + ": holds " + std::to_string(nbytes(t)) + " bytes, needs " + std::to_string(bytes) + " (" +
         sized_by + ")");
}

formats::Format format_arg(const char* name, const std::string& value) {
  formats::Format f;
  if (formats::parse_format(value, &f)) return f;
  std::string all;
  for (formats::Format x : formats::all_formats()) all += std::string(all.empty() ? "" : ", ") + formats::format_name(x);
  fail(std::string(name) + ": '" + value + "' is not one of " + all);
}

formats::Direction direction_arg(const std::string& value) {
  if (value == "rowwise") return formats::Direction::kRowwise;
  if (value == "columnwise") return formats::Direction::kColumnwise;
  if (value == "both") return formats::Direction::kBoth;
  fail("direction: '" + value + "' is not one of rowwise, columnwise, both");
}

DeviceGuard::DeviceGuard(int device) {
  cudaError_t err = cudaGetDevice(&previous_);
  if (err == cudaSuccess && previous_ != device) err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: the next call starts clean
    throw std::runtime_error(std::string("blockscale._cuda: cannot use cuda:") + std::to_string(device) + ": " +
                             cudaGetErrorString(err));
  }
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

}  // namespace blockscale::python
