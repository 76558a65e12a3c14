// Training data: the built-in synthetic corpus, token files, byte-level text, and batches.
//
// Synthetic corpus (make_synthetic_corpus), the default training data. Tokens are drawn one at a
// time from a process that a small transformer can learn, using only 64-bit integer arithmetic
// (splitmix64), so the same (vocab, length, seed) gives the same tokens on every platform:
//   * Markov step: context c = the previous token (token 0 is uniform). c has
//     kSyntheticSuccessors = 4 distinct successors s_0..s_3 (hashed from (seed, c)); the next
//     token is s_k with probability 128/256, 64/256, 32/256, 16/256, or, with the remaining
//     16/256, a token uniform over the whole vocabulary (which may be one of the s_k).
//   * Copy span: from position 256 on, before each Markov step a span starts with probability
//     1/64: length L uniform in [8, 32], distance d uniform in [L, 256]; the next L tokens repeat
//     tokens[i-d .. i-d+L) verbatim (a span cut short at the corpus end stays short). Rewards
//     attention (induction heads): about 24% of a long corpus is copied.
// synthetic_markov_entropy_nats gives the exact entropy of one Markov step (the same for every
// context, since the successors are distinct). Copied tokens are nearly free to predict once a
// span is recognised, so a model can go below that value but not far below it.
//
// Batches: sample s of global batch `step` is the window starting at
// hash(seed, step, s) mod (tokens - seq_len), whoever asks for it. One process with batch 8 and
// two data-parallel ranks with batch 4 (first_sample 0 and 4) see the same 8 windows, and resuming
// needs no sampler state: (seed, step) is all of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"

namespace blockscale::train {

struct TokenCorpus {
  std::vector<uint32_t> tokens;  // every token < vocab_size
  int vocab_size = 0;
  std::string description;  // where the tokens came from, for logs
};

// ---- synthetic corpus ---------------------------------------------------------------------
inline constexpr int kSyntheticMinVocab = 16;
inline constexpr int kSyntheticMaxVocab = 1 << 20;
inline constexpr int kSyntheticSuccessors = 4;
// Successor weights out of 256; the rest (256 - sum) is the uniform draw.
inline constexpr int kSyntheticSuccessorWeights[kSyntheticSuccessors] = {128, 64, 32, 16};
inline constexpr int kSyntheticCopyLookback = 256;  // farthest distance a span copies from
inline constexpr int kSyntheticCopyMinLen = 8;
inline constexpr int kSyntheticCopyMaxLen = 32;

// vocab_size in [16, 1<<20], num_tokens >= 2.
Status make_synthetic_corpus(int vocab_size, int64_t num_tokens, uint64_t seed, TokenCorpus* out);

// The exact entropy (nats, the unit of the cross-entropy loss) of the next token after a Markov
// step of the synthetic process, for any context and seed. vocab_size in [16, 1<<20].
Status synthetic_markov_entropy_nats(int vocab_size, double* nats);

// ---- token files: raw little-endian tokens, no header ---------------------------------------
enum class TokenDtype { kUint16, kUint32 };

Status parse_token_dtype(const std::string& name, TokenDtype* out);  // "uint16" | "uint32"
const char* token_dtype_name(TokenDtype dtype);

// The file must hold a nonzero whole number of elements, at least 2 tokens, every one
// < vocab_size. vocab_size 0 infers it as max token + 1.
Status load_token_file(const std::string& path, TokenDtype dtype, int vocab_size, TokenCorpus* out);

// ---- raw text, byte-level tokenizer (vocab 256, token = byte value) -------------------------
Status load_text_bytes(const std::string& path, TokenCorpus* out);  // at least 2 bytes

// Printable ASCII as is; '\\', '\n', '\t', '\r' escaped; other bytes as \xHH; tokens > 255 as
// \u{N}. For printing samples, not a round-trip format.
std::string decode_bytes(const uint32_t* tokens, size_t n);

// ---- train / eval split ---------------------------------------------------------------------
// The last floor(eval_fraction * size) tokens are eval (contiguous), the rest train; both need
// >= 2 tokens. eval_fraction in (0, 0.5]. `all` may be the same object as *train or *eval.
Status split_corpus(const TokenCorpus& all, double eval_fraction, TokenCorpus* train,
                    TokenCorpus* eval);

// ---- batches ------------------------------------------------------------------------------
// Fills samples [first_sample, first_sample + num_samples) of global batch `step`: for sample j,
// inputs[j*seq_len + i] = tokens[start + i], targets[j*seq_len + i] = tokens[start + i + 1],
// start = hash(seed, step, first_sample + j) mod (tokens.size() - seq_len). Needs seq_len >= 1,
// tokens.size() >= seq_len + 1, step >= 0, first_sample >= 0, num_samples >= 0, and non-null
// outputs when num_samples > 0; a copied token >= vocab_size is an error.
Status make_batch(const TokenCorpus& c, int seq_len, uint64_t seed, int64_t step,
                  int64_t first_sample, int num_samples, int32_t* inputs, int32_t* targets);

// The start offset make_batch uses for sample `sample` of batch `step` (arguments unchecked;
// needs tokens.size() >= seq_len + 1).
int64_t batch_window_start(const TokenCorpus& c, int seq_len, uint64_t seed, int64_t step,
                           int64_t sample);

// Number of non-overlapping eval windows, (tokens.size() - 1) / seq_len; 0 when seq_len < 1.
int64_t eval_windows(const TokenCorpus& eval, int seq_len);

// Deterministic evaluation: sample j of eval batch `index` is window
// w = (index * num_samples + j) mod eval_windows, starting at w * seq_len. Batches
// 0 .. ceil(eval_windows / num_samples) - 1 cover every window once (the last one wraps).
Status make_eval_batch(const TokenCorpus& eval, int seq_len, int64_t index, int num_samples,
                       int32_t* inputs, int32_t* targets);

}  // namespace blockscale::train
