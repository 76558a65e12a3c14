// Throughput of blockscale's grouped (MoE) GEMMs (gemm/grouped.h) against cuBLAS BF16 on the same
// expert sizes, timed in the same process: cublasGemmGroupedBatchedEx (one call) and a per-expert
// loop of cublasGemmEx; the ratio is to the faster of the two. cuBLAS knows the expert sizes on the
// host; ours reads them on the device (one launch). torch._grouped_mm / _scaled_grouped_mm are
// measured by a torch script on the same GPU in the same sitting (docs/performance.md).
//   fprop (M-grouped): D (tokens x N, bf16) = X_g W_g^T per expert.
//   wgrad (K-grouped): dW_g (N x K) = dY_g^T X_g over expert g's tokens. Ours: fp32 dW accumulated
//     in place (beta 1: the main gradient), from columnwise copies padded per expert to the block;
//     cuBLAS: bf16 dW, beta 0 (less memory traffic than ours).
// Cases: 8 experts x 4096 tokens, N 4096, K 7168; 32 experts x 512 tokens, N 2048,
// K 7168; and the first shape skewed (one expert with 50% of the tokens, the rest spread evenly).
// Recipes: FP8 blockwise (fprop 1x128 x 128x128, wgrad 1x128 x 1x128) and MXFP8 (E4M3) exact.
// Random codes: E4M3 never NaN, fp32 scales 2^[-4, 4), E8M0 scales 2^[-4, 4]
// (bench/block_scaled_operands.cuh). TFLOP/s = 2 * tokens * N * K / time, median of --iters.
//
// The width-2048 training step's MoE layer (docs/performance.md) adds four cases: w13 fprop
// (N 2816, K 2048), w2 fprop (N 2048, K 1408), w2 dgrad (N 1408, K 2048), w13 dgrad (N 2048,
// K 2816), 8 experts x 1024 tokens. Then DeepGEMM's own grouped shapes (its tests' sets):
// M-grouped 4 x 8192 and 8 x 4096 tokens with N x K in (4096, 7168), (7168, 2048), (6144, 7168);
// K-grouped (experts, tokens) (4, 8192), (8, 4096), (16, 2048) with N 4096, K 7168.
//
// Usage: gemm_grouped_bench [--iters N] [--only I,J,...] [--tile 128|192|256|256pair]
//                           [--timing sustained|isolated] (case indices, 0-based, in the order above;
// --tile: the FP8 M-grouped kernel's tile (256: 256 x 128; 256pair: the same in 2-CTA clusters sharing
// A) instead of the automatic choice; --timing:
// bench_common.cuh).
// One line per case, then a markdown table (last).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"            // defines: CHECK_CUDA, cublas_bf16_gemm, median_ms, fill_scales, fill_bf16
#include "bench/block_scaled_operands.cuh"  // defines: fill_bytes (E4M3, E8M0)
#include "formats/scale_layout.h"
#include "gemm/grouped.h"
#include "gemm/launchers.h"  // the sm90 tile-width selector

