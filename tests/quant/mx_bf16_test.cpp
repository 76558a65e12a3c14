// Tests of quant/mx_bf16.cu (quant/mx_bf16.h): MX quantize of an fp32 matrix straight to bf16
// values. The GPU's bf16 bits against the CPU emulator's, bit for bit: the reference is
// formats::quantize() (grouped: formats::quantize_grouped_columnwise()) then formats::dequantize(),
// each value rounded by formats::float_to_bf16_bits_rn(), the columnwise copy transposed back to
// the input's rows x cols. Where the reference holds NaN (a block with a NaN or Inf), the GPU must
// give a NaN, its bits free.
//   - every output poisoned (0xAB bytes) before each run, with 64 poisoned elements either side:
//     an unwritten element, a write outside the matrix, or a write to a row no expert owns fails;
//   - MXFP8 E4M3 ceil, E5M2 ceil, E4M3 floor; both outputs, rowwise alone, columnwise alone;
//   - normal data, and per 16x32 region a kind of adversarial data (NaN / Inf / subnormal / -0 /
//     largest finite / all-zero blocks / rounding ties), with and without non-finite values;
//   - shapes 1x1 .. 200x4104 (cols % 8 == 0, not % 32), rows not a multiple of 32; x, rowwise and
//     columnwise one element off a 256-byte aligned allocation (the scalar paths), together or alone;
//   - dense batches (3 x 40 rows, 2 x 64 rows: columnwise blocks restart at each matrix);
//   - grouped (MoE): 8 and 40 experts, every expert split of grouped_test_util.h, with and without
//     the row_index gather (indices -1, past input_rows, INT32_MAX; input_rows != rows), and group
//     ends that stop short of rows (the rows past the last end keep their poison);
//   - empty problems (nothing written).
// GPU tests skip without a GPU. The argument checks: mx_bf16_api_test.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "formats/scalar_codecs.h"
#include "quant/mx_bf16.h"
#include "tests/quant/gpu_test_util.h"
#include "tests/quant/grouped_test_util.h"

