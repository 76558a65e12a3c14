// The quantized-tensor file schema (docs/file-format.md): an entry written as plain safetensors
// tensors plus string metadata, and read back with every key, dtype and shape checked against
// what the recipe, the input shape, the direction and the block say it must be.
//
// The reader treats the file as untrusted: every size it allocates is that of a tensor the file
// holds (checked against the schema first), the metadata strings are parsed strictly, and the
// matrix it hands out has passed formats::validate().
#include "formats/io/quantized_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstddef>
#include <exception>
#include <iterator>

namespace blockscale::io {
namespace {

namespace f = blockscale::formats;
using detail::printable;
using f::Format;

// Scales and the global scale are written as the host's fp32 bytes; the file is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the file format is little-endian");

constexpr const char* kMetaSuffixes[] = {".recipe", ".shape", ".direction",
                                         ".rounding", ".block", ".transform"};

f::DType data_dtype(Format r) {
  switch (r) {
    case Format::kMxfp8E5M2: return f::DType::kF8E5M2;
    case Format::kMxfp8E4M3:
    case Format::kFp8Block1x128:
    case Format::kFp8Block128x128: return f::DType::kF8E4M3;
    default: return f::DType::kU8;  // E2M1 pairs (mxfp4, nvfp4), one E2M3/E3M2 code (mxfp6)
  }
}

// E8M0 and UE4M3 codes are U8: numpy has neither type, and safetensors has no UE4M3 dtype.
f::DType scale_dtype(Format r) { return f::is_fp8_block(r) ? f::DType::kF32 : f::DType::kU8; }

// The blocks each recipe may be stored with (nvfp4: 1D, or 2D tiles for weights).
std::string legal_blocks(Format r) {
  const std::string one = std::to_string(f::default_block_rows(r, false)) + "x" +
                          std::to_string(f::default_block_cols(r));
  return r == Format::kNvfp4 ? one + " or 16x16" : one;
}
bool is_legal_block(Format r, int64_t br, int64_t bc) {
  if (bc != f::default_block_cols(r)) return false;
  return br == f::default_block_rows(r, false) || (r == Format::kNvfp4 && br == 16);
}

const char* rounding_name(Format r, f::ScaleRounding s) {
  if (!f::is_mx(r)) return "rn";  // nvfp4 and FP8 blockwise scales have no rounding option
  return s == f::ScaleRounding::kFloor ? "floor" : "ceil";
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? "," : "") + std::to_string(shape[k]);
  return s + "]";
}

// Bytes per stored row, without the (cols + 1) that could overflow for a hostile shape.
int64_t row_bytes(Format r, int64_t cols) { return f::is_fp4(r) ? cols / 2 + cols % 2 : cols; }
int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A non-negative decimal integer at text[*i] (no sign, no leading zeros), advancing *i.
bool parse_int(const std::string& text, size_t* i, int64_t* out) {
  const size_t begin = *i;
  int64_t v = 0;
  while (*i < text.size() && text[*i] >= '0' && text[*i] <= '9') {
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text[*i] - '0', &v)) return false;
    ++*i;
  }
  *out = v;
  return *i > begin && !(*i - begin > 1 && text[begin] == '0');
}

// A JSON list of integers: "[4,128,256]" as written; JSON whitespace is accepted (Python's
// json.dumps writes "[4, 128, 256]").
Status parse_shape(const std::string& key, const std::string& text, std::vector<int64_t>* out) {
  const Status bad = Status::error(printable(key) + ": " + printable(text) +
                                   " is not a JSON list of non-negative integers, e.g. [4,128,256]");
  std::vector<int64_t> shape;
  size_t i = 0;
  auto skip = [&] { while (i < text.size() && is_space(text[i])) ++i; };
  skip();
  if (i >= text.size() || text[i++] != '[') return bad;
  skip();
  if (i < text.size() && text[i] == ']') {
    ++i;
  } else {
    for (;;) {
      int64_t d = 0;
      skip();
      if (!parse_int(text, &i, &d)) return bad;
      if (shape.size() >= static_cast<size_t>(kMaxRank))
        return Status::error(printable(key) + ": rank exceeds the limit " + std::to_string(kMaxRank));
      shape.push_back(d);
      skip();
      if (i < text.size() && text[i] == ',') { ++i; continue; }
      if (i < text.size() && text[i] == ']') { ++i; break; }
      return bad;
    }
  }
  skip();
  if (i != text.size()) return bad;
  *out = std::move(shape);
  return Status::ok();
}

