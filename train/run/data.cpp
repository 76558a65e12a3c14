// Training data: synthetic corpus, token files, byte-level text, split and batches (data.h).
#include "train/run/data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace blockscale::train {
namespace {

// splitmix64's finaliser (Steele et al., "Fast splittable pseudorandom number generators").
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += kGolden); }
  // Uniform in [0, n); the modulo bias (< n / 2^64) is far below anything measurable.
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_;
};

// Successor k (< kSyntheticSuccessors) of context c: the k-th distinct value of a hashed sequence.
uint32_t synthetic_successor(uint64_t key, uint32_t c, int k, uint32_t vocab) {
  const uint64_t base = mix64(key + static_cast<uint64_t>(c) * kGolden);
  uint32_t found[kSyntheticSuccessors];
  int n = 0;
  for (uint64_t j = 0;; ++j) {
    const auto s = static_cast<uint32_t>(mix64(base + j) % vocab);
    if (std::find(found, found + n, s) != found + n) continue;
    if (n == k) return s;
    found[n++] = s;
  }
}

int synthetic_weight_sum() {
  int sum = 0;
  for (int w : kSyntheticSuccessorWeights) sum += w;
  return sum;
}

Status check_synthetic_vocab(int vocab_size) {
  if (vocab_size < kSyntheticMinVocab || vocab_size > kSyntheticMaxVocab) {
    return Status::error("vocab_size must be in [" + std::to_string(kSyntheticMinVocab) + ", " +
                         std::to_string(kSyntheticMaxVocab) + "], got " + std::to_string(vocab_size));
  }
  return Status::ok();
}

std::string errno_text(int err) { return std::strerror(err); }

// Reads a whole regular file through consume(bytes, n), in chunks of 1 MiB (a multiple of every
// element size). check(file size) runs first and may reject the file.
template <typename Check, typename Consume>
Status read_file_chunks(const std::string& path, Check check, Consume consume) {
  // O_NONBLOCK: a FIFO (not a regular file: refused below) must not block open() waiting for a
  // writer; it changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::error("cannot open '" + path + "': " + errno_text(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::error("cannot stat '" + path + "': " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) return Status::error("'" + path + "' is not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  BS_RETURN_IF_ERROR(check(size));
  std::vector<uint8_t> chunk(size_t{1} << 20);
  for (uint64_t done = 0; done < size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), size - done));
    size_t have = 0;  // fill the whole chunk so no element straddles two consume calls
    while (have < want) {
      const ssize_t got = ::read(fd, chunk.data() + have, want - have);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return Status::error("cannot read '" + path + "': " + errno_text(errno));
      if (got == 0) {
        return Status::error("'" + path + "' shrank while being read (" + std::to_string(size) +
                             " bytes expected, " + std::to_string(done + have) + " read)");
      }
      have += static_cast<size_t>(got);
    }
    consume(chunk.data(), want);
    done += want;
  }
  return Status::ok();
}

Status check_batch_args(const TokenCorpus& c, int seq_len, int64_t first_sample, int num_samples,
                        const int32_t* inputs, const int32_t* targets) {
  if (seq_len < 1) return Status::error("seq_len must be >= 1, got " + std::to_string(seq_len));
  if (c.tokens.size() < static_cast<size_t>(seq_len) + 1) {
    return Status::error("corpus has " + std::to_string(c.tokens.size()) +
                         " tokens; seq_len " + std::to_string(seq_len) + " needs at least seq_len + 1");
  }
  if (c.vocab_size < 1) return Status::error("corpus vocab_size must be >= 1, got " + std::to_string(c.vocab_size));
  if (num_samples < 0) return Status::error("num_samples must be >= 0, got " + std::to_string(num_samples));
  if (first_sample < 0) return Status::error("first_sample must be >= 0, got " + std::to_string(first_sample));
  if (first_sample > std::numeric_limits<int64_t>::max() - num_samples) {
    return Status::error("first_sample + num_samples overflows int64");
  }
  if (num_samples > 0 && (inputs == nullptr || targets == nullptr)) {
    return Status::error(std::string(inputs == nullptr ? "inputs" : "targets") +
                         " must be non-null when num_samples > 0");
  }
  return Status::ok();
}

