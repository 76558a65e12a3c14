// Throughput of blockscale's FP8 blockwise GEMM (gemm/gemm.h) against its peers, timed in the same
// process on the same inputs. gemm/'s sm90 kernel (sm90_fp8_gemm) runs at each tile asked for
// (128 x 128, 128 x 192 and 256 x 128 by default, gemm/launchers.h) and at the tile run() picks (auto);
// every output must be the same bits (same operations per element). Peers:
//   - cuBLASLt's own blockwise FP8 GEMM (scale modes VEC128_32F for the 1x128 operand and
//     BLK128x128_32F for the 128x128 one: quant/'s scale tensors feed it unchanged);
//   - cuBLAS BF16 (cublasGemmEx, fp32 compute) on bf16 operands of the same shape.
// D is bf16 for all three (alpha 1, beta 0). Times: median of --iters launches (CUDA events per
// launch, after warm-up). TFLOP/s = 2 M N K / time. The project's D is also compared with
// cuBLASLt's on identical inputs: max |ours - lt| / max |lt| and the relative Frobenius
// difference (both bf16 outputs of fp32 sums: expect ~1e-3, bf16's half ulp, not more).
//
// Inputs (--data): `uniform`: E4M3 codes with every bit pattern but NaN equally likely and
// log-uniform scales; `normal`: standard-normal bf16 values quantized by quant/ (1x128 for A, B by
// its recipe), the data of training and of DeepGEMM's harness. The tensor cores draw more power on
// uniform codes, so at the power limit the two give different clocks.
// Timing (--timing, bench_common.cuh): `sustained` (launches back to back) or `isolated` (each
// launch after an idle moment, as DeepGEMM's harness times).
//
// Usage: gemm_bench [--iters N] [--only I,J,...] [--tiles 128,192,256] [--data uniform|normal]
//                   [--timing sustained|isolated] [--list]. One line per case, then a markdown table
// (last). DeepGEMM is timed by bench/deepgemm_peer.py on the same GPU; its dense shape set (M 4096)
// is among the cases here.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_common.cuh"  // defines: CHECK_CUDA, cublas_bf16_gemm, median_ms, the fills
#include "bench/cublaslt_blockwise.cuh"  // defines: LtMatmul
#include "formats/recipe.h"
#include "formats/scale_layout.h"
#include "gemm/gemm.h"
#include "gemm/launchers.h"  // the sm90 tile-width selector
#include "quant/quantize.h"

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
namespace bq = blockscale::quant;
using bf::Format;
using bench::DeviceBuffer;
using bench::device_array;
using bg::detail::Sm90Fp8Tile;

struct Case {
  int64_t m, n, k;
  Format b_recipe;  // kFp8Block128x128 (fprop / dgrad) or kFp8Block1x128 (wgrad)
};

std::string label(const Case& c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%lldx%lldx%lld %s", static_cast<long long>(c.m), static_cast<long long>(c.n),
                static_cast<long long>(c.k), c.b_recipe == Format::kFp8Block1x128 ? "1x128.1x128" : "1x128.128x128");
  return buf;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases = {{8192, 8192, 8192, Format::kFp8Block128x128},
                             {16384, 4096, 4096, Format::kFp8Block128x128},
                             {16384, 14336, 4096, Format::kFp8Block128x128},
                             {16384, 4096, 14336, Format::kFp8Block128x128}};
  for (int64_t m : {128, 512, 2048}) {
    cases.push_back({m, 4096, 4096, Format::kFp8Block128x128});
    cases.push_back({m, 14336, 4096, Format::kFp8Block128x128});
  }
  cases.push_back({8192, 8192, 8192, Format::kFp8Block1x128});  // wgrad recipe
  cases.push_back({4096, 4096, 16384, Format::kFp8Block1x128});
  // The attention projections of the width-2048 training step (docs/performance.md, 4096 tokens):
  // wqkv and wo fprop, wqkv dgrad, wqkv wgrad (dW = dY^T X over the tokens).
  cases.push_back({4096, 6144, 2048, Format::kFp8Block128x128});
  cases.push_back({4096, 2048, 2048, Format::kFp8Block128x128});
  cases.push_back({4096, 2048, 6144, Format::kFp8Block128x128});
  cases.push_back({6144, 2048, 4096, Format::kFp8Block1x128});
  // DeepGEMM's own dense set (M 4096; N x K), for a one-to-one comparison with its benchmark.
  for (const auto& nk : {std::pair<int64_t, int64_t>{2112, 7168}, {24576, 1536}, {7168, 16384}, {4096, 7168}, {7168, 2048}})
    cases.push_back({4096, nk.first, nk.second, Format::kFp8Block128x128});
  return cases;
}

