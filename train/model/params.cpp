#include "train/model/params.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

namespace blockscale::train {
namespace {

// splitmix64: a small, platform-independent generator for the initial weights. Its state moves
// by kGamma per draw.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
uint64_t next_u64(uint64_t* state) {
  uint64_t z = (*state += kGamma);
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

// Each tensor draws from its own splitmix64 stream, a pair of normals per two draws. splitmix64's
// state after n draws is its start plus n * gamma, so any range of pairs can start on its own: the
// tensors are cut into chunks filled by all hardware threads, with the bits of one sequential pass
// (a 3B-parameter model took ~1 minute on one core).
void init_params(const ParamLayout& layout, const ModelConfig& c, uint64_t seed, float* params) {
  constexpr int64_t kChunkPairs = int64_t{1} << 20;
  const double out_scale = 1.0 / std::sqrt(2.0 * c.n_layers);
  struct Chunk {
    float* p;
    int64_t begin, end;  // elements of the tensor, begin even
    uint64_t state;      // the stream's state before element `begin`'s pair
    double std_dev;
  };
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const ParamTensor& t = layout.tensors[i];
    float* p = params + t.offset;
    if (t.shape.size() == 1) {  // a norm's gain
      std::fill(p, p + t.size, 1.0f);
      continue;
    }
    const bool is_output = t.name.size() > 3 && (t.name.compare(t.name.size() - 3, 3, ".wo") == 0 ||
                                                 t.name.compare(t.name.size() - 3, 3, ".w2") == 0);
    const double std_dev = 0.02 * (is_output ? out_scale : 1.0);
    const uint64_t start = seed ^ (0xA0761D6478BD642Full * (i + 1));  // one stream per tensor
    for (int64_t b = 0; b < t.size; b += 2 * kChunkPairs)
      chunks.push_back({p, b, std::min(t.size, b + 2 * kChunkPairs), start + uint64_t(b) * kGamma, std_dev});
  }
  std::atomic<size_t> next{0};
  auto fill = [&] {
    for (size_t n; (n = next.fetch_add(1)) < chunks.size();) {
      const Chunk& k = chunks[n];
      uint64_t state = k.state;
      for (int64_t j = k.begin; j < k.end; j += 2) {  // Box-Muller, two normals per draw
        const double r = std::sqrt(-2.0 * std::log(uniform01(&state)));
        const double a = 6.283185307179586 * uniform01(&state);
        k.p[j] = static_cast<float>(k.std_dev * r * std::cos(a));
        if (j + 1 < k.end) k.p[j + 1] = static_cast<float>(k.std_dev * r * std::sin(a));
      }
    }
  };
  const size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), chunks.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(fill);
  fill();
  for (std::thread& t : pool) t.join();
}

}  // namespace blockscale::train
