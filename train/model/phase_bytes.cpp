#include "train/model/phase_bytes.h"

#include <algorithm>

namespace blockscale::train {
namespace {

// Bytes one fp32 element costs when a recipe quantizes it: read, plus the copies written.
double quantize_bytes(Recipe r) {
  switch (r) {
    case Recipe::kBf16: return 4 + 2;
    case Recipe::kFp8Block: return 4 + 2 + 8.0 / 128;
    case Recipe::kMxfp8: return 4 + 2 + 2.0 / 32;
    case Recipe::kNvfp4: return 4 + 1 + 2.0 / 16;
    default: return 0;  // fp32: the tensors as they are
  }
}

}  // namespace

std::vector<std::pair<std::string, double>> step_phase_bytes(const ModelConfig& c, Recipe recipe, int64_t batch,
                                                             int64_t grad_accum) {
  const double M = double(batch) * c.seq_len, D = c.d_model, F = c.d_ff, V = c.vocab, L = c.n_layers;
  const double R = c.moe() ? M * c.top_k : M, G = c.moe() ? c.n_experts : 1, A = double(grad_accum);
  const double activations = L * (2 * M * D + R * D + R * F), gradients = L * (4 * M * D + 2 * R * F + R * D);
  // bf16: the optimizer writes the weights' bf16 copies (2 bytes a parameter) with the weights.
  const bool mirror = recipe == Recipe::kBf16;
  const double weights = mirror ? 0.0 : L * (4 * D * D + 3 * G * D * F);
  const double head =
      recipe == Recipe::kFp32 ? 0.0 : quantize_bytes(Recipe::kBf16) * (A * (M * D + M * V) + (mirror ? 0.0 : V * D));
  const double quantize = quantize_bytes(recipe) * (A * (activations + gradients) + weights) + head;
  const double norms = A * (2 * L + 1) * (8 + 16) * M * D;
  const double embedding_loss = A * (24 * M * D + 8 * M * V);
  const double optimizer = (mirror ? 35.0 : 33.0) * double(parameter_count(c));
  return {{"quantize", quantize}, {"norms", norms}, {"embedding_loss", embedding_loss}, {"optimizer", optimizer}};
}

}  // namespace blockscale::train
