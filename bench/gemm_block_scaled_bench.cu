// Throughput of blockscale's MX / NVFP4 GEMM (gemm/gemm.h with a block-scaled recipe pair; on Hopper
// the sm90a exact kernel) against its peers, timed in the same process on the same GPU. Operands
// are random codes and scales written on the device (E4M3 never NaN, E2M1 any, E8M0 scales in
// 2^[-4, 4], UE4M3 scales in [0.5, 8], NVFP4 S_dec = 1/2688), in quant/'s layouts. Peers:
//   - cuBLAS BF16 (cublasGemmEx, fp32 compute, bench_common.cuh's helper as gemm_bench uses it) on
//     bf16 operands of the same shape: the dequantized copies of our operands, i.e. the values our
//     kernel feeds its own bf16 tensor cores;
//   - dequantize + cuBLAS BF16, timed end to end: this file's dequantize kernels turn both operands
//     (codes x block scale [x S_dec for NVFP4], scales read in the swizzled layout) into K-major
//     bf16, then the same cuBLAS BF16 GEMM. What a user without a block-scaled GEMM would build for
//     operands quantized afresh each step (a cached bf16 weight would save B's dequantize).
// D is bf16 for all (alpha 1, beta 0). Times: median of --iters launches (CUDA events per launch,
// after warm-up). TFLOP/s = 2 M N K / time for all three. The small-M cases are reported, not
// claimed: they are latency bound, and with one event pair per launch their times can include host
// launch overheads (gemm::run's checks; three launches for the dequantize peer). Cross-check: our D
// against the dequantize + cuBLAS D (same codes): max |ours - peer| / max |peer| and the relative
// Frobenius difference. Both are fp32 sums rounded to bf16 (one bf16 ulp apart at most: max-rel
// up to 2^-7); the peer's NVFP4 inputs also round x * S_dec to bf16 (Frobenius ~3e-3, against
// ~5e-5 for MX, whose dequantized values are exact). Above 1e-2 the line says MISMATCH (this
// also checks the dequantize kernels).
//
// Usage: gemm_block_scaled_bench [--iters N] [--only I,J,...] [--recipes mxfp8.mxfp8,nvfp4.nvfp4,...]
// [--list]. Case indices are the same whatever --recipes selects. One line per case, then a
// markdown table (last).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"            // defines: CHECK_CUDA, cublas_bf16_gemm, median_ms
#include "bench/block_scaled_operands.cuh"  // defines: Operand, DeviceBuffer, dequantize, compare
#include "formats/recipe.h"                  // defines: Format, format_name
#include "gemm/gemm.h"

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bf::Format;
using bench::compare;
using bench::dequantize;
using bench::DeviceBuffer;
using bench::device_array;
using bench::Operand;

constexpr double kMismatch = 1e-2;

// ---- Cases ---------------------------------------------------------------------------------------

struct RecipePair {
  Format a, b;
};

std::string pair_name(const RecipePair& r) { return std::string(bf::format_name(r.a)) + "." + bf::format_name(r.b); }

std::vector<RecipePair> all_pairs() {
  return {{Format::kMxfp8E4M3, Format::kMxfp8E4M3},
          {Format::kNvfp4, Format::kNvfp4},
          {Format::kMxfp8E4M3, Format::kNvfp4},
          {Format::kMxfp8E4M3, Format::kMxfp4}};
}

struct Case {
  int index;
  const char* kind;  // "square", "train", "small M" (report only)
  int64_t m, n, k;
  RecipePair recipes;
};

std::string label(const Case& c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%lldx%lldx%lld %s", static_cast<long long>(c.m), static_cast<long long>(c.n),
                static_cast<long long>(c.k), pair_name(c.recipes).c_str());
  return buf;
}

// Shape-major: each shape's recipe pairs are adjacent, so the lines compare recipes at a shape.
std::vector<Case> all_cases() {
  struct Shape {
    const char* kind;
    int64_t m, n, k;
  };
  const Shape shapes[] = {{"square", 8192, 8192, 8192},   {"train", 16384, 4096, 4096},
                          {"train", 16384, 14336, 4096},  {"train", 16384, 4096, 14336},
                          {"small M", 128, 4096, 4096},   {"small M", 512, 4096, 4096},
                          {"small M", 2048, 4096, 4096}};
  std::vector<Case> cases;
  for (const Shape& s : shapes)
    for (const RecipePair& r : all_pairs())
      cases.push_back({static_cast<int>(cases.size()), s.kind, s.m, s.n, s.k, r});
  return cases;
}

