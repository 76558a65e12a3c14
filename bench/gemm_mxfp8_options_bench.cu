// The two ways to run an MXFP8 GEMM on Hopper, measured side by side in one process (gemm/ keeps
// the faster):
//   (a) FP8 wgmma (QGMMA) per 32 of K into a fresh accumulator, promoted in fp32 registers with
//       the two E8M0 scales: bench/sm90_mxfp8_fp8_promote.cuh (an experiment, not in gemm/);
//   (b) the shipped kernel: each element times its scale converted to bf16 (exact), bf16 wgmma
//       (HGMMA), fp32 accumulation over the whole K: gemm::run with an mxfp8 x mxfp8 problem.
// Both on the same random MXFP8 E4M3 operands (bench/block_scaled_operands.cuh: every finite code,
// scales 2^-4..2^4). cuBLAS BF16 on the dequantized operands is timed too, for scale.
//
// Speed: bf16 D, the shapes of gemm_block_scaled_bench (8192^3, the training shapes, small M),
// median of --iters launches; the (a) vs (b) D difference is printed (a MISMATCH above 1e-2).
// Accuracy: fp32 D of both against an fp64 GEMM of the dequantized operands (computed on the GPU,
// exact products, double sums) at M = N = 256 for K 4096 and 16384: relative Frobenius error and
// max |error| / max |reference|. (b) is exact products summed in fp32 (~1e-7); (a)'s error shows
// what the FP8 tensor core's narrower accumulator loses.
//
// Usage: gemm_mxfp8_options_bench [--iters N]. One line per case, then a markdown table (last).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_common.cuh"            // defines: CHECK_CUDA, cublas_bf16_gemm, median_ms
#include "bench/block_scaled_operands.cuh"  // defines: Operand, DeviceBuffer, dequantize, compare
#include "bench/sm90_mxfp8_fp8_promote.cuh"  // defines: option_a::launch
#include "gemm/gemm.h"

namespace {

namespace bg = blockscale::gemm;
using bench::DeviceBuffer;
using bench::Operand;
using blockscale::formats::Recipe;

constexpr double kMismatch = 1e-2;

bg::GemmProblem mxfp8_problem(int64_t m, int64_t n, int64_t k, bg::MatrixType d_type) {
  bg::GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a_recipe = p.b_recipe = Recipe::kMxfp8E4M3;
  p.d_type = d_type, p.ldd = n;
  return p;
}

bg::GemmArguments arguments(const Operand& a, const Operand& b, void* d) {
  bg::GemmArguments args;
  args.a_data = a.data.ptr, args.a_scales = a.scales.ptr;
  args.b_data = b.data.ptr, args.b_scales = b.scales.ptr;
  args.d = d;
  return args;
}

void check(const blockscale::Status& s, const char* what) {
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

// ---- Accuracy ------------------------------------------------------------------------------------

// ref[m][n] = sum_k a[m][k] b[n][k] in fp64 (bf16 inputs: the exact dequantized MXFP8 values).
__global__ void reference_fp64(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k,
                               double* ref) {
  const int64_t i = blockIdx.y, j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= m || j >= n) return;
  double sum = 0;
  for (int64_t t = 0; t < k; ++t) sum += double(__bfloat162float(a[i * k + t])) * double(__bfloat162float(b[j * k + t]));
  ref[i * n + j] = sum;
}

struct Error {
  double frob_rel, max_rel;
};

Error error_against(const std::vector<float>& d, const std::vector<double>& ref) {
  double diff2 = 0, ref2 = 0, max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::isfinite(d[i]) ? std::fabs(d[i] - ref[i]) : INFINITY;
    diff2 += e * e, ref2 += ref[i] * ref[i];
    max_diff = std::fmax(max_diff, e), max_ref = std::fmax(max_ref, std::fabs(ref[i]));
  }
  return {std::sqrt(diff2 / ref2), max_diff / max_ref};
}