// "ROWSxCOLS", e.g. "1x32" or "16x16".
Status parse_block(const std::string& key, const std::string& text, int64_t* br, int64_t* bc) {
  size_t i = 0;
  if (parse_int(text, &i, br) && i < text.size() && text[i++] == 'x' && parse_int(text, &i, bc) &&
      i == text.size())
    return Status::ok();
  return Status::error(printable(key) + ": " + printable(text) + " is not ROWSxCOLS, e.g. 1x32");
}

// Metadata key `key`, or an error saying it is missing.
Status get_meta(const SafetensorsFile& file, const std::string& key, std::string* out) {
  const auto& meta = file.metadata();
  const auto it = meta.find(key);
  if (it == meta.end()) return Status::error(printable(key) + ": missing metadata key");
  *out = it->second;
  return Status::ok();
}

// Tensor `key` with the dtype and shape the schema requires.
Status get_tensor(const SafetensorsFile& file, const std::string& key, f::DType dtype,
                  const std::vector<int64_t>& shape, const std::string& why, TensorView* out) {
  if (!file.contains(key)) return Status::error(printable(key) + ": missing tensor");
  BS_RETURN_IF_ERROR(file.tensor(key, out));
  if (out->dtype != dtype)
    return Status::error(printable(key) + ": dtype " + dtype_name(out->dtype) + ", expected " +
                         dtype_name(dtype) + " (" + why + ")");
  if (out->shape != shape)
    return Status::error(printable(key) + ": shape " + shape_string(out->shape) + ", expected " +
                         shape_string(shape) + " (" + why + ")");
  return Status::ok();
}

// Element codes the decoders would misread: E2M1 padding nibbles and mxfp6's two high bits.
Status check_codes(const std::string& key, const f::QuantizedMatrix& q) {
  const int64_t rb = q.data_row_bytes();
  for (int64_t r = 0; r < q.rows; ++r) {
    if (f::is_fp4(q.recipe) && q.cols % 2 && (q.data[r * rb + rb - 1] >> 4))
      return Status::error(printable(key) + ": row " + std::to_string(r) + " has a non-zero " +
                           "padding nibble (the high nibble of the last byte of a row of odd " +
                           "length must be 0)");
    if (q.recipe == Format::kMxfp6E2M3 || q.recipe == Format::kMxfp6E3M2) {
      for (int64_t c = 0; c < q.cols; ++c) {
        if (q.data[r * rb + c] > 0x3F)
          return Status::error(printable(key) + ": element (" + std::to_string(r) + ", " +
                               std::to_string(c) + ") is not a 6-bit code (high two bits set)");
      }
    }
  }
  return Status::ok();
}

bool valid_global_scale(float s) { return std::isfinite(s) && s > 0.0f; }

std::string float_string(float x) {  // std::to_string would print a tiny S_dec as 0.000000
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
  return buf;
}

