// Tests of formats/io/safetensors.h: round trips of every dtype and rank, metadata, file order
// and alignment, the reference serializer's bytes, the streaming writer's contract, one test per
// rule the parser enforces, and a 300 MB file read without reading it into memory.
#include "formats/io/safetensors.h"
#include "tests/fifo_reader.h"
#include "tests/status_test.h"  // defines: mentions
#include "tests/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace blockscale::io {
namespace {

using blockscale_test::mentions;

namespace fs = std::filesystem;
using formats::DType;
using formats::kNumDTypes;

using blockscale_test::TempDir;

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {  // 1..255: never all zeros
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(1, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(dist(rng));
  return v;
}

size_t nbytes_of(DType d, const std::vector<int64_t>& shape) {
  size_t n = dtype_size(d);
  for (int64_t x : shape) n *= static_cast<size_t>(x);
  return n;
}

// 8-byte length, the header text as given, then `buffer`.
std::vector<uint8_t> st_file(const std::string& header, const std::vector<uint8_t>& buffer) {
  std::vector<uint8_t> f(8 + header.size() + buffer.size());
  for (int k = 0; k < 8; ++k) f[k] = static_cast<uint8_t>(header.size() >> (8 * k));
  std::copy(header.begin(), header.end(), f.begin() + 8);
  std::copy(buffer.begin(), buffer.end(), f.begin() + 8 + static_cast<ptrdiff_t>(header.size()));
  return f;
}

Status parse(const std::vector<uint8_t>& bytes, SafetensorsFile* f) {
  return SafetensorsFile::parse(bytes.data(), bytes.size(), f);
}

// ---- round trips ------------------------------------------------------------------------------

struct RoundTripCase {
  DType dtype;
  std::vector<int64_t> shape;
};

class SafetensorsRoundTrip : public testing::TestWithParam<RoundTripCase> {};

TEST_P(SafetensorsRoundTrip, WriteThenReadGivesTheSameTensor) {
  const RoundTripCase& c = GetParam();
  TempDir dir;
  const auto bytes = random_bytes(nbytes_of(c.dtype, c.shape), 5);
  // A one-byte tensor first in name order but last in file order, to misalign the buffer
  // unless the writer orders by dtype.
  const auto pad = random_bytes(1, 6);
  const std::string path = dir.file("t.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"t", TensorView{c.dtype, c.shape, bytes.data(), bytes.size()}},
                                       {"a_byte", TensorView{DType::kU8, {1}, pad.data(), 1}}}));
  SafetensorsFile f;
  const Status s = SafetensorsFile::open(path, &f);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(f.num_tensors(), 2u);
  TensorView t;
  ASSERT_TRUE(f.tensor("t", &t));
  EXPECT_EQ(t.dtype, c.dtype);
  EXPECT_EQ(t.shape, c.shape);
  ASSERT_EQ(t.nbytes, bytes.size());
  EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtype_size(c.dtype), 0u) << "tensor data not aligned";
  if (dtype_is_float(c.dtype)) {
    std::vector<float> v;
    ASSERT_TRUE(f.tensor_as_float("t", &v));
    EXPECT_EQ(v.size(), bytes.size() / dtype_size(c.dtype));
  }
  EXPECT_EQ(dir.num_entries(), 1u) << "a temporary file was left behind";
}

std::vector<RoundTripCase> round_trip_cases() {
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3, 4}, {3, 0, 2}, {0}};
  std::vector<RoundTripCase> cases;
  for (int d = 0; d < kNumDTypes; ++d) {
    for (const auto& s : shapes) cases.push_back({static_cast<DType>(d), s});
  }
  return cases;
}

std::string case_name(const testing::TestParamInfo<RoundTripCase>& info) {
  std::string n = std::string(dtype_name(info.param.dtype)) + "_rank" + std::to_string(info.param.shape.size());
  for (int64_t d : info.param.shape) n += "_" + std::to_string(d);
  return n;
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, SafetensorsRoundTrip, testing::ValuesIn(round_trip_cases()), case_name);

