// A tensor as the file readers hand it out and the writers take it: a dtype, a row-major shape
// and a pointer to little-endian bytes owned by someone else (a memory mapping, an NpyArray, the
// caller). Also the safetensors dtype string's parse, widening of the float dtypes to fp32, and
// the write-to-a-temporary-then-rename file both writers use.
//
//   defines: dtype_from_name, shape_nbytes, TensorView, check_view, widen_to_float, to_float,
//            detail::AtomicFile, detail::write_file_atomically
//   (the dtypes themselves, formats::DType and its table, are formats/dtype.h's)
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "formats/dtype.h"
#include "formats/scalar_codecs.h"
#include "formats/status.h"

namespace blockscale::io {

// Highest rank either format reads or writes (numpy 2's NPY_MAXDIMS); bounds per-tensor memory.
inline constexpr int kMaxRank = 64;

namespace detail {

// `s` for an error message: quoted, non-printable bytes as \xNN, at most 80 bytes shown (names
// and descrs come from untrusted files).
inline std::string printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string q = "'";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      q += static_cast<char>(c);
    } else {
      q += "\\x";
      q += kHex[c >> 4];
      q += kHex[c & 15];
    }
  }
  return q + (s.size() > 80 ? "'..." : "'");
}

}  // namespace detail

// safetensors dtype string (formats::dtype_name) -> formats::DType.
inline Status dtype_from_name(std::string_view name, formats::DType* out) {
  for (int i = 0; i < formats::kNumDTypes; ++i) {
    if (name == dtype_info(static_cast<formats::DType>(i)).name) {
      *out = static_cast<formats::DType>(i);
      return Status::ok();
    }
  }
  return Status::error("dtype: unsupported dtype " + detail::printable(name) +
                       " (supported: BOOL U8 I8 I16 U16 I32 U32 I64 U64 F16 BF16 F32 F64 "
                       "F8_E4M3 F8_E5M2 F8_E8M0)");
}

// Bytes of a tensor of `shape` and `dtype`: an error for a negative dimension, rank > kMaxRank,
// or an element count or byte count that overflows int64.
inline Status shape_nbytes(const std::vector<int64_t>& shape, formats::DType dtype, uint64_t* nbytes) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return Status::error("shape: rank " + std::to_string(shape.size()) + " exceeds the limit " +
                         std::to_string(kMaxRank));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status::error("shape: dimension " + std::to_string(d) + " is negative");
    if (__builtin_mul_overflow(n, d, &n)) {
      return Status::error("shape: the product of the dimensions overflows int64");
    }
  }
  if (__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(dtype)), &n)) {
    return Status::error("shape: elements x dtype size overflows int64");
  }
  *nbytes = static_cast<uint64_t>(n);
  return Status::ok();
}

struct TensorView {
  formats::DType dtype = formats::DType::kF32;
  std::vector<int64_t> shape;     // row-major (C order); empty: rank 0, one element
  const uint8_t* data = nullptr;  // little-endian elements; may be unaligned (use memcpy)
  size_t nbytes = 0;

  int64_t numel() const { return dtype_size(dtype) ? static_cast<int64_t>(nbytes / dtype_size(dtype)) : 0; }
};

// A view the writers accept: a valid shape, nbytes == elements x dtype size, data set if nbytes.
inline Status check_view(const TensorView& t, const std::string& what) {
  uint64_t want = 0;
  Status s = shape_nbytes(t.shape, t.dtype, &want);
  if (!s) return Status::error(what + ": " + s.message());
  if (want != t.nbytes) {
    return Status::error(what + ": nbytes (" + std::to_string(t.nbytes) + ") must equal the " +
                         "shape's elements x dtype size (" + std::to_string(want) + ")");
  }
  if (t.nbytes && !t.data) return Status::error(what + ": data is null");
  return Status::ok();
}

