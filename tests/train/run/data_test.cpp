// Tests of train/run/data.h: synthetic corpus, token files, byte text, split, batches.
#include "train/run/data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/fifo_reader.h"
#include "tests/temp_dir.h"

namespace blockscale::train {
namespace {

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  ASSERT_EQ(written, bytes.size()) << path;
}

std::vector<uint8_t> le_bytes(const std::vector<uint32_t>& tokens, int elem) {
  std::vector<uint8_t> b;
  for (uint32_t t : tokens) {
    for (int i = 0; i < elem; ++i) b.push_back(static_cast<uint8_t>(t >> (8 * i)));
  }
  return b;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TokenCorpus counting_corpus(int n, int vocab) {  // tokens 0, 1, 2, ... mod vocab
  TokenCorpus c;
  for (int i = 0; i < n; ++i) c.tokens.push_back(static_cast<uint32_t>(i % vocab));
  c.vocab_size = vocab;
  return c;
}

// ---- synthetic corpus ---------------------------------------------------------------------

TEST(SyntheticCorpus, SameSeedSameTokensOtherSeedOtherTokens) {
  TokenCorpus a, b, c;
  ASSERT_TRUE(make_synthetic_corpus(256, 5000, 7, &a));
  ASSERT_TRUE(make_synthetic_corpus(256, 5000, 7, &b));
  ASSERT_TRUE(make_synthetic_corpus(256, 5000, 8, &c));
  ASSERT_EQ(a.tokens.size(), 5000u);
  EXPECT_EQ(a.tokens, b.tokens);
  int same = 0;
  for (size_t i = 0; i < a.tokens.size(); ++i) same += a.tokens[i] == c.tokens[i];
  EXPECT_LT(same, 500) << "seeds 7 and 8 agree on " << same << " of 5000 tokens";
  EXPECT_EQ(a.vocab_size, 256);
  EXPECT_FALSE(a.description.empty());
}

TEST(SyntheticCorpus, TokensBelowVocabForSmallAndLargeVocab) {
  for (int vocab : {16, 17, 1000, 1 << 20}) {
    TokenCorpus c;
    ASSERT_TRUE(make_synthetic_corpus(vocab, 20000, 3, &c)) << vocab;
    uint32_t max = 0;
    for (uint32_t t : c.tokens) max = std::max(max, t);
    EXPECT_LT(max, static_cast<uint32_t>(vocab));
    EXPECT_GT(max, static_cast<uint32_t>(vocab) / 2) << "tokens should span the vocabulary";
  }
}

// Golden prefix, computed once from this implementation (vocab 256, seed 1) and committed: a
// change here means the corpus differs across platforms or versions, breaking comparisons of runs.
TEST(SyntheticCorpus, GoldenPrefix) {
  TokenCorpus c;
  ASSERT_TRUE(make_synthetic_corpus(256, 1000, 1, &c));
  const std::vector<uint32_t> golden = {193, 73, 11, 235, 32, 44, 249, 65, 153, 191, 86, 135, 170, 13, 223, 212};
  EXPECT_EQ(std::vector<uint32_t>(c.tokens.begin(), c.tokens.begin() + 16), golden);
}

// Empirical H(next | previous) in bits, from bigram counts.
double bigram_conditional_entropy_bits(const std::vector<uint32_t>& t) {
  std::map<uint32_t, std::map<uint32_t, int64_t>> counts;
  for (size_t i = 0; i + 1 < t.size(); ++i) ++counts[t[i]][t[i + 1]];
  double h = 0;
  const double total = static_cast<double>(t.size() - 1);
  for (const auto& [prev, next] : counts) {
    int64_t n_prev = 0;
    for (const auto& kv : next) n_prev += kv.second;
    for (const auto& kv : next) {
      const double p = static_cast<double>(kv.second) / n_prev;
      h -= kv.second / total * std::log2(p);
    }
  }
  return h;
}

TEST(SyntheticCorpus, MarkovStructureIsLearnable) {
  TokenCorpus c;
  ASSERT_TRUE(make_synthetic_corpus(256, 1 << 18, 1, &c));
  double markov_nats = 0;
  ASSERT_TRUE(synthetic_markov_entropy_nats(256, &markov_nats));
  const double markov_bits = markov_nats / std::log(2.0);
  const double h = bigram_conditional_entropy_bits(c.tokens);
  // A uniform corpus gives log2(256) = 8 bits; a Markov step is 2.36 bits. Copy spans mostly
  // repeat Markov transitions and the plug-in estimate over 2^18 tokens is biased slightly low;
  // both move it by a few hundredths (2.34 measured). Half of log2(vocab) is a wide margin that
  // unstructured data still fails.
  EXPECT_LT(h, 4.0) << "bigram conditional entropy " << h << " bits";
  // The closed-form entropy is honest: the measurement lands near it.
  EXPECT_NEAR(h, markov_bits, 0.5);
  std::printf("bigram H = %.3f bits, Markov step H = %.3f bits\n", h, markov_bits);
}

// Fraction of positions i whose 8-gram equals one starting at distance d in [lo, hi].
double repeat_rate(const std::vector<uint32_t>& t, size_t lo, size_t hi) {
  int64_t hits = 0, positions = 0;
  for (size_t i = 2048; i + 8 <= t.size(); i += 7) {
    ++positions;
    for (size_t d = lo; d <= hi; ++d) {
      if (std::equal(t.begin() + i, t.begin() + i + 8, t.begin() + (i - d))) {
        ++hits;
        break;
      }
    }
  }
  return static_cast<double>(hits) / positions;
}

TEST(SyntheticCorpus, CopySpansRepeatRecentText) {
  TokenCorpus c;
  ASSERT_TRUE(make_synthetic_corpus(256, 1 << 17, 2, &c));
  // About 15% of positions start an 8-gram inside a copy span (spans start with probability 1/64
  // and average 20 tokens). Chance repeats come from the Markov part alone: measured at distances
  // 1024..1280, where no span copies from, they are the control.
  const double near = repeat_rate(c.tokens, 8, 256);
  const double far = repeat_rate(c.tokens, 1024, 1280);
  EXPECT_GT(near, 0.08) << "8-gram repeats within 256 tokens";
  EXPECT_GT(near, 10 * far) << "near " << near << " far " << far;
  std::printf("8-gram repeat rate: %.4f within 256, %.4f at 1024..1280\n", near, far);
}

TEST(SyntheticCorpus, EntropyAndArgumentErrors) {
  double nats = 0;
  ASSERT_TRUE(synthetic_markov_entropy_nats(1 << 20, &nats));
  EXPECT_GT(nats, 0.0);
  EXPECT_LT(nats, std::log(1 << 20));
  TokenCorpus c;
  Status s = make_synthetic_corpus(15, 100, 1, &c);
  ASSERT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "vocab_size")) << s.message();
  EXPECT_FALSE(make_synthetic_corpus((1 << 20) + 1, 100, 1, &c));
  s = make_synthetic_corpus(256, 1, 1, &c);
  ASSERT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "num_tokens")) << s.message();
  EXPECT_FALSE(make_synthetic_corpus(256, 100, 1, nullptr));
  EXPECT_FALSE(synthetic_markov_entropy_nats(8, &nats));
  EXPECT_FALSE(synthetic_markov_entropy_nats(256, nullptr));
}