Status read_entry(const SafetensorsFile& file, const std::string& name, QuantizedTensor* out) {
  const auto key = [&](const char* suffix) { return name + suffix; };
  std::string text;
  QuantizedTensor t;
  t.name = name;
  f::QuantizedMatrix& q = t.q;

  BS_RETURN_IF_ERROR(get_meta(file, key(".recipe"), &text));
  if (!f::parse_format(text, &q.recipe))
    return Status::error(printable(key(".recipe")) + ": unknown recipe " + printable(text) +
                         " (known: mxfp8 mxfp8_e5m2 mxfp6_e2m3 mxfp6_e3m2 mxfp4 nvfp4 "
                         "fp8_block128 fp8_block128x128)");
  const Format r = q.recipe;
  const std::string rn = f::format_name(r);

  BS_RETURN_IF_ERROR(get_meta(file, key(".rounding"), &text));
  if (text != "ceil" && text != "floor" && text != "rn")
    return Status::error(printable(key(".rounding")) + ": unknown rounding " + printable(text) +
                         " (known: ceil floor rn)");
  t.rounding = text == "floor" ? f::ScaleRounding::kFloor : f::ScaleRounding::kCeil;
  if (text != rounding_name(r, t.rounding))
    return Status::error(printable(key(".rounding")) + ": " + printable(text) +
                         " does not belong to recipe " + rn + " (expected " +
                         (f::is_mx(r) ? "ceil or floor" : "rn") + ")");

  BS_RETURN_IF_ERROR(get_meta(file, key(".direction"), &text));
  if (text != "rowwise" && text != "columnwise")
    return Status::error(printable(key(".direction")) + ": unknown direction " + printable(text) +
                         " (known: rowwise columnwise; 'both' is stored as two entries, " +
                         printable(name) + " and " + printable(name + ".columnwise") + ")");
  t.direction = text == "rowwise" ? f::Direction::kRowwise : f::Direction::kColumnwise;

  BS_RETURN_IF_ERROR(get_meta(file, key(".shape"), &text));
  BS_RETURN_IF_ERROR(parse_shape(key(".shape"), text, &t.shape));
  int64_t rows = 0, cols = 0;
  const Status view = matrix_view(t.shape, &rows, &cols);
  if (!view) return Status::error(printable(key(".shape")) + ": " + view.message());
  const bool colwise = t.direction == f::Direction::kColumnwise;
  q.rows = colwise ? cols : rows;
  q.cols = colwise ? rows : cols;

  BS_RETURN_IF_ERROR(get_meta(file, key(".block"), &text));
  int64_t br = 0, bc = 0;
  BS_RETURN_IF_ERROR(parse_block(key(".block"), text, &br, &bc));
  if (!is_legal_block(r, br, bc))
    return Status::error(printable(key(".block")) + ": " + printable(text) +
                         " is not a block of recipe " + rn + " (" + legal_blocks(r) + ")");
  q.block_rows = static_cast<int>(br);
  q.block_cols = static_cast<int>(bc);

  BS_RETURN_IF_ERROR(get_meta(file, key(".transform"), &text));
  if (text != "none" && text != "rht16")
    return Status::error(printable(key(".transform")) + ": unknown transform " + printable(text) +
                         " (known: none rht16)");
  t.hadamard = text == "rht16";
  if (t.hadamard && (r != Format::kNvfp4 || br != 1 || q.cols % 16 != 0))
    return Status::error(printable(key(".transform")) + ": rht16 applies to nvfp4 with 1x16 " +
                         "blocks and a block dimension that is a multiple of 16 (here " + rn +
                         ", " + std::to_string(br) + "x" + std::to_string(bc) + ", " +
                         std::to_string(q.cols) + ")");

  const std::string why = "recipe " + rn + ", " + (colwise ? "columnwise" : "rowwise") +
                          " copy of shape " + shape_string(t.shape) + ", blocks " +
                          std::to_string(br) + "x" + std::to_string(bc);
  TensorView v;
  BS_RETURN_IF_ERROR(get_tensor(file, key(".data"), data_dtype(r),
                                {q.rows, row_bytes(r, q.cols)}, why, &v));
  q.data.assign(v.data, v.data + v.nbytes);
  BS_RETURN_IF_ERROR(check_codes(key(".data"), q));

  BS_RETURN_IF_ERROR(get_tensor(file, key(".scale"), scale_dtype(r),
                                {ceil_div(q.rows, br), ceil_div(q.cols, bc)}, why, &v));
  if (f::is_fp8_block(r)) {
    q.scales_f32.resize(v.nbytes / sizeof(float));
    if (v.nbytes) std::memcpy(q.scales_f32.data(), v.data, v.nbytes);  // views may be unaligned
  } else {
    q.scales.assign(v.data, v.data + v.nbytes);
  }

  const std::string gkey = key(".global_scale");
  if (r == Format::kNvfp4) {
    BS_RETURN_IF_ERROR(get_tensor(file, gkey, f::DType::kF32, {}, "nvfp4's S_dec, one fp32 scalar", &v));
    std::memcpy(&q.global_scale_dec, v.data, sizeof(float));
    if (!valid_global_scale(q.global_scale_dec))
      return Status::error(printable(gkey) + ": " + float_string(q.global_scale_dec) +
                           " is not a finite value > 0 (S_dec = 1 / S_enc)");
  } else if (file.contains(gkey)) {
    return Status::error(printable(gkey) + ": only nvfp4 entries have a global scale, this one " +
                         "is " + rn);
  }
  BS_RETURN_IF_ERROR(f::validate(q, name.c_str()));
  BS_RETURN_IF_ERROR(f::check_scales(q, printable(key(".scale"))));
  *out = std::move(t);
  return Status::ok();
}

}  // namespace