// Copies the window at `start` into one sample's inputs and targets.
Status copy_window(const TokenCorpus& c, int64_t start, int seq_len, int32_t* inputs,
                   int32_t* targets) {
  const uint32_t* w = c.tokens.data() + start;
  for (int i = 0; i <= seq_len; ++i) {
    if (w[i] >= static_cast<uint32_t>(c.vocab_size)) {
      return Status::error("corpus token at index " + std::to_string(start + i) + " is " +
                           std::to_string(w[i]) + ", not < vocab_size " + std::to_string(c.vocab_size));
    }
  }
  for (int i = 0; i < seq_len; ++i) {
    inputs[i] = static_cast<int32_t>(w[i]);
    targets[i] = static_cast<int32_t>(w[i + 1]);
  }
  return Status::ok();
}

}  // namespace

// ---- synthetic corpus ---------------------------------------------------------------------

Status make_synthetic_corpus(int vocab_size, int64_t num_tokens, uint64_t seed, TokenCorpus* out) {
  BS_RETURN_IF_ERROR(check_synthetic_vocab(vocab_size));
  if (num_tokens < 2) return Status::error("num_tokens must be >= 2, got " + std::to_string(num_tokens));
  if (out == nullptr) return Status::error("out must be non-null");
  const auto vocab = static_cast<uint32_t>(vocab_size);
  const uint64_t successor_key = mix64(seed ^ 0x5DEECE66Dull);  // the "language": fixed per seed
  SplitMix64 rng(seed);

  std::vector<uint32_t> t;
  try {
    t.resize(static_cast<size_t>(num_tokens));
  } catch (const std::exception&) {
    return Status::error("num_tokens " + std::to_string(num_tokens) + " does not fit in memory");
  }
  const size_t n = t.size();
  t[0] = static_cast<uint32_t>(rng.below(vocab));
  size_t i = 1;
  while (i < n) {
    // Copy span: probability 1/64 is exactly "the top 6 bits are zero".
    if (i >= static_cast<size_t>(kSyntheticCopyLookback) && (rng.next() >> 58) == 0) {
      const auto len = kSyntheticCopyMinLen + rng.below(kSyntheticCopyMaxLen - kSyntheticCopyMinLen + 1);
      const auto dist = len + rng.below(kSyntheticCopyLookback - len + 1);
      for (uint64_t k = 0; k < len && i < n; ++k, ++i) t[i] = t[i - dist];
      continue;
    }
    const auto r = static_cast<int>(rng.next() >> 56);  // uniform in [0, 256)
    int slot = 0;  // kSyntheticSuccessors: the uniform draw
    for (int edge = 0; slot < kSyntheticSuccessors; ++slot) {
      edge += kSyntheticSuccessorWeights[slot];
      if (r < edge) break;
    }
    t[i] = slot < kSyntheticSuccessors ? synthetic_successor(successor_key, t[i - 1], slot, vocab)
                                       : static_cast<uint32_t>(rng.below(vocab));
    ++i;
  }
  out->tokens = std::move(t);
  out->vocab_size = vocab_size;
  out->description = "synthetic (markov + copy spans) vocab " + std::to_string(vocab_size) + ", " +
                     std::to_string(num_tokens) + " tokens, seed " + std::to_string(seed);
  return Status::ok();
}

Status synthetic_markov_entropy_nats(int vocab_size, double* nats) {
  BS_RETURN_IF_ERROR(check_synthetic_vocab(vocab_size));
  if (nats == nullptr) return Status::error("nats must be non-null");
  const double v = vocab_size;
  const double uniform = (256 - synthetic_weight_sum()) / 256.0 / v;  // mass of each token from the uniform draw
  double h = -(v - kSyntheticSuccessors) * uniform * std::log(uniform);
  for (int w : kSyntheticSuccessorWeights) {
    const double p = w / 256.0 + uniform;
    h -= p * std::log(p);
  }
  *nats = h;
  return Status::ok();
}

// ---- token files --------------------------------------------------------------------------

Status parse_token_dtype(const std::string& name, TokenDtype* out) {
  if (out == nullptr) return Status::error("out must be non-null");
  if (name == "uint16") {
    *out = TokenDtype::kUint16;
  } else if (name == "uint32") {
    *out = TokenDtype::kUint32;
  } else {
    return Status::error("token dtype must be uint16 or uint32, got '" + name + "'");
  }
  return Status::ok();
}

const char* token_dtype_name(TokenDtype dtype) {
  return dtype == TokenDtype::kUint16 ? "uint16" : "uint32";
}