// ---- token files --------------------------------------------------------------------------

TEST(TokenFile, RoundTripsUint16AndUint32) {
  blockscale_test::TempDir dir;
  const std::vector<uint32_t> t16 = {0, 1, 65535, 258, 7};
  const std::vector<uint32_t> t32 = {0, 70000, 16777216 + 3, 1u << 30, 9};
  write_bytes(dir.file("a.u16"), le_bytes(t16, 2));
  write_bytes(dir.file("a.u32"), le_bytes(t32, 4));
  TokenCorpus c;
  ASSERT_TRUE(load_token_file(dir.file("a.u16"), TokenDtype::kUint16, 65536, &c));
  EXPECT_EQ(c.tokens, t16);
  EXPECT_EQ(c.vocab_size, 65536);
  ASSERT_TRUE(load_token_file(dir.file("a.u32"), TokenDtype::kUint32, (1 << 30) + 1, &c));
  EXPECT_EQ(c.tokens, t32);
}

TEST(TokenFile, InfersVocabAsMaxPlusOne) {
  blockscale_test::TempDir dir;
  write_bytes(dir.file("t"), le_bytes({3, 41, 5}, 2));
  TokenCorpus c;
  ASSERT_TRUE(load_token_file(dir.file("t"), TokenDtype::kUint16, 0, &c));
  EXPECT_EQ(c.vocab_size, 42);
  write_bytes(dir.file("big"), le_bytes({3, 0xFFFFFFFFu}, 4));
  EXPECT_FALSE(load_token_file(dir.file("big"), TokenDtype::kUint32, 0, &c));  // no int vocab
}