Status matrix_view(const std::vector<int64_t>& shape, int64_t* rows, int64_t* cols) {
  if (!rows || !cols) return Status::error("matrix_view: rows and cols must not be null");
  if (shape.empty()) return Status::error("shape []: rank 0 (a scalar) has no 2D view");
  int64_t r = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] < 0)
      return Status::error("shape " + shape_string(shape) + ": dimension " +
                           std::to_string(shape[k]) + " is negative");
    if (shape[k] == 0)
      return Status::error("shape " + shape_string(shape) + ": empty tensor (a dimension is 0), " +
                           "nothing to quantize");
    if (k + 1 < shape.size() && __builtin_mul_overflow(r, shape[k], &r))
      return Status::error("shape " + shape_string(shape) + ": the product of the dimensions " +
                           "overflows int64");
  }
  int64_t n = 0;
  if (__builtin_mul_overflow(r, shape.back(), &n))
    return Status::error("shape " + shape_string(shape) + ": the product of the dimensions " +
                         "overflows int64");
  *rows = r;
  *cols = shape.back();
  return Status::ok();
}

Status add_quantized_tensor(const QuantizedTensor& t,
                            std::vector<std::pair<std::string, TensorView>>* tensors,
                            std::map<std::string, std::string>* metadata) {
  if (!tensors || !metadata) return Status::error("tensors, metadata: must not be null");
  if (t.name.empty()) return Status::error("name: the entry name must not be empty");
  const std::string entry = "entry " + printable(t.name) + ": ";
  const f::QuantizedMatrix& q = t.q;
  const Format r = q.recipe;
  if (std::string(f::format_name(r)) == "unknown") return Status::error(entry + "q.recipe: unknown recipe");
  const std::string rn = f::format_name(r);
  const Status valid = f::validate(q, "q");
  if (!valid) return Status::error(entry + valid.message());

  int64_t rows = 0, cols = 0;
  const Status view = matrix_view(t.shape, &rows, &cols);
  if (!view) return Status::error(entry + view.message());
  if (t.direction != f::Direction::kRowwise && t.direction != f::Direction::kColumnwise)
    return Status::error(entry + "direction: a stored copy is rowwise or columnwise");
  const bool colwise = t.direction == f::Direction::kColumnwise;
  if (q.rows != (colwise ? cols : rows) || q.cols != (colwise ? rows : cols))
    return Status::error(entry + "shape " + shape_string(t.shape) + " has the 2D view [" +
                         std::to_string(rows) + ", " + std::to_string(cols) + "], but q is " +
                         std::to_string(q.rows) + " x " + std::to_string(q.cols) + " (a " +
                         (colwise ? "columnwise copy stores [cols, rows]" : "rowwise copy stores [rows, cols]") + ")");
  if (t.rounding != f::ScaleRounding::kCeil && t.rounding != f::ScaleRounding::kFloor)
    return Status::error(entry + "rounding: a stored copy has one rule, ceil or floor");
  if (t.rounding == f::ScaleRounding::kFloor && !f::is_mx(r))
    return Status::error(entry + "rounding: floor applies to MX recipes only, not " + rn);
  if (t.hadamard && (r != Format::kNvfp4 || q.block_rows != 1))
    return Status::error(entry + "hadamard: applies to nvfp4 with 1x16 blocks only, not " + rn +
                         " " + std::to_string(q.block_rows) + "x" + std::to_string(q.block_cols));
  if (t.hadamard && q.cols % 16 != 0)
    return Status::error(entry + "hadamard: the block dimension (" + std::to_string(q.cols) +
                         ") must be a multiple of 16");
  if (r == Format::kNvfp4 ? !valid_global_scale(q.global_scale_dec) : q.global_scale_dec != 1.0f)
    return Status::error(entry + "q.global_scale_dec: " + float_string(q.global_scale_dec) +
                         (r == Format::kNvfp4 ? " is not a finite value > 0"
                                              : " must be 1 (only nvfp4 stores a global scale)"));

  // Every key this entry adds must be new: a clash would overwrite another entry's metadata. The
  // metadata map is the index: each entry writes all six keys, and no tensor suffix is a proper
  // suffix of another, so two entries share a tensor key only if they share their name, and so a
  // metadata key. A foreign tensor in `tensors` under one of this entry's names is not looked for
  // here (that would be a pass over every tensor per entry, quadratic in a file's entries):
  // write_safetensors refuses the duplicate name.
  for (const char* s : kMetaSuffixes) {
    if (metadata->count(t.name + s))
      return Status::error(entry + "metadata key " + printable(t.name + s) + " is already in the file");
  }

  // Appended in place, undone if an allocation fails: copying either container per entry would
  // make a file of n entries cost n^2.
  const size_t old_size = tensors->size();
  std::vector<std::map<std::string, std::string>::iterator> inserted;
  try {
    tensors->push_back({t.name + ".data", TensorView{data_dtype(r), {q.rows, q.data_row_bytes()},
                                                     q.data.data(), q.data.size()}});
    const std::vector<int64_t> sshape = {q.scale_rows(), q.scale_cols()};
    if (f::is_fp8_block(r)) {
      tensors->push_back({t.name + ".scale", TensorView{f::DType::kF32, sshape,
                                                        reinterpret_cast<const uint8_t*>(q.scales_f32.data()),
                                                        q.scales_f32.size() * sizeof(float)}});
    } else {
      tensors->push_back({t.name + ".scale", TensorView{f::DType::kU8, sshape, q.scales.data(), q.scales.size()}});
    }
    if (r == Format::kNvfp4) {
      tensors->push_back({t.name + ".global_scale",
                          TensorView{f::DType::kF32, {}, reinterpret_cast<const uint8_t*>(&q.global_scale_dec),
                                     sizeof(float)}});
    }
    const std::pair<const char*, std::string> meta[] = {
        {".recipe", rn},
        {".rounding", rounding_name(r, t.rounding)},
        {".direction", colwise ? "columnwise" : "rowwise"},
        {".shape", shape_string(t.shape)},
        {".block", std::to_string(q.block_rows) + "x" + std::to_string(q.block_cols)},
        {".transform", t.hadamard ? "rht16" : "none"}};
    inserted.reserve(std::size(meta));
    for (const auto& [suffix, value] : meta) inserted.push_back(metadata->emplace(t.name + suffix, value).first);
  } catch (const std::exception& e) {
    for (const auto& it : inserted) metadata->erase(it);
    tensors->erase(tensors->begin() + static_cast<std::ptrdiff_t>(old_size), tensors->end());
    return Status::error(entry + "cannot allocate: " + e.what());
  }
  return Status::ok();
}

std::vector<std::string> quantized_tensor_names(const SafetensorsFile& file) {
  static constexpr char kSuffix[] = ".recipe";
  constexpr size_t n = sizeof(kSuffix) - 1;
  std::vector<std::string> names;
  for (const auto& [key, value] : file.metadata()) {
    // An empty NAME (the key ".recipe" alone) is not an entry: add_quantized_tensor refuses it.
    if (key.size() > n && key.compare(key.size() - n, n, kSuffix) == 0)
      names.push_back(key.substr(0, key.size() - n));
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status read_quantized_tensor(const SafetensorsFile& file, const std::string& name,
                             QuantizedTensor* out) {
  if (!out) return Status::error("out: must not be null");
  if (name.empty()) return Status::error("name: the entry name must not be empty");
  try {
    return read_entry(file, name, out);
  } catch (const std::exception& e) {  // allocation failure
    return Status::error("entry " + printable(name) + ": cannot read: " + e.what());
  }
}

}  // namespace blockscale::io
