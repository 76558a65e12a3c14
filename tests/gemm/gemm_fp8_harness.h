// Shared by gemm_test's sources (gemm_test.cpp: random data against the derived bound, the
// cuBLASLt and automatic routes, extreme scales; gemm_exact_test.cpp: bit-exact cases and tile
// widths; gemm_checks_test.cpp: the checks, the dispatch rule, the tile order): the FP8 blockwise
// operands, the tiles under test, one GEMM run with D poisoned (0xFF bytes: NaN in bf16 and fp32),
// and the shape cases every parametrised test takes. gemm_test.cpp's header derives the bound.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "formats/quantize.h"
#include "formats/recipe.h"
#include "gemm/device_operand.h"
#include "gemm/gemm.h"
#include "gemm/launchers.h"  // the tile-width selector
#include "tests/gemm/gemm_test_util.h"
#include "tests/gpu_test.h"  // defines: ASSERT_CUDA, ASSERT_OK

namespace blockscale_test {
namespace fp8_blockwise {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bf::Format;
using bf::DType;
using bg::detail::Sm90Fp8Tile;
using blockscale::runtime::DeviceBuffer;

// ---- Operands ----------------------------------------------------------------------------------

// A quantized operand as formats::quantize gave it; run_gemm uploads it (gemm::DeviceOperand).
struct HostOperand {
  bf::QuantizedMatrix q;
};

// rows x k random values quantized with formats::quantize: normal samples times `magnitude`
// times a power of two in [2^-4, 2^4] drawn per 128-element block (so scales differ per block).
inline void random_operand(int64_t rows, int64_t k, Format recipe, double magnitude, uint64_t seed,
                           HostOperand* op) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> exponent(-4, 4);
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < k / 128; ++kb) {
      const double block = magnitude * std::ldexp(1.0, exponent(rng));
      for (int64_t i = 0; i < 128; ++i) x[static_cast<size_t>(r * k + kb * 128 + i)] = static_cast<float>(normal(rng) * block);
    }
  bf::QuantizeOptions options;
  options.recipe = recipe;
  const blockscale::Status s = bf::quantize(x.data(), rows, k, k, options, bf::Direction::kRowwise, &op->q);
  ASSERT_TRUE(s.is_ok()) << s.message();
}

// ---- Running the GEMM --------------------------------------------------------------------------

struct GemmRun {
  std::vector<uint8_t> d;  // m x ldd elements of d_type, as the GPU left them
  blockscale::Status status = blockscale::Status::ok();
};

inline std::string tile_name(Sm90Fp8Tile t) {
  return t == Sm90Fp8Tile::kN192 ? "tile 128 x 192" : t == Sm90Fp8Tile::kM256 ? "tile 256 x 128" : "tile 128 x 128";
}

// The tiles every GPU case runs: all three, or the one GEMM_TEST_TILE names (128, 192 or 256).
inline std::vector<Sm90Fp8Tile> tiles_under_test() {
  const char* env = std::getenv("GEMM_TEST_TILE");
  const std::string only = env ? env : "";
  if (only == "128") return {Sm90Fp8Tile::kN128};
  if (only == "192") return {Sm90Fp8Tile::kN192};
  if (only == "256") return {Sm90Fp8Tile::kM256};
  return {Sm90Fp8Tile::kN128, Sm90Fp8Tile::kN192, Sm90Fp8Tile::kM256};
}

// Selects a tile for one scope; the automatic choice comes back after it.
struct TileScope {
  explicit TileScope(Sm90Fp8Tile t) { bg::detail::set_sm90_fp8_tile(t); }
  ~TileScope() { bg::detail::set_sm90_fp8_tile(Sm90Fp8Tile::kAuto); }
};

// How a case runs: gemm::run on the wgmma kernel (the route forced to it, at the given tile
// width), the cuBLASLt launcher called directly, or gemm::run's automatic route.
enum class Via { kKernel, kCublasLtLaunch, kRunAuto };