TEST(TokenFile, FifoIsRefusedWithoutBlocking) {
  blockscale_test::TempDir dir;
  TokenCorpus c;
  std::string msg = blockscale_test::read_fifo(
      dir.file("tokens"), [&](const std::string& p) { return load_token_file(p, TokenDtype::kUint16, 0, &c); });
  EXPECT_TRUE(contains(msg, "not a regular file")) << msg;
  msg = blockscale_test::read_fifo(dir.file("text"), [&](const std::string& p) { return load_text_bytes(p, &c); });
  EXPECT_TRUE(contains(msg, "not a regular file")) << msg;
}

TEST(TokenFile, TruncatedFileNamesItsSize) {
  blockscale_test::TempDir dir;
  write_bytes(dir.file("odd"), {1, 0, 2, 0, 3});
  TokenCorpus c;
  Status s = load_token_file(dir.file("odd"), TokenDtype::kUint16, 0, &c);
  ASSERT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "5 bytes")) << s.message();
  write_bytes(dir.file("six"), {1, 0, 0, 0, 2, 0});
  s = load_token_file(dir.file("six"), TokenDtype::kUint32, 0, &c);
  ASSERT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "6 bytes")) << s.message();
}

TEST(TokenFile, OutOfRangeTokenNamesIndexAndValue) {
  blockscale_test::TempDir dir;
  write_bytes(dir.file("t"), le_bytes({1, 2, 99, 3, 100}, 2));
  TokenCorpus c;
  Status s = load_token_file(dir.file("t"), TokenDtype::kUint16, 50, &c);
  ASSERT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "index 2")) << s.message();
  EXPECT_TRUE(contains(s.message(), "99")) << s.message();
}

TEST(TokenFile, MissingEmptyAndTooShortFiles) {
  blockscale_test::TempDir dir;
  TokenCorpus c;
  const std::string missing = dir.file("no_such_file.bin");
  Status s = load_token_file(missing, TokenDtype::kUint16, 0, &c);
  ASSERT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), missing)) << s.message();
  EXPECT_TRUE(contains(s.message(), "No such file")) << s.message();
  write_bytes(dir.file("empty"), {});
  EXPECT_FALSE(load_token_file(dir.file("empty"), TokenDtype::kUint16, 0, &c));
  write_bytes(dir.file("one"), {5, 0});
  EXPECT_FALSE(load_token_file(dir.file("one"), TokenDtype::kUint16, 0, &c));
  EXPECT_FALSE(load_token_file(dir.path().string(), TokenDtype::kUint16, 0, &c));  // a directory
  EXPECT_FALSE(load_token_file(dir.file("one"), TokenDtype::kUint16, -1, &c));
}

TEST(TokenFile, ParsesDtypeNames) {
  TokenDtype d;
  ASSERT_TRUE(parse_token_dtype("uint16", &d));
  EXPECT_EQ(d, TokenDtype::kUint16);
  ASSERT_TRUE(parse_token_dtype("uint32", &d));
  EXPECT_EQ(d, TokenDtype::kUint32);
  Status s = parse_token_dtype("int8", &d);
  ASSERT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "int8")) << s.message();
}

// ---- text -----------------------------------------------------------------------------------

TEST(TextBytes, RoundTripsEveryByteValue) {
  blockscale_test::TempDir dir;
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 512; ++i) bytes.push_back(static_cast<uint8_t>(i * 37 + 1));
  write_bytes(dir.file("t.txt"), bytes);
  TokenCorpus c;
  ASSERT_TRUE(load_text_bytes(dir.file("t.txt"), &c));
  EXPECT_EQ(c.vocab_size, 256);
  ASSERT_EQ(c.tokens.size(), bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(c.tokens[i], bytes[i]) << i;
}

TEST(TextBytes, EmptyFileIsAnError) {
  blockscale_test::TempDir dir;
  write_bytes(dir.file("e.txt"), {});
  TokenCorpus c;
  Status s = load_text_bytes(dir.file("e.txt"), &c);
  ASSERT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "0 bytes")) << s.message();
}

TEST(TextBytes, DecodeEscapesNonPrintable) {
  const std::vector<uint32_t> t = {'H', 'i', '\n', '\t', '\\', 0, 0xFF, 300, '!'};
  EXPECT_EQ(decode_bytes(t.data(), t.size()), "Hi\\n\\t\\\\\\x00\\xff\\u{300}!");
  EXPECT_EQ(decode_bytes(nullptr, 3), "");
}

