// .safetensors reader (mmap + a schema-checking SAX handler) and streaming writer.
//
// The header is parsed with nlohmann's SAX interface rather than into a json DOM: the handler
// knows the only valid shape of the document (object -> {tensor object | __metadata__ object}
// -> shape / data_offsets arrays) and stops the parse at the first event that does not fit, so
// nesting never gets deeper than 3, nothing is kept but the tensors themselves, and duplicate
// keys (which a DOM silently overwrites) are seen. nlohmann's SAX parser reports errors through
// the handler instead of throwing; allocation failures are caught at the API boundary.
#include "formats/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

namespace blockscale::io {
namespace {

using json = nlohmann::json;
using detail::printable;

Status bad(const std::string& what) { return Status::error("safetensors: " + what); }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? "," : "") + std::to_string(shape[k]);
  return s + "]";
}

struct Entry {
  std::string name;
  formats::DType dtype = formats::DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Schema-checking SAX handler. Every callback returns false (stopping the parse) on the first
// event that does not fit the schema, recording why in error().
class HeaderSax final : public nlohmann::json_sax<json> {
 public:
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
  const std::string& error() const { return error_; }
  bool done() const { return st_ == St::kDone; }

  bool null() override { return unexpected("null"); }
  bool boolean(bool) override { return unexpected("a boolean"); }
  bool number_integer(number_integer_t) override { return unexpected("a negative integer"); }
  bool number_float(number_float_t, const string_t&) override { return unexpected("a non-integer number"); }
  bool binary(binary_t&) override { return unexpected("binary data"); }

  bool number_unsigned(number_unsigned_t v) override {
    if (st_ == St::kShape) {
      if (cur_.shape.size() >= static_cast<size_t>(kMaxRank)) {
        return fail(where() + "rank exceeds the limit " + std::to_string(kMaxRank));
      }
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail(where() + "'shape' dimension " + std::to_string(v) + " overflows int64");
      }
      cur_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (st_ == St::kOffsets) {
      if (offsets_.size() >= 2) return fail(where() + "'data_offsets' must hold exactly 2 integers");
      offsets_.push_back(v);
      return true;
    }
    return unexpected("an integer");
  }

  bool string(string_t& s) override {
    if (st_ == St::kMetaValue) {
      metadata[meta_key_] = s;
      st_ = St::kMeta;
      return true;
    }
    if (st_ == St::kField && field_ == Field::kDtype) {
      Status st = dtype_from_name(s, &cur_.dtype);
      if (!st) return fail(where() + st.message());
      st_ = St::kTensor;
      return true;
    }
    return unexpected("a string");
  }

  bool start_object(std::size_t) override {
    if (st_ == St::kBegin) {
      st_ = St::kRoot;
      return true;
    }
    if (st_ == St::kRootValue) {
      if (key_ == "__metadata__") {
        st_ = St::kMeta;
      } else {
        cur_ = Entry{};
        cur_.name = key_;
        seen_ = 0;
        st_ = St::kTensor;
      }
      return true;
    }
    return unexpected("an object");
  }

  bool key(string_t& k) override {
    switch (st_) {
      case St::kRoot:
        if (!names_.insert(k).second) return fail("header: duplicate key " + printable(k));
        key_ = k;
        st_ = St::kRootValue;
        return true;
      case St::kMeta:
        if (metadata.count(k)) return fail("header: __metadata__: duplicate key " + printable(k));
        meta_key_ = k;
        st_ = St::kMetaValue;
        return true;
      case St::kTensor: {
        if (k == "dtype") field_ = Field::kDtype;
        else if (k == "shape") field_ = Field::kShape;
        else if (k == "data_offsets") field_ = Field::kOffsets;
        else return fail(where() + "unexpected key " + printable(k) + " (expected dtype, shape, data_offsets)");
        const unsigned bit = 1u << static_cast<unsigned>(field_);
        if (seen_ & bit) return fail(where() + "duplicate key " + printable(k));
        seen_ |= bit;
        st_ = St::kField;
        return true;
      }
      default:
        return unexpected("a key");
    }
  }