TEST(Safetensors, MatchesTheReferenceSerializerBytes) {
  // safetensors' own tests (tensor.rs test_empty, test_serialization): compact JSON, metadata
  // first, header padded with spaces to a multiple of 8.
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("e"), {}));
  EXPECT_EQ(read_file(dir.file("e")), st_file("{}      ", {}));
  ASSERT_TRUE(write_safetensors(dir.file("m"), {}, {{"framework", "pt"}}));
  EXPECT_EQ(read_file(dir.file("m")), st_file("{\"__metadata__\":{\"framework\":\"pt\"}}     ", {}));
  const float v[6] = {0, 1, 2, 3, 4, 5};
  std::vector<uint8_t> data(24);
  std::memcpy(data.data(), v, 24);
  ASSERT_TRUE(write_safetensors(dir.file("a"), {{"attn.0", TensorView{DType::kF32, {1, 2, 3}, data.data(), 24}}}));
  EXPECT_EQ(read_file(dir.file("a")),
            st_file("{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}", data));
}

TEST(Safetensors, FileOrderIsDtypeDescendingThenName) {
  TempDir dir;
  const auto b = random_bytes(64, 9);
  ASSERT_TRUE(write_safetensors(dir.file("o"), {{"z8", TensorView{DType::kU8, {3}, b.data(), 3}},
                                                {"b16", TensorView{DType::kBf16, {1}, b.data(), 2}},
                                                {"a16", TensorView{DType::kBf16, {1}, b.data(), 2}},
                                                {"h16", TensorView{DType::kF16, {1}, b.data(), 2}},
                                                {"e4", TensorView{DType::kF8E4M3, {1}, b.data(), 1}},
                                                {"e5", TensorView{DType::kF8E5M2, {1}, b.data(), 1}},
                                                {"d", TensorView{DType::kF64, {1}, b.data(), 8}},
                                                {"w", TensorView{DType::kF32, {1}, b.data(), 4}}}));
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("o"), &f));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"d", "w", "a16", "b16", "h16", "e4", "e5", "z8"}));
  const auto file = read_file(dir.file("o"));
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header(file.begin() + 8, file.begin() + 8 + n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // padding is spaces
}

TEST(Safetensors, MetadataAndNamesRoundTrip) {
  TempDir dir;
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"quote\"back\\slash", "new\nline\ttab\x01"}, {"unicode \xc3\xa9", "\xe2\x82\xac"}, {"", ""}};
  const auto b = random_bytes(4, 1);
  ASSERT_TRUE(write_safetensors(dir.file("m"), {{"w\"\\\n \xc3\xa9", TensorView{DType::kF32, {1}, b.data(), 4}}}, meta));
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("m"), &f));
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_TRUE(f.contains("w\"\\\n \xc3\xa9"));
  TensorView t;
  EXPECT_TRUE(mentions(f.tensor("nope", &t), "no tensor 'nope'"));
}

TEST(Safetensors, ManyTensorsWithEmptyOnesAmongThem) {
  TempDir dir;
  std::mt19937 rng(11);
  std::vector<std::vector<uint8_t>> store;
  std::vector<std::pair<std::string, TensorView>> tensors;
  for (int i = 0; i < 1000; ++i) {
    const DType d = static_cast<DType>(rng() % kNumDTypes);
    std::vector<int64_t> shape(rng() % 4);
    for (auto& x : shape) x = rng() % 5;  // zeros included: empty tensors
    store.push_back(random_bytes(nbytes_of(d, shape), i));
    tensors.push_back({"t" + std::to_string(i), TensorView{d, shape, store.back().data(), store.back().size()}});
  }
  ASSERT_TRUE(write_safetensors(dir.file("many"), tensors, {{"n", "1000"}}));
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("many"), &f));
  ASSERT_EQ(f.num_tensors(), 1000u);
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorView t;
    ASSERT_TRUE(f.tensor(tensors[i].first, &t));
    EXPECT_EQ(t.dtype, tensors[i].second.dtype);
    EXPECT_EQ(t.shape, tensors[i].second.shape);
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), store[i]) << tensors[i].first;
  }
}

