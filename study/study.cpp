// The accuracy study's engine: tensor sources (mapped files, synthetic tensors), chunked error
// measurement, the GEMM error, and the driver that runs every config on a pool of threads.
#include "study/study.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <thread>

#include "formats/io/quantized_file.h"  // defines: matrix_view
#include "formats/reference_gemm.h"     // defines: reference_gemm_f64
#include "formats/io/input_file.h"     // defines: io::InputFile (.npy, or mmapped .safetensors)

namespace blockscale::study {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

Status check_window(const std::string& name, int64_t rows, int64_t cols, int64_t r0, int64_t nr,
                    int64_t c0, int64_t nc, const float* out) {
  if (!out) return Status::error(name + ": read: out is null");
  if (r0 < 0 || nr < 0 || r0 > rows - nr || c0 < 0 || nc < 0 || c0 > cols - nc)
    return Status::error(name + ": read: window rows [" + str(r0) + ", +" + str(nr) + ") x cols [" +
                         str(c0) + ", +" + str(nc) + ") is outside " + str(rows) + "x" + str(cols));
  return Status::ok();
}

// A view into a file's bytes. For a memory-mapped file, the pages a read touched are handed back
// afterwards (MADV_DONTNEED: they stay in the page cache, a later read faults them in again), so
// the process's resident size stays at a chunk's worth however large the file.
TensorSource view_source(const std::string& name, const io::TensorView& v, int64_t rows,
                         int64_t cols, bool mapped, std::shared_ptr<const void> owner) {
  TensorSource s;
  s.name = name;
  s.shape = v.shape;
  s.dtype = formats::dtype_name(v.dtype);
  s.rows = rows;
  s.cols = cols;
  const formats::DType dtype = v.dtype;
  const uint8_t* data = v.data;
  s.read = [owner, name, dtype, data, rows, cols, mapped](int64_t r0, int64_t nr, int64_t c0,
                                                           int64_t nc, float* out) -> Status {
    BS_RETURN_IF_ERROR(check_window(name, rows, cols, r0, nr, c0, nc, out));
    const int64_t esize = static_cast<int64_t>(formats::dtype_size(dtype));
    for (int64_t r = 0; r < nr; ++r)
      io::widen_to_float(dtype, data + ((r0 + r) * cols + c0) * esize, static_cast<size_t>(nc), out + r * nc);
    if (mapped && nr > 0 && nc > 0) {
      static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
      const uintptr_t begin = reinterpret_cast<uintptr_t>(data + (r0 * cols + c0) * esize) & ~(page - 1);
      const uintptr_t end = reinterpret_cast<uintptr_t>(data + ((r0 + nr - 1) * cols + c0 + nc) * esize);
      ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice only
    }
    return Status::ok();
  };
  return s;
}

}  // namespace

TensorSource memory_source(std::string name, std::vector<int64_t> shape, int64_t rows, int64_t cols,
                           std::vector<float> values) {
  auto held = std::make_shared<const std::vector<float>>(std::move(values));
  TensorSource s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.dtype = "F32";
  s.rows = rows;
  s.cols = cols;
  const std::string n = s.name;
  s.read = [held, n, rows, cols](int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* out) -> Status {
    BS_RETURN_IF_ERROR(check_window(n, rows, cols, r0, nr, c0, nc, out));
    if (static_cast<int64_t>(held->size()) != rows * cols)
      return Status::error(n + ": holds " + str(static_cast<int64_t>(held->size())) +
                           " values, not rows x cols = " + str(rows * cols));
    for (int64_t r = 0; r < nr; ++r)
      std::copy_n(held->data() + (r0 + r) * cols + c0, nc, out + r * nc);
    return Status::ok();
  };
  return s;
}

// ---- the synthetic suite ---------------------------------------------------------------------

namespace {

// Normal deviates by Box-Muller on a 64-bit Mersenne Twister: unlike std::normal_distribution,
// the same numbers with every standard library.
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u = 1.0 - uniform(), v = uniform();  // u in (0, 1]
    const double radius = std::sqrt(-2.0 * std::log(u));
    spare_ = radius * std::sin(2.0 * M_PI * v);
    has_spare_ = true;
    return radius * std::cos(2.0 * M_PI * v);
  }

 private:
  std::mt19937_64 rng_;
  bool has_spare_ = false;
  double spare_ = 0;
};