  bool end_object() override {
    if (st_ == St::kRoot) {
      st_ = St::kDone;
      return true;
    }
    if (st_ == St::kMeta) {
      st_ = St::kRoot;
      return true;
    }
    if (st_ == St::kTensor) {
      if (!(seen_ & 1u)) return fail(where() + "missing key 'dtype'");
      if (!(seen_ & 2u)) return fail(where() + "missing key 'shape'");
      if (!(seen_ & 4u)) return fail(where() + "missing key 'data_offsets'");
      uint64_t nbytes = 0;
      Status s = shape_nbytes(cur_.shape, cur_.dtype, &nbytes);
      if (!s) return fail(where() + s.message());
      if (cur_.begin > cur_.end) {
        return fail(where() + "data_offsets begin (" + std::to_string(cur_.begin) + ") > end (" +
                    std::to_string(cur_.end) + ")");
      }
      if (cur_.end - cur_.begin != nbytes) {
        return fail(where() + "data_offsets span " + std::to_string(cur_.end - cur_.begin) +
                    " bytes but shape " + shape_string(cur_.shape) + " x " + dtype_name(cur_.dtype) +
                    " needs " + std::to_string(nbytes));
      }
      entries.push_back(std::move(cur_));
      st_ = St::kRoot;
      return true;
    }
    return unexpected("the end of an object");
  }

  bool start_array(std::size_t) override {
    if (st_ == St::kField && field_ == Field::kShape) {
      cur_.shape.clear();
      st_ = St::kShape;
      return true;
    }
    if (st_ == St::kField && field_ == Field::kOffsets) {
      offsets_.clear();
      st_ = St::kOffsets;
      return true;
    }
    return unexpected("an array");
  }

  bool end_array() override {
    if (st_ == St::kShape) {
      st_ = St::kTensor;
      return true;
    }
    if (st_ == St::kOffsets) {
      if (offsets_.size() != 2) return fail(where() + "'data_offsets' must hold exactly 2 integers");
      cur_.begin = offsets_[0];
      cur_.end = offsets_[1];
      st_ = St::kTensor;
      return true;
    }
    return unexpected("the end of an array");
  }

  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) override {
    // Keep nlohmann's reason, drop its "[json.exception...]" prefix and its echo of the input.
    std::string why = ex.what();
    const size_t cut = why.find("; last read");
    if (cut != std::string::npos) why.resize(cut);
    const size_t p = why.find("] ");
    if (p != std::string::npos) why.erase(0, p + 2);
    if (why.size() > 200) why.resize(200);
    return fail("header: malformed JSON near byte " + std::to_string(pos) + ": " + why);
  }

 private:
  enum class St { kBegin, kRoot, kRootValue, kMeta, kMetaValue, kTensor, kField, kShape, kOffsets, kDone };
  enum class Field : unsigned { kDtype, kShape, kOffsets };

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }
  std::string where() const { return "tensor " + printable(cur_.name) + ": "; }

  // An event the schema has no place for: say what was expected where.
  bool unexpected(const char* got) {
    std::string g = std::string(", got ") + got;
    switch (st_) {
      case St::kBegin: return fail("header: must be a JSON object" + g);
      case St::kRootValue: return fail("header: the value of " + printable(key_) + " must be an object" + g);
      case St::kMetaValue: return fail("header: __metadata__ value of " + printable(meta_key_) + " must be a string" + g);
      case St::kField:
        return fail(where() + (field_ == Field::kDtype ? "'dtype' must be a string"
                               : field_ == Field::kShape ? "'shape' must be an array"
                                                         : "'data_offsets' must be an array") + g);
      case St::kShape: return fail(where() + "'shape' must hold non-negative integers" + g);
      case St::kOffsets: return fail(where() + "'data_offsets' must hold 2 non-negative integers" + g);
      default: return fail("header: unexpected JSON" + g);
    }
  }

  St st_ = St::kBegin;
  Field field_ = Field::kDtype;
  unsigned seen_ = 0;  // bit per Field seen in the current tensor object
  std::string key_, meta_key_;
  std::unordered_set<std::string> names_;
  Entry cur_;
  std::vector<uint64_t> offsets_;
  std::string error_;
};

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = v << 8 | p[k];
  return v;
}

}  // namespace

// ---- reading ----------------------------------------------------------------------------------

struct SafetensorsFile::Impl {
  void* map = nullptr;  // owned mapping, or null for parse()'d memory
  size_t map_size = 0;
  const uint8_t* buffer = nullptr;  // the byte buffer (after the header)
  std::vector<Entry> entries;       // sorted by offset
  std::unordered_map<std::string, size_t> index;
  std::map<std::string, std::string> metadata;