namespace {

namespace bf = blockscale::formats;
namespace bq = blockscale::quant;
using bf::Format;
using bf::ScaleRounding;
using bf::DType;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::DeviceInput;
using blockscale_test::GuardedOutput;
using blockscale_test::HostInput;
using blockscale_test::Split;
using blockscale_test::alloc_poisoned;
using blockscale_test::make_counts;
using blockscale_test::name;
using blockscale_test::upload_input;

constexpr uint16_t kPoison16 = 0xABAB;  // kDefaultPoison in both bytes: a finite bf16, never NaN
constexpr int64_t kGuardBytes = 128;    // 64 bf16 elements either side of each output

bool bf16_is_nan(uint16_t u) { return (u & 0x7FFFu) > 0x7F80u; }

// ---- Inputs --------------------------------------------------------------------------------

enum class Data {
  kNormal,  // N(0, 1)
  kMixed,   // grouped_test_util's make_input: NaN / Inf / subnormal / zero blocks / ties
  kFinite,  // the same without NaN / Inf
};
const char* name(Data d) { return d == Data::kNormal ? "normal" : d == Data::kMixed ? "mixed" : "finite"; }

// rows x cols fp32 (row stride cols).
HostInput make_data(int64_t rows, int64_t cols, Data d, uint64_t seed) {
  if (d != Data::kNormal)
    return blockscale_test::make_input(rows, cols, cols, DType::kF32, d == Data::kFinite, seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  HostInput in;
  in.values.resize(static_cast<size_t>(rows * cols));
  for (float& v : in.values) v = normal(rng);
  in.bytes.resize(in.values.size() * sizeof(float));
  if (!in.values.empty()) std::memcpy(in.bytes.data(), in.values.data(), in.bytes.size());
  return in;
}

// ---- Reference -----------------------------------------------------------------------------

struct Variant {
  Format recipe;
  ScaleRounding rounding;
  const char* name;
};
const Variant kVariants[] = {{Format::kMxfp8E4M3, ScaleRounding::kCeil, "e4m3_ceil"},
                             {Format::kMxfp8E5M2, ScaleRounding::kCeil, "e5m2_ceil"},
                             {Format::kMxfp8E4M3, ScaleRounding::kFloor, "e4m3_floor"}};

bf::QuantizeOptions options(const Variant& v) {
  bf::QuantizeOptions o;
  o.recipe = v.recipe;
  o.rounding = v.rounding;
  return o;
}

// Both outputs' expected bits, rows x cols each; kPoison16 where nothing may be written.
struct Expected {
  std::vector<uint16_t> row, col;
  int64_t nans = 0;  // NaN expectations (both outputs)
};

Expected poisoned(int64_t rows, int64_t cols) {
  Expected e;
  e.row.assign(static_cast<size_t>(rows * cols), kPoison16);
  e.col.assign(static_cast<size_t>(rows * cols), kPoison16);
  return e;
}

void count_nans(Expected* e) {
  e->nans = std::count_if(e->row.begin(), e->row.end(), bf16_is_nan) +
            std::count_if(e->col.begin(), e->col.end(), bf16_is_nan);
}

// formats::quantize() then formats::dequantize() of the rows x cols matrix x (row stride cols), in
// the stored orientation (columnwise: cols x rows).
std::vector<float> quantize_dequantize(const float* x, int64_t rows, int64_t cols, const Variant& v,
                                       bf::Direction d) {
  bf::QuantizedMatrix q;
  std::vector<float> out;
  blockscale::Status s = bf::quantize(x, rows, cols, cols, options(v), d, &q);
  EXPECT_TRUE(s.is_ok()) << s.message();
  s = bf::dequantize(q, &out);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

// Dense: rowwise over the whole matrix (its blocks never cross rows), columnwise per each of
// `batches` stacked matrices of rows / batches rows.
Expected dense_reference(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t batches,
                         const Variant& v) {
  Expected e = poisoned(rows, cols);
  if (rows == 0 || cols == 0) return e;
  const std::vector<float> row = quantize_dequantize(x.data(), rows, cols, v, bf::Direction::kRowwise);
  for (size_t i = 0; i < row.size(); ++i) e.row[i] = bf::float_to_bf16_bits_rn(row[i]);
  const int64_t m = rows / batches;
  for (int64_t b = 0; b < batches; ++b) {
    const std::vector<float> col =
        quantize_dequantize(x.data() + b * m * cols, m, cols, v, bf::Direction::kColumnwise);  // cols x m
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < cols; ++c)
        e.col[static_cast<size_t>((b * m + r) * cols + c)] =
            bf::float_to_bf16_bits_rn(col[static_cast<size_t>(c * m + r)]);
  }
  count_nans(&e);
  return e;
}

// Grouped: g is the (gathered) rows x cols matrix, ends the cumulative expert ends (the last may be
// below rows: the rows past it stay poisoned in both outputs). Rowwise: the plain rowwise quantize;
// columnwise: formats::quantize_grouped_columnwise(), expert e's token t (row ends[e-1] + t) read
// from the padded column padded_ends[e-1] + t.
Expected grouped_reference(const std::vector<float>& g, int64_t rows, int64_t cols, const std::vector<int64_t>& ends,
                           const Variant& v) {
  Expected e = poisoned(rows, cols);
  const int64_t used = ends.empty() ? 0 : ends.back();
  if (used == 0 || cols == 0) return e;
  const std::vector<float> row = quantize_dequantize(g.data(), used, cols, v, bf::Direction::kRowwise);
  for (size_t i = 0; i < row.size(); ++i) e.row[i] = bf::float_to_bf16_bits_rn(row[i]);
  bf::QuantizedMatrix q;
  std::vector<int64_t> padded;
  blockscale::Status s = bf::quantize_grouped_columnwise(g.data(), used, cols, cols, ends, options(v), &q, &padded);
  EXPECT_TRUE(s.is_ok()) << s.message();
  std::vector<float> col;
  s = bf::dequantize(q, &col);
  EXPECT_TRUE(s.is_ok()) << s.message();
  const int64_t total = q.cols;  // padded tokens
  for (size_t x = 0; x < ends.size(); ++x) {
    const int64_t start = x ? ends[x - 1] : 0, padded_start = x ? padded[x - 1] : 0;
    for (int64_t t = 0; t < ends[x] - start; ++t)
      for (int64_t c = 0; c < cols; ++c)
        e.col[static_cast<size_t>((start + t) * cols + c)] =
            bf::float_to_bf16_bits_rn(col[static_cast<size_t>(c * total + padded_start + t)]);
  }
  count_nans(&e);
  return e;
}

// ---- GPU run and comparison ----------------------------------------------------------------

// Compares the rows x cols bf16 output in o with `want` (NaN expectations: any NaN) and its guards
// with the poison. Returns the number of bad elements (guard bytes count one each); describes the
// first few in *report.
int64_t check_bf16(const GuardedOutput& o, const std::vector<uint16_t>& want, int64_t cols, const char* what,
                   std::string* report) {
  std::vector<uint8_t> all(o.buf.size());
  const blockscale::Status copied = o.buf.download(all.data(), all.size(), what);
  if (!copied) {
    *report += copied.message() + "\n";
    return 1;
  }
  if (static_cast<int64_t>(want.size()) * 2 != o.bytes) {
    *report += std::string(what) + ": reference of " + std::to_string(want.size()) + " elements, buffer of " +
               std::to_string(o.bytes) + " bytes\n";
    return 1;
  }
  int64_t bad = 0;
  char line[256];
  const int64_t begin = o.guard + o.offset, end = begin + o.bytes;
  for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) {
    if ((i >= begin && i < end) || all[static_cast<size_t>(i)] == o.poison) continue;
    if (bad++ < 4) {
      std::snprintf(line, sizeof line, "%s: guard byte %lld %s the matrix written (0x%02X)\n", what,
                    static_cast<long long>(i < begin ? begin - i : i - end + 1), i < begin ? "before" : "after",
                    all[static_cast<size_t>(i)]);
      *report += line;
    }
  }
  for (size_t j = 0; j < want.size(); ++j) {
    uint16_t got;
    std::memcpy(&got, &all[static_cast<size_t>(begin) + 2 * j], 2);
    const uint16_t w = want[j];
    if (bf16_is_nan(w) ? bf16_is_nan(got) : got == w) continue;
    if (bad++ < 6) {
      const int64_t r = static_cast<int64_t>(j) / cols, c = static_cast<int64_t>(j) % cols;
      std::snprintf(line, sizeof line, "%s (row %lld, col %lld): got 0x%04X (%g) want 0x%04X (%g)%s\n", what,
                    static_cast<long long>(r), static_cast<long long>(c), got, bf::bf16_bits_to_float(got), w,
                    bf::bf16_bits_to_float(w), w == kPoison16 ? " (the poison: must not be written)" : "");
      *report += line;
    }
  }
  return bad;
}

// Which pointers sit one element off a 256-byte aligned allocation.
enum Misalign : int { kAligned = 0, kMisX = 1, kMisRow = 2, kMisCol = 4, kMisAll = 7 };

std::string misalign_name(int m) {
  if (m == kAligned) return "";
  if (m == kMisAll) return "_misaligned";
  return std::string("_mis") + (m & kMisX ? "x" : "") + (m & kMisRow ? "row" : "") + (m & kMisCol ? "col" : "");
}

// One run() into fresh poisoned outputs (only those requested: the other pointer is null), each one
// element off alignment where `misalign` says; compared with `want`. Returns the bad elements.
int64_t run_and_check(const bq::MxBf16Problem& p, const bq::MxBf16Inputs& in, const Expected& want, bool row,
                      bool col, int misalign, const std::string& what) {
  const int64_t bytes = p.rows * p.cols * 2;
  GuardedOutput ro, co;
  bq::MxBf16Outputs out;
  if (row) {
    if (!alloc_poisoned(&ro, bytes, misalign & kMisRow ? 2 : 0, blockscale_test::kDefaultPoison, kGuardBytes)) {
      ADD_FAILURE() << what << ": rowwise allocation";
      return 1;
    }
    out.rowwise = reinterpret_cast<uint16_t*>(ro.ptr());
  }
  if (col) {
    if (!alloc_poisoned(&co, bytes, misalign & kMisCol ? 2 : 0, blockscale_test::kDefaultPoison, kGuardBytes)) {
      ADD_FAILURE() << what << ": columnwise allocation";
      return 1;
    }
    out.columnwise = reinterpret_cast<uint16_t*>(co.ptr());
  }
  const blockscale::Status s = bq::run(p, in, out, nullptr);
  EXPECT_TRUE(s.is_ok()) << what << ": " << s.message();
  const blockscale::Status synced = blockscale::runtime::cuda_status(cudaDeviceSynchronize(), what.c_str());
  EXPECT_TRUE(synced.is_ok()) << synced.message();
  if (!s.is_ok() || !synced) return 1;
  std::string report;
  int64_t bad = 0;
  if (row) bad += check_bf16(ro, want.row, p.cols, "rowwise", &report);
  if (col) bad += check_bf16(co, want.col, p.cols, "columnwise", &report);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " bad elements\n" << report;
  return bad;
}

// Every variant with both outputs, and E4M3 ceil with each output alone. Returns the bad elements.
template <typename Reference>
int64_t run_variants(const bq::MxBf16Problem& base, const bq::MxBf16Inputs& in, int misalign,
                     const std::string& what, Reference reference, int* runs, int64_t* nans) {
  int64_t bad = 0;
  for (const Variant& v : kVariants) {
    bq::MxBf16Problem p = base;
    p.recipe = v.recipe;
    p.rounding = v.rounding;
    const Expected want = reference(v);
    *nans = std::max(*nans, want.nans);
    const std::string w = what + " " + v.name;
    bad += run_and_check(p, in, want, true, true, misalign, w + " both");
    ++*runs;
    if (&v != &kVariants[0]) continue;
    bad += run_and_check(p, in, want, true, false, misalign, w + " rowwise only");
    bad += run_and_check(p, in, want, false, true, misalign, w + " columnwise only");
    *runs += 2;
  }
  return bad;
}

// ---- Dense ---------------------------------------------------------------------------------

struct DenseCase {
  int64_t rows, cols, batches;
  Data data;
  int misalign;
};

std::string dense_name(const DenseCase& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) +
         (c.batches > 1 ? "_b" + std::to_string(c.batches) : std::string()) + "_" + name(c.data) +
         misalign_name(c.misalign);
}
void PrintTo(const DenseCase& c, std::ostream* os) { *os << dense_name(c); }