enum class Kind { kWeight, kOutlierActivation, kStudentT3, kGradient };

std::vector<float> generate(Kind kind, int64_t rows, int64_t cols, uint64_t seed) {
  Normal normal(seed);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  switch (kind) {
    case Kind::kWeight:
      for (float& x : v) x = static_cast<float>(0.02 * normal());
      break;
    case Kind::kOutlierActivation: {
      // A few hidden channels 60-150x the rest, as in LLM residual streams.
      std::vector<double> channel(static_cast<size_t>(cols), 1.0);
      for (int i = 0; i < 8; ++i) {
        const size_t c = static_cast<size_t>(normal.uniform() * cols);
        channel[c] = 60 + 90 * normal.uniform();
      }
      for (int64_t i = 0; i < rows * cols; ++i) v[i] = static_cast<float>(normal() * channel[i % cols]);
      break;
    }
    case Kind::kStudentT3:  // Z / sqrt(chi^2_3 / 3)
      for (float& x : v) {
        const double a = normal(), b = normal(), c = normal();
        x = static_cast<float>(normal() / std::sqrt((a * a + b * b + c * c) / 3.0));
      }
      break;
    case Kind::kGradient:  // rows scaled by 1e-6 * 10^u, u uniform in [-3, 3]
      for (int64_t r = 0; r < rows; ++r) {
        const double scale = 1e-6 * std::pow(10.0, 6.0 * normal.uniform() - 3.0);
        for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = static_cast<float>(scale * normal());
      }
      break;
  }
  return v;
}

}  // namespace

Status synthetic_suite(int64_t hidden, uint64_t seed, std::vector<StudyInput>* out) {
  if (!out) return Status::error("synthetic_suite: out is null");
  if (hidden < 16 || hidden > 65536 || hidden % 16 != 0)
    return Status::error("--hidden " + str(hidden) + ": must be a multiple of 16 in [16, 65536]");
  const int64_t h = hidden, tokens = hidden / 2;  // a micro-batch; keeps the GEMM pair cheap
  const int64_t ffn = std::max<int64_t>(256, (h * 11 / 4 + 128) / 256 * 256);
  struct Spec {
    const char* name;
    int64_t rows, cols;
    Kind kind;
  };
  const Spec specs[] = {
      {"attn.qkv.weight", 3 * h, h, Kind::kWeight},
      {"mlp.up.weight", ffn, h, Kind::kWeight},
      {"mlp.input", tokens, h, Kind::kOutlierActivation},
      {"attn.output", tokens, h, Kind::kStudentT3},
      {"mlp.down.grad", tokens, ffn, Kind::kGradient},
  };
  std::vector<StudyInput> inputs;
  uint64_t index = 0;
  for (const Spec& sp : specs) {
    const uint64_t tensor_seed = seed * 0x9E3779B97F4A7C15ull + ++index;  // one stream per tensor
    StudyInput in;
    in.name = sp.name;
    in.shape = {sp.rows, sp.cols};
    in.dtype = "F32";
    in.open = [sp, tensor_seed](TensorSource* s) {
      *s = memory_source(sp.name, {sp.rows, sp.cols}, sp.rows, sp.cols,
                         generate(sp.kind, sp.rows, sp.cols, tensor_seed));
      return Status::ok();
    };
    inputs.push_back(std::move(in));
  }
  *out = std::move(inputs);
  return Status::ok();
}

std::vector<std::pair<std::string, std::string>> synthetic_gemms() {
  return {{"mlp.input", "mlp.up.weight"}};
}

// ---- input files -----------------------------------------------------------------------------