  ~Impl() {
    if (map) ::munmap(map, map_size);
  }

  Status load(const uint8_t* b, size_t size) {
    if (size < 8) return bad("truncated: " + std::to_string(size) + " bytes, the 8-byte header length is missing");
    const uint64_t n = read_le64(b);
    if (n > kMaxSafetensorsHeader) {
      return bad("header length " + std::to_string(n) + " exceeds the limit " + std::to_string(kMaxSafetensorsHeader));
    }
    if (n > size - 8) {
      return bad("truncated: header length " + std::to_string(n) + " runs past the end of the file (" +
                 std::to_string(size) + " bytes)");
    }
    const char* h = reinterpret_cast<const char*>(b + 8);
    // nlohmann skips a UTF-8 byte-order mark; serde_json (the reference) does not, nor do we.
    if (n >= 3 && std::memcmp(h, "\xEF\xBB\xBF", 3) == 0) return bad("header: starts with a byte-order mark");
    HeaderSax sax;
    const bool ok = json::sax_parse(h, h + n, &sax, json::input_format_t::json, /*strict=*/true);
    if (!ok || !sax.done()) return bad(sax.error().empty() ? "header: malformed JSON" : sax.error());

    // The tensors, in offset order, must tile the byte buffer: no overlap, no hole, no tail.
    const uint64_t buffer_size = size - 8 - n;
    std::vector<Entry>& e = sax.entries;
    std::sort(e.begin(), e.end(), [](const Entry& x, const Entry& y) {
      if (x.begin != y.begin) return x.begin < y.begin;
      return x.end != y.end ? x.end < y.end : x.name < y.name;  // names: a deterministic order
    });
    uint64_t covered = 0;
    for (size_t i = 0; i < e.size(); ++i) {
      if (e[i].end > buffer_size) {
        return bad("tensor " + printable(e[i].name) + ": data_offsets end (" + std::to_string(e[i].end) +
                   ") exceeds the byte buffer (" + std::to_string(buffer_size) + " bytes)");
      }
      if (e[i].begin < covered) {
        return bad("tensor " + printable(e[i].name) + ": data_offsets [" + std::to_string(e[i].begin) + ", " +
                   std::to_string(e[i].end) + ") overlap tensor " + printable(e[i - 1].name) +
                   " (which ends at " + std::to_string(covered) + ")");
      }
      if (e[i].begin > covered) {
        return bad("bytes [" + std::to_string(covered) + ", " + std::to_string(e[i].begin) +
                   ") of the byte buffer belong to no tensor (the tensors must cover it without holes)");
      }
      covered = e[i].end;
    }
    if (covered != buffer_size) {
      return bad("the byte buffer has " + std::to_string(buffer_size) + " bytes but the tensors cover " +
                 std::to_string(covered) + " (trailing bytes or a truncated file)");
    }
    buffer = b + 8 + n;
    entries = std::move(e);
    metadata = std::move(sax.metadata);
    index.reserve(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) index.emplace(entries[i].name, i);
    return Status::ok();
  }
};

SafetensorsFile::SafetensorsFile() : impl_(std::make_unique<Impl>()) {}
SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

Status SafetensorsFile::parse(const uint8_t* bytes, size_t size, SafetensorsFile* out) {
  if (!out) return bad("out is null");
  if (!bytes && size) return bad("bytes is null");
  try {
    auto impl = std::make_unique<Impl>();
    BS_RETURN_IF_ERROR(impl->load(bytes, size));
    out->impl_ = std::move(impl);
    return Status::ok();
  } catch (const std::exception& e) {  // allocation failure
    return bad(std::string("parse failed: ") + e.what());
  }
}

Status SafetensorsFile::open(const std::string& path, SafetensorsFile* out) {
  if (!out) return bad("out is null");
  // O_NONBLOCK: a FIFO (not a regular file: refused below) must not block open() waiting for a
  // writer; it changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return bad("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return bad("'" + path + "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return bad("truncated: '" + path + "' has " + std::to_string(size) + " bytes, the 8-byte header length is missing");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file open
  if (map == MAP_FAILED) return bad("cannot map '" + path + "': " + std::strerror(map_errno));
  try {
    auto impl = std::make_unique<Impl>();
    impl->map = map;
    impl->map_size = size;
    Status s = impl->load(static_cast<const uint8_t*>(map), size);
    if (!s) return Status::error(s.message() + " ('" + path + "')");
    out->impl_ = std::move(impl);
    return Status::ok();
  } catch (const std::exception& e) {
    return bad("reading '" + path + "' failed: " + e.what());
  }
}

