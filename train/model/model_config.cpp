#include "train/model/model_config.h"

#include <cmath>
#include <cstddef>
#include <string>

namespace blockscale::train {
namespace {

Status require(bool ok, const std::string& message) {
  return ok ? Status::ok() : Status::error(message);
}

// The value among `values` whose name_of() is `name`, or "<option>: unknown <what> '<name>'
// (expected a, b or c)" listing every name.
template <typename T, size_t N>
Status parse_named(const char* option, const char* what, const std::string& name, const T (&values)[N],
                   const char* (*name_of)(T), T* out) {
  std::string expected;
  for (size_t i = 0; i < N; ++i) {
    if (name == name_of(values[i])) {
      *out = values[i];
      return Status::ok();
    }
    expected += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + name_of(values[i]);
  }
  return Status::error(std::string(option) + ": unknown " + what + " '" + name + "' (expected " + expected + ")");
}

}  // namespace

const char* recipe_name(Recipe r) {
  switch (r) {
    case Recipe::kFp32: return "fp32";
    case Recipe::kBf16: return "bf16";
    case Recipe::kFp8Block: return "fp8_block";
    case Recipe::kMxfp8: return "mxfp8";
    case Recipe::kNvfp4: return "nvfp4";
  }
  return "?";
}

Status parse_recipe(const std::string& name, Recipe* out) {
  const Recipe all[] = {Recipe::kFp32, Recipe::kBf16, Recipe::kFp8Block, Recipe::kMxfp8, Recipe::kNvfp4};
  return parse_named("--recipe", "recipe", name, all, recipe_name, out);
}

Status check_gemm_route(Recipe recipe, gemm::GemmRoute route) {
  const bool mx = recipe == Recipe::kMxfp8 || recipe == Recipe::kNvfp4;
  const std::string name = gemm::gemm_route_name(route);
  if (route == gemm::GemmRoute::kCublasLt && mx)
    return Status::error("--gemm-route cublaslt: cuBLASLt's blockwise FP8 matmul is a route of fp8_block; " +
                         std::string(recipe_name(recipe)) + "'s GEMMs run auto, kernel or bf16");
  if (route == gemm::GemmRoute::kBf16Values && recipe == Recipe::kFp8Block)
    return Status::error("--gemm-route bf16: the block values as bf16 is a route of mxfp8 and nvfp4; fp8_block's "
                         "GEMMs run auto, kernel or cublaslt");
  return Status::ok();
}

bool mx_bf16_values(gemm::GemmRoute route, int major) {
  return route == gemm::GemmRoute::kBf16Values || (route == gemm::GemmRoute::kAuto && major == 9);
}

bool is_quantized(Recipe r) {
  return r == Recipe::kFp8Block || r == Recipe::kMxfp8 || r == Recipe::kNvfp4;
}

int recipe_alignment(Recipe r) {
  switch (r) {
    case Recipe::kFp8Block: return 128;
    case Recipe::kMxfp8:
    case Recipe::kNvfp4: return 32;
    default: return 1;
  }
}

Status validate(const ModelConfig& c, Recipe recipe, int64_t tokens_per_micro_batch) {
  BS_RETURN_IF_ERROR(require(c.vocab >= 2 && c.vocab <= (1 << 24), "--vocab must be in [2, 2^24]"));
  BS_RETURN_IF_ERROR(require(c.n_layers >= 1 && c.n_layers <= 1024, "--layers must be in [1, 1024]"));
  BS_RETURN_IF_ERROR(require(c.n_heads >= 1, "--heads must be >= 1"));
  BS_RETURN_IF_ERROR(require(c.d_model >= 2 && c.d_model % c.n_heads == 0,
                             "--d-model must be a positive multiple of --heads"));
  BS_RETURN_IF_ERROR(require(c.d_ff >= 1, "--d-ff must be >= 1"));
  BS_RETURN_IF_ERROR(require(c.seq_len >= 1 && c.seq_len <= 65536, "--seq-len must be in [1, 65536]"));
  BS_RETURN_IF_ERROR(require(c.n_experts >= 0 && c.n_experts <= 4096, "--experts must be in [0, 4096]"));
  if (c.moe()) {
    BS_RETURN_IF_ERROR(require(c.top_k >= 1 && c.top_k <= c.n_experts,
                               "--top-k must be in [1, --experts]"));
  }
  BS_RETURN_IF_ERROR(require(c.aux_loss_coef >= 0.0f && std::isfinite(c.aux_loss_coef),
                             "--aux-loss-coef must be a finite value >= 0"));
  BS_RETURN_IF_ERROR(require(tokens_per_micro_batch >= 1, "--batch x --seq-len must be >= 1"));
  const int a = recipe_alignment(recipe);
  if (a > 1) {
    const std::string rule = std::string(" must be a multiple of ") + std::to_string(a) + " for --recipe " +
                             recipe_name(recipe) + " (its block length)";
    BS_RETURN_IF_ERROR(require(c.d_model % a == 0, "--d-model" + rule));
    BS_RETURN_IF_ERROR(require(c.d_ff % a == 0, "--d-ff" + rule));
    BS_RETURN_IF_ERROR(require(tokens_per_micro_batch % a == 0, "--batch x --seq-len" + rule));
  }
  return Status::ok();
}

int64_t parameter_count(const ModelConfig& c) {
  const int64_t d = c.d_model, f = c.d_ff;
  const int64_t ffn = c.moe() ? c.n_experts * 3 * d * f + c.n_experts * d : 3 * d * f;
  const int64_t layer = 2 * d + 4 * d * d + ffn;
  return 2 * int64_t{c.vocab} * d + int64_t{c.seq_len} * d + c.n_layers * layer + d;
}

int64_t active_parameter_count(const ModelConfig& c) {
  if (!c.moe()) return parameter_count(c);
  const int64_t d = c.d_model, f = c.d_ff;
  return parameter_count(c) - c.n_layers * (c.n_experts - c.top_k) * 3 * d * f;
}

double train_flops_per_token(const ModelConfig& c) {
  const double d = c.d_model, f = c.d_ff;
  const double ffn = c.moe() ? c.top_k * 3 * d * f + c.n_experts * d : 3 * d * f;
  const double matmul_params = c.n_layers * (4 * d * d + ffn) + double(c.vocab) * d;
  // QK^T and PV: 2 matmuls x 2 flops x seq_len x d_model per token, half of it causal-masked.
  const double attention = c.n_layers * 2.0 * 2.0 * c.seq_len * d * 0.5;
  return 3.0 * (2.0 * matmul_params + attention);
}

}  // namespace blockscale::train