Status load_token_file(const std::string& path, TokenDtype dtype, int vocab_size, TokenCorpus* out) {
  if (out == nullptr) return Status::error("out must be non-null");
  if (dtype != TokenDtype::kUint16 && dtype != TokenDtype::kUint32) {
    return Status::error("dtype must be kUint16 or kUint32");
  }
  if (vocab_size < 0) return Status::error("vocab_size must be >= 0 (0: infer), got " + std::to_string(vocab_size));
  const size_t elem = dtype == TokenDtype::kUint16 ? 2 : 4;
  const std::string where = "token file '" + path + "' (" + token_dtype_name(dtype) + ")";
  std::vector<uint32_t> tokens;
  auto check = [&](uint64_t size) {
    if (size == 0) return Status::error(where + " is empty");
    if (size % elem != 0) {
      return Status::error(where + " has " + std::to_string(size) + " bytes, not a multiple of " +
                           std::to_string(elem) + " (truncated?)");
    }
    if (size / elem < 2) return Status::error(where + " holds 1 token; at least 2 are needed");
    try {
      tokens.reserve(static_cast<size_t>(size / elem));
    } catch (const std::exception&) {
      return Status::error(where + " (" + std::to_string(size) + " bytes) does not fit in memory");
    }
    return Status::ok();
  };
  auto consume = [&](const uint8_t* b, size_t n) {
    for (size_t i = 0; i + elem <= n; i += elem) {
      uint32_t v = uint32_t{b[i]} | uint32_t{b[i + 1]} << 8;
      if (elem == 4) v |= uint32_t{b[i + 2]} << 16 | uint32_t{b[i + 3]} << 24;
      tokens.push_back(v);
    }
  };
  BS_RETURN_IF_ERROR(read_file_chunks(path, check, consume));

  if (vocab_size == 0) {
    const uint32_t max = *std::max_element(tokens.begin(), tokens.end());
    if (max >= static_cast<uint32_t>(INT_MAX)) {
      return Status::error(where + ": max token " + std::to_string(max) + " leaves no int vocab_size");
    }
    vocab_size = static_cast<int>(max) + 1;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= static_cast<uint32_t>(vocab_size)) {
        return Status::error(where + ": token at index " + std::to_string(i) + " is " +
                             std::to_string(tokens[i]) + ", not < vocab_size " + std::to_string(vocab_size));
      }
    }
  }
  out->description = where + ", " + std::to_string(tokens.size()) + " tokens";
  out->tokens = std::move(tokens);
  out->vocab_size = vocab_size;
  return Status::ok();
}

// ---- raw text -----------------------------------------------------------------------------

Status load_text_bytes(const std::string& path, TokenCorpus* out) {
  if (out == nullptr) return Status::error("out must be non-null");
  std::vector<uint32_t> tokens;
  auto check = [&](uint64_t size) {
    if (size < 2) {
      return Status::error("text file '" + path + "' has " + std::to_string(size) +
                           " bytes; at least 2 are needed");
    }
    try {
      tokens.reserve(static_cast<size_t>(size));
    } catch (const std::exception&) {
      return Status::error("text file '" + path + "' does not fit in memory");
    }
    return Status::ok();
  };
  auto consume = [&](const uint8_t* b, size_t n) { tokens.insert(tokens.end(), b, b + n); };
  BS_RETURN_IF_ERROR(read_file_chunks(path, check, consume));
  out->description = "text file '" + path + "' (bytes), " + std::to_string(tokens.size()) + " tokens";
  out->tokens = std::move(tokens);
  out->vocab_size = 256;
  return Status::ok();
}

std::string decode_bytes(const uint32_t* tokens, size_t n) {
  std::string s;
  if (tokens == nullptr) return s;
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    const uint32_t t = tokens[i];
    if (t == '\\') s += "\\\\";
    else if (t == '\n') s += "\\n";
    else if (t == '\t') s += "\\t";
    else if (t == '\r') s += "\\r";
    else if (t >= 0x20 && t < 0x7f) s += static_cast<char>(t);
    else if (t < 256) s += std::string("\\x") + kHex[t >> 4] + kHex[t & 15];
    else s += "\\u{" + std::to_string(t) + "}";
  }
  return s;
}

// ---- train / eval split ---------------------------------------------------------------------