size_t SafetensorsFile::num_tensors() const { return impl_ ? impl_->entries.size() : 0; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> n;
  if (!impl_) return n;
  n.reserve(impl_->entries.size());
  for (const Entry& e : impl_->entries) n.push_back(e.name);
  return n;
}

bool SafetensorsFile::contains(const std::string& name) const {
  return impl_ && impl_->index.count(name) != 0;
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return impl_ ? impl_->metadata : kEmpty;
}

Status SafetensorsFile::tensor(const std::string& name, TensorView* out) const {
  if (!out) return bad("out is null");
  if (!impl_) return bad("the file is not open");
  const auto it = impl_->index.find(name);
  if (it == impl_->index.end()) return bad("name: no tensor " + printable(name) + " in the file");
  const Entry& e = impl_->entries[it->second];
  *out = TensorView{e.dtype, e.shape, impl_->buffer + e.begin, static_cast<size_t>(e.end - e.begin)};
  return Status::ok();
}

Status SafetensorsFile::tensor_as_float(const std::string& name, std::vector<float>* out) const {
  TensorView t;
  BS_RETURN_IF_ERROR(tensor(name, &t));
  Status s = to_float(t, out);
  return s ? s : bad("tensor " + printable(name) + ": " + s.message());
}

// ---- writing ----------------------------------------------------------------------------------

struct SafetensorsWriter::Impl {
  detail::AtomicFile file;
  std::vector<TensorSpec> order;
  std::vector<uint64_t> sizes;
  size_t cur = 0;        // first tensor not yet complete
  uint64_t written = 0;  // bytes of order[cur] written
  bool open = false;
  bool finished = false;

  void skip_complete() {
    while (cur < order.size() && written == sizes[cur]) {
      ++cur;
      written = 0;
    }
  }
};

namespace {

// `s` as a JSON string (nlohmann escapes as serde_json does); an error for invalid UTF-8.
Status json_string(const std::string& s, const char* what, std::string* out) {
  try {
    *out += json(s).dump(-1, ' ', false, json::error_handler_t::strict);
    return Status::ok();
  } catch (const json::exception&) {
    return bad(std::string(what) + " " + printable(s) + " is not valid UTF-8");
  }
}

// The header the reference serializer writes: compact JSON, __metadata__ first, tensors in file
// order, padded with spaces to a multiple of 8 bytes.
Status build_header(const std::vector<TensorSpec>& order, const std::vector<uint64_t>& sizes,
                    const std::map<std::string, std::string>& metadata, std::string* out) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ',';
      first = false;
      BS_RETURN_IF_ERROR(json_string(k, "metadata key", &h));
      h += ':';
      BS_RETURN_IF_ERROR(json_string(v, "metadata value", &h));
    }
    h += '}';
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i || !metadata.empty()) h += ',';
    BS_RETURN_IF_ERROR(json_string(order[i].name, "tensor name", &h));
    h += std::string(":{\"dtype\":\"") + dtype_name(order[i].dtype) + "\",\"shape\":" + shape_string(order[i].shape) +
         ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + sizes[i]) + "]}";
    offset += sizes[i];
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  if (h.size() > kMaxSafetensorsHeader) {
    return bad("the header would be " + std::to_string(h.size()) + " bytes, over the limit " +
               std::to_string(kMaxSafetensorsHeader) + " readers enforce");
  }
  *out = std::move(h);
  return Status::ok();
}

}  // namespace

SafetensorsWriter::SafetensorsWriter() : impl_(std::make_unique<Impl>()) {}
SafetensorsWriter::~SafetensorsWriter() = default;