TEST(Safetensors, ToFloatDecodesEveryFloatDtype) {
  const std::pair<DType, std::vector<uint8_t>> cases[] = {
      {DType::kF32, {0x00, 0x00, 0xC0, 0x3F}},                    // 1.5
      {DType::kF64, {0, 0, 0, 0, 0, 0, 0xF8, 0x3F}},              // 1.5
      {DType::kF16, {0x00, 0x3E}},                                // 1.5
      {DType::kBf16, {0xC0, 0x3F}},                               // 1.5
      {DType::kF8E4M3, {0x3C}},                                  // 1.5
      {DType::kF8E5M2, {0x3E}},                                  // 1.5
  };
  for (const auto& [d, bytes] : cases) {
    std::vector<float> v;
    ASSERT_TRUE(to_float(TensorView{d, {1}, bytes.data(), bytes.size()}, &v)) << dtype_name(d);
    EXPECT_EQ(v, std::vector<float>{1.5f}) << dtype_name(d);
  }
  const uint8_t e8m0 = 128;  // 2^1
  std::vector<float> v;
  ASSERT_TRUE(to_float(TensorView{DType::kF8E8M0, {}, &e8m0, 1}, &v));
  EXPECT_EQ(v, std::vector<float>{2.0f});
  const int32_t i = 3;
  EXPECT_TRUE(mentions(to_float(TensorView{DType::kI32, {}, reinterpret_cast<const uint8_t*>(&i), 4}, &v),
                       "not a floating-point dtype"));
}

// ---- the streaming writer ---------------------------------------------------------------------

TEST(SafetensorsWriter, StreamsChunksInFileOrder) {
  TempDir dir;
  const auto big = random_bytes(1000, 1), small = random_bytes(8, 2);
  SafetensorsWriter w;
  ASSERT_TRUE(w.open(dir.file("s"), {{"big", DType::kU8, {1000}}, {"small", DType::kF64, {1}}, {"empty", DType::kF32, {0, 4}}}));
  ASSERT_EQ(w.order().size(), 3u);
  EXPECT_EQ(w.order()[0].name, "small");
  EXPECT_TRUE(mentions(w.write("big", big.data(), 10), "expected data for 'small'"));
  EXPECT_TRUE(mentions(w.write("small", small.data(), 9), "9 bytes exceed the 8 bytes left"));
  ASSERT_TRUE(w.write("small", small.data(), 8));
  for (size_t off = 0; off < 1000; off += 300) {
    ASSERT_TRUE(w.write("big", big.data() + off, std::min<size_t>(300, 1000 - off)));
  }
  EXPECT_TRUE(mentions(w.write("big", big.data(), 1), "every tensor is complete"));
  EXPECT_EQ(dir.num_entries(), 1u);  // only the temporary so far
  EXPECT_FALSE(fs::exists(dir.file("s")));
  ASSERT_TRUE(w.finish());
  EXPECT_EQ(dir.num_entries(), 1u);
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("s"), &f));
  TensorView t;
  ASSERT_TRUE(f.tensor("big", &t));
  EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), big);
  EXPECT_TRUE(mentions(w.write("big", big.data(), 1), "not open"));
}

