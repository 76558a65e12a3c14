// The CPU model's gradients against finite differences (fp32 recipe, where the model is a smooth
// function of its parameters away from routing ties), and its quantized recipes against fp32.
#include "train/cpu/cpu_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace blockscale::train {
namespace {

using gemm::GemmRoute;

ModelConfig tiny_config(bool moe) {
  ModelConfig c;
  c.vocab = 11;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_experts = moe ? 3 : 0;
  c.top_k = 2;
  c.d_ff = 6;
  c.seq_len = 5;
  c.aux_loss_coef = 0.1f;  // large enough that a wrong router gradient shows
  return c;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch random_batch(const ModelConfig& c, int batch, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  for (int i = 0; i < batch * c.seq_len; ++i) {
    b.tokens.push_back(int32_t(rng() % c.vocab));
    b.targets.push_back(int32_t(rng() % c.vocab));
  }
  return b;
}

// Parameters with some spread (the N(0, 0.02) initialisation makes every logit nearly equal).
std::vector<float> spread_params(const ParamLayout& layout, const ModelConfig& c) {
  std::vector<float> p(layout.total);
  init_params(layout, c, 7, p.data());
  for (float& v : p) v *= 10.0f;
  for (const ParamTensor& t : layout.tensors) {
    if (t.shape.size() == 1) {
      for (int64_t i = 0; i < t.size; ++i) p[t.offset + i] = 1.0f + 0.1f * float(i % 3);
    }
  }
  return p;
}

double total_loss(CpuModel& model, const ModelConfig& c, const std::vector<float>& p, const Batch& b, int batch) {
  StepLosses l;
  EXPECT_TRUE(model.forward(p.data(), b.tokens.data(), b.targets.data(), batch, &l).is_ok());
  return l.loss + c.aux_loss_coef * l.aux_loss;
}

// For each tensor: the directional derivative along a random direction confined to it, by central
// differences in fp32, against the analytic gradient's dot product with the direction.
void check_gradients(bool moe) {
  const ModelConfig c = tiny_config(moe);
  const int batch = 2;
  CpuModel model(c, Recipe::kFp32);
  const ParamLayout& layout = model.layout();
  std::vector<float> p = spread_params(layout, c);
  const Batch b = random_batch(c, batch, 3);
  std::vector<float> g(layout.total, 0.0f);
  StepLosses losses;
  ASSERT_TRUE(model.forward_backward(p.data(), b.tokens.data(), b.targets.data(), batch, 1.0f, 1, 0, g.data(), &losses)
                  .is_ok());
  if (moe) {
    EXPECT_GT(losses.aux_loss, 0.0);
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ParamTensor& t : layout.tensors) {
    std::vector<float> u(t.size);
    double analytic = 0;
    for (int64_t i = 0; i < t.size; ++i) {
      u[i] = normal(rng);
      analytic += double(u[i]) * g[t.offset + i];
    }
    const float h = 2e-3f;  // small enough that no routing choice flips (1e-2 flips one here)
    std::vector<float> plus = p, minus = p;
    for (int64_t i = 0; i < t.size; ++i) {
      plus[t.offset + i] += h * u[i];
      minus[t.offset + i] -= h * u[i];
    }
    const double numeric = (total_loss(model, c, plus, b, batch) - total_loss(model, c, minus, b, batch)) / (2.0 * h);
    // fp32 loss differences of ~3e-7 over 2h = 4e-3, plus the O(h^2) truncation: 2e-3 absolute
    // and 2% relative cover both with room; a wrong term is usually off by its whole size.
    EXPECT_NEAR(numeric, analytic, 2e-3 + 0.02 * std::fabs(analytic)) << t.name;
  }
}

TEST(CpuModel, GradientsMatchFiniteDifferencesMoe) { check_gradients(true); }
TEST(CpuModel, GradientsMatchFiniteDifferencesDense) { check_gradients(false); }

// The same inputs give the same bits; the gradient accumulates across calls.
TEST(CpuModel, DeterministicAndAccumulating) {
  const ModelConfig c = tiny_config(true);
  CpuModel model(c, Recipe::kBf16);
  std::vector<float> p = spread_params(model.layout(), c);
  const Batch b = random_batch(c, 2, 5);
  std::vector<float> g1(model.layout().total, 0.0f), g2 = g1;
  StepLosses l1, l2;
  ASSERT_TRUE(model.forward_backward(p.data(), b.tokens.data(), b.targets.data(), 2, 1.0f, 1, 0, g1.data(), &l1).is_ok());
  ASSERT_TRUE(model.forward_backward(p.data(), b.tokens.data(), b.targets.data(), 2, 1.0f, 1, 0, g2.data(), &l2).is_ok());
  EXPECT_EQ(l1.loss, l2.loss);
  EXPECT_EQ(g1, g2);
  ASSERT_TRUE(model.forward_backward(p.data(), b.tokens.data(), b.targets.data(), 2, 1.0f, 1, 0, g2.data(), &l2).is_ok());
  for (size_t i = 0; i < g1.size(); ++i) ASSERT_FLOAT_EQ(g2[i], 2.0f * g1[i]) << i;
}

// Every quantized recipe: loss close to fp32's and gradients pointing the same way. The bounds
// are loose on purpose (4-bit elements are coarse); each recipe's gradient cosine is printed.
TEST(CpuModel, QuantizedRecipesTrackFp32) {
  ModelConfig c;
  c.vocab = 64;
  c.d_model = 128;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_experts = 2;
  c.top_k = 1;
  c.d_ff = 128;
  c.seq_len = 64;
  const int batch = 2;
  const Batch b = random_batch(c, batch, 9);
  CpuModel ref(c, Recipe::kFp32);
  std::vector<float> p(ref.layout().total);
  init_params(ref.layout(), c, 3, p.data());
  std::vector<float> g_ref(p.size(), 0.0f);
  StepLosses l_ref;
  ASSERT_TRUE(ref.forward_backward(p.data(), b.tokens.data(), b.targets.data(), batch, 1.0f, 1, 0, g_ref.data(), &l_ref)
                  .is_ok());
  for (Recipe r : {Recipe::kBf16, Recipe::kFp8Block, Recipe::kMxfp8, Recipe::kNvfp4}) {
    ASSERT_TRUE(validate(c, r, batch * c.seq_len).is_ok()) << recipe_name(r);
    CpuModel model(c, r);
    std::vector<float> g(p.size(), 0.0f);
    StepLosses l;
    ASSERT_TRUE(model.forward_backward(p.data(), b.tokens.data(), b.targets.data(), batch, 1.0f, 1, 0, g.data(), &l)
                    .is_ok())
        << recipe_name(r);
    double dot = 0, n1 = 0, n2 = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      dot += double(g[i]) * g_ref[i];
      n1 += double(g[i]) * g[i];
      n2 += double(g_ref[i]) * g_ref[i];
    }
    const double cosine = dot / std::sqrt(n1 * n2);
    std::printf("%-9s loss %.5f (fp32 %.5f), gradient cosine to fp32 %.4f\n", recipe_name(r), l.loss, l_ref.loss, cosine);
    EXPECT_NEAR(l.loss, l_ref.loss, 0.02 * l_ref.loss) << recipe_name(r);
    EXPECT_GT(cosine, r == Recipe::kNvfp4 ? 0.8 : 0.95) << recipe_name(r);
  }
}

// init_params fills chunks of each tensor on all threads, each chunk's splitmix64 stream jumped
// ahead: the weights must equal one sequential pass over every tensor's stream, written out here
// independently (its seed mixing, Box-Muller pairs, std 0.02 and 0.02 / sqrt(2 layers) for wo / w2,
// norms 1). lm_head (2100 x 1024) spans two chunks.
TEST(Params, InitEqualsOneSequentialPass) {
  ModelConfig c;
  c.vocab = 2100, c.d_model = 1024, c.n_layers = 2, c.n_heads = 4, c.n_experts = 3, c.top_k = 2, c.d_ff = 96;
  c.seq_len = 16;
  const ParamLayout layout = make_param_layout(c);
  std::vector<float> got(layout.total);
  init_params(layout, c, 11, got.data());
  auto next = [](uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return ((static_cast<double>((z ^ (z >> 31)) >> 11) + 0.5) / 9007199254740992.0);
  };
  bool spans_chunks = false;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const ParamTensor& t = layout.tensors[i];
    spans_chunks |= t.size > (int64_t{2} << 20);
    const std::string tail = t.name.size() > 3 ? t.name.substr(t.name.size() - 3) : "";
    const double sd = 0.02 * (tail == ".wo" || tail == ".w2" ? 0.5 : 1.0);
    uint64_t s = 11 ^ (0xA0761D6478BD642Full * (i + 1));
    for (int64_t j = 0; j < t.size; j += 2) {
      float want[2] = {1.0f, 1.0f};
      if (t.shape.size() > 1) {
        const double r = std::sqrt(-2.0 * std::log(next(&s))), a = 6.283185307179586 * next(&s);
        want[0] = float(sd * r * std::cos(a)), want[1] = float(sd * r * std::sin(a));
      }
      for (int64_t e = j; e < std::min(t.size, j + 2); ++e)
        ASSERT_EQ(got[t.offset + e], want[e - j]) << t.name << " element " << e;
    }
  }
  EXPECT_TRUE(spans_chunks);
}