Status open_study_files(const std::vector<std::string>& paths, const std::string& flag,
                        std::vector<StudyInput>* out, std::vector<Skipped>* skipped) {
  if (!out || !skipped) return Status::error("open_study_files: out and skipped must not be null");
  std::vector<StudyInput> inputs;
  std::map<std::string, std::string> owner;  // tensor name -> file, to catch clashes
  for (const std::string& path : paths) {
    const std::string prefix =
        paths.size() > 1 ? std::filesystem::path(path).stem().string() + "/" : std::string();
    auto file = std::make_shared<io::InputFile>();  // kept alive by every source it hands out
    BS_RETURN_IF_ERROR(io::InputFile::open(path, flag, file.get()));
    const bool mapped = file->safetensors() != nullptr;
    const std::shared_ptr<const void> holder = file;
    for (const io::InputTensor& e : file->tensors()) {
      const std::string name = prefix + e.name;
      int64_t rows = 0, cols = 0;
      Status s = io::matrix_of(e, &rows, &cols);
      if (!s) {
        skipped->push_back({name, s.message()});
        continue;
      }
      if (!owner.emplace(name, path).second)
        return Status::error(flag + ": files '" + owner[name] + "' and '" + path +
                             "' both give a tensor named '" + name +
                             "' (names are prefixed with the file name's stem; rename a file)");
      StudyInput in;
      in.name = name;
      in.shape = e.view.shape;
      in.dtype = formats::dtype_name(e.view.dtype);
      const io::TensorView view = e.view;
      in.open = [name, view, rows, cols, mapped, holder](TensorSource* src) {
        *src = view_source(name, view, rows, cols, mapped, holder);
        return Status::ok();
      };
      inputs.push_back(std::move(in));
    }
  }
  *out = std::move(inputs);
  return Status::ok();
}

// ---- configs ---------------------------------------------------------------------------------

std::vector<StudyConfig> study_configs(const std::vector<formats::Format>& recipes, formats::ScaleRounding mx) {
  std::vector<StudyConfig> configs;
  for (formats::Format r : formats::all_formats()) {
    if (std::find(recipes.begin(), recipes.end(), r) == recipes.end()) continue;
    StudyConfig c;
    c.label = formats::format_name(r);
    c.options.recipe = r;
    if (!formats::is_mx(r) || mx != formats::ScaleRounding::kFloor) configs.push_back(c);
    if (formats::is_mx(r) && mx != formats::ScaleRounding::kCeil) {
      c.label += "/floor";
      c.options.rounding = formats::ScaleRounding::kFloor;
      configs.push_back(c);
    }
  }
  return configs;
}

// ---- measuring one tensor ---------------------------------------------------------------------

namespace {

// How a tensor is cut: chunk_rows x chunk_cols, multiples of the block (a tile of 128x128 or
// 16x16 is never split), at most max(limit, one block row) elements.
struct Chunking {
  int64_t rows = 0, cols = 0;
};
Chunking chunking(int64_t rows, int64_t cols, int br, int bc, int64_t limit) {
  Chunking c;
  c.cols = cols * br <= limit ? cols : std::max<int64_t>(bc, limit / br / bc * bc);
  c.rows = std::min(rows, std::max<int64_t>(br, limit / c.cols / br * br));
  return c;
}

// Running sums over the chunks of one tensor.
struct Accumulator {
  double signal = 0, noise = 0, max_abs = 0, max_rel = 0;
  int64_t nonfinite = 0, excluded = 0, measured = 0, nonzero = 0, flushed = 0, saturated = 0;
  int64_t blocks = 0, at_min = 0, at_max = 0;
};

enum class ScaleFormat { kE8M0, kUE4M3, kFp32 };

ScaleFormat scale_format(formats::Format r) {
  if (formats::is_mx(r)) return ScaleFormat::kE8M0;
  return r == formats::Format::kNvfp4 ? ScaleFormat::kUE4M3 : ScaleFormat::kFp32;
}

// Adds chunk x (nr x nc, contiguous), its quantized copy q and q's fp32 dequantization.
void accumulate(const float* x, const formats::QuantizedMatrix& q, const std::vector<float>& deq,
                Accumulator* acc) {
  const formats::MinifloatSpec& spec = formats::element_spec(q.recipe);
  const uint32_t mag_mask = (1u << (spec.exp_bits + spec.man_bits)) - 1u;
  // A max-code element saturated when |x| lay beyond the midpoint to the next (missing) value.
  const float maxnorm = formats::element_max(q.recipe);
  const int emax = static_cast<int>(formats::float_bits(maxnorm) >> 23) - 127;
  const double clip = 1.0 + std::ldexp(1.0, emax - spec.man_bits - 1) / maxnorm;
  const bool fp4 = formats::is_fp4(q.recipe);
  const int64_t nr = q.rows, nc = q.cols, row_bytes = q.data_row_bytes(), sc = q.scale_cols();
  const int block_shift = __builtin_ctz(static_cast<unsigned>(q.block_cols));  // 16, 32 or 128
  std::vector<uint8_t> block_nonzero(static_cast<size_t>(q.scale_rows() * sc), 0);
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t* codes = q.data.data() + r * row_bytes;
    uint8_t* nz = block_nonzero.data() + (r / q.block_rows) * sc;
    for (int64_t c = 0; c < nc; ++c) {
      const double xv = x[r * nc + c], d = deq[r * nc + c];
      if (!std::isfinite(xv)) {
        ++acc->nonfinite;
        ++acc->excluded;
        continue;
      }
      if (std::isnan(d)) {  // shares a block with a non-finite input
        ++acc->excluded;
        continue;
      }
      const double err = std::fabs(xv - d);
      ++acc->measured;
      acc->signal += xv * xv;
      acc->noise += err * err;
      acc->max_abs = std::max(acc->max_abs, err);
      if (xv == 0) continue;
      nz[c >> block_shift] = 1;
      ++acc->nonzero;
      acc->max_rel = std::max(acc->max_rel, err / std::fabs(xv));
      if (d == 0) {
        ++acc->flushed;
        continue;
      }
      const uint32_t code = fp4 ? (codes[c / 2] >> (4 * (c & 1))) & 0xFu : codes[c];
      if ((code & mag_mask) == spec.max_code && std::fabs(xv) > std::fabs(d) * clip) ++acc->saturated;
    }
  }
  const ScaleFormat sf = scale_format(q.recipe);
  if (sf == ScaleFormat::kFp32) return;
  for (size_t i = 0; i < block_nonzero.size(); ++i) {
    if (!block_nonzero[i]) continue;  // all zero (or a NaN-scale block): no scale to judge
    const uint8_t s = q.scales[i];
    ++acc->blocks;
    if (sf == ScaleFormat::kE8M0) {
      acc->at_min += s == 0x00;
      acc->at_max += s == 0xFE;
    } else {
      acc->at_min += s <= 0x01;
      acc->at_max += s == 0x7E;
    }
  }
}