// TFLOP/s of each (0: failed, the case's line says why), the cross-check, and the dequantize alone.
struct Row {
  Case c;
  double ours = 0, bf16 = 0, peer = 0;
  double max_rel = NAN, frob_rel = NAN;
  double dequant_ms = 0, dequant_gbs = 0;
};

double ratio(double x, double y) { return y > 0 ? x / y : 0.0; }

// Runs and times one case; false (after saying why) when blockscale's GEMM refuses it.
bool run_case(const Case& c, int iters, cublasHandle_t blas, Row* row) {
  row->c = c;
  const std::string name = label(c);
  const double flop = 2.0 * c.m * c.n * c.k;
  const Operand a(c.recipes.a, c.m, c.k, static_cast<uint64_t>(2 * c.index + 1) << 44);
  const Operand b(c.recipes.b, c.n, c.k, static_cast<uint64_t>(2 * c.index + 2) << 44);
  const DeviceBuffer d_ours_buf = device_array<__nv_bfloat16>(c.m * c.n, "D");
  const DeviceBuffer d_peer_buf = device_array<__nv_bfloat16>(c.m * c.n, "D (peer)");
  __nv_bfloat16 *d_ours = d_ours_buf.as<__nv_bfloat16>(), *d_peer = d_peer_buf.as<__nv_bfloat16>();

  // 1. Ours.
  bg::GemmProblem p;
  p.m = c.m, p.n = c.n, p.k = c.k;
  p.a_recipe = c.recipes.a, p.b_recipe = c.recipes.b;
  p.d_type = bf::DType::kBf16, p.ldd = c.n;
  p.alpha = 1.0f, p.beta = 0.0f;
  bg::GemmArguments args;
  args.a_data = a.data.data(), args.a_scales = a.scales.data(), args.a_scale_dec = a.scale_dec_or_null();
  args.b_data = b.data.data(), args.b_scales = b.scales.data(), args.b_scale_dec = b.scale_dec_or_null();
  args.d = d_ours;
  const size_t ws_bytes = bg::workspace_size(p);
  const DeviceBuffer ws = device_array<uint8_t>(static_cast<int64_t>(ws_bytes), "workspace");
  CHECK_CUDA(cudaMemset(d_ours, 0xFF, d_ours_buf.size()));  // NaN: unwritten shows
  const blockscale::Status s = bg::run(p, args, ws.data(), ws_bytes, nullptr);
  if (!s.is_ok()) {
    std::printf("case %d %s: blockscale gemm: %s (case skipped)\n", c.index, name.c_str(), s.message().c_str());
    std::fflush(stdout);
    return false;
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  row->ours = flop / (bench::median_ms([&] { (void)bg::run(p, args, ws.data(), ws_bytes, nullptr); }, iters) * 1e9);

  // 3. Dequantize + cuBLAS BF16, first once for the cross-check.
  const DeviceBuffer a16_buf = device_array<__nv_bfloat16>(c.m * c.k, "A (bf16)");
  const DeviceBuffer b16_buf = device_array<__nv_bfloat16>(c.n * c.k, "B (bf16)");
  __nv_bfloat16 *a16 = a16_buf.as<__nv_bfloat16>(), *b16 = b16_buf.as<__nv_bfloat16>();
  const auto dequant_both = [&] {
    dequantize(a, a16);
    dequantize(b, b16);
  };
  const auto peer = [&] {
    dequant_both();
    return bench::cublas_bf16_gemm(blas, c.m, c.n, c.k, a16, b16, d_peer);
  };
  CHECK_CUDA(cudaMemset(d_peer, 0xFF, d_peer_buf.size()));
  const cublasStatus_t peer_status = peer();
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  if (peer_status != CUBLAS_STATUS_SUCCESS) {
    std::printf("case %d %s: cuBLAS BF16 failed: %s\n", c.index, name.c_str(), cublasGetStatusString(peer_status));
  } else {
    compare(d_ours, d_peer, c.m * c.n, &row->max_rel, &row->frob_rel);
    row->peer = flop / (bench::median_ms([&] { (void)peer(); }, iters) * 1e9);
    // 2. cuBLAS BF16 alone, on the dequantized operands.
    row->bf16 = flop / (bench::median_ms([&] { (void)bench::cublas_bf16_gemm(blas, c.m, c.n, c.k, a16, b16, d_peer); },
                                  iters) * 1e9);
  }
  // The dequantize alone: its share of the peer, and its bandwidth (codes + scales in, bf16 out).
  row->dequant_ms = bench::median_ms(dequant_both, iters);
  CHECK_CUDA(cudaGetLastError());
  const double bytes = static_cast<double>(a.data_bytes() + a.scale_bytes() + b.data_bytes() + b.scale_bytes()) +
                       2.0 * (c.m + c.n) * c.k;
  row->dequant_gbs = bytes / (row->dequant_ms * 1e6);

  const bool bad = !(row->max_rel <= kMismatch && row->frob_rel <= kMismatch);
  std::printf("case %2d %-34s ours %7.1f  cublas-bf16 %7.1f  dequant+cublas %7.1f TFLOP/s  ours/bf16 %.3f"
              "  ours/(deq+bf16) %.3f  dequant %.3f ms %5.0f GB/s  vs-peer max-rel %.2e frob-rel %.2e%s\n",
              c.index, name.c_str(), row->ours, row->bf16, row->peer, ratio(row->ours, row->bf16),
              ratio(row->ours, row->peer), row->dequant_ms, row->dequant_gbs, row->max_rel, row->frob_rel,
              bad ? "  MISMATCH" : "");
  std::fflush(stdout);
  return true;
}

bool parse_pairs(const char* list, std::vector<std::string>* out) {
  std::vector<std::string> known;
  for (const RecipePair& r : all_pairs()) known.push_back(pair_name(r));
  std::string s = list;
  for (size_t pos = 0; pos <= s.size();) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string name = s.substr(pos, comma - pos);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string all;
      for (const std::string& k : known) all += (all.empty() ? "" : ", ") + k;
      std::fprintf(stderr, "--recipes: unknown pair '%s' (known: %s)\n", name.c_str(), all.c_str());
      return false;
    }
    out->push_back(name);
    pos = comma + 1;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  std::vector<int> only;
  std::vector<std::string> pairs;  // empty: all
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(3, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) only.push_back(std::atoi(t));
    } else if (!std::strcmp(argv[i], "--recipes") && i + 1 < argc) {
      if (!parse_pairs(argv[++i], &pairs)) return 2;
    } else if (!std::strcmp(argv[i], "--list")) {
      list = true;
    } else {
      std::fprintf(stderr,
                   "usage: gemm_block_scaled_bench [--iters N] [--only I,J,...] "
                   "[--recipes mxfp8.mxfp8,nvfp4.nvfp4,mxfp8.nvfp4,mxfp8.mxfp4] [--list]\n");
      return 2;
    }
  }
  std::vector<Case> cases;
  for (const Case& c : all_cases()) {
    const bool pair_ok = pairs.empty() || std::find(pairs.begin(), pairs.end(), pair_name(c.recipes)) != pairs.end();
    const bool index_ok = only.empty() || std::find(only.begin(), only.end(), c.index) != only.end();
    if (pair_ok && index_ok) cases.push_back(c);
  }
  if (list) {
    for (const Case& c : cases) std::printf("%d %s (%s)\n", c.index, label(c).c_str(), c.kind);
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), cuBLAS %d, iters %d\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, CUBLAS_VERSION, iters);
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  std::vector<Row> rows;
  int skipped = 0;
  for (const Case& c : cases) {
    Row row;
    if (run_case(c, iters, blas, &row)) {
      rows.push_back(row);
    } else {
      ++skipped;
    }
  }
  cublasDestroy(blas);
  if (skipped) std::printf("%d case(s) skipped: blockscale gemm refused them (lines above)\n", skipped);

  // TFLOP/s 0.0 and ratio 0.000: that peer failed (its line above says why). Small M: report only.
  std::printf("\n| case | recipes | M | N | K | ours TFLOP/s | cuBLAS BF16 TFLOP/s | dequant+cuBLAS TFLOP/s |"
              " ours/BF16 | ours/(deq+BF16) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %d %s | %s | %lld | %lld | %lld | %.1f | %.1f | %.1f | %.3f | %.3f |\n", r.c.index, r.c.kind,
                pair_name(r.c.recipes).c_str(), static_cast<long long>(r.c.m), static_cast<long long>(r.c.n),
                static_cast<long long>(r.c.k), r.ours, r.bf16, r.peer, ratio(r.ours, r.bf16), ratio(r.ours, r.peer));
  return 0;
}