std::vector<__nv_bfloat16> download(const __nv_bfloat16* dev, int64_t n) {
  std::vector<__nv_bfloat16> host(static_cast<size_t>(n));
  CHECK_CUDA(cudaMemcpy(host.data(), dev, static_cast<size_t>(n) * 2, cudaMemcpyDeviceToHost));
  return host;
}

// max |x - y| / max |y| and ||x - y|| / ||y|| over two bf16 matrices.
void compare(const std::vector<__nv_bfloat16>& x, const std::vector<__nv_bfloat16>& y, double* max_rel,
             double* frob_rel) {
  double max_diff = 0, max_y = 0, diff2 = 0, y2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);
    const double d = std::isfinite(a) ? std::fabs(a - b) : INFINITY;
    max_diff = std::max(max_diff, d), max_y = std::max(max_y, std::fabs(b));
    diff2 += d * d, y2 += b * b;
  }
  *max_rel = max_diff / max_y;
  *frob_rel = std::sqrt(diff2 / y2);
}

bool g_normal_data = false;  // --data normal

// rows x cols codes and their scales (recipe's layout) from standard-normal bf16 values, quantized
// by quant/ (rowwise).
void quantize_normal(int64_t rows, int64_t cols, Format recipe, uint64_t seed, uint8_t* codes, float* scales,
                     int64_t scale_floats) {
  const DeviceBuffer x = device_array<__nv_bfloat16>(rows * cols, "normal values");
  bench::fill_bf16_normal<<<1024, 256>>>(x.as<__nv_bfloat16>(), rows * cols, seed);
  bq::QuantizeProblem q;
  q.recipe = recipe, q.input_type = bf::DType::kBf16, q.rows = rows, q.cols = cols, q.ld = cols;
  q.directions = bf::Direction::kRowwise;
  if (bq::rowwise_scale_bytes(q) > scale_floats * 4) bench::check(blockscale::Status::error("scale buffer too small"));
  bq::QuantizeInputs in;
  in.x = x.data();
  bq::QuantizeOutputs out;
  out.rowwise_data = codes, out.rowwise_scales = scales;
  bench::check(bq::run(q, in, out, nullptr, 0, nullptr), "quantize (normal data)");
  CHECK_CUDA(cudaDeviceSynchronize());
}

int tile_index(Sm90Fp8Tile t) { return t == Sm90Fp8Tile::kN192 ? 1 : t == Sm90Fp8Tile::kM256 ? 2 : 0; }
const char* tile_name(Sm90Fp8Tile t) {
  return t == Sm90Fp8Tile::kN192 ? "tile 128x192" : t == Sm90Fp8Tile::kM256 ? "tile 256x128" : "tile 128x128";
}

// Per tile (tile_index): TFLOP/s (0: not run or failed); run()'s own tile; the difference to Lt.
struct Row {
  std::string label;
  double ours[3] = {0, 0, 0}, automatic = 0, max_rel = NAN, frob_rel = NAN;
  double lt = 0, bf16 = 0;
  const char* same_bits = "-";  // "yes" / "NO": every variant that ran gave the same bits
};

