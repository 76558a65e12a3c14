// `blockscale gemm`: one block-scaled GEMM of gemm/ on random operands, timed, and (--check)
// compared with formats::reference_gemm (fp64) on a sample of D's rows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "formats/quantize.h"        // defines: quantize (the emulator, same bytes as quant/)
#include "formats/reference_gemm.h"  // defines: reference_gemm (fp64)
#include "gemm/gemm_route.h"          // defines: parse_gemm_route (no CUDA needed)
#include "tools/cli.h"
#include "tools/cli_gemm.h"
#ifdef BLOCKSCALE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gemm/gemm.h"        // defines: can_implement (no device needed)
#include "tools/gpu_gemm.h"  // defines: gpu_gemm
#endif

namespace blockscale::tools {

namespace {
uint64_t mix(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return x;
}
}  // namespace

// Roughly normal values, each row at its own magnitude in 2^[-8, 8], so that block scales differ
// along both dimensions. A counter hash keeps it fast and seedable.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = std::ldexp(1.0f, static_cast<int>(mix(seed ^ (0x9E3779B97F4A7C15ull * (r + 1))) % 17) - 8);
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t h = mix(seed + static_cast<uint64_t>(r * cols + c) * 0xD1B54A32D192ED03ull);
      const float u = ((h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48)) / 65536.0f - 2.0f;
      x[static_cast<size_t>(r * cols + c)] = u * mag;  // sum of 4 uniforms: mean 0, sd ~0.58
    }
  }
  return x;
}

formats::QuantizedMatrix quantize_operand(const std::string& what, int64_t rows, int64_t cols, formats::Format r,
                                          uint64_t seed) {
  const std::vector<float> x = random_matrix(rows, cols, seed);
  formats::QuantizeOptions o;
  o.recipe = r;
  formats::QuantizedMatrix q;
  const Status st = formats::quantize(x.data(), rows, cols, cols, o, formats::Direction::kRowwise, &q);
  if (!st) fail("gemm", what + ": " + st.message());
  return q;
}

// Rows `rows` of a 1-row-block operand (the A operands: 1x128), for a sampled reference.
formats::QuantizedMatrix take_rows(const formats::QuantizedMatrix& q, const std::vector<int64_t>& rows) {
  formats::QuantizedMatrix s = q;
  s.rows = static_cast<int64_t>(rows.size());
  s.data.clear(), s.scales.clear(), s.scales_f32.clear();
  const int64_t rb = q.data_row_bytes(), sc = q.scale_cols();
  for (int64_t r : rows) {
    s.data.insert(s.data.end(), q.data.begin() + r * rb, q.data.begin() + (r + 1) * rb);
    if (!q.scales_f32.empty())
      s.scales_f32.insert(s.scales_f32.end(), q.scales_f32.begin() + r * sc, q.scales_f32.begin() + (r + 1) * sc);
    if (!q.scales.empty()) s.scales.insert(s.scales.end(), q.scales.begin() + r * sc, q.scales.begin() + (r + 1) * sc);
  }
  return s;
}

void progress(const GemmArgs& a, const char* what) {
  if (!a.quiet) std::fprintf(stderr, "blockscale gemm: %s\n", what);
}

std::vector<int64_t> sample_indices(int64_t n, int64_t s) {
  std::vector<int64_t> out;
  s = std::min(n, s);
  for (int64_t i = 0; i < s; ++i) out.push_back(s == 1 ? 0 : i * (n - 1) / (s - 1));
  return out;
}