class MxBf16Dense : public ::testing::TestWithParam<DenseCase> {};

TEST_P(MxBf16Dense, MatchesTheEmulatorBitForBit) {
  SKIP_WITHOUT_GPU();
  const DenseCase& c = GetParam();
  const uint64_t seed = 1000003u * static_cast<uint64_t>(c.rows) + 7919u * static_cast<uint64_t>(c.cols) +
                        31u * static_cast<uint64_t>(c.batches) + static_cast<uint64_t>(c.data);
  const HostInput in = make_data(c.rows, c.cols, c.data, seed);
  DeviceInput x;
  ASSERT_TRUE(upload_input(in, DType::kF32, (c.misalign & kMisX) != 0, &x));
  bq::MxBf16Problem p;
  p.rows = c.rows, p.cols = c.cols, p.batches = c.batches;
  bq::MxBf16Inputs inputs;
  inputs.x = static_cast<const float*>(x.ptr());
  int runs = 0;
  int64_t nans = 0;
  const int64_t bad = run_variants(p, inputs, c.misalign, dense_name(c), [&](const Variant& v) {
    return dense_reference(in.values, c.rows, c.cols, c.batches, v);
  }, &runs, &nans);
  if (c.data == Data::kMixed && c.rows * c.cols >= 32768) EXPECT_GT(nans, 0) << "the input should hold NaN blocks";
  if (c.data != Data::kMixed) EXPECT_EQ(nans, 0) << "finite input, no NaN expected";
  if (c.batches > 1 && (c.rows / c.batches) % 32 != 0 && c.data == Data::kMixed) {
    // Blocks of the whole matrix would cross matrices: the batching must matter to the reference.
    const Expected whole = dense_reference(in.values, c.rows, c.cols, 1, kVariants[0]);
    const Expected batched = dense_reference(in.values, c.rows, c.cols, c.batches, kVariants[0]);
    EXPECT_NE(whole.col, batched.col);
    EXPECT_EQ(whole.row, batched.row);
  }
  std::printf("mx_bf16_test: %-32s %d runs, %lld NaN expected, bad elements %lld\n", dense_name(c).c_str(), runs,
              static_cast<long long>(nans), static_cast<long long>(bad));
}

