// The GPU step's forward and backward (GpuBackend::run, train/gpu/gpu_backend_impl.h): embedding,
// per layer attention and the FFN (dense, or MoE with routing, the experts through the grouped
// layers and, with expert parallelism, the token exchange), the loss; then the same in reverse,
// summing each layer's gradients across ranks as soon as they are written.
#include "train/gpu/gpu_backend_impl.h"

namespace blockscale::train::gpu_step {

Status GpuBackend::run(const int32_t* tokens_host, const int32_t* targets_host, int batch, float grad_scale,
                       uint64_t run_seed, int64_t micro_step, bool backward, bool reduce, StepLosses* losses) {
  const ModelConfig& c = config_;
  const int64_t m = int64_t{batch} * c.seq_len;
  const int d = c.d_model, f = c.d_ff, e = c.n_experts, k = c.top_k, hd = c.head_dim(), L = c.n_layers;
  const Recipe lin = recipe_, head = head_recipe(recipe_);
  for (int64_t t = 0; t < m; ++t) {
    if (tokens_host[t] < 0 || tokens_host[t] >= c.vocab || targets_host[t] < 0 || targets_host[t] >= c.vocab)
      return Status::error("tokens/targets: entry " + std::to_string(t) + " is outside [0, vocab)");
  }
  int32_t *tokens, *targets;
  BS_RETURN_IF_ERROR(buf("tokens", m, &tokens));
  BS_RETURN_IF_ERROR(buf("targets", m, &targets));
  BS_CUDA(cudaMemcpyAsync(tokens, tokens_host, m * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  BS_CUDA(cudaMemcpyAsync(targets, targets_host, m * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  // Attention: cuDNN's fused path for this batch size where it builds, else the reference (from
  // here on; a forward and its backward always take the same one).
  if (attention_status_.is_ok()) attention_status_ = fused_attention_.prepare(batch, c.seq_len, c.n_heads, hd, stream_);
  const bool fused = attention_status_.is_ok();
  const size_t attn_ws_bytes = fused ? fused_attention_.workspace_bytes(batch)
                                     : gpu::attention_workspace_bytes(batch, c.seq_len, c.n_heads, hd);
  uint8_t* attn_ws;
  BS_RETURN_IF_ERROR(buf("attn_ws", int64_t(attn_ws_bytes), &attn_ws));
  float* aux;  // one load-balancing loss per layer
  BS_RETURN_IF_ERROR(buf("aux", std::max(L, 1), &aux));
  BS_CUDA(cudaMemsetAsync(aux, 0, sizeof(float) * std::max(L, 1), stream_));
  const int64_t rows = m * k;  // routed rows: every token takes top_k experts, none dropped
  const size_t router_ws_bytes = c.moe() ? gpu::router_workspace_bytes(m, e) : 0;
  uint8_t* router_ws;
  BS_RETURN_IF_ERROR(buf("router_ws", int64_t(router_ws_bytes), &router_ws));

  // ---- forward ----
  float* x;
  BS_RETURN_IF_ERROR(buf("x", m * d, &x));
  timer_.mark(Phase::kEmbedLoss);
  BS_RETURN_IF_ERROR(await_params(0));  // the sharded optimizer's gathers, part by part
  BS_RETURN_IF_ERROR(gpu::embedding_forward(tokens, m, c.seq_len, d, c.vocab, P(layout_.embed), P(layout_.pos_embed),
                                            x, stream_));
  for (int l = 0; l < L; ++l) {
    const LayerParams& lp = layout_.layers[l];
    const std::string n = "l" + std::to_string(l);
    LayerActivations s;
    BS_RETURN_IF_ERROR(layer_activations(l, batch, &s));
    float *x_in = s.x_in, *h = s.h, *rstd1 = s.rstd1, *qkv = s.qkv, *att = s.att, *x_mid = s.x_mid, *h2 = s.h2,
          *rstd2 = s.rstd2, *u = s.u, *a = s.a, *o, *ffn_out;
    uint16_t* probs = s.probs;
    BS_RETURN_IF_ERROR(buf("o", m * d, &o));
    BS_RETURN_IF_ERROR(buf("ffn_out", m * d, &ffn_out));
    timer_.mark(Phase::kOther);
    BS_RETURN_IF_ERROR(await_params(1 + l));
    BS_CUDA(cudaMemcpyAsync(x_in, x, m * d * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    timer_.mark(Phase::kNorm);
    BS_RETURN_IF_ERROR(gpu::rmsnorm_forward(x, P(lp.attn_norm), m, d, h, rstd1, stream_));
    BS_RETURN_IF_ERROR(layers_.linear_forward(n + ".wqkv", lin, h, P(lp.wqkv), m, 3 * d, d, qkv));
    {
      PhaseScope phase(timer_, Phase::kAttention);
      if (fused)
        BS_RETURN_IF_ERROR(fused_attention_.forward(qkv, batch, att, s.stats, attn_ws, stream_));
      else
        BS_RETURN_IF_ERROR(gpu::attention_forward(qkv, batch, c.seq_len, c.n_heads, hd, probs, att, attn_ws,
                                                  attn_ws_bytes, cublas_, stream_));
    }
    BS_RETURN_IF_ERROR(layers_.linear_forward(n + ".wo", lin, att, P(lp.wo), m, d, d, o));
    timer_.mark(Phase::kOther);
    gpu::add_inplace(x, o, m * d, stream_);
    BS_CUDA(cudaMemcpyAsync(x_mid, x, m * d * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    timer_.mark(Phase::kNorm);
    BS_RETURN_IF_ERROR(gpu::rmsnorm_forward(x, P(lp.ffn_norm), m, d, h2, rstd2, stream_));
    if (c.moe()) {
      float *logits, *rprobs = s.rprobs, *gates = s.gates, *xs = s.xs, *y = s.y;
      int32_t *ids = s.ids, *ends = s.ends, *row_source = s.row_source, *slot_row = s.slot_row;
      uint16_t* y16;
      BS_RETURN_IF_ERROR(buf("router_logits", m * e, &logits));
      BS_RETURN_IF_ERROR(buf("y16", rows * d, &y16));
      BS_RETURN_IF_ERROR(layers_.cublas_gemm(Product::kXWt, CUDA_R_32F, h2, P(lp.router), m, e, d, logits, 0.0f));
      timer_.mark(Phase::kRouting);
      BS_RETURN_IF_ERROR(gpu::router_forward(logits, m, e, k, rprobs, ids, gates, stream_));
      BS_RETURN_IF_ERROR(gpu::load_balance_loss(rprobs, ids, m, e, k, aux + l, router_ws, router_ws_bytes, stream_));
      quant::RoutingProblem rp{m, k, e};
      uint8_t* route_ws;
      const size_t route_ws_bytes = quant::workspace_size(rp);
      BS_RETURN_IF_ERROR(buf("route_ws", int64_t(route_ws_bytes), &route_ws));
      BS_RETURN_IF_ERROR(quant::run(rp, quant::RoutingInputs{ids}, quant::RoutingOutputs{ends, row_source, slot_row},
                                    route_ws, route_ws_bytes, stream_));
      // The group sizes on the host: for the cuBLAS experts loop, the per-expert cuBLASLt route
      // and the exchange plan.
      if (layers_.experts_need_host_ends() || expert_parallel_) {
        layers_.host_ends().resize(e);
        BS_CUDA(cudaMemcpyAsync(layers_.host_ends().data(), ends, e * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                stream_));
        BS_CUDA(cudaStreamSynchronize(stream_));
        all_host_ends_[l] = layers_.host_ends();
      }
      ExpertRows er{e, rows, ends, 0};  // the experts this rank runs, and their rows
      float* ye = y;
      if (expert_parallel_) {  // xs: the rows every rank routed to this rank's experts
        float *routed, *scratch;
        BS_RETURN_IF_ERROR(buf("ep_routed", rows * d, &routed));
        BS_RETURN_IF_ERROR(buf("ep_scratch", ffn_capacity(rows) * d, &scratch));
        BS_RETURN_IF_ERROR(buf("ep_y", ffn_capacity(rows) * d, &ye));
        gpu::gather_rows(h2, m, d, row_source, rows, routed, stream_);
        ExpertExchange& xc = exchange(l);
        BS_RETURN_IF_ERROR(xc.plan(*comm_, layers_.host_ends(), e, stream_));
        {
          PhaseScope phase(timer_, Phase::kCommunication);
          BS_RETURN_IF_ERROR(xc.dispatch(*comm_, routed, xs, d, scratch, stream_));
        }
        er = {xc.local_experts(), xc.received_rows(), xc.local_ends_device(), xc.first_expert()};
        layers_.host_ends() = xc.local_ends_host();
      }
      // MXFP8 and FP8 blockwise permute the tokens while quantizing them (the backward needs only
      // their quantized copies); NVFP4 and the cuBLAS recipes take a permuted fp32 copy.
      const bool fused = !expert_parallel_ && (recipe_ == Recipe::kMxfp8 || recipe_ == Recipe::kFp8Block);
      const Gather gather{row_source, m};
      if (!expert_parallel_ && !fused) gpu::gather_rows(h2, m, d, row_source, rows, xs, stream_);
      if (er.rows > 0) {
        BS_RETURN_IF_ERROR(layers_.grouped_forward(n + ".w13", fused ? h2 : xs, er.rows, er.ends, er.experts,
                                           P(lp.w13) + er.first * 2 * f * d, 2 * f, d, u, fused ? &gather : nullptr));
        timer_.mark(Phase::kOther);
        BS_RETURN_IF_ERROR(gpu::swiglu_forward(u, er.rows, f, a, stream_));
        BS_RETURN_IF_ERROR(layers_.grouped_forward(n + ".w2", a, er.rows, er.ends, er.experts, P(lp.w2) + er.first * d * f, d,
                                           f, ye));
      }
      if (expert_parallel_) {
        float* scratch;
        BS_RETURN_IF_ERROR(buf("ep_scratch", ffn_capacity(rows) * d, &scratch));
        {
          PhaseScope phase(timer_, Phase::kCommunication);
          BS_RETURN_IF_ERROR(exchange(l).give_back(*comm_, ye, y, d, scratch, stream_));
        }
      }
      timer_.mark(Phase::kRouting);
      gpu::round_to_bf16(y, y16, rows * d, stream_);  // the combine takes bf16 expert outputs
      quant::CombineProblem cp;
      cp.tokens = m, cp.top_k = k, cp.cols = d, cp.y_rows = rows, cp.ld_y = d, cp.ld_out = d;
      cp.out_type = quant::CombineOutputType::kFp32;
      BS_RETURN_IF_ERROR(quant::run(cp, quant::CombineInputs{y16, gates, slot_row}, quant::CombineOutputs{ffn_out},
                                    nullptr, 0, stream_));
    } else {
      BS_RETURN_IF_ERROR(layers_.linear_forward(n + ".w13", lin, h2, P(lp.w13), m, 2 * f, d, u));
      timer_.mark(Phase::kOther);
      BS_RETURN_IF_ERROR(gpu::swiglu_forward(u, m, f, a, stream_));
      BS_RETURN_IF_ERROR(layers_.linear_forward(n + ".w2", lin, a, P(lp.w2), m, d, f, ffn_out));
    }
    timer_.mark(Phase::kOther);
    gpu::add_inplace(x, ffn_out, m * d, stream_);
  }
  float *hf, *rstd_f, *logits, *row_loss, *loss_sum;
  uint8_t* reduce_ws;
  BS_RETURN_IF_ERROR(buf("hf", m * d, &hf));
  BS_RETURN_IF_ERROR(buf("rstd_f", m, &rstd_f));
  BS_RETURN_IF_ERROR(buf("logits", m * c.vocab, &logits));
  BS_RETURN_IF_ERROR(buf("row_loss", m, &row_loss));
  BS_RETURN_IF_ERROR(buf("loss_sum", 1, &loss_sum));
  const size_t reduce_bytes = gpu::reduction_workspace_bytes(m);
  BS_RETURN_IF_ERROR(buf("loss_ws", int64_t(reduce_bytes), &reduce_ws));
  BS_RETURN_IF_ERROR(await_params(L + 1));
  timer_.mark(Phase::kNorm);
  BS_RETURN_IF_ERROR(gpu::rmsnorm_forward(x, P(layout_.final_norm), m, d, hf, rstd_f, stream_));
  BS_RETURN_IF_ERROR(layers_.linear_forward("lm_head", head, hf, P(layout_.lm_head), m, c.vocab, d, logits));
  timer_.mark(Phase::kEmbedLoss);
  BS_RETURN_IF_ERROR(gpu::cross_entropy(logits, targets, m, c.vocab, grad_scale / float(m), row_loss,
                                        backward ? logits : nullptr, stream_));
  BS_RETURN_IF_ERROR(gpu::sum(row_loss, m, loss_sum, reduce_ws, reduce_bytes, stream_));
  // Into pinned memory, so the backward queues behind the copies instead of waiting for them; the
  // host reads the losses at its next wait (at once for evaluation, after the backward otherwise).
  BS_CUDA(cudaMemcpyAsync(host_scalars_ + kLoss, loss_sum, sizeof(float), cudaMemcpyDeviceToHost, stream_));
  BS_CUDA(cudaMemcpyAsync(host_scalars_ + kAuxLosses, aux, std::max(L, 1) * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_));
  const auto read_losses = [&] {
    losses->loss = double(host_scalars_[kLoss]) / m;
    losses->aux_loss = 0;
    for (int l = 0; l < L && c.moe(); ++l) losses->aux_loss += host_scalars_[kAuxLosses + l];
  };
  if (!backward) {
    BS_CUDA(cudaStreamSynchronize(stream_));
    read_losses();
    return Status::ok();
  }

  // ---- backward (logits holds dlogits) ----
  float *dhf, *dx, *dh2, *datt, *dqkv, *dh;
  BS_RETURN_IF_ERROR(buf("dhf", m * d, &dhf));
  BS_RETURN_IF_ERROR(buf("dx", m * d, &dx));
  BS_RETURN_IF_ERROR(buf("dh2", m * d, &dh2));
  BS_RETURN_IF_ERROR(buf("datt", m * d, &datt));
  BS_RETURN_IF_ERROR(buf("dqkv", m * 3 * d, &dqkv));
  BS_RETURN_IF_ERROR(buf("dh", m * d, &dh));
  const size_t norm_ws_bytes = gpu::rmsnorm_backward_workspace_bytes(m, d);
  uint8_t* norm_ws;
  BS_RETURN_IF_ERROR(buf("norm_ws", int64_t(norm_ws_bytes), &norm_ws));
  BS_CUDA(cudaMemsetAsync(dx, 0, m * d * sizeof(float), stream_));
  BS_RETURN_IF_ERROR(layers_.linear_backward("lm_head", head, {}, logits, hf, P(layout_.lm_head), m, c.vocab, d, dhf,
                                     G(layout_.lm_head)));
  timer_.mark(Phase::kNorm);
  BS_RETURN_IF_ERROR(gpu::rmsnorm_backward(dhf, x, P(layout_.final_norm), rstd_f, m, d, dx, G(layout_.final_norm),
                                           norm_ws, norm_ws_bytes, stream_));
  if (reduce) BS_RETURN_IF_ERROR(reduce_gradients(layer_begin(L), layout_.total));  // final norm, LM head
  const float aux_weight = grad_scale * c.aux_loss_coef;
  for (int l = L - 1; l >= 0; --l) {
    const LayerParams& lp = layout_.layers[l];
    const std::string n = "l" + std::to_string(l);
    LayerActivations s;
    BS_RETURN_IF_ERROR(layer_activations(l, batch, &s));
    float *x_in = s.x_in, *h = s.h, *rstd1 = s.rstd1, *qkv = s.qkv, *att = s.att, *x_mid = s.x_mid, *h2 = s.h2,
          *rstd2 = s.rstd2, *u = s.u, *a = s.a;
    const uint16_t* probs = s.probs;
    timer_.mark(Phase::kOther);
    BS_CUDA(cudaMemsetAsync(dh2, 0, m * d * sizeof(float), stream_));
    if (c.moe()) {
      float *rprobs = s.rprobs, *gates = s.gates, *xs = s.xs, *y = s.y, *dy, *d_gates, *da, *du, *dxs, *dlogits;
      int32_t *ids = s.ids, *ends = s.ends, *slot_row = s.slot_row;
      const int64_t cap = ffn_capacity(rows);
      BS_RETURN_IF_ERROR(buf("dy", rows * d, &dy));
      BS_RETURN_IF_ERROR(buf("d_gates", m * k, &d_gates));
      BS_RETURN_IF_ERROR(buf("da", cap * f, &da));
      BS_RETURN_IF_ERROR(buf("du", cap * 2 * f, &du));
      BS_RETURN_IF_ERROR(buf("dxs", rows * d, &dxs));
      BS_RETURN_IF_ERROR(buf("router_dlogits", m * e, &dlogits));
      timer_.mark(Phase::kRouting);
      BS_RETURN_IF_ERROR(gpu::moe_combine_backward(dx, y, gates, slot_row, m, k, d, rows, dy, d_gates, stream_));
      ExpertRows er{e, rows, ends, 0};
      float *dye = dy, *dxe = dxs, *scratch = nullptr;
      if (expert_parallel_) {  // each dy row to its expert's rank, as in the forward
        const ExpertExchange& xc = exchange(l);
        er = {xc.local_experts(), xc.received_rows(), xc.local_ends_device(), xc.first_expert()};
        layers_.host_ends() = xc.local_ends_host();
        BS_RETURN_IF_ERROR(buf("ep_scratch", cap * d, &scratch));
        BS_RETURN_IF_ERROR(buf("ep_dy", cap * d, &dye));
        BS_RETURN_IF_ERROR(buf("ep_dx", cap * d, &dxe));
        {
          PhaseScope phase(timer_, Phase::kCommunication);
          BS_RETURN_IF_ERROR(xc.dispatch(*comm_, dy, dye, d, scratch, stream_));
        }
      } else if (layers_.experts_need_host_ends()) {
        layers_.host_ends() = all_host_ends_[l];
      }
      if (er.rows > 0) {
        const int64_t w2_at = er.first * d * f, w13_at = er.first * 2 * f * d;
        BS_RETURN_IF_ERROR(layers_.grouped_backward(n + ".w2", gradient_sr_key(run_seed, micro_step, l, 3), dye, a, er.rows,
                                            er.ends, er.experts, P(lp.w2) + w2_at, d, f, da, G(lp.w2) + w2_at));
        if (reduce && !expert_parallel_) BS_RETURN_IF_ERROR(reduce_tensor(l, lp.w2));
        timer_.mark(Phase::kOther);
        BS_RETURN_IF_ERROR(gpu::swiglu_backward(u, da, er.rows, f, du, stream_));
        BS_RETURN_IF_ERROR(layers_.grouped_backward(n + ".w13", gradient_sr_key(run_seed, micro_step, l, 2), du, xs, er.rows,
                                            er.ends, er.experts, P(lp.w13) + w13_at, 2 * f, d, dxe,
                                            G(lp.w13) + w13_at));
        if (reduce && !expert_parallel_) BS_RETURN_IF_ERROR(reduce_tensor(l, lp.w13));
      }
      if (expert_parallel_) {
        PhaseScope phase(timer_, Phase::kCommunication);
        BS_RETURN_IF_ERROR(exchange(l).give_back(*comm_, dxe, dxs, d, scratch, stream_));
      }
      timer_.mark(Phase::kRouting);
      BS_RETURN_IF_ERROR(gpu::moe_scatter_add(dxs, slot_row, m, k, rows, d, dh2, stream_));
      BS_RETURN_IF_ERROR(gpu::router_backward(rprobs, ids, gates, d_gates, m, e, k, aux_weight, dlogits, router_ws,
                                              router_ws_bytes, stream_));
      // router in fp32: dWr += dlogits^T h2, dh2 += dlogits · Wr
      BS_RETURN_IF_ERROR(
          layers_.cublas_gemm(Product::kDytX, CUDA_R_32F, dlogits, h2, m, e, d, G(lp.router), layers_.wgrad_beta()));
      BS_RETURN_IF_ERROR(layers_.cublas_gemm(Product::kDyW, CUDA_R_32F, dlogits, P(lp.router), m, e, d, dh2, 1.0f));
    } else {
      float *da, *du;
      BS_RETURN_IF_ERROR(buf("da", m * f, &da));
      BS_RETURN_IF_ERROR(buf("du", m * 2 * f, &du));
      BS_RETURN_IF_ERROR(layers_.linear_backward(n + ".w2", lin, gradient_sr_key(run_seed, micro_step, l, 3), dx, a, P(lp.w2), m,
                                         d, f, da, G(lp.w2)));
      if (reduce) BS_RETURN_IF_ERROR(reduce_tensor(l, lp.w2));
      timer_.mark(Phase::kOther);
      BS_RETURN_IF_ERROR(gpu::swiglu_backward(u, da, m, f, du, stream_));
      BS_RETURN_IF_ERROR(layers_.linear_backward(n + ".w13", lin, gradient_sr_key(run_seed, micro_step, l, 2), du, h2, P(lp.w13),
                                         m, 2 * f, d, dh2, G(lp.w13)));
      if (reduce) BS_RETURN_IF_ERROR(reduce_tensor(l, lp.w13));
    }
    timer_.mark(Phase::kNorm);
    BS_RETURN_IF_ERROR(gpu::rmsnorm_backward(dh2, x_mid, P(lp.ffn_norm), rstd2, m, d, dx, G(lp.ffn_norm), norm_ws,
                                             norm_ws_bytes, stream_));
    if (reduce) BS_RETURN_IF_ERROR(reduce_tensor(l, lp.ffn_norm));  // with the router
    timer_.mark(Phase::kOther);
    BS_CUDA(cudaMemsetAsync(dh, 0, m * d * sizeof(float), stream_));
    BS_RETURN_IF_ERROR(layers_.linear_backward(n + ".wo", lin, gradient_sr_key(run_seed, micro_step, l, 1), dx, att, P(lp.wo), m,
                                       d, d, datt, G(lp.wo)));
    if (reduce) BS_RETURN_IF_ERROR(reduce_tensor(l, lp.wo));
    {
      PhaseScope phase(timer_, Phase::kAttention);
      if (fused)
        BS_RETURN_IF_ERROR(fused_attention_.backward(qkv, att, s.stats, datt, batch, dqkv, attn_ws, stream_));
      else
        BS_RETURN_IF_ERROR(gpu::attention_backward(qkv, probs, datt, batch, c.seq_len, c.n_heads, hd, dqkv, attn_ws,
                                                   attn_ws_bytes, cublas_, stream_));
    }
    BS_RETURN_IF_ERROR(layers_.linear_backward(n + ".wqkv", lin, gradient_sr_key(run_seed, micro_step, l, 0), dqkv, h,
                                       P(lp.wqkv), m, 3 * d, d, dh, G(lp.wqkv)));
    timer_.mark(Phase::kNorm);
    BS_RETURN_IF_ERROR(gpu::rmsnorm_backward(dh, x_in, P(lp.attn_norm), rstd1, m, d, dx, G(lp.attn_norm), norm_ws,
                                             norm_ws_bytes, stream_));
    if (reduce) BS_RETURN_IF_ERROR(reduce_tensor(l, lp.attn_norm));  // with wqkv
  }
  size_t emb_ws_bytes = 0;
  BS_RETURN_IF_ERROR(gpu::embedding_backward_workspace_bytes(m, c.vocab, &emb_ws_bytes));
  uint8_t* emb_ws;
  BS_RETURN_IF_ERROR(buf("emb_ws", int64_t(emb_ws_bytes), &emb_ws));
  timer_.mark(Phase::kEmbedLoss);
  BS_RETURN_IF_ERROR(gpu::embedding_backward(tokens, m, c.seq_len, d, c.vocab, dx, G(layout_.embed),
                                             G(layout_.pos_embed), emb_ws, emb_ws_bytes, stream_));
  if (reduce) BS_RETURN_IF_ERROR(reduce_gradients(0, layer_begin(0)));  // embeddings
  BS_CUDA(cudaStreamSynchronize(stream_));
  BS_RETURN_IF_ERROR(runtime::launch_status("the step's kernels"));
  read_losses();
  return Status::ok();
}

}  // namespace blockscale::train::gpu_step