namespace {

namespace bg = blockscale::gemm;
using bench::DeviceBuffer;
using bench::device_array;
using bench::Fill;
using blockscale::formats::Format;

// Which products a case times: the M-grouped fprop, the K-grouped wgrad, or both.
enum class Runs { kBoth, kFprop, kWgrad };

struct Case {
  const char* name;
  int experts;
  int64_t tokens_per_expert, n, k;
  bool skewed;
  Runs runs = Runs::kBoth;
};

std::vector<int64_t> expert_counts(const Case& c) {
  const int64_t total = c.experts * c.tokens_per_expert;
  std::vector<int64_t> counts(static_cast<size_t>(c.experts), c.tokens_per_expert);
  if (c.skewed) {
    counts[0] = total / 2;
    const int64_t rest = total - counts[0];
    for (int g = 1; g < c.experts; ++g) counts[g] = rest / (c.experts - 1) + (g <= rest % (c.experts - 1) ? 1 : 0);
  }
  return counts;
}

// Device buffers of one of our grouped problems, filled with random codes and scales.
struct OurOperands {
  DeviceBuffer a, b, sa, sb;  // codes and scales (bytes)
  DeviceBuffer ends;          // int32 group ends
  OurOperands(bool mx, int64_t a_bytes, int64_t b_bytes, int64_t sa_bytes, int64_t sb_bytes,
              const std::vector<int64_t>& group_ends)
      : a(device_array<uint8_t>(a_bytes, "A")),
        b(device_array<uint8_t>(b_bytes, "B")),
        sa(device_array<uint8_t>(sa_bytes, "A scales")),
        sb(device_array<uint8_t>(sb_bytes, "B scales")) {
    bench::fill_bytes<<<1024, 256>>>(a.data(), a_bytes, Fill::kE4M3, 1);
    bench::fill_bytes<<<1024, 256>>>(b.data(), b_bytes, Fill::kE4M3, 2);
    if (mx) {
      bench::fill_bytes<<<256, 256>>>(sa.data(), sa_bytes, Fill::kE8M0, 3);
      bench::fill_bytes<<<256, 256>>>(sb.data(), sb_bytes, Fill::kE8M0, 4);
    } else {
      bench::fill_scales<<<256, 256>>>(sa.as<float>(), sa_bytes / 4, 3);
      bench::fill_scales<<<256, 256>>>(sb.as<float>(), sb_bytes / 4, 4);
    }
    CHECK_CUDA(cudaGetLastError());
    bench::check(ends.upload(std::vector<int32_t>(group_ends.begin(), group_ends.end()), "group ends"));
  }
};

double time_ours(const char* name, const bg::GroupedGemmProblem& p, const bg::GroupedGemmArguments& args, int iters) {
  bench::check(bg::run(p, args, nullptr, 0, nullptr), name);
  CHECK_CUDA(cudaDeviceSynchronize());
  return bench::median_ms([&] { (void)bg::run(p, args, nullptr, 0, nullptr); }, iters);
}

std::vector<int64_t> cumulative(const std::vector<int64_t>& counts, int64_t multiple) {
  std::vector<int64_t> ends;
  int64_t end = 0;
  for (int64_t n_g : counts) ends.push_back(end += (n_g + multiple - 1) / multiple * multiple);
  return ends;
}

// fprop: D (tokens x N, bf16) = A (tokens x K) . B_g^T per expert (M-grouped).
double ours_fprop_tflops(const Case& c, Format recipe, const std::vector<int64_t>& counts, int iters) {
  const int64_t m = c.experts * c.tokens_per_expert, g = c.experts;
  const bool mx = recipe == Format::kMxfp8E4M3;
  bg::GroupedGemmProblem p;
  p.num_groups = c.experts, p.m = m, p.n = c.n, p.k = c.k;
  p.a_recipe = mx ? recipe : Format::kFp8Block1x128;
  p.b_recipe = mx ? recipe : Format::kFp8Block128x128;
  p.d_type = blockscale::formats::DType::kBf16, p.ldd = c.n;
  const int64_t a_scale_bytes = mx ? blockscale::formats::swizzled_scale_bytes(m, c.k / 32)
                                   : blockscale::formats::vec128_scale_floats(m, c.k / 128) * 4;
  OurOperands o(mx, m * c.k, g * c.n * c.k, a_scale_bytes, g * bg::grouped_b_scale_bytes(p), cumulative(counts, 1));
  const DeviceBuffer d = device_array<__nv_bfloat16>(m * c.n, "D");
  bg::GroupedGemmArguments args;
  args.a_data = o.a.data(), args.a_scales = o.sa.data(), args.b_data = o.b.data(), args.b_scales = o.sb.data();
  args.group_ends = o.ends.as<int32_t>(), args.d = d.data();
  return 2.0 * m * c.n * c.k / (time_ours(c.name, p, args, iters) * 1e9);
}

// wgrad: dW_g (N x K, fp32, accumulated in place: beta 1) = dY_g^T . X_g over expert g's tokens
// (K-grouped), from columnwise copies with each expert padded to the block as quant/ writes them.
double ours_wgrad_tflops(const Case& c, Format recipe, const std::vector<int64_t>& counts, int iters) {
  const int64_t tokens = c.experts * c.tokens_per_expert, g = c.experts;
  const bool mx = recipe == Format::kMxfp8E4M3;
  const int64_t block = mx ? 32 : 128;
  const std::vector<int64_t> ends = cumulative(counts, block);
  const int64_t capacity = (tokens + g * (block - 1) + block - 1) / block * block;
  bg::GroupedGemmProblem p;
  p.mode = bg::GroupMode::kK;
  p.num_groups = c.experts, p.m = c.n, p.n = c.k, p.k = capacity;
  p.a_recipe = p.b_recipe = mx ? recipe : Format::kFp8Block1x128;
  p.c_type = p.d_type = blockscale::formats::DType::kF32, p.ldc = p.ldd = c.k, p.beta = 1.0f;
  const auto scale_bytes = [&](int64_t rows) {
    return mx ? blockscale::formats::swizzled_scale_bytes(rows, capacity / 32)
              : blockscale::formats::vec128_scale_floats(rows, capacity / 128) * 4;
  };
  OurOperands o(mx, c.n * capacity, c.k * capacity, scale_bytes(c.n), scale_bytes(c.k), ends);
  const DeviceBuffer d = device_array<float>(g * c.n * c.k, "dW");
  CHECK_CUDA(cudaMemset(d.data(), 0, d.size()));
  bg::GroupedGemmArguments args;
  args.a_data = o.a.data(), args.a_scales = o.sa.data(), args.b_data = o.b.data(), args.b_scales = o.sb.data();
  args.group_ends = o.ends.as<int32_t>(), args.c = d.data(), args.d = d.data();
  return 2.0 * tokens * c.n * c.k / (time_ours(c.name, p, args, iters) * 1e9);
}

// One cuBLAS column-major GEMM: C (m x n) = op(A) op(B), bf16 in and out, fp32 compute.
struct BlasGemm {
  cublasOperation_t ta, tb;
  int m, n, k;
  const __nv_bfloat16* a;
  int lda;
  const __nv_bfloat16* b;
  int ldb;
  __nv_bfloat16* c;
  int ldc;
};

// Per-expert problems in cuBLAS terms (row-major tensors seen as column-major transposes):
//   fprop: D_g (T_g x N) = X_g W_g^T  ->  D_g^T (N x T_g) = W_g^T' X_g^T': op(A) = W (T), op(B) = X (N)
//   wgrad: dW_g (N x K) = dY_g^T X_g  ->  dW_g^T (K x N) = X_g^T dY_g:   op(A) = X (N), op(B) = dY (T)
std::vector<BlasGemm> peer_problems(const Case& c, bool wgrad, const std::vector<int64_t>& counts,
                                    const __nv_bfloat16* tokens, const __nv_bfloat16* other, __nv_bfloat16* out) {
  std::vector<BlasGemm> problems;
  int64_t row = 0;
  const int n = static_cast<int>(c.n), k = static_cast<int>(c.k);
  for (int e = 0; e < c.experts; ++e) {
    const int t = static_cast<int>(counts[e]);
    if (t > 0 && !wgrad)  // tokens: X (all x K), other: W (G x N x K), out: D (all x N)
      problems.push_back({CUBLAS_OP_T, CUBLAS_OP_N, n, t, k, other + e * c.n * c.k, k, tokens + row * c.k, k,
                          out + row * c.n, n});
    if (t > 0 && wgrad)  // tokens: X (all x K), other: dY (all x N), out: dW (G x N x K)
      problems.push_back({CUBLAS_OP_N, CUBLAS_OP_T, k, n, t, tokens + row * c.k, k, other + row * c.n, n,
                          out + e * c.n * c.k, k});
    row += t;
  }
  return problems;
}

struct PeerTflops {
  double grouped, loop;
};

// cublasGemmGroupedBatchedEx (one call, each expert its own group of one) and a per-expert loop of
// cublasGemmEx, bf16, on the same expert sizes.
PeerTflops peer_tflops(const Case& c, bool wgrad, const std::vector<int64_t>& counts, cublasHandle_t blas, int iters) {
  const int64_t tokens = c.experts * c.tokens_per_expert, g = c.experts;
  const DeviceBuffer x = device_array<__nv_bfloat16>(tokens * c.k, "X");
  const DeviceBuffer other = device_array<__nv_bfloat16>(wgrad ? tokens * c.n : g * c.n * c.k, "the other operand");
  const DeviceBuffer out = device_array<__nv_bfloat16>(wgrad ? g * c.n * c.k : tokens * c.n, "D");
  bench::fill_bf16<<<1024, 256>>>(x.as<__nv_bfloat16>(), tokens * c.k, 5);
  bench::fill_bf16<<<1024, 256>>>(other.as<__nv_bfloat16>(), wgrad ? tokens * c.n : g * c.n * c.k, 6);
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<BlasGemm> problems =
      peer_problems(c, wgrad, counts, x.as<__nv_bfloat16>(), other.as<__nv_bfloat16>(), out.as<__nv_bfloat16>());
  const size_t count = problems.size();
  std::vector<cublasOperation_t> ta(count), tb(count);
  std::vector<int> m(count), n(count), k(count), lda(count), ldb(count), ldc(count), size(count, 1);
  std::vector<float> alpha(count, 1.0f), beta(count, 0.0f);
  std::vector<const void*> a_ptrs(count), b_ptrs(count);
  std::vector<void*> c_ptrs(count);
  for (size_t i = 0; i < count; ++i) {
    const BlasGemm& q = problems[i];
    ta[i] = q.ta, tb[i] = q.tb, m[i] = q.m, n[i] = q.n, k[i] = q.k, lda[i] = q.lda, ldb[i] = q.ldb, ldc[i] = q.ldc;
    a_ptrs[i] = q.a, b_ptrs[i] = q.b, c_ptrs[i] = q.c;
  }
  DeviceBuffer a_dev, b_dev, c_dev;
  bench::check(a_dev.upload(a_ptrs, "A pointers"));
  bench::check(b_dev.upload(b_ptrs, "B pointers"));
  bench::check(c_dev.upload(c_ptrs, "C pointers"));
  const auto grouped = [&] {
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(
        blas, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(), a_dev.as<const void*>(), CUDA_R_16BF,
        lda.data(), b_dev.as<const void*>(), CUDA_R_16BF, ldb.data(), beta.data(), c_dev.as<void*>(), CUDA_R_16BF,
        ldc.data(), static_cast<int>(count), size.data(), CUBLAS_COMPUTE_32F);
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasGemmGroupedBatchedEx: status %d\n", static_cast<int>(st));
      std::exit(1);
    }
  };
  const auto loop = [&] {
    const float one = 1.0f, zero = 0.0f;
    for (const BlasGemm& q : problems)
      (void)cublasGemmEx(blas, q.ta, q.tb, q.m, q.n, q.k, &one, q.a, CUDA_R_16BF, q.lda, q.b, CUDA_R_16BF, q.ldb,
                         &zero, q.c, CUDA_R_16BF, q.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const double flops = 2.0 * tokens * c.n * c.k;
  return {flops / (bench::median_ms(grouped, iters) * 1e9), flops / (bench::median_ms(loop, iters) * 1e9)};
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  std::vector<int> only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(3, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) only.push_back(std::atoi(t));
    } else if (!std::strcmp(argv[i], "--tile") && i + 1 < argc) {
      const std::string tile = argv[++i];
      if (tile != "128" && tile != "192" && tile != "256" && tile != "256pair") {
        std::fprintf(stderr, "--tile: 128, 192, 256 (256 x 128) or 256pair (256 x 128, 2-CTA clusters), got '%s'\n",
                     tile.c_str());
        return 2;
      }
      bg::detail::set_sm90_fp8_tile(tile == "128"   ? bg::detail::Sm90Fp8Tile::kN128
                                    : tile == "192" ? bg::detail::Sm90Fp8Tile::kN192
                                    : tile == "256" ? bg::detail::Sm90Fp8Tile::kM256
                                                    : bg::detail::Sm90Fp8Tile::kM256Pair);
    } else if (!std::strcmp(argv[i], "--timing") && i + 1 < argc) {
      if (!bench::set_timing(argv[++i])) return 2;
    } else {
      std::fprintf(stderr,
                   "usage: gemm_grouped_bench [--iters N] [--only I,J,...] [--tile 128|192|256|256pair]"
                   " [--timing sustained|isolated]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), iters %d, timing %s\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, iters, bench::timing_name());
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  const Case cases[] = {{"8x4096 N4096 K7168", 8, 4096, 4096, 7168, false},
                        {"32x512 N2048 K7168", 32, 512, 2048, 7168, false},
                        {"8x4096 N4096 K7168 skew 50%", 8, 4096, 4096, 7168, true},
                        // the MoE layer of the width-2048 training step (docs/performance.md): w13
                        {"8x1024 N2816 K2048 (train)", 8, 1024, 2816, 2048, false},
                        {"8x1024 N2048 K1408 (train w2)", 8, 1024, 2048, 1408, false},
                        {"8x1024 N1408 K2048 (train w2 dgrad)", 8, 1024, 1408, 2048, false},
                        {"8x1024 N2048 K2816 (train w13 dgrad)", 8, 1024, 2048, 2816, false},
                        // DeepGEMM's own grouped sets (its tests' shapes), for a one-to-one comparison
                        {"4x8192 N4096 K7168", 4, 8192, 4096, 7168, false, Runs::kBoth},
                        {"4x8192 N7168 K2048", 4, 8192, 7168, 2048, false, Runs::kFprop},
                        {"4x8192 N6144 K7168", 4, 8192, 6144, 7168, false, Runs::kFprop},
                        {"8x4096 N7168 K2048", 8, 4096, 7168, 2048, false, Runs::kFprop},
                        {"8x4096 N6144 K7168", 8, 4096, 6144, 7168, false, Runs::kFprop},
                        {"16x2048 N4096 K7168", 16, 2048, 4096, 7168, false, Runs::kWgrad}};
  struct Row {
    std::string name;
    double fp8, mx;
    PeerTflops peer;
  };
  std::vector<Row> rows;
  for (const bool wgrad : {false, true}) {
    for (int index = 0; index < static_cast<int>(std::size(cases)); ++index) {
      if (!only.empty() && std::find(only.begin(), only.end(), index) == only.end()) continue;
      const Case& c = cases[index];
      if (c.runs == (wgrad ? Runs::kFprop : Runs::kWgrad)) continue;
      const std::vector<int64_t> counts = expert_counts(c);
      const auto ours = wgrad ? ours_wgrad_tflops : ours_fprop_tflops;
      Row r{std::string(wgrad ? "wgrad " : "fprop ") + c.name, ours(c, Format::kFp8Block1x128, counts, iters),
            ours(c, Format::kMxfp8E4M3, counts, iters), peer_tflops(c, wgrad, counts, blas, iters)};
      const double best = std::max(r.peer.grouped, r.peer.loop);
      std::printf("%-34s fp8-blockwise %7.1f  mxfp8-exact %7.1f  cublas-grouped %7.1f  cublas-loop %7.1f TFLOP/s  "
                  "fp8/best-peer %.3f  mxfp8/best-peer %.3f\n",
                  r.name.c_str(), r.fp8, r.mx, r.peer.grouped, r.peer.loop, r.fp8 / best, r.mx / best);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  cublasDestroy(blas);
  std::printf("\n| case | FP8 blockwise | MXFP8 exact | cuBLAS bf16 GroupedBatchedEx | cuBLAS bf16 loop | FP8 / best cuBLAS | "
              "MXFP8 / best cuBLAS |\n|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double best = std::max(r.peer.grouped, r.peer.loop);
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f |\n", r.name.c_str(), r.fp8, r.mx, r.peer.grouped,
                r.peer.loop, r.fp8 / best, r.mx / best);
  }
  return 0;
}