namespace {

void run_gemm(const GemmArgs& a) {
  gemm::GemmRoute chosen = gemm::GemmRoute::kAuto;
  check_usage("gemm", gemm::parse_gemm_route("--gemm-route", a.gemm_route, &chosen));
  if (chosen == gemm::GemmRoute::kBf16Values)
    usage_error("gemm", "--gemm-route bf16: a route of the training step's mxfp8 and nvfp4 GEMMs; `blockscale "
                        "gemm` runs auto, kernel or cublaslt");
  // Grouped problems read the expert ends on the device, which only gemm/'s kernel does.
  if (!a.grouped.empty() && chosen == gemm::GemmRoute::kCublasLt)
    usage_error("gemm", "--gemm-route cublaslt: not with --grouped (cuBLASLt needs the expert sizes on the host; "
                        "grouped GEMMs here read them on the device and run gemm/'s kernel)");
  if (!a.grouped.empty()) return run_grouped_gemm(a);
  if (a.m <= 0) usage_error("gemm", "--m: required (rows of A and D) unless --grouped");
  formats::Format ra, rb;
  formats::parse_format(a.recipe, &ra);  // the validator accepted it
  const std::string b_name = !a.b_recipe.empty() ? a.b_recipe
                             : ra == formats::Format::kFp8Block1x128 ? "fp8_block128x128" : a.recipe;
  if (!formats::parse_format(b_name, &rb)) usage_error("gemm", "--b-recipe: unknown recipe '" + b_name + "'");
#ifndef BLOCKSCALE_HAVE_CUDA
  (void)rb, (void)chosen;
  fail("gemm", "this build has no CUDA parts (configure with -DBLOCKSCALE_CUDA=ON); gemm/ runs on the GPU only");
#else
  gemm::GemmProblem p;
  p.m = a.m, p.n = a.n, p.k = a.k;
  p.a_recipe = ra, p.b_recipe = rb;
  p.d_type = a.out_type == "fp32" ? formats::DType::kF32 : formats::DType::kBf16;
  p.ldd = p.ldc = a.n;
  check_usage("gemm", gemm::can_implement(p));  // shapes and recipes (the options alone), before any work
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    fail("gemm", "no CUDA device is visible to this process (gemm/ runs on the GPU only)");
  gemm::set_gemm_route(chosen);
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  gemm::GemmKernel kernel = gemm::GemmKernel::kNone;
  check("gemm", gemm::can_implement_for_arch(p, major * 10 + minor, &kernel));
  const char* route = kernel == gemm::GemmKernel::kCublasLtBlockScaled ? "cuBLASLt" : "gemm/ kernel";
  progress(a, "quantizing random operands on the CPU (formats::quantize)");
  const formats::QuantizedMatrix qa = quantize_operand("A", a.m, a.k, ra, a.seed);
  const formats::QuantizedMatrix qb = quantize_operand("B", a.n, a.k, rb, a.seed ^ 0x5DEECE66Dull);
  progress(a, "running on the GPU");
  GpuGemmResult res;
  check("gemm", gpu_gemm(qa, qb, p.d_type == formats::DType::kF32, a.iters, a.check, &res));
  const double tflops = a.iters > 0 ? 2.0 * a.m * a.n * a.k / (res.median_us * 1e-6) / 1e12 : 0.0;
  std::printf("gemm %s x %s, %lld x %lld x %lld, %s D: %.1f us, %.1f TFLOP/s (median of %d; %s)\n", a.recipe.c_str(),
              b_name.c_str(), static_cast<long long>(a.m), static_cast<long long>(a.n), static_cast<long long>(a.k),
              a.out_type.c_str(), res.median_us, tflops, a.iters, route);
  if (!a.check) return;
  // A sample of D's rows, evenly spread (all of them when m <= check_rows), against fp64.
  const std::vector<int64_t> rows = sample_indices(a.m, a.check_rows);
  progress(a, "fp64 reference of the sampled rows (formats::reference_gemm)");
  std::vector<double> ref;
  check("gemm", formats::reference_gemm(take_rows(qa, rows), qb, 1.0, 0.0, nullptr, 0, &ref));
  double err2 = 0, ref2 = 0;
  int64_t nonfinite = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t c = 0; c < a.n; ++c) {
      const double got = res.d[static_cast<size_t>(rows[i] * a.n + c)], want = ref[i * a.n + c];
      if (!std::isfinite(got)) ++nonfinite;
      err2 += (got - want) * (got - want), ref2 += want * want;
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  // bf16 D: rounding the output alone costs up to 2^-9 relative per element; 2^-8 leaves room for
  // the accumulation. fp32 D: the accumulation (the tensor core's partial sums, fp32 promotion)
  // stays near 1e-4 on this data; tests/gemm derives the per-case bound, this is a sanity gate.
  const double limit = p.d_type == formats::DType::kBf16 ? std::ldexp(1.0, -8) : 1e-3;
  const bool ok = nonfinite == 0 && rel <= limit;
  std::printf("check: %lld of %lld rows against formats::reference_gemm (fp64): relative Frobenius error %.3g "
              "(limit %.3g), %lld non-finite: %s\n",
              static_cast<long long>(rows.size()), static_cast<long long>(a.m), rel, limit,
              static_cast<long long>(nonfinite), ok ? "ok" : "FAILED");
  if (!ok) fail("gemm", "--check failed: the GPU result is outside the limit");
#endif
}

}  // namespace

