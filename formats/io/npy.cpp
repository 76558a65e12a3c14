// .npy reader and writer. The header is a Python dict literal; this parses the subset np.save
// writes ({'descr': str, 'fortran_order': bool, 'shape': tuple of ints}) with a bounded,
// non-recursive scanner, so no input can make it recurse, allocate more than the header's size,
// or read outside the buffer.
#include "formats/io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string_view>

namespace blockscale::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct Header {
  formats::DType dtype = formats::DType::kF32;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  size_t data_offset = 0;  // bytes before the array data
  uint64_t nbytes = 0;     // bytes of array data the shape and descr call for
};

Status bad(const std::string& what) { return Status::error("npy: " + what); }

// Scanner over the header dict. Every read is bounds-checked against the header text.
class DictScanner {
 public:
  explicit DictScanner(std::string_view s) : s_(s) {}

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool at_end() { skip_ws(); return i_ == s_.size(); }
  char peek() { skip_ws(); return i_ < s_.size() ? s_[i_] : '\0'; }
  size_t pos() const { return i_; }

  // A quoted string without escapes ('...' or "..."): all np.save ever writes for keys and descr.
  Status string(std::string* out) {
    const char q = peek();
    if (q != '\'' && q != '"') return bad("header: expected a quoted string at byte " + std::to_string(i_));
    const size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') return bad("header: escape sequences in strings are not supported");
      ++i_;
    }
    if (i_ == s_.size()) return bad("header: unterminated string");
    *out = std::string(s_.substr(start, i_ - start));
    ++i_;
    return Status::ok();
  }

  Status boolean(bool* out) {
    skip_ws();
    if (s_.substr(i_, 4) == "True") { *out = true; i_ += 4; return Status::ok(); }
    if (s_.substr(i_, 5) == "False") { *out = false; i_ += 5; return Status::ok(); }
    return bad("header: 'fortran_order' must be True or False");
  }

  // A non-negative decimal integer; a trailing 'L' (Python 2 era files) is accepted.
  Status integer(int64_t* out) {
    skip_ws();
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') {
      return bad("header: 'shape' must hold non-negative integers (byte " + std::to_string(i_) + ")");
    }
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (__builtin_mul_overflow(v, int64_t{10}, &v) || __builtin_add_overflow(v, int64_t{s_[i_] - '0'}, &v)) {
        return bad("header: a 'shape' dimension overflows int64");
      }
      ++i_;
    }
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;
    *out = v;
    return Status::ok();
  }

  // A Python tuple of integers: (), (n,), (a, b), (a, b,).
  Status tuple(std::vector<int64_t>* out) {
    out->clear();
    if (!eat('(')) return bad("header: 'shape' must be a tuple");
    bool trailing_comma = false;
    while (!eat(')')) {
      if (out->size() >= static_cast<size_t>(kMaxRank)) {
        return bad("header: 'shape' rank exceeds the limit " + std::to_string(kMaxRank));
      }
      int64_t v = 0;
      BS_RETURN_IF_ERROR(integer(&v));
      out->push_back(v);
      trailing_comma = eat(',');
      if (!trailing_comma && peek() != ')') return bad("header: malformed 'shape' tuple");
    }
    // (3) is the integer 3 in Python, not a tuple: numpy rejects it, and so do we.
    if (out->size() == 1 && !trailing_comma) return bad("header: 'shape' (n) needs a trailing comma");
    return Status::ok();
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

// The numpy descr np.save writes for each formats::DType (in its order); nullptr: no .npy form.
// bf16: numpy has no bfloat16; ml_dtypes' bfloat16 arrays save as '<V2' (checked with numpy
// 2.4.6 / ml_dtypes 0.6.0). The fp8 types save as '<V1' for every variant, so .npy cannot say
// which fp8 format a file holds: they have no .npy form here (save them as uint8).
const char* npy_descr(formats::DType d) {
  static constexpr const char* kDescr[formats::kNumDTypes] = {
      "|b1", "|u1", "|i1", nullptr, nullptr, nullptr, "<i2", "<u2",
      "<f2", "<V2", "<i4", "<u4", "<f4", "<f8", "<i8", "<u8"};
  return static_cast<int>(d) < formats::kNumDTypes ? kDescr[static_cast<int>(d)] : nullptr;
}

Status descr_to_dtype(const std::string& descr, formats::DType* out) {
  for (int k = 0; k < formats::kNumDTypes; ++k) {
    const formats::DType d = static_cast<formats::DType>(k);
    if (!npy_descr(d)) continue;
    const std::string_view want(npy_descr(d));
    // One-byte types have no byte order: numpy writes '|', '<' is equally clear.
    const bool match = descr == want || (formats::dtype_size(d) == 1 && descr.size() == want.size() &&
                                         (descr[0] == '<' || descr[0] == '|') &&
                                         std::string_view(descr).substr(1) == want.substr(1));
    if (match) {
      *out = static_cast<formats::DType>(k);
      return Status::ok();
    }
  }
  if (!descr.empty() && descr[0] == '>') return bad("descr: big-endian " + detail::printable(descr) + " is not supported");
  if (descr == "<V1" || descr == "|V1") {
    return bad("descr: " + descr + " is a 1-byte opaque type (every ml_dtypes fp8 saves as "
               "it, so the format is unknown): save fp8 data as uint8 instead");
  }
  return bad("descr: unsupported " + detail::printable(descr) + " (supported: <f2 <f4 <f8 <V2(bf16) |b1 |u1 |i1 "
             "<i2 <u2 <i4 <u4 <i8 <u8)");
}

Status parse_dict(std::string_view text, Header* h) {
  DictScanner sc(text);
  if (!sc.eat('{')) return bad("header: must start with '{'");
  bool have_descr = false, have_order = false, have_shape = false;
  while (!sc.eat('}')) {
    std::string key;
    BS_RETURN_IF_ERROR(sc.string(&key));
    if (!sc.eat(':')) return bad("header: expected ':' after " + detail::printable(key));
    bool* seen = nullptr;
    if (key == "descr") {
      if (sc.peek() == '[') return bad("descr: structured dtypes are not supported");
      std::string descr;
      BS_RETURN_IF_ERROR(sc.string(&descr));
      BS_RETURN_IF_ERROR(descr_to_dtype(descr, &h->dtype));
      seen = &have_descr;
    } else if (key == "fortran_order") {
      BS_RETURN_IF_ERROR(sc.boolean(&h->fortran_order));
      seen = &have_order;
    } else if (key == "shape") {
      BS_RETURN_IF_ERROR(sc.tuple(&h->shape));
      seen = &have_shape;
    } else {
      return bad("header: unexpected key " + detail::printable(key) + " (numpy writes only descr, fortran_order, shape)");
    }
    if (*seen) return bad("header: duplicate key " + detail::printable(key));
    *seen = true;
    if (!sc.eat(',') && sc.peek() != '}') {
      return bad("header: expected ',' or '}' at byte " + std::to_string(sc.pos()));
    }
  }
  if (!sc.at_end()) return bad("header: unexpected text after the dict");
  if (!have_descr) return bad("header: missing key 'descr'");
  if (!have_order) return bad("header: missing key 'fortran_order'");
  if (!have_shape) return bad("header: missing key 'shape'");
  return Status::ok();
}

// Parses the preamble and header. `avail` bytes of the file are in `b`; `file_size` is the
// whole file's size (the data after the header must be exactly shape x itemsize bytes).
Status parse_header(const uint8_t* b, size_t avail, uint64_t file_size, Header* h) {
  if (avail < kMagicLen + 4) {
    return bad("truncated: " + std::to_string(avail) + " bytes, shorter than the 10-byte preamble");
  }
  if (std::memcmp(b, kMagic, kMagicLen) != 0) return bad("bad magic: not a .npy file");
  const int major = b[6], minor = b[7];
  if (major < 1 || major > 3 || minor != 0) {
    return bad("unsupported format version " + std::to_string(major) + "." + std::to_string(minor) +
               " (1.0, 2.0 and 3.0 are supported)");
  }
  size_t prefix = 10;
  uint64_t hlen = b[8] | static_cast<uint64_t>(b[9]) << 8;
  if (major >= 2) {
    if (avail < 12) return bad("truncated: the 4-byte header length is missing");
    prefix = 12;
    hlen |= static_cast<uint64_t>(b[10]) << 16 | static_cast<uint64_t>(b[11]) << 24;
  }
  if (hlen > kMaxNpyHeader) {
    return bad("header length " + std::to_string(hlen) + " exceeds the limit " + std::to_string(kMaxNpyHeader));
  }
  if (prefix + hlen > avail) {
    return bad("truncated: header length " + std::to_string(hlen) + " runs past the end of the file");
  }
  if (hlen == 0 || b[prefix + hlen - 1] != '\n') return bad("header: not terminated by '\\n'");
  const std::string_view text(reinterpret_cast<const char*>(b + prefix), hlen);
  BS_RETURN_IF_ERROR(parse_dict(text, h));
  Status s = shape_nbytes(h->shape, h->dtype, &h->nbytes);
  if (!s) return bad(s.message());
  h->data_offset = prefix + hlen;
  const uint64_t have = file_size - h->data_offset;
  if (have < h->nbytes) {
    return bad("truncated: " + std::to_string(have) + " data bytes, the shape and descr need " +
               std::to_string(h->nbytes));
  }
  if (have > h->nbytes) {
    return bad(std::to_string(have - h->nbytes) + " unexpected bytes after the array data");
  }
  return Status::ok();
}

// Column-major `src` -> row-major `dst`: walks the source in order, keeping the destination
// offset of the current multi-index up to date (dimension 0 varies fastest in the source).
void fortran_to_c(const uint8_t* src, uint8_t* dst, const std::vector<int64_t>& shape, size_t es, uint64_t n) {
  // An empty array has nothing to move, and its other dimensions' products may not fit in
  // int64 (shape_nbytes only bounds the total): found by npy_fuzz.
  if (n == 0) return;
  const size_t r = shape.size();
  std::vector<int64_t> stride(r, 1), idx(r, 0);
  for (size_t k = r; k-- > 1;) stride[k - 1] = stride[k] * shape[k];
  int64_t off = 0;
  for (uint64_t j = 0; j < n; ++j) {
    std::memcpy(dst + static_cast<size_t>(off) * es, src + j * es, es);
    for (size_t k = 0; k < r; ++k) {
      if (++idx[k] < shape[k]) {
        off += stride[k];
        break;
      }
      off -= (shape[k] - 1) * stride[k];
      idx[k] = 0;
    }
  }
}

// Fills `out` from a parsed header and the `h.nbytes` data bytes at `data`.
Status fill(const Header& h, const uint8_t* data, NpyArray* out) {
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(h.nbytes);
  } catch (const std::bad_alloc&) {
    return bad("cannot allocate " + std::to_string(h.nbytes) + " bytes");
  }
  const bool transpose = h.fortran_order && h.shape.size() > 1;
  if (transpose) {
    fortran_to_c(data, bytes.data(), h.shape, dtype_size(h.dtype), h.nbytes / dtype_size(h.dtype));
  } else if (h.nbytes) {
    std::memcpy(bytes.data(), data, h.nbytes);
  }
  out->dtype = h.dtype;
  out->shape = h.shape;
  out->data = std::move(bytes);
  return Status::ok();
}