TEST(SafetensorsWriter, IncompleteOrAbandonedWritesLeaveNothing) {
  TempDir dir;
  const auto b = random_bytes(16, 1);
  ASSERT_TRUE(write_safetensors(dir.file("keep"), {{"x", TensorView{DType::kU8, {16}, b.data(), 16}}}));
  const auto before = read_file(dir.file("keep"));
  {
    SafetensorsWriter w;
    ASSERT_TRUE(w.open(dir.file("keep"), {{"x", DType::kU8, {32}}}));
    ASSERT_TRUE(w.write("x", b.data(), 16));
    EXPECT_TRUE(mentions(w.finish(), "has 16 of 32 bytes"));
  }
  {
    SafetensorsWriter w;
    ASSERT_TRUE(w.open(dir.file("keep"), {{"x", DType::kU8, {16}}}));
    ASSERT_TRUE(w.write("x", b.data(), 16));
  }  // destroyed before finish()
  EXPECT_EQ(dir.num_entries(), 1u);
  EXPECT_EQ(read_file(dir.file("keep")), before);
}

TEST(SafetensorsWriter, RejectsBadSpecsBeforeCreatingAFile) {
  TempDir dir;
  const std::string p = dir.file("x");
  const std::pair<std::vector<TensorSpec>, const char*> cases[] = {
      {{{"a", DType::kF32, {1}}, {"a", DType::kU8, {1}}}, "duplicate name 'a'"},
      {{{"__metadata__", DType::kF32, {1}}}, "reserved"},
      {{{"a", DType::kF32, {-1}}}, "negative"},
      {{{"a", DType::kF32, {int64_t{1} << 62}}}, "overflow"},
      {{{"a", DType::kF32, std::vector<int64_t>(65, 1)}}, "rank"},
      {{{"bad\xff", DType::kF32, {1}}}, "not valid UTF-8"},
  };
  for (const auto& [specs, why] : cases) {
    SafetensorsWriter w;
    const Status s = w.open(p, specs);
    EXPECT_TRUE(mentions(s, why)) << why << " -> " << (s ? "ok" : s.message());
  }
  SafetensorsWriter w;
  EXPECT_TRUE(mentions(w.open(p, {}, {{"k", "\xc3"}}), "metadata value"));
  EXPECT_TRUE(mentions(w.open(dir.file("no/dir/x"), {}), "temporary file"));
  const uint8_t one = 1;
  EXPECT_TRUE(mentions(write_safetensors(p, {{"a", TensorView{DType::kF32, {1}, &one, 1}}}), "nbytes (1)"));
  EXPECT_EQ(dir.num_entries(), 0u);
}

// ---- malformed input --------------------------------------------------------------------------

TEST(SafetensorsErrors, HeaderLengthAndTruncation) {
  SafetensorsFile f;
  const auto good = st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", random_bytes(4, 1));
  ASSERT_TRUE(parse(good, &f));
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    const Status s = parse(cut, &f);
    EXPECT_TRUE(mentions(s, "truncated") || mentions(s, "exceeds the byte buffer")) << n << ": " << (s ? "ok" : s.message());
  }
  auto big = good;
  big[4] = 1;  // 2^32 + ...
  EXPECT_TRUE(mentions(parse(big, &f), "exceeds the limit 100000000"));
  big = good;
  big[1] = 1;  // 256 + ..., within the limit but past the end
  EXPECT_TRUE(mentions(parse(big, &f), "runs past the end"));
  EXPECT_TRUE(mentions(SafetensorsFile::parse(nullptr, 0, &f), "truncated"));
  // A failed parse leaves `f` as it was.
  ASSERT_TRUE(parse(good, &f));
  EXPECT_FALSE(parse(big, &f));
  EXPECT_TRUE(f.contains("a"));
}

