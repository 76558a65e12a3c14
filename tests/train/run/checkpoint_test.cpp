// Tests of train/run/checkpoint.h: bit-exact round trips, `latest`, re-saves, every check load
// makes (each corruption refused, slots left untouched), a save killed halfway, pruning, bad
// arguments, and the XXH64 checksum against the reference's published vectors.
#include "train/run/checkpoint.h"
#include "formats/io/safetensors.h"
#include "tests/status_test.h"  // defines: mentions
#include "tests/temp_dir.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace blockscale::train {
namespace {

using blockscale_test::mentions;

namespace fs = std::filesystem;
using blockscale_test::TempDir;
using json = nlohmann::json;

constexpr uint32_t kSentinelBits = 0x7FBADBADu;  // a NaN no checkpoint here holds

using blockscale_test::read_file;

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Three tensors of different ranks: random bits (never all zero) plus the values a lossy copy
// would change: -0, denormals, NaNs with payloads (quiet and signaling), infinities.
struct Model {
  std::vector<std::string> names = {"param/embed", "adam_m/embed", "adam_v/bias"};
  std::vector<std::vector<int64_t>> shapes = {{7, 3}, {7, 3, 1}, {5}};
  std::vector<std::vector<float>> data;

  explicit Model(uint32_t seed) {
    std::mt19937 rng(seed);
    for (const auto& shape : shapes) {
      size_t n = 1;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      std::vector<float> v(n);
      for (float& x : v) x = from_bits(static_cast<uint32_t>(rng()) | 1u);
      data.push_back(v);
    }
    const uint32_t special[] = {0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7FC12345u, 0xFFA00001u, 0x7F800000u};
    for (size_t i = 0; i < std::size(special); ++i) data[0][i] = from_bits(special[i]);
    data[2][0] = from_bits(0x80000000u);
  }

  std::vector<TensorRef> refs() const {
    std::vector<TensorRef> r;
    for (size_t i = 0; i < names.size(); ++i) r.push_back({names[i], shapes[i], data[i].data()});
    return r;
  }
};

// Buffers shaped like `m`, filled with the sentinel, and slots pointing into them.
struct Buffers {
  std::vector<std::vector<float>> data;
  std::vector<TensorSlot> slots;

  explicit Buffers(const Model& m) {
    for (const auto& d : m.data) data.emplace_back(d.size(), from_bits(kSentinelBits));
    for (size_t i = 0; i < m.names.size(); ++i) slots.push_back({m.names[i], m.shapes[i], data[i].data()});
  }
  bool bit_equal(const Model& m) const {
    for (size_t i = 0; i < data.size(); ++i) {
      if (std::memcmp(data[i].data(), m.data[i].data(), 4 * data[i].size()) != 0) return false;
    }
    return true;
  }
  bool untouched() const {
    for (const auto& d : data) {
      for (float x : d) {
        uint32_t b;
        std::memcpy(&b, &x, 4);
        if (b != kSentinelBits) return false;
      }
    }
    return true;
  }
};

json make_state(int64_t step) {
  return {{"step", step}, {"tokens_seen", step * 4096}, {"seeds", {1, 2, 3}},
          {"lr", {{"schedule", "cosine"}, {"position", 0.25}}}, {"config", {{"d_model", 64}}}};
}

std::string xxh64_hex(const std::string& bytes) {
  detail::Xxh64 h;
  h.update(bytes.data(), bytes.size());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
  return hex;
}

// Replaces a checkpoint's tensors file with `bytes` and makes state.json agree with it, so that
// load gets past the size and checksum checks to the ones behind them.
void replace_tensors_file(const fs::path& ckpt, const std::string& bytes) {
  write_text(ckpt / "tensors.safetensors", bytes);
  json j = json::parse(read_file(ckpt / "state.json"));
  j["tensors_bytes"] = bytes.size();
  j["tensors_xxh64"] = xxh64_hex(bytes);
  write_text(ckpt / "state.json", j.dump());
}

class CheckpointTest : public ::testing::Test {
 protected:
  TempDir tmp_{"blockscale_checkpoint_test"};
  fs::path run_ = tmp_.path() / "run";
  Model model_{7};