void add_gemm_command(CLI::App& app) {
  auto a = std::make_shared<GemmArgs>();
  CLI::App* c = app.add_subcommand(
      "gemm", "Run one block-scaled GEMM of gemm/ (D = A B^T, A m x k, B n x k), or a grouped MoE one (--grouped), "
              "on random operands quantized by formats/, on the GPU; time it and optionally check it against the fp64 "
              "reference");
  c->add_option("--recipe", a->recipe,
                "A's recipe: fp8_block128 (1x128 blocks, the default), mxfp8, mxfp8_e5m2, mxfp4 or nvfp4")
      ->check(recipe_validator());
  c->add_option("--b-recipe", a->b_recipe,
                "B's recipe (default: fp8_block128x128 with fp8_block128, the weights'; fp8_block128 is wgrad's; "
                "otherwise A's recipe; mxfp8 / mxfp8_e5m2 A also take mxfp4 or nvfp4 B)")
      ->check(recipe_validator());
  c->add_option("--m", a->m, "rows of A and D (not with --grouped)")->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  c->add_option("--n", a->n, "rows of B, columns of D (--grouped: each expert's output features)")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  c->add_option("--k", a->k,
                "reduction length, a multiple of 128 for FP8 blockwise, of 32 for MX / NVFP4 (--grouped: the input "
                "features; any length with --grouped k)")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  c->add_option("--grouped", a->grouped,
                "a grouped (MoE) GEMM of gemm/grouped.h: m = fprop (tokens x k times each expert's n x k weight), "
                "k = wgrad (dW_g = dY_g^T X_g, n x k per expert, from the columnwise copies)")
      ->check(CLI::IsMember({"m", "k"}));
  c->add_option("--experts", a->experts, "--grouped: number of experts (default 8)")->check(CLI::Range(1, 1024));
  c->add_option("--tokens", a->tokens, "--grouped: tokens of all experts together")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  c->add_option("--skew", a->skew, "--grouped: share of the tokens routed to expert 0, the rest spread evenly "
                                   "(default 0: balanced)")
      ->check(finite_validator())
      ->check(CLI::Range(0.0, 1.0));
  c->add_flag("--check", a->check,
              "compare a sample of D's rows (--grouped k: of each expert's dW) with formats' fp64 reference GEMM; "
              "exit 1 if off");
  c->add_option("--check-rows", a->check_rows, "rows of D the check compares (default 64)")->check(CLI::Range(1, 1 << 20));
  c->add_option("--out-type", a->out_type, "D's type: bf16 (default) or fp32")->check(CLI::IsMember({"bf16", "fp32"}));
  c->add_option("--iters", a->iters, "timed runs after one untimed one (default 20)")->check(CLI::Range(0, 100000));
  c->add_option("--seed", a->seed, "seed of the random operands (default 1)")->check(seed_validator());
  c->add_flag("--quiet", a->quiet, "no progress lines on stderr");
  // --fp8-route: the earlier spelling, still accepted.
  c->add_option("--gemm-route,--fp8-route", a->gemm_route,
                "which engine multiplies FP8 blockwise on Hopper: auto (gemm/'s wgmma kernel; cuBLASLt's blockwise "
                "kernel for M <= 512 where it takes the shape; default), kernel (gemm/'s wgmma kernel) or "
                "cublaslt (not with --grouped)");
  c->callback([a] { run_gemm(*a); });
}

}  // namespace blockscale::tools