TEST(SafetensorsErrors, OffsetsMustTileTheBuffer) {
  const auto t = [](const char* name, const char* dtype, const char* shape, uint64_t b, uint64_t e) {
    return std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  const std::pair<std::string, const char*> cases[] = {
      {"{" + t("a", "U8", "[4]", 0, 4) + "," + t("b", "U8", "[4]", 2, 6) + "}", "overlap tensor 'a'"},
      {"{" + t("a", "U8", "[4]", 0, 4) + "," + t("b", "U8", "[2]", 6, 8) + "}", "belong to no tensor"},
      {"{" + t("a", "U8", "[4]", 0, 4) + "}", "cover 4"},
      {"{" + t("a", "U8", "[10]", 0, 10) + "}", "exceeds the byte buffer"},
      {"{" + t("a", "U8", "[0]", 5, 4) + "}", "begin (5) > end (4)"},
      {"{" + t("a", "F32", "[2]", 0, 4) + "}", "span 4 bytes but shape [2] x F32 needs 8"},
      {"{" + t("a", "U8", "[4294967296,4294967296]", 0, 8) + "}", "overflows int64"},
      {"{" + t("a", "F64", "[2305843009213693952]", 0, 8) + "}", "overflows int64"},
      {"{" + t("a", "U8", "[18446744073709551615]", 0, 8) + "}", "overflows int64"},
      {"{" + t("a", "U8", "[8]", 0, 8) + "," + t("a", "U8", "[0]", 8, 8) + "}", "duplicate key 'a'"},
  };
  for (const auto& [header, why] : cases) {
    SafetensorsFile f;
    const Status s = parse(st_file(header, random_bytes(8, 1)), &f);
    EXPECT_TRUE(mentions(s, why)) << header << " -> " << (s ? "ok" : s.message());
  }
  // Empty tensors may share an offset with each other and with the next tensor.
  SafetensorsFile f;
  ASSERT_TRUE(parse(st_file("{" + t("e1", "F32", "[0]", 4, 4) + "," + t("e2", "U8", "[2,0]", 4, 4) + "," +
                            t("a", "U8", "[4]", 0, 4) + "," + t("b", "U8", "[4]", 4, 8) + "}",
                            random_bytes(8, 1)), &f));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "e1", "e2", "b"}));
}

