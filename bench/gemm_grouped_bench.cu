// Throughput of blockscale's M-grouped (MoE fprop) GEMM (gemm/grouped.h) against a per-expert loop
// of cuBLAS BF16 GEMMs (cublasGemmEx, fp32 compute, bench_common.cuh's helper) on the same expert
// sizes, timed in the same process. The peer knows the expert sizes on the host (one launch per
// expert); ours reads them on the device (one launch). Not yet the cublasGemmGroupedBatchedEx and
// torch._scaled_grouped_mm peers the issue names.
// Cases (issue 6): 8 experts x 4096 tokens, N 4096, K 7168; 32 experts x 512 tokens, N 2048,
// K 7168; and the first shape skewed (one expert with 50% of the tokens, the rest spread evenly).
// Recipes: FP8 blockwise (1x128 A, 128x128 B) and MXFP8 (E4M3) exact. Random codes: E4M3 never
// NaN, fp32 scales 2^[-4, 4), E8M0 scales 2^[-4, 4] (bench/block_scaled_operands.cuh). bf16 D.
// TFLOP/s = 2 * tokens * N * K / time, median of --iters launches.
//
// Usage: gemm_grouped_bench [--iters N]. One line per case, then a markdown table (last).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_common.cuh"            // defines: CHECK_CUDA, cublas_bf16_gemm, median_ms, hash32
#include "bench/block_scaled_operands.cuh"  // defines: DeviceBuffer, fill_bytes (E4M3, E8M0)
#include "formats/scale_layout.h"
#include "gemm/grouped.h"