  fs::path saved(int64_t step, const Model& m) {
    Status s = save_checkpoint(run_.string(), step, m.refs(), make_state(step));
    EXPECT_TRUE(s) << s.message();
    return run_ / ("step_" + std::string(8 - std::to_string(step).size(), '0') + std::to_string(step));
  }
};

TEST(Xxh64Test, MatchesReferenceVectorsAndIgnoresChunking) {
  const std::pair<std::string, uint64_t> vectors[] = {
      {"", 0xEF46DB3751D8E999ULL},
      {"a", 0xD24EC4F1A98C6E5BULL},
      {"abc", 0x44BC2CF5AD770999ULL},
      {"1234", 0xD8316E61D84F6BA4ULL},
      {"12345678", 0xD2D02F08CF7CFD4AULL},
      {"Nobody inspects the spammish repetition", 0xFBCEA83C8A378BF1ULL}};
  for (const auto& [text, want] : vectors) {
    detail::Xxh64 h;
    h.update(text.data(), text.size());
    EXPECT_EQ(h.digest(), want) << "'" << text << "'";
  }
  std::mt19937 rng(3);
  std::vector<unsigned char> bytes(1000);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  detail::Xxh64 whole;
  whole.update(bytes.data(), bytes.size());
  for (size_t chunk : {1, 3, 31, 32, 33, 100}) {
    detail::Xxh64 h;
    for (size_t at = 0; at < bytes.size(); at += chunk) h.update(bytes.data() + at, std::min(chunk, bytes.size() - at));
    EXPECT_EQ(h.digest(), whole.digest()) << "chunk " << chunk;
  }
}

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  const fs::path ckpt = saved(10, model_);
  for (const fs::path& from : {run_, ckpt}) {  // a run directory, then the checkpoint itself
    Buffers b(model_);
    json state;
    std::string resolved;
    Status s = load_checkpoint(from.string(), b.slots, &state, &resolved);
    ASSERT_TRUE(s) << s.message();
    EXPECT_TRUE(b.bit_equal(model_));
    EXPECT_EQ(state, make_state(10));
    EXPECT_EQ(fs::path(resolved), ckpt);
  }
}

TEST_F(CheckpointTest, StateFileWrapsTheCallersState) {
  const fs::path ckpt = saved(10, model_);
  const json j = json::parse(read_file(ckpt / "state.json"));
  EXPECT_EQ(j["format"], "blockscale-checkpoint");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["step"], 10);
  EXPECT_EQ(j["tensors_bytes"], fs::file_size(ckpt / "tensors.safetensors"));
  EXPECT_EQ(j["tensors_xxh64"], xxh64_hex(read_file(ckpt / "tensors.safetensors")));
  EXPECT_EQ(j["state"], make_state(10));
  EXPECT_EQ(read_file(run_ / "latest"), "step_00000010\n");
}

TEST_F(CheckpointTest, LatestFollowsTheNewestSave) {
  saved(10, model_);
  const Model newer(8);
  const fs::path ckpt20 = saved(20, newer);
  std::string latest;
  ASSERT_TRUE(latest_checkpoint(run_.string(), &latest));
  EXPECT_EQ(fs::path(latest), ckpt20);
  Buffers b(newer);
  json state;
  ASSERT_TRUE(load_checkpoint(run_.string(), b.slots, &state));
  EXPECT_TRUE(b.bit_equal(newer));
  EXPECT_EQ(state["step"], 20);
}

TEST_F(CheckpointTest, ResavingAStepReplacesItAndLeavesNoTemporaries) {
  saved(10, model_);
  const Model other(9);
  saved(10, other);
  Buffers b(other);
  json state;
  ASSERT_TRUE(load_checkpoint(run_.string(), b.slots, &state));
  EXPECT_TRUE(b.bit_equal(other));
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(run_)) entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"latest", "step_00000010"}));
}

