// The training step's FP8 blockwise GEMMs as `blockscale train --recipe fp8_block` runs them: fp32 D
// (the driver's activations and main gradients are fp32), wgrad at beta 0 (a step's first
// micro-batch) or 1 (accumulating into the main gradient). gemm/ against cuBLASLt's blockwise FP8
// matmul on the same operands and against cuBLASLt BF16 with fp32 D (the bf16 recipe's route), in
// the same process. gemm/ runs twice: its wgmma kernel (GemmRoute::kKernel) and its automatic
// route (cuBLASLt where it takes the shape, as the fp8_block recipe's dense products run by
// default). Per configuration the cases are weighted by how often a step runs each (two layers;
// the experts modelled as uniform, tokens x top_k / experts rows each, run dense), which gives the
// step's FP8 GEMM time on each route.
//   width 2048 : the docs command (d 2048, d_ff 1408, 16 heads, 8 experts top-2, 4096 tokens)
//   mixtral    : the docs command (d 4096, d_ff 14336, 32 heads, 8 experts top-2, 8192 tokens per micro-batch),
//                wgrad accumulating (beta 1) as with --grad-accum
// Times: median of --iters launches (CUDA events, after warm-up). Operands: random E4M3 codes and
// log-uniform scales; bf16 operands random in [-1, 1).
//
// Usage: gemm_step_bench [--iters N] [--only I,J,...] (case indices, 0-based, in the table's order;
// the per-step totals then count only those). One line per case, then a markdown table (last).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"        // defines: CHECK_CUDA, median_ms, the fills
#include "bench/cublaslt_blockwise.cuh"  // defines: LtMatmul
#include "formats/scale_layout.h"
#include "gemm/gemm.h"

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bench::DeviceBuffer;
using bench::device_array;
using bf::Format;

struct Case {
  const char* config;
  const char* name;
  int64_t m, n, k;
  bool wgrad;   // B 1x128 (dW = dY^T X), else 128x128 (fprop / dgrad)
  float beta;   // 1: accumulate into D
  int per_step; // launches of this shape per step (micro-batch); 0: a comparison, not in the step
};

std::vector<Case> cases() {
  return {
      {"width 2048", "wqkv fprop", 4096, 6144, 2048, false, 0, 2},
      {"width 2048", "wo fprop", 4096, 2048, 2048, false, 0, 2},
      {"width 2048", "wqkv dgrad", 4096, 2048, 6144, false, 0, 2},
      {"width 2048", "wo dgrad", 4096, 2048, 2048, false, 0, 2},
      {"width 2048", "wqkv wgrad", 6144, 2048, 4096, true, 0, 2},
      {"width 2048", "wo wgrad", 2048, 2048, 4096, true, 0, 2},
      {"width 2048", "w13 fprop (expert)", 1024, 2816, 2048, false, 0, 16},
      {"width 2048", "w2 fprop (expert)", 1024, 2048, 1408, false, 0, 16},
      {"width 2048", "w13 dgrad (expert)", 1024, 2048, 2816, false, 0, 16},
      {"width 2048", "w2 dgrad (expert)", 1024, 1408, 2048, false, 0, 16},
      {"width 2048", "w13 wgrad (expert)", 2816, 2048, 1024, true, 0, 16},
      {"width 2048", "w2 wgrad (expert)", 2048, 1408, 1024, true, 0, 16},
      {"mixtral", "wqkv fprop", 8192, 12288, 4096, false, 0, 2},
      {"mixtral", "wo fprop", 8192, 4096, 4096, false, 0, 2},
      {"mixtral", "wqkv dgrad", 8192, 4096, 12288, false, 0, 2},
      {"mixtral", "wo dgrad", 8192, 4096, 4096, false, 0, 2},
      {"mixtral", "wqkv wgrad, beta 1", 12288, 4096, 8192, true, 1, 2},
      {"mixtral", "wo wgrad, beta 1", 4096, 4096, 8192, true, 1, 2},
      {"mixtral", "w13 fprop (expert)", 2048, 28672, 4096, false, 0, 16},
      {"mixtral", "w2 fprop (expert)", 2048, 4096, 14336, false, 0, 16},
      {"mixtral", "w13 dgrad (expert)", 2048, 4096, 28672, false, 0, 16},
      {"mixtral", "w2 dgrad (expert)", 2048, 14336, 4096, false, 0, 16},
      {"mixtral", "w13 wgrad (expert), beta 1", 28672, 4096, 2048, true, 1, 16},
      {"mixtral", "w2 wgrad (expert), beta 1", 4096, 14336, 2048, true, 1, 16},
      // The same two at beta 0: what reading dW costs each engine (outside the step's totals).
      {"mixtral", "w13 wgrad (expert), beta 0", 28672, 4096, 2048, true, 0, 0},
      {"mixtral", "w2 wgrad (expert), beta 0", 4096, 14336, 2048, true, 0, 0},
  };
}

