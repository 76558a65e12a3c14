// `blockscale quantize` then `blockscale dequantize`, through files, against the in-memory
// emulator: every stored byte must equal formats::quantize's, every dequantized value (bit for
// bit, NaN included) formats::dequantize's, in the input tensor's shape.
#include <gtest/gtest.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "formats/io/npy.h"
#include "formats/io/quantized_file.h"
#include "formats/io/safetensors.h"
#include "formats/quantize.h"
#include "tests/formats/quantize_test_data.h"
#include "tests/temp_dir.h"

namespace {

namespace f = blockscale::formats;
namespace io = blockscale::io;
using blockscale_test::TempDir;

struct CliCase {
  const char* label;
  const char* recipe;
  const char* direction;
  std::vector<std::string> flags;  // extra quantize flags
  bool rht_input = false;          // use the input whose block dimensions are multiples of 16
};
void PrintTo(const CliCase& c, std::ostream* os) { *os << c.label; }

// Input tensors: odd shapes, three dtypes, rank 1 and 3, specials; plus tensors the CLI skips.
struct Input {
  std::string name;
  f::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

Input make_input(const std::string& name, f::DType dtype, std::vector<int64_t> shape, uint64_t seed,
                 bool specials) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> x = blockscale_test::make_data(n, seed, blockscale_test::Dist::kStudentT, 3.0);
  if (specials && n > 40) {
    x[3] = NAN;
    x[7] = INFINITY;
    x[11] = -0.0f;
    x[33] = 1e-40f;  // subnormal
    x[34] = -3.0e38f;
  }
  Input in{name, dtype, shape, {}};
  const size_t esize = f::dtype_size(dtype);
  in.bytes.resize(static_cast<size_t>(n) * esize);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == f::DType::kF32) {
      std::memcpy(&in.bytes[i * 4], &x[i], 4);
    } else {  // BF16 / F16 by truncation is fine: the test only needs some valid values
      uint16_t h = dtype == f::DType::kBf16 ? f::float_to_bf16_bits_rn(x[i])
                                            : static_cast<uint16_t>(0x3C00 | (i * 37 % 0x3FF));
      std::memcpy(&in.bytes[i * 2], &h, 2);
    }
  }
  return in;
}

std::vector<Input> make_inputs(bool rht) {
  std::vector<Input> v;
  if (rht) {
    v.push_back(make_input("a", f::DType::kF32, {64, 48}, 1, true));
    v.push_back(make_input("b.weight", f::DType::kBf16, {2, 16, 32}, 2, false));
    return v;
  }
  v.push_back(make_input("a", f::DType::kF32, {130, 96}, 1, true));
  v.push_back(make_input("b.weight", f::DType::kBf16, {3, 5, 48}, 2, false));
  v.push_back(make_input("c", f::DType::kF16, {70}, 3, false));
  Input ids{"ids", f::DType::kI32, {2, 2}, std::vector<uint8_t>(16, 1)};
  v.push_back(ids);
  v.push_back(make_input("s", f::DType::kF32, {}, 4, false));
  return v;
}

int run_cli(const std::string& args) {
  const std::string cmd = std::string(BLOCKSCALE_CLI) + " " + args + " >/dev/null 2>&1";
  return std::system(cmd.c_str());
}

class CliRoundTrip : public ::testing::TestWithParam<CliCase> {
 protected:
  TempDir tmp_{"blockscale_cli_test"};
  const std::string dir_ = tmp_.path().string();
};