TEST_F(CheckpointTest, EmptyTensorsRoundTrip) {
  const std::vector<TensorRef> refs = {{"param/empty", {0, 3}, nullptr}, {"param/one", {}, model_.data[2].data()}};
  ASSERT_TRUE(save_checkpoint(run_.string(), 0, refs, json::object()));
  float one = from_bits(kSentinelBits);
  json state;
  Status s = load_checkpoint(run_.string(), {{"param/empty", {0, 3}, nullptr}, {"param/one", {}, &one}}, &state);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(std::memcmp(&one, model_.data[2].data(), 4), 0);
  EXPECT_EQ(state, json::object());
}

TEST_F(CheckpointTest, FlippedByteFailsTheChecksumAndLeavesSlotsUntouched) {
  const fs::path file = saved(10, model_) / "tensors.safetensors";
  std::string bytes = read_file(file);
  bytes[bytes.size() - 5] ^= 0x10;  // inside the last tensor: the safetensors header stays valid
  write_text(file, bytes);
  Buffers b(model_);
  json state = "unchanged";
  Status s = load_checkpoint(run_.string(), b.slots, &state);
  EXPECT_TRUE(mentions(s, "checksum")) << s.message();
  EXPECT_TRUE(mentions(s, "tensors.safetensors")) << s.message();
  EXPECT_TRUE(b.untouched());
  EXPECT_EQ(state, "unchanged");
}

TEST_F(CheckpointTest, TruncatedFileIsRefused) {
  const fs::path file = saved(10, model_) / "tensors.safetensors";
  fs::resize_file(file, fs::file_size(file) - 4);
  Buffers b(model_);
  json state;
  Status s = load_checkpoint(run_.string(), b.slots, &state);
  EXPECT_TRUE(mentions(s, "truncated")) << s.message();
  EXPECT_TRUE(b.untouched());
}

TEST_F(CheckpointTest, GarbageStateJsonIsRefusedNamingTheFile) {
  const fs::path ckpt = saved(10, model_);
  write_text(ckpt / "state.json", "{\"format\": \"blockscale-checkpoint\", ");
  Buffers b(model_);
  json state;
  Status s = load_checkpoint(run_.string(), b.slots, &state);
  EXPECT_TRUE(mentions(s, (ckpt / "state.json").string())) << s.message();
  EXPECT_TRUE(mentions(s, "not valid JSON")) << s.message();
  EXPECT_TRUE(b.untouched());
}

TEST_F(CheckpointTest, WrongVersionOrFormatIsRefused) {
  const fs::path ckpt = saved(10, model_);
  const json good = json::parse(read_file(ckpt / "state.json"));
  json j = good;
  j["version"] = 2;
  write_text(ckpt / "state.json", j.dump());
  Buffers b(model_);
  json state;
  EXPECT_TRUE(mentions(load_checkpoint(run_.string(), b.slots, &state), "version 2 is not supported"));
  j = good;
  j["format"] = "something-else";
  write_text(ckpt / "state.json", j.dump());
  EXPECT_TRUE(mentions(load_checkpoint(run_.string(), b.slots, &state), "'format'"));
  j = good;
  j.erase("tensors_xxh64");
  write_text(ckpt / "state.json", j.dump());
  EXPECT_TRUE(mentions(load_checkpoint(run_.string(), b.slots, &state), "'tensors_xxh64'"));
  j = good;
  j["step"] = 11;  // not the directory's step: a copied or renamed checkpoint
  write_text(ckpt / "state.json", j.dump());
  EXPECT_TRUE(mentions(load_checkpoint(run_.string(), b.slots, &state), "step_00000010"));
  EXPECT_TRUE(b.untouched());
}