struct Row {
  double ours_us = 0, auto_us = 0, lt_fp8_us = 0, lt_bf16_us = 0;  // 0: failed (the case's line says why)
};

Row run_case(const Case& c, int iters) {
  Row row;
  const int64_t kb = c.k / 128;
  const int64_t sa_n = bf::vec128_scale_floats(c.m, kb);
  const int64_t sb_n = c.wgrad ? bf::vec128_scale_floats(c.n, kb) : bf::blk128_scale_floats((c.n + 127) / 128, kb);
  const DeviceBuffer a_buf = device_array<uint8_t>(c.m * c.k, "A"), b_buf = device_array<uint8_t>(c.n * c.k, "B");
  const DeviceBuffer sa_buf = device_array<float>(sa_n, "A scales"), sb_buf = device_array<float>(sb_n, "B scales");
  const DeviceBuffer d_buf = device_array<float>(c.m * c.n, "D");
  const DeviceBuffer a16_buf = device_array<__nv_bfloat16>(c.m * c.k, "A (bf16)");
  const DeviceBuffer b16_buf = device_array<__nv_bfloat16>(c.n * c.k, "B (bf16)");
  uint8_t *a = a_buf.data(), *b = b_buf.data();
  float *sa = sa_buf.as<float>(), *sb = sb_buf.as<float>(), *d = d_buf.as<float>();
  __nv_bfloat16 *a16 = a16_buf.as<__nv_bfloat16>(), *b16 = b16_buf.as<__nv_bfloat16>();
  CHECK_CUDA(cudaMemset(d, 0, d_buf.size()));
  bench::fill_e4m3<<<1024, 256>>>(a, c.m * c.k, 1);
  bench::fill_e4m3<<<1024, 256>>>(b, c.n * c.k, 2);
  bench::fill_scales<<<256, 256>>>(sa, sa_n, 3);
  bench::fill_scales<<<256, 256>>>(sb, sb_n, 4);
  bench::fill_bf16<<<1024, 256>>>(a16, c.m * c.k, 5);
  bench::fill_bf16<<<1024, 256>>>(b16, c.n * c.k, 6);
  CHECK_CUDA(cudaGetLastError());

  bg::GemmProblem p;
  p.m = c.m, p.n = c.n, p.k = c.k;
  p.a_recipe = Format::kFp8Block1x128;
  p.b_recipe = c.wgrad ? Format::kFp8Block1x128 : Format::kFp8Block128x128;
  p.d_type = p.c_type = bf::DType::kF32;
  p.ldd = p.ldc = c.n;
  p.beta = c.beta;
  bg::GemmArguments args;
  args.a_data = a, args.b_data = b, args.a_scales = sa, args.b_scales = sb, args.d = d;
  args.c = c.beta != 0 ? d : nullptr;
  const size_t ws_bytes = bg::workspace_size(p);
  const DeviceBuffer ws_buf = device_array<uint8_t>(static_cast<int64_t>(ws_bytes), "workspace");
  void* ws = ws_buf.data();
  for (bg::GemmRoute route : {bg::GemmRoute::kKernel, bg::GemmRoute::kAuto}) {
    bg::set_gemm_route(route);
    const blockscale::Status s = bg::run(p, args, ws, ws_bytes, nullptr);
    double& us = route == bg::GemmRoute::kKernel ? row.ours_us : row.auto_us;
    if (!s.is_ok())
      std::printf("case %s / %s: blockscale gemm: %s\n", c.config, c.name, s.message().c_str());
    else
      us = 1e3 * bench::median_ms([&] { (void)bg::run(p, args, ws, ws_bytes, nullptr); }, iters);
  }
  bg::set_gemm_route(bg::GemmRoute::kAuto);

  std::string why;
  bench::LtMatmul fp8;
  if (!fp8.setup_fp8(c.m, c.n, c.k, p.b_recipe, sa, sb, CUDA_R_32F, c.beta, &why) ||
      fp8.run(a, b, d) != CUBLAS_STATUS_SUCCESS)
    std::printf("case %s / %s: cuBLASLt blockwise: %s\n", c.config, c.name, why.empty() ? "failed" : why.c_str());
  else
    row.lt_fp8_us = 1e3 * bench::median_ms([&] { fp8.run(a, b, d); }, iters);
  why.clear();
  bench::LtMatmul bf16;
  if (!bf16.setup_bf16(c.m, c.n, c.k, CUDA_R_32F, c.beta, &why) || bf16.run(a16, b16, d) != CUBLAS_STATUS_SUCCESS)
    std::printf("case %s / %s: cuBLASLt BF16: %s\n", c.config, c.name, why.empty() ? "failed" : why.c_str());
  else
    row.lt_bf16_us = 1e3 * bench::median_ms([&] { bf16.run(a16, b16, d); }, iters);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("case %-10s %-28s %6lld x %6lld x %6lld  kernel %8.1f us  auto %8.1f  cublasLt-fp8 %8.1f"
              "  cublasLt-bf16 %8.1f  (kernel %.0f TFLOP/s)\n",
              c.config, c.name, static_cast<long long>(c.m), static_cast<long long>(c.n), static_cast<long long>(c.k),
              row.ours_us, row.auto_us, row.lt_fp8_us, row.lt_bf16_us,
              row.ours_us > 0 ? 2e-6 * c.m * c.n * c.k / row.ours_us : 0);
  std::fflush(stdout);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 0;
  std::vector<int> only;
  if (!bench::parse_iters_and_cases(argc, argv, "gemm_step_bench", &iters, &only)) return 2;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d), cuBLAS %d, iters %d\n", prop.name, prop.major, prop.minor, CUBLAS_VERSION, iters);
  std::vector<Case> all;
  const std::vector<Case> every = cases();
  for (size_t i = 0; i < every.size(); ++i)
    if (bench::selected(only, i)) all.push_back(every[i]);
  std::vector<Row> rows;
  for (const Case& c : all) rows.push_back(run_case(c, iters));

  const auto ratio = [](double x, double y) { return x > 0 && y > 0 ? x / y : 0.0; };
  std::printf("\n| configuration | GEMM | M x N x K | per step | gemm/ kernel us | gemm/ auto us | cuBLASLt FP8 us |"
              " cuBLASLt BF16 us | auto / kernel | Lt FP8 / kernel | Lt BF16 / kernel |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    const Row& r = rows[i];
    std::printf("| %s | %s | %lldx%lldx%lld | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |\n", c.config,
                c.name, static_cast<long long>(c.m), static_cast<long long>(c.n), static_cast<long long>(c.k),
                c.per_step, r.ours_us, r.auto_us, r.lt_fp8_us, r.lt_bf16_us, ratio(r.auto_us, r.ours_us),
                ratio(r.lt_fp8_us, r.ours_us), ratio(r.lt_bf16_us, r.ours_us));
  }
  for (const char* config : {"width 2048", "mixtral"}) {
    if (std::none_of(all.begin(), all.end(), [&](const Case& c) { return !std::strcmp(c.config, config); })) continue;
    double ours = 0, autos = 0, fp8 = 0, bf16 = 0;
    for (size_t i = 0; i < all.size(); ++i)
      if (!std::strcmp(all[i].config, config))
        ours += rows[i].ours_us * all[i].per_step, autos += rows[i].auto_us * all[i].per_step,
            fp8 += rows[i].lt_fp8_us * all[i].per_step, bf16 += rows[i].lt_bf16_us * all[i].per_step;
    std::printf("| %s | **per step** | | | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |\n", config, ours, autos,
                fp8, bf16, ratio(autos, ours), ratio(fp8, ours), ratio(bf16, ours));
  }
  return 0;
}