RecipeError finish(const Accumulator& a, int64_t elements, formats::Format recipe) {
  RecipeError e;
  e.elements = elements;
  e.nonfinite = a.nonfinite;
  e.excluded = a.excluded;
  e.sqnr_db = a.measured == 0 ? NAN : a.noise == 0 ? INFINITY : 10.0 * std::log10(a.signal / a.noise);
  e.rel_fro_error = a.signal > 0 ? std::sqrt(a.noise / a.signal) : a.noise > 0 ? INFINITY : 0.0;
  e.max_abs_error = a.max_abs;
  e.max_rel_error = a.max_rel;
  e.saturated = a.measured ? static_cast<double>(a.saturated) / a.measured : 0;
  e.flushed = a.nonzero ? static_cast<double>(a.flushed) / a.nonzero : 0;
  e.scale_limits = scale_format(recipe) != ScaleFormat::kFp32;
  e.blocks = a.blocks;
  e.scale_at_min = a.blocks ? static_cast<double>(a.at_min) / a.blocks : 0;
  e.scale_at_max = a.blocks ? static_cast<double>(a.at_max) / a.blocks : 0;
  if (a.measured == 0) {  // every element was excluded: nothing to report
    e.rel_fro_error = e.max_abs_error = e.max_rel_error = e.saturated = e.flushed = NAN;
    e.scale_at_min = e.scale_at_max = NAN;
  }
  return e;
}

// Calls fn(r0, c0, nr, nc, values) for each chunk, in row-major chunk order.
template <typename Fn>
Status for_each_chunk(const TensorSource& src, const Chunking& ch, std::vector<float>* buf, Fn fn) {
  for (int64_t r0 = 0; r0 < src.rows; r0 += ch.rows) {
    const int64_t nr = std::min(ch.rows, src.rows - r0);
    for (int64_t c0 = 0; c0 < src.cols; c0 += ch.cols) {
      const int64_t nc = std::min(ch.cols, src.cols - c0);
      buf->resize(static_cast<size_t>(nr * nc));
      BS_RETURN_IF_ERROR(src.read(r0, nr, c0, nc, buf->data()));
      BS_RETURN_IF_ERROR(fn(r0, c0, nr, nc, buf->data()));
    }
  }
  return Status::ok();
}

}  // namespace