void accuracy_case(int64_t k, uint64_t seed) {
  const int64_t m = 256, n = 256;
  const Operand a(Recipe::kMxfp8E4M3, m, k, seed), b(Recipe::kMxfp8E4M3, n, k, seed + 1);
  DeviceBuffer<__nv_bfloat16> a16(m * k), b16(n * k);
  bench::dequantize(a, a16.ptr);
  bench::dequantize(b, b16.ptr);
  DeviceBuffer<double> ref(m * n);
  reference_fp64<<<dim3(static_cast<unsigned>((n + 127) / 128), static_cast<unsigned>(m)), 128>>>(a16.ptr, b16.ptr, m, n,
                                                                                                  k, ref.ptr);
  CHECK_CUDA(cudaGetLastError());
  DeviceBuffer<float> d_a(m * n), d_b(m * n);
  const bg::GemmProblem p = mxfp8_problem(m, n, k, bg::MatrixType::kFp32);
  check(bench::option_a::launch(p, arguments(a, b, d_a.ptr), nullptr), "option (a)");
  check(bg::run(p, arguments(a, b, d_b.ptr), nullptr, 0, nullptr), "option (b)");
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> h_ref(static_cast<size_t>(m * n));
  std::vector<float> h_a(h_ref.size()), h_b(h_ref.size());
  CHECK_CUDA(cudaMemcpy(h_ref.data(), ref.ptr, h_ref.size() * sizeof(double), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(h_a.data(), d_a.ptr, h_a.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(h_b.data(), d_b.ptr, h_b.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const Error ea = error_against(h_a, h_ref), eb = error_against(h_b, h_ref);
  std::printf("accuracy %lldx%lldx%lld fp32 D vs fp64: (a) frob-rel %.2e max-rel %.2e | (b) frob-rel %.2e max-rel %.2e\n",
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), ea.frob_rel, ea.max_rel,
              eb.frob_rel, eb.max_rel);
  std::fflush(stdout);
}

// ---- Speed ---------------------------------------------------------------------------------------

struct Row {
  int64_t m, n, k;
  double a = 0, b = 0, bf16 = 0;
};

Row speed_case(int64_t m, int64_t n, int64_t k, int iters, cublasHandle_t blas, uint64_t seed) {
  Row row{m, n, k};
  const double flop = 2.0 * m * n * k;
  const Operand a(Recipe::kMxfp8E4M3, m, k, seed), b(Recipe::kMxfp8E4M3, n, k, seed + 1);
  DeviceBuffer<__nv_bfloat16> d_a(m * n), d_b(m * n);
  const bg::GemmProblem p = mxfp8_problem(m, n, k, bg::MatrixType::kBf16);
  const bg::GemmArguments args_a = arguments(a, b, d_a.ptr), args_b = arguments(a, b, d_b.ptr);
  CHECK_CUDA(cudaMemset(d_a.ptr, 0xFF, static_cast<size_t>(m * n) * 2));  // NaN: unwritten shows
  CHECK_CUDA(cudaMemset(d_b.ptr, 0xFF, static_cast<size_t>(m * n) * 2));
  check(bench::option_a::launch(p, args_a, nullptr), "option (a)");
  check(bg::run(p, args_b, nullptr, 0, nullptr), "option (b)");
  CHECK_CUDA(cudaDeviceSynchronize());
  double max_rel = 0, frob_rel = 0;
  bench::compare(d_a.ptr, d_b.ptr, m * n, &max_rel, &frob_rel);
  row.a = flop / (bench::median_ms([&] { (void)bench::option_a::launch(p, args_a, nullptr); }, iters) * 1e9);
  row.b = flop / (bench::median_ms([&] { (void)bg::run(p, args_b, nullptr, 0, nullptr); }, iters) * 1e9);
  DeviceBuffer<__nv_bfloat16> a16(m * k), b16(n * k);
  bench::dequantize(a, a16.ptr);
  bench::dequantize(b, b16.ptr);
  row.bf16 = flop / (bench::median_ms([&] { (void)bench::cublas_bf16_gemm(blas, m, n, k, a16.ptr, b16.ptr, d_b.ptr); },
                                      iters) * 1e9);
  CHECK_CUDA(cudaGetLastError());
  const bool bad = !(max_rel <= kMismatch && frob_rel <= kMismatch);
  std::printf("%lldx%lldx%lld  (a) fp8+promote %7.1f  (b) bf16-convert %7.1f  cublas-bf16 %7.1f TFLOP/s  (a)/(b) %.3f"
              "  (a) vs (b) max-rel %.2e frob-rel %.2e%s\n",
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), row.a, row.b, row.bf16,
              row.a / row.b, max_rel, frob_rel, bad ? "  MISMATCH" : "");
  std::fflush(stdout);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 0;
  if (!bench::parse_iters_only(argc, argv, "gemm_mxfp8_options_bench", &iters)) return 2;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), iters %d\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              iters);
  accuracy_case(4096, 11ull << 44);
  accuracy_case(16384, 13ull << 44);
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  const int64_t shapes[][3] = {{8192, 8192, 8192}, {16384, 4096, 4096}, {16384, 14336, 4096}, {16384, 4096, 14336},
                               {128, 4096, 4096},  {512, 4096, 4096},   {2048, 4096, 4096}};
  std::vector<Row> rows;
  uint64_t seed = 17ull << 44;
  for (const auto& s : shapes) rows.push_back(speed_case(s[0], s[1], s[2], iters, blas, seed += 2));
  cublasDestroy(blas);
  std::printf("\n| M | N | K | (a) FP8 + per-32 promotion TFLOP/s | (b) bf16 conversion TFLOP/s | cuBLAS BF16 TFLOP/s |"
              " (a)/(b) | (a)/BF16 | (b)/BF16 |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %lld | %lld | %lld | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f |\n", static_cast<long long>(r.m),
                static_cast<long long>(r.n), static_cast<long long>(r.k), r.a, r.b, r.bf16, r.a / r.b, r.a / r.bf16,
                r.b / r.bf16);
  return 0;
}