std::vector<DenseCase> dense_cases() {
  std::vector<DenseCase> v;
  const int64_t shapes[][2] = {{32, 256}, {128, 128}, {1, 1},    {31, 33},
                               {33, 257}, {97, 1000}, {200, 4104}, {64, 2048}};
  for (const auto& s : shapes) {
    v.push_back({s[0], s[1], 1, Data::kNormal, kAligned});
    v.push_back({s[0], s[1], 1, Data::kMixed, kAligned});
    v.push_back({s[0], s[1], 1, Data::kFinite, kMisAll});
    v.push_back({s[0], s[1], 1, Data::kMixed, kMisAll});
  }
  for (int m : {kMisX, kMisRow, kMisCol}) v.push_back({97, 1000, 1, Data::kMixed, m});  // one pointer off alone
  v.push_back({71, 8, 1, Data::kMixed, kAligned});  // one 8-column chunk per row
  // Batched: 3 x 40 rows (columnwise blocks of 32 + 8 rows per matrix), 2 x 64 rows.
  v.push_back({120, 96, 3, Data::kMixed, kAligned});
  v.push_back({120, 257, 3, Data::kMixed, kMisAll});
  v.push_back({120, 1000, 3, Data::kNormal, kAligned});
  v.push_back({128, 200, 2, Data::kMixed, kAligned});
  v.push_back({128, 4104, 2, Data::kFinite, kMisAll});
  v.push_back({128, 4104, 2, Data::kMixed, kAligned});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MxBf16Dense, ::testing::ValuesIn(dense_cases()),
                         [](const ::testing::TestParamInfo<DenseCase>& i) { return dense_name(i.param); });