TEST(SafetensorsErrors, SchemaRules) {
  const std::string ok_tensor = "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}";
  const std::pair<std::string, const char*> cases[] = {
      {"", "malformed JSON"},
      {"{\"a\":", "malformed JSON"},
      {"{} x", "malformed JSON"},
      {"{\"a\":" + ok_tensor + ",}", "malformed JSON"},
      {"[]", "must be a JSON object"},
      {"{\"a\":[1]}", "value of 'a' must be an object"},
      {"{\"a\":{\"dtype\":\"Q8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "unsupported dtype 'Q8'"},
      {"{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", "'dtype' must be a string"},
      {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", "missing key 'dtype'"},
      {"{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", "missing key 'shape'"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", "missing key 'data_offsets'"},
      {"{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "duplicate key 'dtype'"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"offsets\":[0,1]}}", "unexpected key 'offsets'"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", "negative integer"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", "non-integer"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[[1]],\"data_offsets\":[0,1]}}", "non-negative integers, got an array"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", "'shape' must be an array"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", "exactly 2"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", "exactly 2"},
      {"{\"__metadata__\":{\"k\":1},\"a\":" + ok_tensor + "}", "__metadata__ value of 'k' must be a string"},
      {"{\"__metadata__\":{\"k\":{}},\"a\":" + ok_tensor + "}", "must be a string, got an object"},
      {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"},\"a\":" + ok_tensor + "}", "__metadata__: duplicate key 'k'"},
      {"{\"__metadata__\":{},\"__metadata__\":{},\"a\":" + ok_tensor + "}", "duplicate key '__metadata__'"},
      {"{\"__metadata__\":\"x\",\"a\":" + ok_tensor + "}", "must be an object"},
      {"{\"a\":" + ok_tensor + ",\"b\xff\":" + ok_tensor + "}", "malformed JSON"},  // invalid UTF-8
      {"\xef\xbb\xbf{\"a\":" + ok_tensor + "}", "byte-order mark"},  // not JSON to serde_json
  };
  for (const auto& [header, why] : cases) {
    SafetensorsFile f;
    const Status s = parse(st_file(header, random_bytes(1, 1)), &f);
    EXPECT_TRUE(mentions(s, why)) << header << " -> " << (s ? "ok" : s.message());
  }
  std::string rank65 = "[";
  for (int k = 0; k < 65; ++k) rank65 += k ? ",1" : "1";
  SafetensorsFile f;
  EXPECT_TRUE(mentions(parse(st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":" + rank65 + "],\"data_offsets\":[0,1]}}",
                                     random_bytes(1, 1)), &f), "rank exceeds"));
}

TEST(SafetensorsErrors, DeepNestingStopsAtOnce) {
  // 10 million levels: a DOM parser would allocate gigabytes; the schema stops at level 2.
  for (const char* open : {"[", "{\"a\":", "{\"__metadata__\":{\"k\":"}) {
    std::string h = open;
    for (int k = 0; k < 10'000'000; ++k) h += '[';
    SafetensorsFile f;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(parse(st_file(h, {}), &f));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  }
}

TEST(SafetensorsErrors, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  SafetensorsFile f;
  const std::string msg = blockscale_test::read_fifo(dir.file("in.safetensors"),
                                                     [&](const std::string& p) { return SafetensorsFile::open(p, &f); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

TEST(SafetensorsErrors, OpenErrorsNameThePath) {
  TempDir dir;
  SafetensorsFile f;
  EXPECT_TRUE(mentions(SafetensorsFile::open(dir.file("missing"), &f), "missing"));
  EXPECT_TRUE(mentions(SafetensorsFile::open(dir.file(""), &f), "not a regular file"));
  std::ofstream(dir.file("short")) << "1234";
  EXPECT_TRUE(mentions(SafetensorsFile::open(dir.file("short"), &f), "truncated"));
  const auto bad = st_file("{\"a\":1}", {});
  std::ofstream(dir.file("bad"), std::ios::binary).write(reinterpret_cast<const char*>(bad.data()), bad.size());
  EXPECT_TRUE(mentions(SafetensorsFile::open(dir.file("bad"), &f), "bad'"));
}

// ---- a large file -----------------------------------------------------------------------------

long vm_hwm_kib() {  // peak resident set size of this process
  std::ifstream s("/proc/self/status");
  std::string line;
  while (std::getline(s, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST(SafetensorsLarge, ReadingOneTensorOfA300MBFileStaysSmall) {
  TempDir dir;
  const size_t kBig = size_t{300} << 20, kChunk = size_t{1} << 20;
  const auto chunk = random_bytes(kChunk, 3);
  const auto small = random_bytes(4096, 4);
  {  // streamed: one 1 MiB chunk in memory at a time
    SafetensorsWriter w;
    ASSERT_TRUE(w.open(dir.file("big"), {{"big", DType::kBf16, {static_cast<int64_t>(kBig / 2)}},
                                         {"small", DType::kF32, {1024}}}));
    ASSERT_TRUE(w.write("small", small.data(), small.size()));
    for (size_t off = 0; off < kBig; off += kChunk) ASSERT_TRUE(w.write("big", chunk.data(), kChunk));
    ASSERT_TRUE(w.finish());
  }
  ASSERT_GT(fs::file_size(dir.file("big")), kBig);
  const long before = vm_hwm_kib();
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::open(dir.file("big"), &f));
  std::vector<float> v;
  ASSERT_TRUE(f.tensor_as_float("small", &v));
  EXPECT_EQ(std::memcmp(v.data(), small.data(), small.size()), 0);
  TensorView big;
  ASSERT_TRUE(f.tensor("big", &big));
  ASSERT_EQ(big.nbytes, kBig);
  EXPECT_EQ(big.data[kBig - 1], chunk[kChunk - 1]);  // touches one page, not the file
  const long after = vm_hwm_kib();
  ASSERT_GT(before, 0);
  EXPECT_LT(after - before, 16 * 1024) << "peak RSS grew by " << (after - before) << " KiB";
}

}  // namespace
}  // namespace blockscale::io
