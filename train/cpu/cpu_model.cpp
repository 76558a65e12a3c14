#include "train/cpu/cpu_model.h"

#include <cstring>
#include <vector>

#include "formats/moe.h"
#include "train/cpu/cpu_ops.h"
#include "train/model/recipe_policy.h"  // defines: gradient_sr_key, head_recipe

namespace blockscale::train {
namespace {

using Floats = std::vector<float>;

// What the backward needs of one layer's forward.
struct LayerActivations {
  Floats x_in, h, rstd1, qkv, probs, att, x_mid, h2, rstd2;
  // MoE
  Floats router_probs, gates, xs, u, a, y;
  std::vector<int32_t> expert_ids;
  formats::MoeRouting routing;
  std::vector<int64_t> group_ends;  // int64 copy of routing.group_ends
};

}  // namespace

CpuModel::CpuModel(const ModelConfig& config, Recipe recipe)
    : config_(config), recipe_(recipe), layout_(make_param_layout(config)) {}

Status CpuModel::forward_backward(const float* params, const int32_t* tokens, const int32_t* targets, int batch,
                                  float grad_scale, uint64_t run_seed, int64_t micro_step, float* grads,
                                  StepLosses* losses) {
  if (grads == nullptr) return Status::error("grads: must not be null");
  return run(params, tokens, targets, batch, grad_scale, run_seed, micro_step, grads, losses);
}

Status CpuModel::forward(const float* params, const int32_t* tokens, const int32_t* targets, int batch,
                         StepLosses* losses) {
  return run(params, tokens, targets, batch, 0.0f, 0, 0, nullptr, losses);
}

Status CpuModel::run(const float* params, const int32_t* tokens, const int32_t* targets, int batch,
                     float grad_scale, uint64_t run_seed, int64_t micro_step, float* grads, StepLosses* losses) {
  const ModelConfig& c = config_;
  if (params == nullptr || tokens == nullptr || targets == nullptr || losses == nullptr)
    return Status::error("params, tokens, targets, losses: must not be null");
  if (batch < 1) return Status::error("batch: must be >= 1");
  const int64_t m = int64_t{batch} * c.seq_len;
  for (int64_t t = 0; t < m; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab || targets[t] < 0 || targets[t] >= c.vocab)
      return Status::error("tokens/targets: entry " + std::to_string(t) + " is outside [0, vocab)");
  }
  const int d = c.d_model, f = c.d_ff, e = c.n_experts, k = c.top_k, hd = c.head_dim();
  const Recipe lin = recipe_, head = head_recipe(recipe_);
  const bool bf16_attention = recipe_ != Recipe::kFp32;  // fp32: exact, for gradient checks
  auto P = [&](int index) { return params + layout_.at(index).offset; };
  auto G = [&](int index) { return grads + layout_.at(index).offset; };