namespace {

namespace bg = blockscale::gemm;
using bench::DeviceBuffer;
using bench::Fill;
using blockscale::formats::Recipe;

__global__ void fill_scales(float* s, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    s[i] = exp2f((bench::hash32(seed + static_cast<uint64_t>(i)) % 8192) / 1024.0f - 4.0f);
}

__global__ void fill_bf16(__nv_bfloat16* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __float2bfloat16_rn((bench::hash32(seed + static_cast<uint64_t>(i)) % 65536) / 32768.0f - 1.0f);
}

struct Case {
  const char* name;
  int experts;
  int64_t tokens_per_expert, n, k;
  bool skewed;
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

double ours_tflops(const Case& c, Recipe recipe, const std::vector<int64_t>& counts, int iters) {
  const int64_t m = c.experts * c.tokens_per_expert, g = c.experts;
  bg::GroupedGemmProblem p;
  p.num_groups = c.experts, p.m = m, p.n = c.n, p.k = c.k;
  p.a_recipe = recipe == Recipe::kMxfp8E4M3 ? recipe : Recipe::kFp8Block1x128;
  p.b_recipe = recipe == Recipe::kMxfp8E4M3 ? recipe : Recipe::kFp8Block128x128;
  p.d_type = bg::MatrixType::kBf16, p.ldd = c.n;
  const bool mx = recipe == Recipe::kMxfp8E4M3;
  const int64_t a_scale_bytes = mx ? blockscale::formats::swizzled_scale_bytes(m, c.k / 32)
                                   : blockscale::formats::vec128_scale_floats(m, c.k / 128) * 4;
  const int64_t b_scale_bytes = g * bg::grouped_b_scale_bytes(p);
  DeviceBuffer<uint8_t> a(m * c.k), b(g * c.n * c.k), sa(a_scale_bytes), sb(b_scale_bytes);
  DeviceBuffer<__nv_bfloat16> d(m * c.n);
  DeviceBuffer<int32_t> ends(g);
  bench::fill_bytes<<<1024, 256>>>(a.ptr, m * c.k, Fill::kE4M3, 1);
  bench::fill_bytes<<<1024, 256>>>(b.ptr, g * c.n * c.k, Fill::kE4M3, 2);
  if (mx) {
    bench::fill_bytes<<<256, 256>>>(sa.ptr, a_scale_bytes, Fill::kE8M0, 3);
    bench::fill_bytes<<<256, 256>>>(sb.ptr, b_scale_bytes, Fill::kE8M0, 4);
  } else {
    fill_scales<<<256, 256>>>(reinterpret_cast<float*>(sa.ptr), a_scale_bytes / 4, 3);
    fill_scales<<<256, 256>>>(reinterpret_cast<float*>(sb.ptr), b_scale_bytes / 4, 4);
  }
  CHECK_CUDA(cudaGetLastError());
  std::vector<int32_t> host_ends;
  int64_t end = 0;
  for (int64_t n_g : counts) host_ends.push_back(static_cast<int32_t>(end += n_g));
  CHECK_CUDA(cudaMemcpy(ends.ptr, host_ends.data(), host_ends.size() * 4, cudaMemcpyHostToDevice));
  bg::GroupedGemmArguments args;
  args.a_data = a.ptr, args.a_scales = sa.ptr, args.b_data = b.ptr, args.b_scales = sb.ptr;
  args.group_ends = ends.ptr, args.d = d.ptr;
  const blockscale::Status s = bg::run(p, args, nullptr, 0, nullptr);
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s: %s\n", c.name, s.message().c_str());
    std::exit(1);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  const double ms = bench::median_ms([&] { (void)bg::run(p, args, nullptr, 0, nullptr); }, iters);
  return 2.0 * m * c.n * c.k / (ms * 1e9);
}

double cublas_loop_tflops(const Case& c, const std::vector<int64_t>& counts, cublasHandle_t blas, int iters) {
  const int64_t m = c.experts * c.tokens_per_expert, g = c.experts;
  DeviceBuffer<__nv_bfloat16> a(m * c.k), b(g * c.n * c.k), d(m * c.n);
  fill_bf16<<<1024, 256>>>(a.ptr, m * c.k, 5);
  fill_bf16<<<1024, 256>>>(b.ptr, g * c.n * c.k, 6);
  CHECK_CUDA(cudaDeviceSynchronize());
  const auto loop = [&] {
    int64_t row = 0;
    for (int e = 0; e < c.experts; ++e) {
      if (counts[e] > 0)
        (void)bench::cublas_bf16_gemm(blas, counts[e], c.n, c.k, a.ptr + row * c.k, b.ptr + e * c.n * c.k,
                                      d.ptr + row * c.n);
      row += counts[e];
    }
  };
  const double ms = bench::median_ms(loop, iters);
  return 2.0 * m * c.n * c.k / (ms * 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(3, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: gemm_grouped_bench [--iters N]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), iters %d\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              iters);
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  const Case cases[] = {{"8x4096 N4096 K7168", 8, 4096, 4096, 7168, false},
                        {"32x512 N2048 K7168", 32, 512, 2048, 7168, false},
                        {"8x4096 N4096 K7168 skew 50%", 8, 4096, 4096, 7168, true}};
  struct Row {
    const char* name;
    double fp8, mx, peer;
  };
  std::vector<Row> rows;
  for (const Case& c : cases) {
    const std::vector<int64_t> counts = expert_counts(c);
    Row r{c.name, ours_tflops(c, Recipe::kFp8Block1x128, counts, iters), ours_tflops(c, Recipe::kMxfp8E4M3, counts, iters),
          cublas_loop_tflops(c, counts, blas, iters)};
    std::printf("%-28s fp8-blockwise %7.1f  mxfp8-exact %7.1f  cublas-bf16-loop %7.1f TFLOP/s  fp8/peer %.3f  mxfp8/peer %.3f\n",
                r.name, r.fp8, r.mx, r.peer, r.fp8 / r.peer, r.mx / r.peer);
    std::fflush(stdout);
    rows.push_back(r);
  }
  cublasDestroy(blas);
  std::printf("\n| case | FP8 blockwise TFLOP/s | MXFP8 exact TFLOP/s | cuBLAS BF16 per-expert loop TFLOP/s | FP8 / peer | MXFP8 / peer |\n"
              "|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %.1f | %.1f | %.1f | %.3f | %.3f |\n", r.name, r.fp8, r.mx, r.peer, r.fp8 / r.peer, r.mx / r.peer);
  return 0;
}
