#include "train/params.h"

#include <cmath>

namespace blockscale::train {
namespace {

// splitmix64: a small, platform-independent generator for the initial weights.
uint64_t next_u64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double uniform01(uint64_t* state) {  // in (0, 1)
  return (static_cast<double>(next_u64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace

ParamLayout make_param_layout(const ModelConfig& c) {
  ParamLayout layout;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool decay) {
    ParamTensor t;
    t.name = name;
    t.shape = std::move(shape);
    t.size = 1;
    for (int64_t s : t.shape) t.size *= s;
    t.offset = layout.total;
    t.weight_decay = decay;
    layout.total += t.size;
    layout.tensors.push_back(t);
    return static_cast<int>(layout.tensors.size()) - 1;
  };
  const int64_t v = c.vocab, d = c.d_model, f = c.d_ff, e = c.n_experts;
  layout.embed = add("embed", {v, d}, true);
  layout.pos_embed = add("pos_embed", {c.seq_len, d}, true);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "l" + std::to_string(l) + ".";
    LayerParams lp;
    lp.attn_norm = add(p + "attn_norm", {d}, false);
    lp.wqkv = add(p + "wqkv", {3 * d, d}, true);
    lp.wo = add(p + "wo", {d, d}, true);
    lp.ffn_norm = add(p + "ffn_norm", {d}, false);
    if (c.moe()) {
      lp.router = add(p + "router", {e, d}, true);
      lp.w13 = add(p + "w13", {e, 2 * f, d}, true);
      lp.w2 = add(p + "w2", {e, d, f}, true);
    } else {
      lp.router = -1;
      lp.w13 = add(p + "w13", {2 * f, d}, true);
      lp.w2 = add(p + "w2", {d, f}, true);
    }
    layout.layers.push_back(lp);
  }
  layout.final_norm = add("final_norm", {d}, false);
  layout.lm_head = add("lm_head", {v, d}, true);
  return layout;
}

void init_params(const ParamLayout& layout, const ModelConfig& c, uint64_t seed, float* params) {
  const double out_scale = 1.0 / std::sqrt(2.0 * c.n_layers);
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const ParamTensor& t = layout.tensors[i];
    float* p = params + t.offset;
    if (t.shape.size() == 1) {  // a norm's gain
      for (int64_t j = 0; j < t.size; ++j) p[j] = 1.0f;
      continue;
    }
    const bool is_output = t.name.size() > 3 && (t.name.compare(t.name.size() - 3, 3, ".wo") == 0 ||
                                                 t.name.compare(t.name.size() - 3, 3, ".w2") == 0);
    const double std_dev = 0.02 * (is_output ? out_scale : 1.0);
    uint64_t state = seed ^ (0xA0761D6478BD642Full * (i + 1));  // one stream per tensor
    for (int64_t j = 0; j < t.size; j += 2) {  // Box-Muller, two normals per draw
      const double r = std::sqrt(-2.0 * std::log(uniform01(&state)));
      const double a = 6.283185307179586 * uniform01(&state);
      p[j] = static_cast<float>(std_dev * r * std::cos(a));
      if (j + 1 < t.size) p[j + 1] = static_cast<float>(std_dev * r * std::sin(a));
    }
  }
}

}  // namespace blockscale::train