TEST_F(CheckpointTest, SlotMismatchesAreRefusedNamingTheTensor) {
  saved(10, model_);
  json state;
  {
    Buffers b(model_);
    b.slots.push_back({"adam_m/bias", {5}, b.data[2].data()});
    Status s = load_checkpoint(run_.string(), b.slots, &state);
    EXPECT_TRUE(mentions(s, "'adam_m/bias' is not in")) << s.message();
    EXPECT_TRUE(b.untouched());
  }
  {
    Buffers b(model_);
    b.slots[1].shape = {3, 7, 1};
    Status s = load_checkpoint(run_.string(), b.slots, &state);
    EXPECT_TRUE(mentions(s, "'adam_m/embed'")) << s.message();
    EXPECT_TRUE(mentions(s, "[7,3,1]") && mentions(s, "[3,7,1]")) << s.message();
    EXPECT_TRUE(b.untouched());
  }
  {
    Buffers b(model_);
    b.slots.pop_back();
    Status s = load_checkpoint(run_.string(), b.slots, &state);
    EXPECT_TRUE(mentions(s, "'adam_v/bias' that no slot asks for")) << s.message();
    EXPECT_TRUE(b.untouched());
  }
}

TEST_F(CheckpointTest, NonF32TensorAndBadSafetensorsAreRefused) {
  const fs::path ckpt = saved(10, model_);
  const fs::path scratch = tmp_.path() / "bf16.safetensors";
  const uint16_t bf16[5] = {0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0};
  io::TensorView view{formats::DType::kBf16, {5}, reinterpret_cast<const uint8_t*>(bf16), sizeof bf16};
  ASSERT_TRUE(io::write_safetensors(scratch.string(), {{"adam_v/bias", view}}));
  replace_tensors_file(ckpt, read_file(scratch));
  float bias[5];
  json state;
  Status s = load_checkpoint(run_.string(), {{"adam_v/bias", {5}, bias}}, &state);
  EXPECT_TRUE(mentions(s, "'adam_v/bias'") && mentions(s, "BF16")) << s.message();

  std::string bytes = read_file(scratch);
  bytes[8] = '[';  // the header is no longer a JSON object: the parser's own message comes through
  replace_tensors_file(ckpt, bytes);
  s = load_checkpoint(run_.string(), {{"adam_v/bias", {5}, bias}}, &state);
  EXPECT_TRUE(mentions(s, "safetensors: header")) << s.message();
}

TEST_F(CheckpointTest, MissingDirectoriesAreRefused) {
  Buffers b(model_);
  json state;
  EXPECT_TRUE(mentions(load_checkpoint((tmp_.path() / "nowhere").string(), b.slots, &state), "does not exist"));
  fs::create_directories(run_);
  EXPECT_TRUE(mentions(load_checkpoint(run_.string(), b.slots, &state), "neither a checkpoint directory"));
  std::string latest;
  EXPECT_TRUE(mentions(latest_checkpoint(run_.string(), &latest), "no checkpoint"));
  write_text(run_ / "latest", "step_00000030\n");
  EXPECT_TRUE(mentions(load_checkpoint(run_.string(), b.slots, &state), "step_00000030"));
  write_text(run_ / "latest", "../../etc\n");
  EXPECT_TRUE(mentions(latest_checkpoint(run_.string(), &latest), "must name a step_XXXXXXXX directory"));
  EXPECT_TRUE(b.untouched());
}

TEST_F(CheckpointTest, SaveKilledHalfwayLosesOnlyThatSave) {
  saved(10, model_);
  // A save of step 20 killed while writing, and one killed after its rename but before `latest`
  // moved: neither is committed.
  const fs::path partial = run_ / "step_00000020.tmp-999";
  fs::create_directories(partial);
  write_text(partial / "tensors.safetensors", "\x10\0\0\0junk");
  write_text(partial / "state.json", "{\"format\":");
  write_text(run_ / ".latest.tmp.999.1", "step_00000020");
  Buffers b(model_);
  json state;
  ASSERT_TRUE(load_checkpoint(run_.string(), b.slots, &state));
  EXPECT_TRUE(b.bit_equal(model_));
  EXPECT_EQ(state["step"], 10);

  saved(20, model_);
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_FALSE(fs::exists(run_ / ".latest.tmp.999.1"));
  ASSERT_TRUE(load_checkpoint(run_.string(), b.slots, &state));
  EXPECT_EQ(state["step"], 20);
}