Status quantize_in_chunks(const TensorSource& source, const formats::QuantizeOptions& options,
                          int64_t chunk_elements, const ChunkFn& fn) {
  if (!source.read) return Status::error(source.name + ": the source has no reader");
  if (source.rows <= 0 || source.cols <= 0)
    return Status::error(source.name + ": rows and cols must be positive, not " +
                         str(source.rows) + "x" + str(source.cols));
  if (chunk_elements <= 0) return Status::error("chunk_elements: must be positive");
  // Both depend on where an element sits in the whole tensor, which a chunk does not know.
  if (options.stochastic_rounding)
    return Status::error("options.stochastic_rounding: not supported by the chunked study");
  if (options.hadamard) return Status::error("options.hadamard: not supported by the chunked study");
  formats::QuantizeOptions opt = options;
  const int br = formats::default_block_rows(opt.recipe, opt.nvfp4_2d);
  const int bc = formats::default_block_cols(opt.recipe);
  const Chunking ch = chunking(source.rows, source.cols, br, bc, chunk_elements);
  std::vector<float> x;
  if (opt.recipe == formats::Format::kNvfp4 && !opt.has_tensor_amax) {
    // Pass 1: the tensor amax as quantize() measures it (NaN ignored, Inf counts).
    uint32_t amax_bits = 0;
    BS_RETURN_IF_ERROR(for_each_chunk(source, ch, &x, [&](int64_t, int64_t, int64_t nr, int64_t nc,
                                                          const float* v) {
      for (int64_t i = 0; i < nr * nc; ++i) {
        const uint32_t a = formats::float_bits(v[i]) & 0x7FFFFFFFu;
        if (a <= 0x7F800000u && a > amax_bits) amax_bits = a;
      }
      return Status::ok();
    }));
    // A given amax must be finite; 2688 (= 448 x 6) gives S_enc = 1, as a measured Inf does.
    opt.tensor_amax = amax_bits == 0x7F800000u ? 2688.0f : formats::bits_float(amax_bits);
    opt.has_tensor_amax = true;
  }
  formats::QuantizedMatrix q;
  std::vector<float> deq;
  return for_each_chunk(source, ch, &x, [&](int64_t r0, int64_t c0, int64_t nr, int64_t nc,
                                            const float* v) {
    Status s = formats::quantize(v, nr, nc, nc, opt, formats::Direction::kRowwise, &q);
    if (!s) return Status::error(source.name + ": " + s.message());
    BS_RETURN_IF_ERROR(formats::dequantize(q, &deq));
    return fn(r0, c0, v, q, deq);
  });
}

Status measure_recipe_error(const TensorSource& source, const formats::QuantizeOptions& options,
                            RecipeError* out, int64_t chunk_elements) {
  if (!out) return Status::error("measure_recipe_error: out is null");
  Accumulator acc;
  BS_RETURN_IF_ERROR(quantize_in_chunks(
      source, options, chunk_elements,
      [&](int64_t, int64_t, const float* x, const formats::QuantizedMatrix& q,
          const std::vector<float>& deq) {
        accumulate(x, q, deq, &acc);
        return Status::ok();
      }));
  *out = finish(acc, source.rows * source.cols, options.recipe);
  return Status::ok();
}

// ---- the GEMM error --------------------------------------------------------------------------

Status gemm_reference(std::vector<float> a, int64_t m, std::vector<float> b, int64_t n, int64_t k,
                      GemmReference* out) {
  if (!out) return Status::error("gemm_reference: out is null");
  if (m <= 0 || n <= 0 || k <= 0) return Status::error("gemm_reference: M, N and K must be positive");
  if (static_cast<int64_t>(a.size()) != m * k || static_cast<int64_t>(b.size()) != n * k)
    return Status::error("gemm_reference: a must hold M x K and b N x K values");
  const std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
  GemmReference ref;
  BS_RETURN_IF_ERROR(
      formats::reference_gemm_f64(ad.data(), bd.data(), m, n, k, 1.0, 0.0, nullptr, 0, &ref.e));
  double sum = 0;
  for (double v : ref.e) {
    sum += v * v;
    ref.e_max_abs = std::max(ref.e_max_abs, std::fabs(v));
  }
  ref.e_fro = std::sqrt(sum);
  ref.m = m;
  ref.n = n;
  ref.k = k;
  ref.a = std::move(a);
  ref.b = std::move(b);
  *out = std::move(ref);
  return Status::ok();
}