// The options the CLI should have used, rebuilt from the case.
f::QuantizeOptions expected_options(const CliCase& c, bool columnwise) {
  f::QuantizeOptions o;
  EXPECT_TRUE(f::parse_format(c.recipe, &o.recipe));
  for (size_t i = 0; i < c.flags.size(); ++i) {
    if (c.flags[i] == "--rounding") o.rounding = c.flags[i + 1] == "floor" ? f::ScaleRounding::kFloor : f::ScaleRounding::kCeil;
    if (c.flags[i] == "--sr-seed") {
      o.stochastic_rounding = true;
      o.sr_seed = std::stoull(c.flags[i + 1]);
    }
    if (c.flags[i] == "--2d") o.nvfp4_2d = true;
    if (c.flags[i] == "--pow2") o.pow2_scales = true;
    if (c.flags[i] == "--rht") o.hadamard = columnwise;
  }
  return o;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

TEST_P(CliRoundTrip, FilesEqualTheEmulator) {
  const CliCase& c = GetParam();
  const std::vector<Input> inputs = make_inputs(c.rht_input);
  std::vector<std::pair<std::string, io::TensorView>> views;
  for (const Input& in : inputs)
    views.push_back({in.name, io::TensorView{in.dtype, in.shape, in.bytes.data(), in.bytes.size()}});
  const std::string in_path = dir_ + "/in.safetensors", q_path = dir_ + "/q.safetensors",
                    dq_path = dir_ + "/dq.safetensors";
  ASSERT_TRUE(io::write_safetensors(in_path, views));
  std::string args = std::string("quantize --quiet --recipe ") + c.recipe + " --direction " + c.direction;
  for (const std::string& flag : c.flags) args += " " + flag;
  ASSERT_EQ(run_cli(args + " --in " + in_path + " --out " + q_path), 0) << args;
  ASSERT_EQ(run_cli("dequantize --quiet --in " + q_path + " --out " + dq_path), 0);

  io::SafetensorsFile qf, dqf;
  ASSERT_TRUE(io::SafetensorsFile::open(q_path, &qf));
  ASSERT_TRUE(io::SafetensorsFile::open(dq_path, &dqf));
  size_t entries = 0;
  for (const Input& in : inputs) {
    int64_t rows = 0, cols = 0;
    if (!f::dtype_is_float(in.dtype) || !io::matrix_view(in.shape, &rows, &cols)) {
      EXPECT_FALSE(qf.metadata().count(in.name + ".recipe")) << in.name << " should be skipped";
      continue;
    }
    std::vector<float> x;
    ASSERT_TRUE(io::to_float(views[&in - inputs.data()].second, &x));
    for (bool columnwise : {false, true}) {
      const std::string dir = c.direction;
      if ((columnwise && dir == "rowwise") || (!columnwise && dir == "columnwise")) continue;
      const std::string name = in.name + (columnwise && dir == "both" ? ".columnwise" : "");
      SCOPED_TRACE(name);
      ++entries;
      f::QuantizedMatrix want;
      ASSERT_TRUE(f::quantize(x.data(), rows, cols, cols, expected_options(c, columnwise),
                              columnwise ? f::Direction::kColumnwise : f::Direction::kRowwise, &want));
      io::QuantizedTensor got;
      const blockscale::Status s = io::read_quantized_tensor(qf, name, &got);
      ASSERT_TRUE(s) << s.message();
      EXPECT_EQ(got.shape, in.shape);
      EXPECT_EQ(got.q.rows, want.rows);
      EXPECT_EQ(got.q.cols, want.cols);
      EXPECT_EQ(got.q.block_rows, want.block_rows);
      EXPECT_TRUE(same_bits(got.q.data, want.data));
      EXPECT_TRUE(same_bits(got.q.scales, want.scales));
      EXPECT_TRUE(same_bits(got.q.scales_f32, want.scales_f32));
      EXPECT_EQ(f::float_bits(got.q.global_scale_dec), f::float_bits(want.global_scale_dec));

      // Dequantized, in the input's orientation and shape, bit for bit.
      std::vector<float> stored, want_values(x.size()), got_values;
      ASSERT_TRUE(f::dequantize(want, &stored));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t col = 0; col < cols; ++col)
          want_values[r * cols + col] = columnwise ? stored[col * rows + r] : stored[r * cols + col];
      io::TensorView dv;
      ASSERT_TRUE(dqf.tensor(name, &dv));
      EXPECT_EQ(dv.dtype, f::DType::kF32);
      EXPECT_EQ(dv.shape, in.shape);
      ASSERT_TRUE(io::to_float(dv, &got_values));
      EXPECT_TRUE(same_bits(got_values, want_values));
    }
  }
  EXPECT_EQ(io::quantized_tensor_names(qf).size(), entries);
  EXPECT_EQ(dqf.num_tensors(), entries);
}