// ---- Grouped -------------------------------------------------------------------------------

struct GroupedCase {
  int64_t rows, cols;
  int groups;
  Split split;
  bool gather;          // with row_index
  int64_t unowned = 0;  // rows past the last group end
  Data data = Data::kMixed;
  int misalign = kAligned;
};

std::string grouped_name(const GroupedCase& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_g" + std::to_string(c.groups) + "_" +
         name(c.split) + (c.gather ? "_gather" : "") +
         (c.unowned ? "_unowned" + std::to_string(c.unowned) : std::string()) + "_" + name(c.data) +
         misalign_name(c.misalign);
}
void PrintTo(const GroupedCase& c, std::ostream* os) { *os << grouped_name(c); }

class MxBf16Grouped : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(MxBf16Grouped, MatchesTheEmulatorBitForBit) {
  SKIP_WITHOUT_GPU();
  const GroupedCase& c = GetParam();
  const uint64_t seed = 1000003u * static_cast<uint64_t>(c.rows) + 7919u * static_cast<uint64_t>(c.cols) +
                        101u * static_cast<uint64_t>(c.groups) + 13u * static_cast<uint64_t>(c.split) +
                        (c.gather ? 5u : 0u) + 3u * static_cast<uint64_t>(c.unowned) + static_cast<uint64_t>(c.data);
  // x: input_rows rows with the gather (fewer or more than rows), else rows.
  const int64_t input_rows = !c.gather ? c.rows : (c.rows % 2 ? c.rows + 45 : c.rows * 3 / 4 + 7);
  const HostInput in = make_data(input_rows, c.cols, c.data, seed);
  std::mt19937_64 rng(seed * 3 + 1);
  std::vector<int32_t> index;
  if (c.gather) {
    for (int64_t r = 0; r < c.rows; ++r) {
      const uint64_t u = rng() % 100;
      int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(input_rows));
      if (u < 5) i = -1;
      else if (u < 8) i = input_rows + static_cast<int64_t>(rng() % 3);  // just past the end
      else if (u == 8) i = INT32_MAX;
      else if (u == 9) i = INT32_MIN;
      index.push_back(static_cast<int32_t>(i));
    }
  }
  // The gathered host matrix: row r is x's row index[r], a zero row for an index out of range.
  std::vector<float> g(static_cast<size_t>(c.rows * c.cols), 0.0f);
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t src = c.gather ? index[static_cast<size_t>(r)] : r;
    if (src < 0 || src >= input_rows) continue;
    std::copy_n(in.values.begin() + src * c.cols, c.cols, g.begin() + r * c.cols);
  }
  const std::vector<int64_t> counts = make_counts(c.rows - c.unowned, c.groups, c.split, seed * 7 + 1);
  std::vector<int64_t> ends;
  std::vector<int32_t> ends32;
  for (int64_t n : counts) {
    ends.push_back((ends.empty() ? 0 : ends.back()) + n);
    ends32.push_back(static_cast<int32_t>(ends.back()));
  }
  ASSERT_EQ(ends.back(), c.rows - c.unowned);

  DeviceInput x;
  ASSERT_TRUE(upload_input(in, DType::kF32, (c.misalign & kMisX) != 0, &x));
  DeviceBuffer ends_dev, index_dev;
  ASSERT_OK(ends_dev.upload(ends32.data(), ends32.size() * 4, "ends_dev"));
  if (c.gather) ASSERT_OK(index_dev.upload(index.data(), index.size() * 4, "index_dev"));
  bq::MxBf16Problem p;
  p.rows = c.rows, p.cols = c.cols, p.num_groups = c.groups;
  p.input_rows = c.gather ? input_rows : 0;
  bq::MxBf16Inputs inputs;
  inputs.x = static_cast<const float*>(x.ptr());
  inputs.group_ends = ends_dev.as<int32_t>();
  inputs.row_index = c.gather ? index_dev.as<int32_t>() : nullptr;
  int runs = 0;
  int64_t nans = 0;
  const int64_t bad = run_variants(p, inputs, c.misalign, grouped_name(c), [&](const Variant& v) {
    return grouped_reference(g, c.rows, c.cols, ends, v);
  }, &runs, &nans);
  std::string tokens;
  for (size_t e = 0; e < counts.size() && e < 12; ++e) tokens += (e ? "," : "") + std::to_string(counts[e]);
  std::printf("mx_bf16_test: %-48s tokens %s%s: %d runs, bad elements %lld\n", grouped_name(c).c_str(),
              tokens.c_str(), counts.size() > 12 ? ",..." : "", runs, static_cast<long long>(bad));
}