Status read_all(int fd, uint8_t* dst, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return bad("reading '" + path + "' failed: " + (r < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    dst += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::ok();
}

// The header text np.save writes: keys sorted, shape as a Python tuple, spare spaces so the
// first axis can grow in place (numpy's GROWTH_AXIS_MAX_DIGITS = 21), padded with spaces and a
// final '\n' so that preamble + header is a multiple of 64 bytes.
Status npy_header(const TensorView& t, std::string* out) {
  BS_RETURN_IF_ERROR(check_view(t, "t"));
  const char* descr = npy_descr(t.dtype);
  if (!descr) {
    return bad(std::string("t.dtype: ") + dtype_name(t.dtype) + " has no .npy form (numpy saves "
               "every fp8 type as '<V1'); write the bytes as U8 instead");
  }
  std::string shape = "(";
  for (size_t k = 0; k < t.shape.size(); ++k) shape += (k ? ", " : "") + std::to_string(t.shape[k]);
  shape += t.shape.size() == 1 ? ",)" : ")";
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  if (!t.shape.empty()) {
    const size_t digits = std::to_string(t.shape[0]).size();
    if (digits < 21) dict.append(21 - digits, ' ');
  }
  const size_t hlen = dict.size() + 1;  // + '\n'
  int major = 1;
  size_t prefix = kMagicLen + 4;
  size_t pad = 64 - (prefix + hlen) % 64;
  if (hlen + pad > 0xFFFF) {  // 1.0 stores the header length in 16 bits
    major = 2;
    prefix = kMagicLen + 6;
    pad = 64 - (prefix + hlen) % 64;
  }
  const uint64_t total = hlen + pad;
  std::string h(kMagic, kMagicLen);
  h += static_cast<char>(major);
  h += '\0';
  for (size_t k = 0; k < prefix - kMagicLen - 2; ++k) h += static_cast<char>((total >> (8 * k)) & 0xFF);
  h += dict;
  h.append(pad, ' ');
  h += '\n';
  *out = std::move(h);
  return Status::ok();
}

}  // namespace

Status parse_npy(const uint8_t* bytes, size_t size, NpyArray* out) {
  if (!out) return bad("out is null");
  if (!bytes && size) return bad("bytes is null");
  try {
    Header h;
    BS_RETURN_IF_ERROR(parse_header(bytes, size, size, &h));
    return fill(h, bytes + h.data_offset, out);
  } catch (const std::exception& e) {  // allocation failure: report, never let it escape
    return bad(std::string("parse failed: ") + e.what());
  }
}

Status read_npy(const std::string& path, NpyArray* out) {
  if (!out) return bad("out is null");
  // O_NONBLOCK: a FIFO (not a regular file: refused below) must not block open() waiting for a
  // writer; it changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return bad("cannot open '" + path + "': " + std::strerror(errno));
  struct Closer { int fd; ~Closer() { ::close(fd); } } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return bad("'" + path + "' is not a regular file");
  try {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    // Read the preamble and at most the largest allowed header, then the data alone.
    std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(size, 12 + kMaxNpyHeader)));
    BS_RETURN_IF_ERROR(read_all(fd, head.data(), head.size(), 0, path));
    Header h;
    Status s = parse_header(head.data(), head.size(), size, &h);
    if (!s) return Status::error(s.message() + " ('" + path + "')");
    std::vector<uint8_t> data(h.nbytes);
    BS_RETURN_IF_ERROR(read_all(fd, data.data(), data.size(), h.data_offset, path));
    if (!h.fortran_order || h.shape.size() < 2) {
      out->dtype = h.dtype;
      out->shape = h.shape;
      out->data = std::move(data);
      return Status::ok();
    }
    return fill(h, data.data(), out);
  } catch (const std::exception& e) {
    return bad("reading '" + path + "' failed: " + e.what());
  }
}

Status encode_npy(const TensorView& t, std::vector<uint8_t>* out) {
  if (!out) return bad("out is null");
  try {
    std::string h;
    BS_RETURN_IF_ERROR(npy_header(t, &h));
    out->assign(h.begin(), h.end());
    out->insert(out->end(), t.data, t.data + t.nbytes);
    return Status::ok();
  } catch (const std::exception& e) {
    return bad(std::string("encode failed: ") + e.what());
  }
}

Status write_npy(const std::string& path, const TensorView& t) {
  try {
    std::string h;
    BS_RETURN_IF_ERROR(npy_header(t, &h));
    detail::AtomicFile f;
    BS_RETURN_IF_ERROR(f.open(path));
    BS_RETURN_IF_ERROR(f.write(h.data(), h.size()));
    BS_RETURN_IF_ERROR(f.write(t.data, t.nbytes));
    return f.commit();
  } catch (const std::exception& e) {
    return bad("writing '" + path + "' failed: " + e.what());
  }
}

}  // namespace blockscale::io