const CliCase kCases[] = {
    {"mxfp8_rowwise", "mxfp8", "rowwise", {}},
    {"mxfp8_columnwise_floor", "mxfp8", "columnwise", {"--rounding", "floor"}},
    {"mxfp8_e5m2_both", "mxfp8_e5m2", "both", {}},
    {"mxfp6_e2m3_rowwise", "mxfp6_e2m3", "rowwise", {}},
    {"mxfp6_e3m2_columnwise", "mxfp6_e3m2", "columnwise", {"--rounding", "floor"}},
    {"mxfp4_both_floor", "mxfp4", "both", {"--rounding", "floor"}},
    {"nvfp4_rowwise", "nvfp4", "rowwise", {}},
    {"nvfp4_2d_both", "nvfp4", "both", {"--2d"}},
    {"nvfp4_sr_rht_both", "nvfp4", "both", {"--sr-seed", "12345", "--rht"}, true},
    {"fp8_block128_both", "fp8_block128", "both", {}},
    {"fp8_block128x128_pow2", "fp8_block128x128", "rowwise", {"--pow2"}},
    {"fp8_block128x128_columnwise", "fp8_block128x128", "columnwise", {}},
};
INSTANTIATE_TEST_SUITE_P(Recipes, CliRoundTrip, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.label); });

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::vector<uint8_t> b;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    int c;
    while ((c = std::fgetc(f)) != EOF) b.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
  }
  return b;
}

// `--device gpu` (quant/'s kernels) writes the very file `--device cpu` writes. Skips where the
// build or the machine has no GPU path (the CLI says which).
TEST_F(CliRoundTrip, GpuWritesTheCpuFile) {
  std::vector<Input> inputs = make_inputs(false);
  inputs.push_back(make_input("big", f::DType::kBf16, {1000, 4096}, 5, true));
  Input f64 = make_input("f64", f::DType::kF32, {33, 65}, 6, true);
  std::vector<uint8_t> wide(f64.bytes.size() * 2);
  for (size_t i = 0; i < f64.bytes.size() / 4; ++i) {
    float v;
    std::memcpy(&v, &f64.bytes[4 * i], 4);
    const double d = v;
    std::memcpy(&wide[8 * i], &d, 8);
  }
  inputs.push_back(Input{"f64", f::DType::kF64, {33, 65}, wide});
  std::vector<std::pair<std::string, io::TensorView>> views;
  for (const Input& in : inputs)
    views.push_back({in.name, io::TensorView{in.dtype, in.shape, in.bytes.data(), in.bytes.size()}});
  const std::string in_path = dir_ + "/in.safetensors";
  ASSERT_TRUE(io::write_safetensors(in_path, views));
  const std::string probe = std::string(BLOCKSCALE_CLI) + " quantize --quiet --recipe mxfp8 --device gpu --in " +
                            in_path + " --out " + dir_ + "/probe.safetensors 2>" + dir_ + "/probe.err >/dev/null";
  if (std::system(probe.c_str()) != 0) {
    const std::vector<uint8_t> err = file_bytes(dir_ + "/probe.err");
    const std::string msg(err.begin(), err.end());
    ASSERT_NE(msg.find("--device gpu: "), std::string::npos) << msg;
    GTEST_SKIP() << msg;
  }
  // A second file for the nvfp4 transform (its row count, the columnwise block dimension, must be
  // a multiple of 16 in every tensor).
  const std::string rht_path = dir_ + "/rht.safetensors";
  const Input w = make_input("w", f::DType::kBf16, {1008, 520}, 7, true);
  const Input g = make_input("g", f::DType::kF32, {64, 97}, 8, true);
  ASSERT_TRUE(io::write_safetensors(rht_path, {{w.name, io::TensorView{w.dtype, w.shape, w.bytes.data(), w.bytes.size()}},
                                               {g.name, io::TensorView{g.dtype, g.shape, g.bytes.data(), g.bytes.size()}}}));
  std::vector<std::string> variants;  // "--recipe ... options", each run for every direction it allows
  for (const char* recipe : {"mxfp8", "mxfp8_e5m2", "mxfp4"})
    for (const char* rounding : {"ceil", "floor"})
      variants.push_back(std::string("--recipe ") + recipe + " --rounding " + rounding);
  for (const char* v : {"--recipe nvfp4", "--recipe nvfp4 --2d", "--recipe nvfp4 --sr-seed 7", "--recipe fp8_block128",
                        "--recipe fp8_block128 --pow2", "--recipe fp8_block128x128", "--recipe fp8_block128x128 --pow2"})
    variants.push_back(v);
  int cases = 0;
  auto compare = [&](const std::string& args) {
    ASSERT_EQ(run_cli(args + " --out " + dir_ + "/cpu.safetensors --device cpu"), 0) << args;
    ASSERT_EQ(run_cli(args + " --out " + dir_ + "/gpu.safetensors --device gpu"), 0) << args;
    const std::vector<uint8_t> cpu = file_bytes(dir_ + "/cpu.safetensors");
    EXPECT_GT(cpu.size(), 100u * 1000) << args;  // the big tensors are in it
    EXPECT_TRUE(cpu == file_bytes(dir_ + "/gpu.safetensors")) << args;
    ++cases;
  };
  for (const std::string& v : variants)
    for (const char* direction : {"rowwise", "columnwise", "both"})
      compare("quantize --quiet " + v + " --direction " + direction + " --in " + in_path);
  for (const char* v : {"--rht --direction columnwise", "--rht --direction both", "--rht --sr-seed 11 --direction both"})
    compare(std::string("quantize --quiet --recipe nvfp4 ") + v + " --in " + rht_path);
  std::printf("cli_roundtrip_test: --device gpu wrote the --device cpu file byte for byte in %d cases\n", cases);
}