Status SafetensorsWriter::open(const std::string& path, std::vector<TensorSpec> tensors,
                               const std::map<std::string, std::string>& metadata) {
  Impl& w = *impl_;
  if (w.open) return bad("open: the writer is already open");
  try {
    std::stable_sort(tensors.begin(), tensors.end(), [](const TensorSpec& a, const TensorSpec& b) {
      return a.dtype != b.dtype ? a.dtype > b.dtype : a.name < b.name;
    });
    std::unordered_set<std::string> seen;
    std::vector<uint64_t> sizes(tensors.size());
    uint64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorSpec& t = tensors[i];
      if (t.name == "__metadata__") return bad("tensors: '__metadata__' is reserved, not a tensor name");
      if (!seen.insert(t.name).second) return bad("tensors: duplicate name " + printable(t.name));
      if (static_cast<int>(t.dtype) >= formats::kNumDTypes) return bad("tensors: " + printable(t.name) + " has an invalid dtype");
      Status s = shape_nbytes(t.shape, t.dtype, &sizes[i]);
      if (!s) return bad("tensors: " + printable(t.name) + ": " + s.message());
      if (__builtin_add_overflow(total, sizes[i], &total)) return bad("tensors: total size overflows");
    }
    std::string header;
    BS_RETURN_IF_ERROR(build_header(tensors, sizes, metadata, &header));
    BS_RETURN_IF_ERROR(w.file.open(path));
    uint8_t len[8];
    for (int k = 0; k < 8; ++k) len[k] = static_cast<uint8_t>(header.size() >> (8 * k));
    Status s = w.file.write(len, 8);
    if (s) s = w.file.write(header.data(), header.size());
    if (!s) {
      w.file.discard();
      return s;
    }
    w.order = std::move(tensors);
    w.sizes = std::move(sizes);
    w.cur = 0;
    w.written = 0;
    w.open = true;
    w.finished = false;
    w.skip_complete();
    return Status::ok();
  } catch (const std::exception& e) {
    w.file.discard();
    return bad(std::string("open failed: ") + e.what());
  }
}

const std::vector<TensorSpec>& SafetensorsWriter::order() const { return impl_->order; }

Status SafetensorsWriter::write(const std::string& name, const void* data, size_t nbytes) {
  Impl& w = *impl_;
  if (!w.open || w.finished) return bad("write: the writer is not open");
  if (nbytes == 0) return Status::ok();  // nothing to place; empty tensors complete themselves
  if (w.cur == w.order.size()) return bad("write: every tensor is complete; got data for " + printable(name));
  const TensorSpec& t = w.order[w.cur];
  if (name != t.name) {
    return bad("write: expected data for " + printable(t.name) + " (file order: dtype descending, then name), got " +
               printable(name));
  }
  if (nbytes > w.sizes[w.cur] - w.written) {
    return bad("write: " + std::to_string(nbytes) + " bytes exceed the " + std::to_string(w.sizes[w.cur] - w.written) +
               " bytes left of " + printable(name));
  }
  if (nbytes && !data) return bad("write: data is null");
  Status s = w.file.write(data, nbytes);
  if (!s) {  // the file is unusable now: drop it
    w.file.discard();
    w.open = false;
    return s;
  }
  w.written += nbytes;
  w.skip_complete();
  return Status::ok();
}

Status SafetensorsWriter::finish() {
  Impl& w = *impl_;
  if (!w.open || w.finished) return bad("finish: the writer is not open");
  w.open = false;
  if (w.cur != w.order.size()) {
    w.file.discard();
    return bad("finish: tensor " + printable(w.order[w.cur].name) + " has " + std::to_string(w.written) + " of " +
               std::to_string(w.sizes[w.cur]) + " bytes (the file was not written)");
  }
  BS_RETURN_IF_ERROR(w.file.commit());
  w.finished = true;
  return Status::ok();
}

Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  try {
    std::vector<TensorSpec> specs;
    std::unordered_map<std::string, const TensorView*> by_name;
    for (const auto& [name, view] : tensors) {
      BS_RETURN_IF_ERROR(check_view(view, "tensors: " + printable(name)));
      specs.push_back(TensorSpec{name, view.dtype, view.shape});
      by_name.emplace(name, &view);
    }
    SafetensorsWriter w;
    BS_RETURN_IF_ERROR(w.open(path, std::move(specs), metadata));
    for (const TensorSpec& t : w.order()) {
      const TensorView* v = by_name.at(t.name);
      BS_RETURN_IF_ERROR(w.write(t.name, v->data, v->nbytes));
    }
    return w.finish();
  } catch (const std::exception& e) {
    return bad("writing '" + path + "' failed: " + e.what());
  }
}

}  // namespace blockscale::io
