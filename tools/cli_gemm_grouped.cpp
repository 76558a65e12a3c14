// `blockscale gemm --grouped m|k`: one grouped (MoE) GEMM of gemm/grouped.h on random operands
// the emulator quantized, timed on the GPU, and (--check) compared with formats' fp64 reference
// on a sample of D's rows.
//   m (fprop / dgrad): D (tokens x n) = A (tokens x k) . B_g^T, each expert its own n x k weight.
//   k (wgrad): dW_g (n x k) = dY_g^T X_g over expert g's tokens, from the columnwise copies of dY
//      (tokens x n) and X (tokens x k), each expert padded to the block as quant/ writes them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/quantize.h"        // defines: quantize_grouped_columnwise, pad_columns
#include "formats/reference_gemm.h"  // defines: reference_gemm, reference_gemm_k_grouped
#include "tools/cli.h"
#include "tools/cli_gemm.h"
#ifdef BLOCKSCALE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gemm/grouped.h"     // defines: can_implement (no device needed)
#include "quant/quantize.h"   // defines: grouped_capacity
#include "tools/gpu_gemm.h"  // defines: gpu_grouped_gemm
#endif

namespace blockscale::tools {
namespace {

// Tokens per expert: `skew` of them on expert 0 and the rest spread evenly (skew 0: all even).
std::vector<int64_t> expert_counts(int64_t tokens, int experts, double skew) {
  std::vector<int64_t> counts(static_cast<size_t>(experts), 0);
  int64_t first = skew > 0 ? std::llround(skew * static_cast<double>(tokens)) : 0;
  if (experts == 1) first = tokens;
  const int64_t rest = tokens - first;
  const int spread = skew > 0 ? experts - 1 : experts;
  for (int i = 0; i < spread; ++i) counts[static_cast<size_t>(experts - spread + i)] = rest / spread + (i < rest % spread);
  counts[0] += first;
  return counts;
}

std::vector<int64_t> cumulative(const std::vector<int64_t>& counts) {
  std::vector<int64_t> ends;
  int64_t end = 0;
  for (int64_t c : counts) ends.push_back(end += c);
  return ends;
}

// Relative Frobenius error of `got` against `want`, printed, and the --check verdict.
void report_check(const GemmArgs& a, const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  double err2 = 0, ref2 = 0;
  int64_t nonfinite = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++nonfinite;
    err2 += (got[i] - want[i]) * (got[i] - want[i]), ref2 += want[i] * want[i];
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  // The dense command's sanity gate (cli_gemm.cpp): bf16 D 2^-8, fp32 D 1e-3; tests/gemm derives
  // the per-case bounds.
  const double limit = a.out_type == "bf16" ? std::ldexp(1.0, -8) : 1e-3;
  const bool ok = nonfinite == 0 && rel <= limit;
  std::printf("check: %s against formats' fp64 reference: relative Frobenius error %.3g (limit %.3g), %lld "
              "non-finite: %s\n",
              what.c_str(), rel, limit, static_cast<long long>(nonfinite), ok ? "ok" : "FAILED");
  if (!ok) fail("gemm", "--check failed: the GPU result is outside the limit");
}

#ifdef BLOCKSCALE_HAVE_CUDA
void run_fprop(const GemmArgs& a, formats::Format ra, formats::Format rb, const std::vector<int64_t>& counts) {
  const std::vector<int64_t> ends = cumulative(counts);
  progress(a, "quantizing random tokens and expert weights on the CPU (formats::quantize)");
  const formats::QuantizedMatrix qa = quantize_operand("A (tokens)", a.tokens, a.k, ra, a.seed);
  std::vector<formats::QuantizedMatrix> qb;
  for (int g = 0; g < a.experts; ++g)
    qb.push_back(quantize_operand("B (expert " + std::to_string(g) + ")", a.n, a.k, rb,
                                  a.seed ^ (0x5DEECE66Dull * static_cast<uint64_t>(g + 1))));
  progress(a, "running on the GPU");
  GpuGemmResult res;
  check("gemm", gpu_grouped_gemm(false, qa, qb, ends, a.out_type == "fp32", a.iters, a.check, &res));
  std::printf("grouped gemm m (fprop) %s x %s, %d experts, %lld tokens, n %lld, k %lld, %s D: %.1f us, %.1f TFLOP/s "
              "(median of %d)\n",
              formats::format_name(ra), formats::format_name(rb), a.experts, static_cast<long long>(a.tokens),
              static_cast<long long>(a.n), static_cast<long long>(a.k), a.out_type.c_str(), res.median_us,
              a.iters > 0 ? 2.0 * a.tokens * a.n * a.k / (res.median_us * 1e6) : 0.0, a.iters);
  if (!a.check) return;
  progress(a, "fp64 reference of the sampled rows (formats::reference_gemm, each against its expert)");
  const std::vector<int64_t> rows = sample_indices(a.tokens, a.check_rows);
  std::vector<double> got, want;
  for (int g = 0; g < a.experts; ++g) {
    const int64_t begin = g > 0 ? ends[g - 1] : 0;
    std::vector<int64_t> mine;
    for (int64_t r : rows)
      if (r >= begin && r < ends[g]) mine.push_back(r);
    if (mine.empty()) continue;
    std::vector<double> ref;
    check("gemm", formats::reference_gemm(take_rows(qa, mine), qb[g], 1.0, 0.0, nullptr, 0, &ref));
    for (size_t i = 0; i < mine.size(); ++i)
      for (int64_t c = 0; c < a.n; ++c) {
        got.push_back(res.d[static_cast<size_t>(mine[i] * a.n + c)]);
        want.push_back(ref[i * a.n + c]);
      }
  }
  report_check(a, got, want, std::to_string(rows.size()) + " of " + std::to_string(a.tokens) + " rows");
}

void run_wgrad(const GemmArgs& a, formats::Format ra, formats::Format rb, const std::vector<int64_t>& counts) {
  const std::vector<int64_t> ends = cumulative(counts);
  progress(a, "quantizing random dY and X columnwise per expert on the CPU (formats::quantize_grouped_columnwise)");
  const std::vector<float> dy = random_matrix(a.tokens, a.n, a.seed);
  const std::vector<float> x = random_matrix(a.tokens, a.k, a.seed ^ 0x5DEECE66Dull);
  formats::QuantizeOptions oa, ob;
  oa.recipe = ra, ob.recipe = rb;
  formats::QuantizedMatrix qa, qb, wa, wb;
  std::vector<int64_t> pends, pends_b;
  check("gemm", formats::quantize_grouped_columnwise(dy.data(), a.tokens, a.n, a.n, ends, oa, &qa, &pends));
  check("gemm", formats::quantize_grouped_columnwise(x.data(), a.tokens, a.k, a.k, ends, ob, &qb, &pends_b));
  // The capacity quant/'s grouped quantize allocates; past the padded total: zero codes and scales.
  quant::GroupedQuantizeProblem gq;
  gq.dense.recipe = ra, gq.dense.rows = a.tokens, gq.num_groups = a.experts;
  const int64_t capacity = quant::grouped_capacity(gq);
  check("gemm", formats::pad_columns(qa, capacity, &wa));
  check("gemm", formats::pad_columns(qb, capacity, &wb));
  progress(a, "running on the GPU");
  GpuGemmResult res;
  check("gemm", gpu_grouped_gemm(true, wa, {wb}, pends, a.out_type == "fp32", a.iters, a.check, &res));
  std::printf("grouped gemm k (wgrad) %s x %s, %d experts, %lld tokens (capacity %lld), dW %lld x %lld per expert, "
              "%s dW: %.1f us, %.1f TFLOP/s (median of %d)\n",
              formats::format_name(ra), formats::format_name(rb), a.experts, static_cast<long long>(a.tokens),
              static_cast<long long>(capacity), static_cast<long long>(a.n), static_cast<long long>(a.k),
              a.out_type.c_str(), res.median_us, a.iters > 0 ? 2.0 * a.tokens * a.n * a.k / (res.median_us * 1e6) : 0.0,
              a.iters);
  if (!a.check) return;
  progress(a, "fp64 reference of the sampled dW rows of every expert (formats::reference_gemm_k_grouped)");
  const std::vector<int64_t> rows = sample_indices(a.n, a.check_rows);
  std::vector<double> ref, got;
  check("gemm", formats::reference_gemm_k_grouped(take_rows(qa, rows), qb, pends, 1.0, 0.0, nullptr, &ref));
  const int64_t s = static_cast<int64_t>(rows.size());
  for (int g = 0; g < a.experts; ++g)
    for (int64_t i = 0; i < s; ++i)
      for (int64_t c = 0; c < a.k; ++c) got.push_back(res.d[static_cast<size_t>((g * a.n + rows[i]) * a.k + c)]);
  report_check(a, got, ref, std::to_string(s) + " of " + std::to_string(a.n) + " rows of each expert's dW");
}
#endif

}  // namespace

void run_grouped_gemm(const GemmArgs& a) {
  const bool wgrad = a.grouped == "k";
  if (a.tokens <= 0) usage_error("gemm", "--tokens: required with --grouped (the tokens of all experts together)");
  if (a.m > 0) usage_error("gemm", "--m: not with --grouped (the rows are the tokens: --tokens)");
  if (a.skew > 0 && a.experts < 2) usage_error("gemm", "--skew: needs --experts >= 2");
  formats::Format ra, rb;
  formats::parse_format(a.recipe, &ra);  // the validator accepted it
  const std::string b_name = !a.b_recipe.empty()                                    ? a.b_recipe
                             : ra == formats::Format::kFp8Block1x128 && !wgrad ? "fp8_block128x128"
                                                                                    : a.recipe;
  if (!formats::parse_format(b_name, &rb)) usage_error("gemm", "--b-recipe: unknown recipe '" + b_name + "'");
  const std::vector<int64_t> counts = expert_counts(a.tokens, a.experts, a.skew);
#ifndef BLOCKSCALE_HAVE_CUDA
  (void)rb, (void)counts;
  fail("gemm", "this build has no CUDA parts (configure with -DBLOCKSCALE_CUDA=ON); gemm/ runs on the GPU only");
#else
  gemm::GroupedGemmProblem p;  // shapes and recipes, before any work (wgrad: k is checked per copy)
  p.mode = wgrad ? gemm::GroupMode::kK : gemm::GroupMode::kM;
  p.num_groups = a.experts;
  quant::GroupedQuantizeProblem gq;
  gq.dense.recipe = ra, gq.dense.rows = a.tokens, gq.num_groups = a.experts;
  p.m = wgrad ? a.n : a.tokens, p.n = wgrad ? a.k : a.n, p.k = wgrad ? quant::grouped_capacity(gq) : a.k;
  p.a_recipe = ra, p.b_recipe = rb;
  p.d_type = a.out_type == "fp32" ? formats::DType::kF32 : formats::DType::kBf16;
  p.ldd = p.ldc = p.n;
  check_usage("gemm", gemm::can_implement(p));  // the options alone, before any work
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    fail("gemm", "no CUDA device is visible to this process (gemm/ runs on the GPU only)");
  if (wgrad) {
    run_wgrad(a, ra, rb, counts);
  } else {
    run_fprop(a, ra, rb, counts);
  }
#endif
}

}  // namespace blockscale::tools