Status measure_gemm(const GemmReference& ref, const formats::QuantizeOptions& options, GemmError* out) {
  if (!out) return Status::error("measure_gemm: out is null");
  formats::QuantizedMatrix qa, qb;
  const auto rowwise = formats::Direction::kRowwise;
  BS_RETURN_IF_ERROR(formats::quantize(ref.a.data(), ref.m, ref.k, ref.k, options, rowwise, &qa));
  BS_RETURN_IF_ERROR(formats::quantize(ref.b.data(), ref.n, ref.k, ref.k, options, rowwise, &qb));
  std::vector<double> da, db, d;
  BS_RETURN_IF_ERROR(formats::dequantize_exact(qa, &da));
  BS_RETURN_IF_ERROR(formats::dequantize_exact(qb, &db));
  BS_RETURN_IF_ERROR(formats::reference_gemm_f64(da.data(), db.data(), ref.m, ref.n, ref.k, 1.0, 0.0,
                                                 nullptr, 0, &d));
  double sum = 0, max_abs = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const double err = std::fabs(d[i] - ref.e[i]);
    sum += err * err;
    max_abs = std::max(max_abs, err);
  }
  GemmError e;
  e.rel_fro_error = ref.e_fro > 0 ? std::sqrt(sum) / ref.e_fro : sum > 0 ? INFINITY : 0.0;
  e.sqnr_db = e.rel_fro_error > 0 ? -20.0 * std::log10(e.rel_fro_error) : INFINITY;
  e.max_abs_error = max_abs;
  *out = e;
  return Status::ok();
}

// ---- the driver ------------------------------------------------------------------------------

namespace {

// Runs fn(0) .. fn(n - 1) on up to `threads` threads; the first failure in index order wins.
template <typename Fn>
Status parallel_for(int64_t n, int threads, Fn fn) {
  std::vector<Status> status(static_cast<size_t>(n), Status::ok());
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i; (i = next++) < n;) {
      try {
        status[i] = fn(i);
      } catch (const std::bad_alloc&) {
        status[i] = Status::error("out of memory");
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int64_t>(threads, n); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const Status& s : status) BS_RETURN_IF_ERROR(s);
  return Status::ok();
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Loads a whole tensor (a GEMM operand) as fp32.
Status load_whole(const StudyInput& in, std::vector<float>* values, int64_t* rows, int64_t* cols,
                  int64_t* nonfinite) {
  TensorSource src;
  BS_RETURN_IF_ERROR(in.open(&src));
  values->resize(static_cast<size_t>(src.rows * src.cols));
  BS_RETURN_IF_ERROR(src.read(0, src.rows, 0, src.cols, values->data()));
  *rows = src.rows;
  *cols = src.cols;
  *nonfinite = std::count_if(values->begin(), values->end(), [](float v) { return !std::isfinite(v); });
  return Status::ok();
}

}  // namespace

Status gemm_pairs(const std::vector<StudyInput>& inputs,
                  const std::vector<std::pair<std::string, std::string>>& gemms,
                  std::vector<std::pair<size_t, size_t>>* out) {
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < inputs.size(); ++i) by_name[inputs[i].name] = i;
  std::vector<std::pair<size_t, size_t>> pairs;
  for (const auto& [a, b] : gemms) {
    const std::string pair = "--gemm '" + a + ":" + b + "': ";
    for (const std::string* name : {&a, &b})
      if (!by_name.count(*name)) return Status::error(pair + "no tensor named '" + *name + "'");
    const StudyInput &ia = inputs[by_name[a]], &ib = inputs[by_name[b]];
    if (ia.shape.back() != ib.shape.back())
      return Status::error(pair + "K must match: '" + a + "' has " + str(ia.shape.back()) +
                           " columns, '" + b + "' has " + str(ib.shape.back()) +
                           " (A is [M, K], B is [N, K])");
    pairs.emplace_back(by_name[a], by_name[b]);
  }
  if (out) *out = std::move(pairs);
  return Status::ok();
}