// ---- split ----------------------------------------------------------------------------------

TEST(Split, LastFractionIsEval) {
  TokenCorpus all = counting_corpus(100, 1000), train, eval;
  ASSERT_TRUE(split_corpus(all, 0.1, &train, &eval));
  ASSERT_EQ(train.tokens.size(), 90u);
  ASSERT_EQ(eval.tokens.size(), 10u);
  EXPECT_EQ(train.tokens.front(), 0u);
  EXPECT_EQ(eval.tokens.front(), 90u);
  EXPECT_EQ(eval.tokens.back(), 99u);
  EXPECT_EQ(eval.vocab_size, 1000);
  ASSERT_TRUE(split_corpus(all, 0.5, &all, &eval));  // in place
  EXPECT_EQ(all.tokens.size(), 50u);
  EXPECT_EQ(eval.tokens.front(), 50u);
}

TEST(Split, Errors) {
  TokenCorpus all = counting_corpus(10, 100), train, eval;
  for (double f : {0.0, -0.1, 0.51, std::nan("")}) {
    Status s = split_corpus(all, f, &train, &eval);
    ASSERT_FALSE(s) << f;
    EXPECT_TRUE(contains(s.message(), "eval_fraction")) << s.message();
  }
  EXPECT_FALSE(split_corpus(all, 0.1, &train, &eval));  // 1 eval token
  EXPECT_FALSE(split_corpus(all, 0.2, nullptr, &eval));
  EXPECT_FALSE(split_corpus(all, 0.2, &train, &train));
  EXPECT_TRUE(split_corpus(all, 0.2, &train, &eval));
}

// ---- batches --------------------------------------------------------------------------------

// In a counting corpus (vocab above the length) a token's value is its index: windows are visible.
TEST(Batch, TargetsAreInputsShiftedByOne) {
  TokenCorpus c = counting_corpus(1000, 5000);
  const int seq = 16, b = 8;
  std::vector<int32_t> in(seq * b, -1), tg(seq * b, -1);
  ASSERT_TRUE(make_batch(c, seq, 42, 3, 0, b, in.data(), tg.data()));
  for (int j = 0; j < b; ++j) {
    const int32_t start = in[j * seq];
    EXPECT_GE(start, 0);
    EXPECT_LE(start, 1000 - seq - 1) << "window must leave room for the last target";
    EXPECT_EQ(start, batch_window_start(c, seq, 42, 3, j));
    for (int i = 0; i < seq; ++i) {
      EXPECT_EQ(in[j * seq + i], start + i);
      EXPECT_EQ(tg[j * seq + i], start + i + 1);
    }
  }
}

TEST(Batch, WindowsCoverTheWholeRange) {
  TokenCorpus c = counting_corpus(40, 100);
  const int seq = 7;  // starts in [0, 32]
  std::set<int64_t> starts;
  for (int64_t step = 0; step < 200; ++step) {
    for (int64_t s = 0; s < 4; ++s) starts.insert(batch_window_start(c, seq, 1, step, s));
  }
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), 40 - seq - 1);
  EXPECT_EQ(starts.size(), 33u);
}

TEST(Batch, SameSampleSameWindowHoweverTheBatchIsSplit) {
  TokenCorpus c;
  ASSERT_TRUE(make_synthetic_corpus(256, 100000, 5, &c));
  const int seq = 32;
  std::vector<int32_t> in8(8 * seq, -1), tg8(8 * seq, -1), in4(8 * seq, -2), tg4(8 * seq, -2);
  ASSERT_TRUE(make_batch(c, seq, 9, 17, 0, 8, in8.data(), tg8.data()));
  ASSERT_TRUE(make_batch(c, seq, 9, 17, 0, 4, in4.data(), tg4.data()));                 // rank 0
  ASSERT_TRUE(make_batch(c, seq, 9, 17, 4, 4, in4.data() + 4 * seq, tg4.data() + 4 * seq));  // rank 1
  EXPECT_EQ(in8, in4);
  EXPECT_EQ(tg8, tg4);
}