std::vector<GroupedCase> grouped_cases() {
  std::vector<GroupedCase> v;
  const Split splits[] = {Split::kUneven, Split::kOneExpert, Split::kEmptyEdges, Split::kOnes, Split::kAligned};
  const int64_t shapes[][2] = {{300, 64}, {517, 136}, {301, 257}, {250, 200}};
  int k = 0;
  for (int groups : {8, 40}) {
    for (Split s : splits) {
      for (bool gather : {false, true}) {
        const auto& shape = shapes[k % 4];
        const Data d = k % 5 == 4 ? Data::kNormal : k % 5 == 2 ? Data::kFinite : Data::kMixed;
        v.push_back({shape[0], shape[1], groups, s, gather, 0, d, k % 4 == 3 ? kMisAll : kAligned});
        ++k;
      }
    }
  }
  // The last group end below rows: the rows past it belong to no expert and keep their poison.
  v.push_back({300, 96, 8, Split::kUneven, false, 37});
  v.push_back({300, 96, 8, Split::kUneven, true, 37});
  v.push_back({517, 257, 40, Split::kEmptyEdges, true, 100, Data::kMixed, kMisAll});
  v.push_back({100, 64, 8, Split::kUneven, true, 100});  // every expert empty: nothing written
  v.push_back({33, 40, 8, Split::kOnes, false, 1});
  // Larger: many tokens per expert, one pointer off alignment at a time.
  v.push_back({1000, 1024, 8, Split::kUneven, true, 0, Data::kMixed, kAligned});
  v.push_back({700, 520, 40, Split::kAligned, true, 11, Data::kMixed, kMisX});
  v.push_back({700, 520, 40, Split::kUneven, false, 0, Data::kMixed, kMisRow});
  v.push_back({700, 520, 8, Split::kUneven, true, 0, Data::kFinite, kMisCol});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Experts, MxBf16Grouped, ::testing::ValuesIn(grouped_cases()),
                         [](const ::testing::TestParamInfo<GroupedCase>& i) {
                           return std::to_string(i.index) + "_" + grouped_name(i.param);
                         });