// A .npy in, one tensor "x", and a .npy out with --tensor.
TEST_F(CliRoundTrip, NpyInAndOut) {
  const std::vector<float> x = blockscale_test::make_data(33 * 70, 9, blockscale_test::Dist::kNormal, 1e-3);
  const io::TensorView v{f::DType::kF32, {33, 70}, reinterpret_cast<const uint8_t*>(x.data()), x.size() * 4};
  ASSERT_TRUE(io::write_npy(dir_ + "/x.npy", v));
  ASSERT_EQ(run_cli("quantize --quiet --recipe mxfp4 --direction both --in " + dir_ + "/x.npy --out " + dir_ + "/q.safetensors"), 0);
  ASSERT_EQ(run_cli("dequantize --quiet --in " + dir_ + "/q.safetensors --tensor x.columnwise --out " + dir_ + "/x.npy.out.npy"), 0);
  io::NpyArray got;
  ASSERT_TRUE(io::read_npy(dir_ + "/x.npy.out.npy", &got));
  EXPECT_EQ(got.shape, (std::vector<int64_t>{33, 70}));
  f::QuantizeOptions o;
  o.recipe = f::Format::kMxfp4;
  f::QuantizedMatrix q;
  ASSERT_TRUE(f::quantize(x.data(), 33, 70, 70, o, f::Direction::kColumnwise, &q));
  std::vector<float> stored;
  ASSERT_TRUE(f::dequantize(q, &stored));
  std::vector<float> got_values;
  ASSERT_TRUE(io::to_float(got.view(), &got_values));
  for (int64_t r = 0; r < 33; ++r)
    for (int64_t c = 0; c < 70; ++c)
      ASSERT_EQ(f::float_bits(got_values[r * 70 + c]), f::float_bits(stored[c * 33 + r])) << r << "," << c;
}

}  // namespace