Status run_study(const std::vector<StudyInput>& inputs, const StudyOptions& options, StudyResult* out) {
  if (!out) return Status::error("run_study: out is null");
  if (options.configs.empty()) return Status::error("configs: no recipe to study");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t nconf = static_cast<int64_t>(options.configs.size());
  const int threads = options.threads > 0 ? options.threads
                                          : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::pair<size_t, size_t>> pairs;  // checked before the long part starts
  BS_RETURN_IF_ERROR(gemm_pairs(inputs, options.gemms, &pairs));
  StudyResult result;
  result.configs = options.configs;
  const size_t total = inputs.size() + pairs.size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto t1 = std::chrono::steady_clock::now();
    if (options.progress) {
      int64_t rows = 0, cols = 0;
      (void)io::matrix_view(inputs[i].shape, &rows, &cols);
      std::fprintf(options.progress, "[%zu/%zu] %s %lldx%lld ...", i + 1, total, inputs[i].name.c_str(),
                   static_cast<long long>(rows), static_cast<long long>(cols));
      std::fflush(options.progress);
    }
    TensorSource src;
    BS_RETURN_IF_ERROR(inputs[i].open(&src));
    TensorResult tr;
    tr.name = inputs[i].name;
    tr.shape = inputs[i].shape;
    tr.dtype = inputs[i].dtype;
    tr.rows = src.rows;
    tr.cols = src.cols;
    tr.errors.resize(static_cast<size_t>(nconf));
    BS_RETURN_IF_ERROR(parallel_for(nconf, threads, [&](int64_t c) {
      return measure_recipe_error(src, options.configs[c].options, &tr.errors[c], options.chunk_elements);
    }));
    result.tensors.push_back(std::move(tr));
    if (options.progress)
      std::fprintf(options.progress, " %.1f s (elapsed %.1f s)\n", since(t1), since(t0));
  }
  for (size_t p = 0; p < pairs.size(); ++p) {
    const auto t1 = std::chrono::steady_clock::now();
    const StudyInput &ia = inputs[pairs[p].first], &ib = inputs[pairs[p].second];
    GemmResult gr;
    gr.a = ia.name;
    gr.b = ib.name;
    std::vector<float> a, b;
    int64_t k = 0, kb = 0, bad_a = 0, bad_b = 0;
    BS_RETURN_IF_ERROR(load_whole(ia, &a, &gr.m, &k, &bad_a));
    BS_RETURN_IF_ERROR(load_whole(ib, &b, &gr.n, &kb, &bad_b));
    if (options.progress)
      std::fprintf(options.progress, "[%zu/%zu] gemm %s * %s^T %lldx%lldx%lld ...",
                   inputs.size() + p + 1, total, gr.a.c_str(), gr.b.c_str(),
                   static_cast<long long>(gr.m), static_cast<long long>(gr.n), static_cast<long long>(k));
    if (bad_a || bad_b) {
      result.skipped.push_back({gr.a + ":" + gr.b, "the GEMM operands hold " + str(bad_a + bad_b) +
                                                       " NaN or Inf values"});
      if (options.progress) std::fprintf(options.progress, " skipped (non-finite values)\n");
      continue;
    }
    GemmReference ref;
    BS_RETURN_IF_ERROR(gemm_reference(std::move(a), gr.m, std::move(b), gr.n, k, &ref));
    gr.k = k;
    gr.e_max_abs = ref.e_max_abs;
    gr.errors.resize(static_cast<size_t>(nconf));
    // Each worker holds both dequantized operands and the product in fp64: keep them to ~2 GiB.
    const double worker_bytes = 8.0 * (gr.m * gr.n + (gr.m + gr.n) * k) + 1.0;
    const int gemm_threads =
        static_cast<int>(std::clamp(2147483648.0 / worker_bytes, 1.0, static_cast<double>(threads)));
    BS_RETURN_IF_ERROR(parallel_for(nconf, gemm_threads, [&](int64_t c) {
      return measure_gemm(ref, options.configs[c].options, &gr.errors[c]);
    }));
    result.gemms.push_back(std::move(gr));
    if (options.progress)
      std::fprintf(options.progress, " %.1f s (elapsed %.1f s)\n", since(t1), since(t0));
  }
  result.seconds = since(t0);
  *out = std::move(result);
  return Status::ok();
}

}  // namespace blockscale::study