  // ---- forward ----
  Floats x(m * d);
  embedding_forward(tokens, m, c.seq_len, d, P(layout_.embed), P(layout_.pos_embed), x.data());
  std::vector<LayerActivations> acts(c.n_layers);
  double aux_total = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerParams& lp = layout_.layers[l];
    LayerActivations& s = acts[l];
    s.x_in = x;
    s.h.resize(m * d);
    s.rstd1.resize(m);
    rmsnorm_forward(x.data(), P(lp.attn_norm), m, d, s.h.data(), s.rstd1.data());
    s.qkv.resize(m * 3 * d);
    BS_RETURN_IF_ERROR(linear_forward(lin, s.h.data(), P(lp.wqkv), m, 3 * d, d, s.qkv.data()));
    s.probs.resize(size_t(batch) * c.n_heads * c.seq_len * c.seq_len);
    s.att.resize(m * d);
    attention_forward(s.qkv.data(), batch, c.seq_len, c.n_heads, hd, s.probs.data(), s.att.data(), bf16_attention);
    Floats o(m * d);
    BS_RETURN_IF_ERROR(linear_forward(lin, s.att.data(), P(lp.wo), m, d, d, o.data()));
    for (int64_t i = 0; i < m * d; ++i) x[i] += o[i];
    s.x_mid = x;
    s.h2.resize(m * d);
    s.rstd2.resize(m);
    rmsnorm_forward(x.data(), P(lp.ffn_norm), m, d, s.h2.data(), s.rstd2.data());
    Floats ffn_out(m * d);
    if (c.moe()) {
      Floats logits(m * e);
      BS_RETURN_IF_ERROR(linear_forward(Recipe::kFp32, s.h2.data(), P(lp.router), m, e, d, logits.data()));
      s.router_probs.resize(m * e);
      s.expert_ids.resize(m * k);
      s.gates.resize(m * k);
      router_forward(logits.data(), m, e, k, s.router_probs.data(), s.expert_ids.data(), s.gates.data());
      aux_total += load_balance_loss(s.router_probs.data(), s.expert_ids.data(), m, e, k);
      BS_RETURN_IF_ERROR(formats::moe_route(s.expert_ids.data(), m, k, e, &s.routing));
      s.group_ends.assign(s.routing.group_ends.begin(), s.routing.group_ends.end());
      const int64_t rows = s.group_ends.back();
      BS_RETURN_IF_ERROR(formats::moe_gather(s.h2.data(), m, d, d, s.routing.row_source.data(), rows, &s.xs));
      s.u.resize(rows * 2 * f);
      BS_RETURN_IF_ERROR(grouped_linear_forward(lin, s.xs.data(), s.group_ends, P(lp.w13), 2 * f, d, s.u.data()));
      s.a.resize(rows * f);
      swiglu_forward(s.u.data(), rows, f, s.a.data());
      s.y.resize(rows * d);
      BS_RETURN_IF_ERROR(grouped_linear_forward(lin, s.a.data(), s.group_ends, P(lp.w2), d, f, s.y.data()));
      if (bf16_attention) {
        for (float& v : s.y) v = round_to_bf16(v);  // the GPU's expert output is bf16
      }
      BS_RETURN_IF_ERROR(formats::moe_unpermute_combine(s.y.data(), rows, d, d, s.gates.data(),
                                                        s.routing.slot_row.data(), m, k, &ffn_out));
    } else {
      s.u.resize(m * 2 * f);
      BS_RETURN_IF_ERROR(linear_forward(lin, s.h2.data(), P(lp.w13), m, 2 * f, d, s.u.data()));
      s.a.resize(m * f);
      swiglu_forward(s.u.data(), m, f, s.a.data());
      BS_RETURN_IF_ERROR(linear_forward(lin, s.a.data(), P(lp.w2), m, d, f, ffn_out.data()));
    }
    for (int64_t i = 0; i < m * d; ++i) x[i] += ffn_out[i];
  }
  Floats hf(m * d), rstd_f(m), logits(m * int64_t{c.vocab});
  rmsnorm_forward(x.data(), P(layout_.final_norm), m, d, hf.data(), rstd_f.data());
  BS_RETURN_IF_ERROR(linear_forward(head, hf.data(), P(layout_.lm_head), m, c.vocab, d, logits.data()));
  const float ce_scale = grad_scale / float(m);
  losses->loss = cross_entropy(logits.data(), targets, m, c.vocab, ce_scale, grads ? logits.data() : nullptr) / m;
  losses->aux_loss = aux_total;
  if (grads == nullptr) return Status::ok();

  // ---- backward (logits now holds dlogits) ----
  Floats dhf(m * d), dx(m * d, 0.0f);
  BS_RETURN_IF_ERROR(linear_backward(head, {}, logits.data(), hf.data(), P(layout_.lm_head), m, c.vocab, d,
                                     dhf.data(), G(layout_.lm_head)));
  rmsnorm_backward(dhf.data(), x.data(), P(layout_.final_norm), rstd_f.data(), m, d, dx.data(), G(layout_.final_norm));
  const float aux_weight = grad_scale * c.aux_loss_coef;
  for (int l = c.n_layers - 1; l >= 0; --l) {
    const LayerParams& lp = layout_.layers[l];
    LayerActivations& s = acts[l];
    Floats dh2(m * d, 0.0f);
    if (c.moe()) {
      const int64_t rows = s.group_ends.back();
      Floats dy(rows * d), d_gates(m * k);
      moe_combine_backward(dx.data(), s.y.data(), s.gates.data(), s.routing.slot_row.data(), m, k, d, rows,
                           dy.data(), d_gates.data());
      Floats da(rows * f), du(rows * 2 * f), dxs(rows * d);
      BS_RETURN_IF_ERROR(grouped_linear_backward(lin, gradient_sr_key(run_seed, micro_step, l, 3), dy.data(),
                                                 s.a.data(), s.group_ends, P(lp.w2), d, f, da.data(), G(lp.w2)));
      swiglu_backward(s.u.data(), da.data(), rows, f, du.data());
      BS_RETURN_IF_ERROR(grouped_linear_backward(lin, gradient_sr_key(run_seed, micro_step, l, 2), du.data(),
                                                 s.xs.data(), s.group_ends, P(lp.w13), 2 * f, d, dxs.data(),
                                                 G(lp.w13)));
      moe_scatter_add(dxs.data(), s.routing.row_source.data(), rows, d, dh2.data());
      Floats dlogits(m * e), dh2_router(m * d);
      router_backward(s.router_probs.data(), s.expert_ids.data(), s.gates.data(), d_gates.data(), m, e, k,
                      aux_weight, dlogits.data());
      BS_RETURN_IF_ERROR(linear_backward(Recipe::kFp32, {}, dlogits.data(), s.h2.data(), P(lp.router), m, e, d,
                                         dh2_router.data(), G(lp.router)));
      for (int64_t i = 0; i < m * d; ++i) dh2[i] += dh2_router[i];
    } else {
      Floats da(m * f), du(m * 2 * f);
      BS_RETURN_IF_ERROR(linear_backward(lin, gradient_sr_key(run_seed, micro_step, l, 3), dx.data(), s.a.data(),
                                         P(lp.w2), m, d, f, da.data(), G(lp.w2)));
      swiglu_backward(s.u.data(), da.data(), m, f, du.data());
      BS_RETURN_IF_ERROR(linear_backward(lin, gradient_sr_key(run_seed, micro_step, l, 2), du.data(), s.h2.data(),
                                         P(lp.w13), m, 2 * f, d, dh2.data(), G(lp.w13)));
    }
    rmsnorm_backward(dh2.data(), s.x_mid.data(), P(lp.ffn_norm), s.rstd2.data(), m, d, dx.data(), G(lp.ffn_norm));
    // attention block: dx is the gradient of x after the attention residual.
    Floats datt(m * d), dqkv(m * 3 * d), dh(m * d, 0.0f);
    BS_RETURN_IF_ERROR(linear_backward(lin, gradient_sr_key(run_seed, micro_step, l, 1), dx.data(), s.att.data(),
                                       P(lp.wo), m, d, d, datt.data(), G(lp.wo)));
    attention_backward(s.qkv.data(), s.probs.data(), datt.data(), batch, c.seq_len, c.n_heads, hd, dqkv.data(),
                       bf16_attention);
    BS_RETURN_IF_ERROR(linear_backward(lin, gradient_sr_key(run_seed, micro_step, l, 0), dqkv.data(), s.h.data(),
                                       P(lp.wqkv), m, 3 * d, d, dh.data(), G(lp.wqkv)));
    rmsnorm_backward(dh.data(), s.x_in.data(), P(lp.attn_norm), s.rstd1.data(), m, d, dx.data(), G(lp.attn_norm));
  }
  embedding_backward(tokens, m, c.seq_len, d, dx.data(), G(layout_.embed), G(layout_.pos_embed));
  return Status::ok();
}

}  // namespace blockscale::train