TEST(CpuModel, RejectsBadTokens) {
  const ModelConfig c = tiny_config(true);
  CpuModel model(c, Recipe::kFp32);
  std::vector<float> p(model.layout().total, 0.01f);
  Batch b = random_batch(c, 1, 1);
  b.tokens[2] = c.vocab;
  StepLosses l;
  const Status s = model.forward(p.data(), b.tokens.data(), b.targets.data(), 1, &l);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("entry 2"), std::string::npos) << s.message();
}

TEST(ModelConfig, ValidationNamesTheFlag) {
  ModelConfig c = tiny_config(true);
  EXPECT_TRUE(validate(c, Recipe::kFp32, 10).is_ok());
  Status s = validate(c, Recipe::kMxfp8, 64);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--d-model"), std::string::npos) << s.message();
  c.top_k = 4;
  s = validate(c, Recipe::kFp32, 10);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--top-k"), std::string::npos);
  Recipe r;
  EXPECT_FALSE(parse_recipe("fp4", &r).is_ok());
  ASSERT_TRUE(parse_recipe("fp8_block", &r).is_ok());
  EXPECT_EQ(r, Recipe::kFp8Block);
  GemmRoute f;
  for (GemmRoute want : {GemmRoute::kAuto, GemmRoute::kKernel, GemmRoute::kCublasLt, GemmRoute::kBf16Values}) {
    ASSERT_TRUE(gemm::parse_gemm_route("--gemm-route", gemm::gemm_route_name(want), &f).is_ok());
    EXPECT_EQ(f, want);
  }
  s = gemm::parse_gemm_route("--gemm-route", "fp8", &f);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--gemm-route: unknown route 'fp8'"), std::string::npos) << s.message();
  // A route names an engine of the recipe's GEMMs; bf16 and fp32 have one engine and take any.
  for (Recipe r : {Recipe::kFp32, Recipe::kBf16, Recipe::kFp8Block, Recipe::kMxfp8, Recipe::kNvfp4})
    for (GemmRoute g : {GemmRoute::kAuto, GemmRoute::kKernel, GemmRoute::kCublasLt, GemmRoute::kBf16Values}) {
      const bool mx = r == Recipe::kMxfp8 || r == Recipe::kNvfp4;
      const bool refused = (g == GemmRoute::kCublasLt && mx) || (g == GemmRoute::kBf16Values && r == Recipe::kFp8Block);
      s = check_gemm_route(r, g);
      EXPECT_EQ(s.is_ok(), !refused) << recipe_name(r) << " " << gemm::gemm_route_name(g);
      if (refused)
        EXPECT_EQ(s.message().rfind(std::string("--gemm-route ") + gemm::gemm_route_name(g) + ":", 0), 0u) << s.message();
    }
  EXPECT_TRUE(mx_bf16_values(GemmRoute::kAuto, 9));
  EXPECT_FALSE(mx_bf16_values(GemmRoute::kAuto, 10));
  EXPECT_TRUE(mx_bf16_values(GemmRoute::kBf16Values, 10));
  EXPECT_FALSE(mx_bf16_values(GemmRoute::kKernel, 9));
}

}  // namespace
}  // namespace blockscale::train