// Uploads the operands (and C: m x ldc fp32 / bf16 values when beta != 0), poisons D, runs.
// in_place: C is D (D is initialised with C instead of the poison).
inline void run_gemm(const bg::GemmProblem& p, const HostOperand& a, const HostOperand& b,
                     const std::vector<double>* c, bool in_place, Sm90Fp8Tile tile, GemmRun* out,
                     Via via = Via::kKernel) {
  bg::DeviceOperand a_dev, b_dev;
  ASSERT_OK(a_dev.upload(a.q));
  ASSERT_OK(b_dev.upload(b.q));
  DeviceBuffer c_buf, d_buf;
  const int64_t d_bytes = p.m * p.ldd * static_cast<int64_t>(blockscale::formats::dtype_size(p.d_type));
  ASSERT_OK(d_buf.alloc(static_cast<size_t>(d_bytes), "d_buf"));
  ASSERT_CUDA(cudaMemset(d_buf.data(), 0xFF, static_cast<size_t>(d_bytes)));
  if (c != nullptr) {
    const std::vector<uint8_t> c_bytes = encode(*c, p.c_type);
    if (in_place) {
      ASSERT_CUDA(cudaMemcpy(d_buf.data(), c_bytes.data(), c_bytes.size(), cudaMemcpyHostToDevice));
    } else {
      ASSERT_OK(c_buf.upload(c_bytes.data(), c_bytes.size(), "c_buf"));
    }
  }
  bg::GemmArguments args;
  args.a_data = a_dev.data();
  args.a_scales = a_dev.scales();
  args.b_data = b_dev.data();
  args.b_scales = b_dev.scales();
  args.c = c == nullptr ? nullptr : in_place ? static_cast<const void*>(d_buf.data()) : c_buf.data();
  args.d = d_buf.data();
  DeviceBuffer workspace;
  ASSERT_OK(workspace.alloc(bg::workspace_size(p), "workspace"));
  if (via == Via::kCublasLtLaunch) {
    out->status = bg::detail::launch_cublaslt_block_scaled(p, args, workspace.data(), workspace.size(), nullptr);
  } else {
    const TileScope scope(tile);
    const RouteScope route(via == Via::kKernel ? bg::GemmRoute::kKernel : bg::GemmRoute::kAuto);
    out->status = bg::run(p, args, workspace.data(), workspace.size(), nullptr);
  }
  ASSERT_TRUE(out->status.is_ok()) << out->status.message();
  ASSERT_CUDA(cudaDeviceSynchronize());
  out->d.resize(static_cast<size_t>(d_bytes));
  ASSERT_CUDA(cudaMemcpy(out->d.data(), d_buf.data(), out->d.size(), cudaMemcpyDeviceToHost));
}

// Every element in columns [n, ldd) must still hold the poison (0xFF bytes).
inline int64_t padding_written(const bg::GemmProblem& p, const GemmRun& r) {
  const int64_t e = static_cast<int64_t>(blockscale::formats::dtype_size(p.d_type));
  int64_t bad = 0;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = p.n * e; j < p.ldd * e; ++j) bad += r.d[static_cast<size_t>(i * p.ldd * e + j)] != 0xFF;
  return bad;
}

inline bg::GemmProblem problem(int64_t m, int64_t n, int64_t k, Format b_recipe, DType d_type, int64_t ldd,
                               float alpha, float beta, DType c_type = DType::kF32) {
  bg::GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a_recipe = Format::kFp8Block1x128;
  p.b_recipe = b_recipe;
  p.d_type = d_type, p.c_type = c_type;
  p.ldd = ldd, p.ldc = ldd;
  p.alpha = alpha, p.beta = beta;
  return p;
}

// A parametrised case: m x n x k with B of b_recipe (A is always 1x128); shape_name names it in
// test names, seed_of derives its operands' seeds.
struct ShapeCase {
  int64_t m, n, k;
  Format b_recipe;
};
inline std::ostream& operator<<(std::ostream& os, const ShapeCase& c) {
  return os << c.m << "x" << c.n << "x" << c.k << "_" << bf::format_name(c.b_recipe);
}
inline std::string shape_name(const ::testing::TestParamInfo<ShapeCase>& info) {
  const ShapeCase& c = info.param;
  return "m" + std::to_string(c.m) + "_n" + std::to_string(c.n) + "_k" + std::to_string(c.k) +
         (c.b_recipe == Format::kFp8Block1x128 ? "_wgrad1x128" : "_w128x128");
}
inline uint64_t seed_of(const ShapeCase& c, uint64_t salt) {
  return static_cast<uint64_t>(c.m) * 1000003u + static_cast<uint64_t>(c.n) * 10007u + static_cast<uint64_t>(c.k) * 101u +
         (c.b_recipe == Format::kFp8Block1x128 ? 7u : 0u) + salt * 0x9E3779B97F4A7C15ull;
}

}  // namespace fp8_blockwise
}  // namespace blockscale_test