TEST(Batch, DifferentStepOrSeedGivesDifferentWindows) {
  TokenCorpus c = counting_corpus(100000, 1 << 20);
  const int seq = 8, b = 8;
  std::vector<int32_t> a(seq * b), t(seq * b), other(seq * b);
  ASSERT_TRUE(make_batch(c, seq, 1, 0, 0, b, a.data(), t.data()));
  ASSERT_TRUE(make_batch(c, seq, 1, 1, 0, b, other.data(), t.data()));
  EXPECT_NE(a, other);
  ASSERT_TRUE(make_batch(c, seq, 2, 0, 0, b, other.data(), t.data()));
  EXPECT_NE(a, other);
  std::set<int32_t> starts;
  for (int j = 0; j < b; ++j) starts.insert(a[j * seq]);
  EXPECT_EQ(starts.size(), static_cast<size_t>(b)) << "samples of one batch should differ";
}

TEST(Batch, ArgumentErrors) {
  TokenCorpus c = counting_corpus(10, 100);
  std::vector<int32_t> in(100), tg(100);
  auto msg = [&](int seq, int64_t step, int64_t first, int n, int32_t* i, int32_t* t) {
    Status s = make_batch(c, seq, 1, step, first, n, i, t);
    return s ? std::string("ok") : s.message();
  };
  EXPECT_TRUE(contains(msg(0, 0, 0, 1, in.data(), tg.data()), "seq_len"));
  EXPECT_TRUE(contains(msg(10, 0, 0, 1, in.data(), tg.data()), "seq_len + 1"));
  EXPECT_EQ(msg(9, 0, 0, 1, in.data(), tg.data()), "ok");
  EXPECT_TRUE(contains(msg(4, -1, 0, 1, in.data(), tg.data()), "step"));
  EXPECT_TRUE(contains(msg(4, 0, -1, 1, in.data(), tg.data()), "first_sample"));
  EXPECT_TRUE(contains(msg(4, 0, 0, -1, in.data(), tg.data()), "num_samples"));
  EXPECT_TRUE(contains(msg(4, 0, 0, 1, nullptr, tg.data()), "inputs"));
  EXPECT_TRUE(contains(msg(4, 0, 0, 1, in.data(), nullptr), "targets"));
  EXPECT_EQ(msg(4, 0, 0, 0, nullptr, nullptr), "ok");
  EXPECT_TRUE(contains(msg(4, 0, INT64_MAX, 2, in.data(), tg.data()), "overflow"));
  c.tokens[5] = 100;  // a hand-made corpus with a token outside its vocabulary
  bool found = false;
  for (int64_t step = 0; step < 50 && !found; ++step) {
    found = contains(msg(8, step, 0, 1, in.data(), tg.data()), "index 5");
  }
  EXPECT_TRUE(found) << "a window over token 5 must report it";
}

TEST(EvalBatch, DeterministicNonOverlappingAndCoversEveryWindow) {
  TokenCorpus c = counting_corpus(101, 1000);
  const int seq = 10, b = 3;
  ASSERT_EQ(eval_windows(c, seq), 10);
  EXPECT_EQ(eval_windows(c, 0), 0);
  EXPECT_EQ(eval_windows(c, 200), 0);
  std::vector<int32_t> in(seq * b, -1), tg(seq * b, -1), again(seq * b, -1), t2(seq * b);
  std::map<int32_t, int> seen;  // window start -> times seen
  for (int64_t index = 0; index < 4; ++index) {  // ceil(10 / 3) batches
    ASSERT_TRUE(make_eval_batch(c, seq, index, b, in.data(), tg.data()));
    ASSERT_TRUE(make_eval_batch(c, seq, index, b, again.data(), t2.data()));
    EXPECT_EQ(in, again);
    for (int j = 0; j < b; ++j) {
      const int32_t start = in[j * seq];
      EXPECT_EQ(start, ((index * b + j) % 10) * seq);
      for (int i = 0; i < seq; ++i) EXPECT_EQ(tg[j * seq + i], in[j * seq + i] + 1);
      ++seen[start];
    }
  }
  ASSERT_EQ(seen.size(), 10u);  // every window, and windows never overlap (starts seq apart)
  EXPECT_EQ(seen.rbegin()->first + seq, 100);  // the last target is the last token
  EXPECT_EQ(seen[0], 2);  // the 12th sample wrapped to window 0 and 1
  EXPECT_FALSE(make_eval_batch(c, seq, -1, b, in.data(), tg.data()));
  EXPECT_FALSE(make_eval_batch(c, 101, 0, b, in.data(), tg.data()));
  EXPECT_FALSE(make_eval_batch(c, seq, INT64_MAX / 2, b, in.data(), tg.data()));
}

}  // namespace
}  // namespace blockscale::train