// Widens n elements of float dtype `d` at p (little-endian, possibly unaligned) to fp32: F64
// rounds to nearest; F16, BF16 and the fp8 formats are exact. Returns false for a non-float dtype.
// The one conversion both to_float and chunked readers (the study) use.
inline bool widen_to_float(formats::DType d, const uint8_t* p, size_t n, float* o) {
  namespace f = blockscale::formats;
  auto u16 = [p](size_t i) { return static_cast<uint16_t>(p[2 * i] | p[2 * i + 1] << 8); };
  switch (d) {
    case formats::DType::kF32: if (n) std::memcpy(o, p, 4 * n); return true;
    case formats::DType::kF64:
      for (size_t i = 0; i < n; ++i) { double v; std::memcpy(&v, p + 8 * i, 8); o[i] = static_cast<float>(v); }
      return true;
    case formats::DType::kF16: for (size_t i = 0; i < n; ++i) o[i] = f::fp16_bits_to_float(u16(i)); return true;
    case formats::DType::kBf16: for (size_t i = 0; i < n; ++i) o[i] = f::bf16_bits_to_float(u16(i)); return true;
    case formats::DType::kF8E4M3: for (size_t i = 0; i < n; ++i) o[i] = f::decode_e4m3(p[i]); return true;
    case formats::DType::kF8E5M2: for (size_t i = 0; i < n; ++i) o[i] = f::decode_e5m2(p[i]); return true;
    case formats::DType::kF8E8M0: for (size_t i = 0; i < n; ++i) o[i] = f::decode_e8m0(p[i]); return true;
    default: return false;
  }
}

// Widens a whole float tensor to fp32 (widen_to_float), one tensor at a time. Integer dtypes are
// an error: their values are not floats.
inline Status to_float(const TensorView& t, std::vector<float>* out) {
  if (!out) return Status::error("to_float: out is null");
  if (!dtype_is_float(t.dtype)) {
    return Status::error(std::string("to_float: dtype ") + dtype_name(t.dtype) +
                         " is not a floating-point dtype");
  }
  BS_RETURN_IF_ERROR(check_view(t, "to_float"));
  const size_t n = t.nbytes / dtype_size(t.dtype);
  try {
    out->resize(n);
  } catch (const std::bad_alloc&) {
    return Status::error("to_float: cannot allocate " + std::to_string(n) + " floats");
  }
  if (!widen_to_float(t.dtype, t.data, n, out->data())) return Status::error("to_float: unreachable dtype");
  return Status::ok();
}

namespace detail {

// The writers' output: a temporary file next to the target (same file system, so rename is
// atomic), fsync'ed and renamed over the target by commit(). Until then the target is untouched;
// the destructor removes an uncommitted temporary, so an error leaves nothing behind.
class AtomicFile {
 public:
  AtomicFile() = default;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() { discard(); }

  Status open(const std::string& path) {
    discard();
    if (path.empty()) return Status::error("path: empty");
    // An existing link or read-only file in the way is the user's, not ours to replace. By the
    // mode bits as well: a process that may write anything (root) still leaves such a file be.
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode))
        return Status::error("'" + path + "' is a symbolic link: nothing is written through or over one");
      if (S_ISREG(st.st_mode) && ((st.st_mode & 0222) == 0 || ::access(path.c_str(), W_OK) != 0))
        return Status::error("'" + path + "' is read-only: it is not replaced");
    }
    namespace fs = std::filesystem;
    const fs::path target(path);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    for (int attempt = 0; attempt < 100; ++attempt) {
      const std::string tmp = (dir / ("." + target.filename().string() + ".tmp." +
                                      std::to_string(::getpid()) + "." +
                                      std::to_string(stamp + attempt)))
                                  .string();
      fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) {
        target_ = path;
        tmp_ = tmp;
        return Status::ok();
      }
      if (errno != EEXIST) break;
    }
    return Status::error("cannot create a temporary file in '" + dir.string() +
                         "': " + std::strerror(errno));
  }

  Status write(const void* data, size_t n) {
    if (fd_ < 0) return Status::error("write: the file is not open");
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        return Status::error("write: writing '" + tmp_ + "' failed: " +
                             std::strerror(w < 0 ? errno : EIO));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::ok();
  }

  Status commit() {
    if (fd_ < 0) return Status::error("commit: the file is not open");
    if (::fsync(fd_) != 0) return fail("fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return fail("close");
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) return fail("rename to '" + target_ + "'");
    tmp_.clear();
    // Make the rename itself durable; file systems that cannot fsync a directory are fine.
    const std::string dir = std::filesystem::path(target_).has_parent_path()
                                ? std::filesystem::path(target_).parent_path().string()
                                : ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
    return Status::ok();
  }

  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    tmp_.clear();
  }

 private:
  Status fail(const std::string& what) {
    const std::string msg = what + " of '" + tmp_ + "' failed: " + std::strerror(errno);
    discard();
    return Status::error(msg);
  }

  int fd_ = -1;
  std::string target_;
  std::string tmp_;
};

// `bytes` as the whole file at `path` through an AtomicFile: the old file stays until the new one
// is complete. Errors are AtomicFile's.
inline Status write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFile f;
  BS_RETURN_IF_ERROR(f.open(path));
  BS_RETURN_IF_ERROR(f.write(bytes.data(), bytes.size()));
  return f.commit();
}

}  // namespace detail
}  // namespace blockscale::io