Status split_corpus(const TokenCorpus& all, double eval_fraction, TokenCorpus* train,
                    TokenCorpus* eval) {
  if (train == nullptr || eval == nullptr) return Status::error("train and eval must be non-null");
  if (train == eval) return Status::error("train and eval must be different objects");
  if (!(eval_fraction > 0.0 && eval_fraction <= 0.5)) {
    return Status::error("eval_fraction must be in (0, 0.5], got " + std::to_string(eval_fraction));
  }
  const size_t n = all.tokens.size();
  const auto n_eval = static_cast<size_t>(std::floor(eval_fraction * static_cast<double>(n)));
  if (n_eval < 2 || n - n_eval < 2) {
    return Status::error("eval_fraction " + std::to_string(eval_fraction) + " of " + std::to_string(n) +
                         " tokens leaves " + std::to_string(n - n_eval) + " train and " +
                         std::to_string(n_eval) + " eval tokens; each part needs at least 2");
  }
  // Build both parts before writing: `all` may alias *train or *eval.
  TokenCorpus t, e;
  t.tokens.assign(all.tokens.begin(), all.tokens.end() - static_cast<std::ptrdiff_t>(n_eval));
  e.tokens.assign(all.tokens.end() - static_cast<std::ptrdiff_t>(n_eval), all.tokens.end());
  t.vocab_size = e.vocab_size = all.vocab_size;
  t.description = all.description + " [train: tokens 0.." + std::to_string(n - n_eval) + ")";
  e.description = all.description + " [eval: tokens " + std::to_string(n - n_eval) + ".." +
                  std::to_string(n) + ")";
  *train = std::move(t);
  *eval = std::move(e);
  return Status::ok();
}

// ---- batches ------------------------------------------------------------------------------

int64_t batch_window_start(const TokenCorpus& c, int seq_len, uint64_t seed, int64_t step,
                           int64_t sample) {
  // Counter-based: each field goes through its own mix so (step, sample) pairs never alias.
  const uint64_t h = mix64(mix64(mix64(seed ^ 0xDA7A5EEDull) + static_cast<uint64_t>(step)) ^
                           (static_cast<uint64_t>(sample) * kGolden));
  const uint64_t range = c.tokens.size() - static_cast<uint64_t>(seq_len);  // starts in [0, range)
  return static_cast<int64_t>(h % range);
}

Status make_batch(const TokenCorpus& c, int seq_len, uint64_t seed, int64_t step,
                  int64_t first_sample, int num_samples, int32_t* inputs, int32_t* targets) {
  BS_RETURN_IF_ERROR(check_batch_args(c, seq_len, first_sample, num_samples, inputs, targets));
  if (step < 0) return Status::error("step must be >= 0, got " + std::to_string(step));
  for (int j = 0; j < num_samples; ++j) {
    const int64_t start = batch_window_start(c, seq_len, seed, step, first_sample + j);
    const size_t off = static_cast<size_t>(j) * seq_len;
    BS_RETURN_IF_ERROR(copy_window(c, start, seq_len, inputs + off, targets + off));
  }
  return Status::ok();
}

int64_t eval_windows(const TokenCorpus& eval, int seq_len) {
  if (seq_len < 1 || eval.tokens.empty()) return 0;
  return static_cast<int64_t>((eval.tokens.size() - 1) / static_cast<size_t>(seq_len));
}

Status make_eval_batch(const TokenCorpus& eval, int seq_len, int64_t index, int num_samples,
                       int32_t* inputs, int32_t* targets) {
  BS_RETURN_IF_ERROR(check_batch_args(eval, seq_len, 0, num_samples, inputs, targets));
  if (index < 0) return Status::error("index must be >= 0, got " + std::to_string(index));
  if (num_samples > 0 && index > (std::numeric_limits<int64_t>::max() - num_samples) / num_samples) {
    return Status::error("index * num_samples overflows int64 (index " + std::to_string(index) + ")");
  }
  const int64_t windows = eval_windows(eval, seq_len);  // >= 1: checked above
  for (int j = 0; j < num_samples; ++j) {
    const int64_t w = (index * num_samples + j) % windows;
    const size_t off = static_cast<size_t>(j) * seq_len;
    BS_RETURN_IF_ERROR(copy_window(eval, w * seq_len, seq_len, inputs + off, targets + off));
  }
  return Status::ok();
}

}  // namespace blockscale::train