Row run_case(const Case& c, int iters, const std::vector<Sm90Fp8Tile>& tiles, cublasHandle_t blas) {
  Row row;
  row.label = label(c);
  const int64_t kb = c.k / 128;
  const int64_t a_scale_floats = bf::vec128_scale_floats(c.m, kb);
  const int64_t b_scale_floats = c.b_recipe == Format::kFp8Block1x128 ? bf::vec128_scale_floats(c.n, kb)
                                                                      : bf::blk128_scale_floats((c.n + 127) / 128, kb);
  DeviceBuffer a_buf = device_array<uint8_t>(c.m * c.k, "A"), b_buf = device_array<uint8_t>(c.n * c.k, "B");
  const DeviceBuffer sa_buf = device_array<float>(a_scale_floats, "A scales");
  const DeviceBuffer sb_buf = device_array<float>(b_scale_floats, "B scales");
  const DeviceBuffer d_ours_buf = device_array<__nv_bfloat16>(c.m * c.n, "D");
  const DeviceBuffer d_lt_buf = device_array<__nv_bfloat16>(c.m * c.n, "D (cuBLASLt)");
  uint8_t *a = a_buf.data(), *b = b_buf.data();
  float *sa = sa_buf.as<float>(), *sb = sb_buf.as<float>();
  __nv_bfloat16 *d_ours = d_ours_buf.as<__nv_bfloat16>(), *d_lt = d_lt_buf.as<__nv_bfloat16>();
  std::vector<__nv_bfloat16> first_host;  // the first variant's D; every other must equal it
  if (g_normal_data) {
    quantize_normal(c.m, c.k, Format::kFp8Block1x128, 1, a, sa, a_scale_floats);
    quantize_normal(c.n, c.k, c.b_recipe, 2, b, sb, b_scale_floats);
  } else {
    bench::fill_e4m3<<<1024, 256>>>(a, c.m * c.k, 1);
    bench::fill_e4m3<<<1024, 256>>>(b, c.n * c.k, 2);
    bench::fill_scales<<<256, 256>>>(sa, a_scale_floats, 3);
    bench::fill_scales<<<256, 256>>>(sb, b_scale_floats, 4);
  }
  CHECK_CUDA(cudaGetLastError());
  const double flop = 2.0 * c.m * c.n * c.k;

  bg::GemmProblem p;
  p.m = c.m, p.n = c.n, p.k = c.k;
  p.a_recipe = Format::kFp8Block1x128, p.b_recipe = c.b_recipe;
  p.d_type = bf::DType::kBf16, p.ldd = c.n;
  bg::GemmArguments args;
  args.a_data = a, args.b_data = b, args.a_scales = sa, args.b_scales = sb, args.d = d_ours;
  // Runs one variant, checks its bits against the first and returns its TFLOP/s (0: failed).
  const auto time_variant = [&](Sm90Fp8Tile tile, const char* name) {
    bg::detail::set_sm90_fp8_tile(tile);
    CHECK_CUDA(cudaMemset(d_ours, 0xFF, static_cast<size_t>(c.m * c.n) * 2));  // NaN: unwritten shows
    double tflops = 0;
    const blockscale::Status s = bg::run(p, args, nullptr, 0, nullptr);
    if (!s.is_ok()) {
      std::printf("case %s: blockscale gemm (%s): %s\n", row.label.c_str(), name, s.message().c_str());
    } else {
      CHECK_CUDA(cudaDeviceSynchronize());
      const std::vector<__nv_bfloat16> host = download(d_ours, c.m * c.n);
      if (first_host.empty()) {
        first_host = host;
        row.same_bits = "yes";
      } else if (std::memcmp(host.data(), first_host.data(), host.size() * 2) != 0) {
        std::printf("case %s: %s differs from the first variant's bits\n", row.label.c_str(), name);
        row.same_bits = "NO";
      }
      tflops = flop / (bench::median_ms([&] { (void)bg::run(p, args, nullptr, 0, nullptr); }, iters) * 1e9);
    }
    bg::detail::set_sm90_fp8_tile(Sm90Fp8Tile::kAuto);
    return tflops;
  };
  for (const Sm90Fp8Tile tile : tiles) row.ours[tile_index(tile)] = time_variant(tile, tile_name(tile));
  row.automatic = time_variant(Sm90Fp8Tile::kAuto, "auto");

  bench::LtMatmul lt;
  std::string why;
  if (!lt.setup_fp8(c.m, c.n, c.k, c.b_recipe, sa, sb, CUDA_R_16BF, 0.0f, &why)) {
    std::printf("case %s: cuBLASLt blockwise: %s\n", row.label.c_str(), why.c_str());
  } else if (lt.run(a, b, d_lt) != CUBLAS_STATUS_SUCCESS) {
    std::printf("case %s: cuBLASLt blockwise: cublasLtMatmul failed\n", row.label.c_str());
  } else {
    CHECK_CUDA(cudaDeviceSynchronize());
    row.lt = flop / (bench::median_ms([&] { lt.run(a, b, d_lt); }, iters) * 1e9);
    const std::vector<__nv_bfloat16> lt_host = download(d_lt, c.m * c.n);
    if (!first_host.empty()) compare(first_host, lt_host, &row.max_rel, &row.frob_rel);
  }
  a_buf = DeviceBuffer(), b_buf = DeviceBuffer();  // room for the bf16 operands

  const DeviceBuffer a16_buf = device_array<__nv_bfloat16>(c.m * c.k, "A (bf16)");
  const DeviceBuffer b16_buf = device_array<__nv_bfloat16>(c.n * c.k, "B (bf16)");
  __nv_bfloat16 *a16 = a16_buf.as<__nv_bfloat16>(), *b16 = b16_buf.as<__nv_bfloat16>();
  if (g_normal_data) {
    bench::fill_bf16_normal<<<1024, 256>>>(a16, c.m * c.k, 5);
    bench::fill_bf16_normal<<<1024, 256>>>(b16, c.n * c.k, 6);
  } else {
    bench::fill_bf16<<<1024, 256>>>(a16, c.m * c.k, 5);
    bench::fill_bf16<<<1024, 256>>>(b16, c.n * c.k, 6);
  }
  auto bf16_gemm = [&] { return bench::cublas_bf16_gemm(blas, c.m, c.n, c.k, a16, b16, d_lt); };
  if (bf16_gemm() != CUBLAS_STATUS_SUCCESS) {
    std::printf("case %s: cuBLAS BF16 failed\n", row.label.c_str());
  } else {
    row.bf16 = flop / (bench::median_ms([&] { (void)bf16_gemm(); }, iters) * 1e9);
  }
  const auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
  std::printf("case %-28s ours-128 %7.1f ours-192 %7.1f ours-256 %7.1f auto %7.1f TFLOP/s  cublasLt-block %7.1f"
              "  cublas-bf16 %7.1f  auto/lt %.3f  vs-lt max-rel %.2e frob-rel %.2e  same bits %s\n",
              row.label.c_str(), row.ours[0], row.ours[1], row.ours[2], row.automatic, row.lt, row.bf16,
              ratio(row.automatic, row.lt), row.max_rel, row.frob_rel, row.same_bits);
  std::fflush(stdout);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  bg::set_gemm_route(bg::GemmRoute::kKernel);  // the columns time gemm/'s wgmma kernel at each tile width
  int iters = 20;
  std::vector<int> only;
  std::vector<Sm90Fp8Tile> tiles;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(3, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) only.push_back(std::atoi(t));
    } else if (!std::strcmp(argv[i], "--tiles") && i + 1 < argc) {
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) {
        if (!std::strcmp(t, "128") || !std::strcmp(t, "192") || !std::strcmp(t, "256")) {
          tiles.push_back(!std::strcmp(t, "192")   ? Sm90Fp8Tile::kN192
                          : !std::strcmp(t, "256") ? Sm90Fp8Tile::kM256
                                                   : Sm90Fp8Tile::kN128);
        } else {
          std::fprintf(stderr, "--tiles: 128, 192 and / or 256 (256 x 128), got %s\n", t);
          return 2;
        }
      }
    } else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "uniform" && d != "normal") {
        std::fprintf(stderr, "--data: uniform or normal, got %s\n", d.c_str());
        return 2;
      }
      g_normal_data = d == "normal";
    } else if (!std::strcmp(argv[i], "--timing") && i + 1 < argc) {
      if (!bench::set_timing(argv[++i])) return 2;
    } else if (!std::strcmp(argv[i], "--list")) {
      list = true;
    } else {
      std::fprintf(stderr,
                   "usage: gemm_bench [--iters N] [--only I,J,...] [--tiles 128,192,256] [--data uniform|normal]"
                   " [--timing sustained|isolated] [--list]\n");
      return 2;
    }
  }
  if (tiles.empty()) tiles = {Sm90Fp8Tile::kN128, Sm90Fp8Tile::kN192, Sm90Fp8Tile::kM256};
  const std::vector<Case> cases = all_cases();
  if (list) {
    for (size_t i = 0; i < cases.size(); ++i) std::printf("%zu %s\n", i, label(cases[i]).c_str());
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), cuBLAS %d, iters %d, data %s, timing %s\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, CUBLAS_VERSION, iters, g_normal_data ? "normal" : "uniform",
              bench::timing_name());
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  std::vector<Row> rows;
  for (size_t i = 0; i < cases.size(); ++i)
    if (only.empty() || std::find(only.begin(), only.end(), static_cast<int>(i)) != only.end())
      rows.push_back(run_case(cases[i], iters, tiles, blas));
  cublasDestroy(blas);

  // TFLOP/s 0.0 and ratio 0.000: that width was not run or failed (its line above says why).
  const auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
  std::printf("\n| M x N x K, recipe (A.B) | blockscale 128x128 TFLOP/s | blockscale 128x192 | blockscale 256x128 |"
              " blockscale auto |"
              " cuBLASLt blockwise | cuBLAS BF16 | auto / Lt | auto / BF16 | max rel diff vs Lt | same bits |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.2e | %s |\n", r.label.c_str(),
                r.ours[0], r.ours[1], r.ours[2], r.automatic, r.lt, r.bf16, ratio(r.automatic, r.lt), ratio(r.automatic, r.bf16), r.max_rel,
                r.same_bits);
  return 0;
}