// ---- Empty problems ------------------------------------------------------------------------

// rows == 0 or cols == 0 (dense, batched, grouped): run() returns ok (x may be null) and writes
// nothing, not even around the outputs.
TEST(MxBf16Empty, RunsAndWritesNothing) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer ends_dev;
  const int32_t zeros[3] = {0, 0, 0};
  ASSERT_OK(ends_dev.upload(zeros, sizeof zeros, "ends_dev"));
  struct Shape {
    int64_t rows, cols, batches;
    int groups;
  };
  for (const Shape& s : {Shape{0, 64, 1, 0}, Shape{64, 0, 1, 0}, Shape{0, 0, 1, 0}, Shape{0, 64, 4, 0},
                         Shape{0, 64, 1, 3}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols) + " batches " + std::to_string(s.batches) +
                 " groups " + std::to_string(s.groups));
    bq::MxBf16Problem p;
    p.rows = s.rows, p.cols = s.cols, p.batches = s.batches, p.num_groups = s.groups;
    bq::MxBf16Inputs in;  // x null: the problem is empty
    if (s.groups) in.group_ends = ends_dev.as<int32_t>();
    GuardedOutput ro, co;
    ASSERT_TRUE(alloc_poisoned(&ro, 0, 0, blockscale_test::kDefaultPoison, kGuardBytes));
    ASSERT_TRUE(alloc_poisoned(&co, 0, 0, blockscale_test::kDefaultPoison, kGuardBytes));
    bq::MxBf16Outputs out;
    out.rowwise = reinterpret_cast<uint16_t*>(ro.ptr());
    out.columnwise = reinterpret_cast<uint16_t*>(co.ptr());
    const blockscale::Status ci = bq::can_implement(p, in, out);
    EXPECT_TRUE(ci.is_ok()) << ci.message();
    const blockscale::Status st = bq::run(p, in, out, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_CUDA(cudaDeviceSynchronize());
    std::string report;
    EXPECT_EQ(check_bf16(ro, {}, 1, "rowwise", &report) + check_bf16(co, {}, 1, "columnwise", &report), 0)
        << report;
  }
}

}  // namespace