TEST_F(CheckpointTest, PruneKeepsTheNewestAndWhatLatestNames) {
  for (int64_t step : {10, 20, 30, 40}) saved(step, model_);
  ASSERT_TRUE(prune_checkpoints(run_.string(), 2));
  EXPECT_FALSE(fs::exists(run_ / "step_00000010"));
  EXPECT_FALSE(fs::exists(run_ / "step_00000020"));
  EXPECT_TRUE(fs::exists(run_ / "step_00000030"));
  EXPECT_TRUE(fs::exists(run_ / "step_00000040"));
  saved(5, model_);  // `latest` now names an older step than the newest
  ASSERT_TRUE(prune_checkpoints(run_.string(), 1));
  EXPECT_TRUE(fs::exists(run_ / "step_00000040"));
  EXPECT_TRUE(fs::exists(run_ / "step_00000005"));
  EXPECT_FALSE(fs::exists(run_ / "step_00000030"));
  Buffers b(model_);
  json state;
  ASSERT_TRUE(load_checkpoint(run_.string(), b.slots, &state));
  EXPECT_EQ(state["step"], 5);
}

TEST_F(CheckpointTest, BadArgumentsAreRefused) {
  const json st = make_state(1);
  const std::string dir = run_.string();
  EXPECT_TRUE(mentions(save_checkpoint("", 1, model_.refs(), st), "dir is empty"));
  EXPECT_TRUE(mentions(save_checkpoint(dir, -1, model_.refs(), st), "step -1 is negative"));
  auto refs = model_.refs();
  refs[1].data = nullptr;
  EXPECT_TRUE(mentions(save_checkpoint(dir, 1, refs, st), "tensors[1] ('adam_m/embed'): data is null"));
  refs = model_.refs();
  refs[2].name = refs[0].name;
  EXPECT_TRUE(mentions(save_checkpoint(dir, 1, refs, st), "tensors[2] ('param/embed'): duplicate name"));
  refs = model_.refs();
  refs[0].name.clear();
  EXPECT_TRUE(mentions(save_checkpoint(dir, 1, refs, st), "name is empty"));
  refs = model_.refs();
  refs[0].shape = {7, -3};
  EXPECT_TRUE(mentions(save_checkpoint(dir, 1, refs, st), "negative"));
  EXPECT_FALSE(fs::exists(run_));  // nothing was written

  saved(1, model_);
  Buffers b(model_);
  json state;
  EXPECT_TRUE(mentions(load_checkpoint("", b.slots, &state), "path is empty"));
  EXPECT_TRUE(mentions(load_checkpoint(dir, b.slots, nullptr), "state is null"));
  auto slots = b.slots;
  slots[0].data = nullptr;
  EXPECT_TRUE(mentions(load_checkpoint(dir, slots, &state), "slots[0] ('param/embed'): data is null"));
  slots = b.slots;
  slots[1].name = slots[0].name;
  EXPECT_TRUE(mentions(load_checkpoint(dir, slots, &state), "slots[1] ('param/embed'): duplicate name"));
  EXPECT_TRUE(b.untouched());
  std::string latest;
  EXPECT_TRUE(mentions(latest_checkpoint("", &latest), "dir is empty"));
  EXPECT_TRUE(mentions(latest_checkpoint(dir, nullptr), "checkpoint_dir is null"));
  EXPECT_TRUE(mentions(prune_checkpoints(dir, 0), "keep 0 must be >= 1"));
  EXPECT_TRUE(mentions(prune_checkpoints("", 1), "dir is empty"));
}

}  // namespace
}  // namespace blockscale::train
