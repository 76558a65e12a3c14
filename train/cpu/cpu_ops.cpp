#include "train/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/scalar_codecs.h"

namespace blockscale::train {

float round_to_bf16(float x) { return formats::bf16_bits_to_float(formats::float_to_bf16_bits_rn(x)); }

void embedding_forward(const int32_t* tokens, int64_t n_tokens, int seq_len, int d, const float* embed,
                       const float* pos_embed, float* x) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* e = embed + int64_t{tokens[t]} * d;
    const float* p = pos_embed + (t % seq_len) * d;
    for (int c = 0; c < d; ++c) x[t * d + c] = e[c] + p[c];
  }
}

void embedding_backward(const int32_t* tokens, int64_t n_tokens, int seq_len, int d, const float* dx,
                        float* d_embed, float* d_pos_embed) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* e = d_embed + int64_t{tokens[t]} * d;
    float* p = d_pos_embed + (t % seq_len) * d;
    for (int c = 0; c < d; ++c) {
      e[c] += dx[t * d + c];
      p[c] += dx[t * d + c];
    }
  }
}

void rmsnorm_forward(const float* x, const float* gain, int64_t rows, int d, float* y, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    double ss = 0;
    for (int c = 0; c < d; ++c) ss += double(xr[c]) * xr[c];
    const float s = 1.0f / std::sqrt(float(ss / d) + kRmsNormEps);
    rstd[r] = s;
    for (int c = 0; c < d; ++c) y[r * d + c] = xr[c] * s * gain[c];
  }
}

void rmsnorm_backward(const float* dy, const float* x, const float* gain, const float* rstd, int64_t rows,
                      int d, float* dx, float* d_gain) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float s = rstd[r];
    // y = g * x * s, s = (mean(x^2) + eps)^-1/2: dx = s * (g*dy - x * s^2 * mean(g*dy*x)).
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += double(gain[c]) * dyr[c] * xr[c];
    const float m = float(dot / d) * s * s;
    for (int c = 0; c < d; ++c) {
      dx[r * d + c] += s * (gain[c] * dyr[c] - xr[c] * m);
      d_gain[c] += dyr[c] * xr[c] * s;
    }
  }
}

namespace {

// Head h of part `part` (0 q, 1 k, 2 v) of token row t, rounded to bf16.
void load_head(const float* qkv, int64_t row, int part, int h, int heads, int hd, bool bf16, float* out) {
  const float* src = qkv + row * (3 * int64_t{heads} * hd) + int64_t{part} * heads * hd + int64_t{h} * hd;
  for (int i = 0; i < hd; ++i) out[i] = bf16 ? round_to_bf16(src[i]) : src[i];
}

}  // namespace

void attention_forward(const float* qkv, int batch, int seq, int heads, int head_dim, float* probs,
                       float* out, bool bf16) {
  auto round = [bf16](float x) { return bf16 ? round_to_bf16(x) : x; };
  const int hd = head_dim;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> q(size_t(seq) * hd), k(q.size()), v(q.size()), s(seq);
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      for (int t = 0; t < seq; ++t) {
        const int64_t row = int64_t{b} * seq + t;
        load_head(qkv, row, 0, h, heads, hd, bf16, &q[size_t(t) * hd]);
        load_head(qkv, row, 1, h, heads, hd, bf16, &k[size_t(t) * hd]);
        load_head(qkv, row, 2, h, heads, hd, bf16, &v[size_t(t) * hd]);
      }
      float* p = probs + (int64_t{b} * heads + h) * seq * seq;
      for (int i = 0; i < seq; ++i) {
        float mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int c = 0; c < hd; ++c) dot += double(q[size_t(i) * hd + c]) * k[size_t(j) * hd + c];
          s[j] = float(dot) * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(double(s[j] - mx));
        for (int j = 0; j < seq; ++j) {
          p[int64_t{i} * seq + j] = j <= i ? round(float(std::exp(double(s[j] - mx)) / sum)) : 0.0f;
        }
        float* o = out + (int64_t{b} * seq + i) * heads * hd + int64_t{h} * hd;
        for (int c = 0; c < hd; ++c) {
          double acc = 0;
          for (int j = 0; j <= i; ++j) acc += double(p[int64_t{i} * seq + j]) * v[size_t(j) * hd + c];
          o[c] = float(acc);
        }
      }
    }
  }
}

void attention_backward(const float* qkv, const float* probs, const float* dout, int batch, int seq,
                        int heads, int head_dim, float* dqkv, bool bf16) {
  auto round = [bf16](float x) { return bf16 ? round_to_bf16(x) : x; };
  const int hd = head_dim;
  const int64_t width = 3 * int64_t{heads} * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> q(size_t(seq) * hd), k(q.size()), v(q.size()), dO(q.size());
  std::vector<float> ds(size_t(seq) * seq);
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      for (int t = 0; t < seq; ++t) {
        const int64_t row = int64_t{b} * seq + t;
        load_head(qkv, row, 0, h, heads, hd, bf16, &q[size_t(t) * hd]);
        load_head(qkv, row, 1, h, heads, hd, bf16, &k[size_t(t) * hd]);
        load_head(qkv, row, 2, h, heads, hd, bf16, &v[size_t(t) * hd]);
        const float* g = dout + row * heads * hd + int64_t{h} * hd;
        for (int c = 0; c < hd; ++c) dO[size_t(t) * hd + c] = round(g[c]);
      }
      const float* p = probs + (int64_t{b} * heads + h) * seq * seq;
      // dP = dO V^T; dS = P * (dP - rowsum(dP * P)), rounded to bf16 for the two products.
      for (int i = 0; i < seq; ++i) {
        double rowdot = 0;
        std::vector<float> dp(i + 1);
        for (int j = 0; j <= i; ++j) {
          double acc = 0;
          for (int c = 0; c < hd; ++c) acc += double(dO[size_t(i) * hd + c]) * v[size_t(j) * hd + c];
          dp[j] = float(acc);
          rowdot += double(dp[j]) * p[int64_t{i} * seq + j];
        }
        for (int j = 0; j < seq; ++j) {
          ds[size_t(i) * seq + j] =
              j <= i ? round(p[int64_t{i} * seq + j] * (dp[j] - float(rowdot))) : 0.0f;
        }
      }
      for (int t = 0; t < seq; ++t) {
        float* dq = dqkv + (int64_t{b} * seq + t) * width + int64_t{h} * hd;
        float* dk = dq + int64_t{heads} * hd;
        float* dv = dk + int64_t{heads} * hd;
        for (int c = 0; c < hd; ++c) {
          double aq = 0, ak = 0, av = 0;
          for (int j = 0; j <= t; ++j) aq += double(ds[size_t(t) * seq + j]) * k[size_t(j) * hd + c];
          for (int i = t; i < seq; ++i) {
            ak += double(ds[size_t(i) * seq + t]) * q[size_t(i) * hd + c];
            av += double(p[int64_t{i} * seq + t]) * dO[size_t(i) * hd + c];
          }
          dq[c] = float(aq) * scale;
          dk[c] = float(ak) * scale;
          dv[c] = float(av);
        }
      }
    }
  }
}

void swiglu_forward(const float* u, int64_t rows, int f, float* a) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < f; ++c) {
      const float g = u[r * 2 * f + c], up = u[r * 2 * f + f + c];
      a[r * f + c] = g / (1.0f + std::exp(-g)) * up;
    }
  }
}

void swiglu_backward(const float* u, const float* da, int64_t rows, int f, float* du) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < f; ++c) {
      const float g = u[r * 2 * f + c], up = u[r * 2 * f + f + c];
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float silu = g * sig;
      const float d = da[r * f + c];
      du[r * 2 * f + c] = d * up * sig * (1.0f + g * (1.0f - sig));
      du[r * 2 * f + f + c] = d * silu;
    }
  }
}

void router_forward(const float* logits, int64_t tokens, int experts, int top_k, float* probs,
                    int32_t* expert_ids, float* gates) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* z = logits + t * experts;
    float* p = probs + t * experts;
    float mx = -INFINITY;
    for (int e = 0; e < experts; ++e) mx = std::max(mx, z[e]);
    double sum = 0;
    for (int e = 0; e < experts; ++e) sum += std::exp(double(z[e] - mx));
    for (int e = 0; e < experts; ++e) p[e] = float(std::exp(double(z[e] - mx)) / sum);
    int32_t* ids = expert_ids + t * top_k;
    float* g = gates + t * top_k;
    float chosen_sum = 0;
    for (int j = 0; j < top_k; ++j) {  // selection: the largest not yet taken, lower index on ties
      int best = -1;
      for (int e = 0; e < experts; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken |= ids[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      ids[j] = best;
      g[j] = p[best];
      chosen_sum += p[best];
    }
    if (top_k > 1) {
      for (int j = 0; j < top_k; ++j) g[j] /= chosen_sum;
    }
  }
}

float load_balance_loss(const float* probs, const int32_t* expert_ids, int64_t tokens, int experts, int top_k) {
  if (tokens == 0) return 0.0f;
  std::vector<double> f(experts, 0.0), pm(experts, 0.0);
  for (int64_t s = 0; s < tokens * top_k; ++s) f[expert_ids[s]] += 1.0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) pm[e] += probs[t * experts + e];
  }
  double loss = 0;
  for (int e = 0; e < experts; ++e) loss += (f[e] / double(tokens * top_k)) * (pm[e] / double(tokens));
  return float(experts * loss);
}

void router_backward(const float* probs, const int32_t* expert_ids, const float* gates, const float* d_gates,
                     int64_t tokens, int experts, int top_k, float aux_weight, float* dlogits) {
  std::vector<float> share(experts, 0.0f);  // d aux / d P_e = experts * f_e, per token / tokens
  for (int64_t s = 0; s < tokens * top_k; ++s) share[expert_ids[s]] += 1.0f;
  for (int e = 0; e < experts; ++e) share[e] = aux_weight * experts * share[e] / float(tokens * top_k) / float(tokens);
  std::vector<float> dp(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* p = probs + t * experts;
    const int32_t* ids = expert_ids + t * top_k;
    const float* g = gates + t * top_k;
    const float* dg = d_gates + t * top_k;
    for (int e = 0; e < experts; ++e) dp[e] = share[e];
    if (top_k == 1) {
      dp[ids[0]] += dg[0];
    } else {  // g_j = p_j / S: dp_j = (dg_j - sum_i dg_i g_i) / S
      float chosen_sum = 0, gdot = 0;
      for (int j = 0; j < top_k; ++j) {
        chosen_sum += p[ids[j]];
        gdot += dg[j] * g[j];
      }
      for (int j = 0; j < top_k; ++j) dp[ids[j]] += (dg[j] - gdot) / chosen_sum;
    }
    double pdot = 0;
    for (int e = 0; e < experts; ++e) pdot += double(dp[e]) * p[e];
    for (int e = 0; e < experts; ++e) dlogits[t * experts + e] = p[e] * (dp[e] - float(pdot));
  }
}

void moe_combine_backward(const float* dout, const float* y, const float* gates, const int32_t* slot_row,
                          int64_t tokens, int top_k, int d, int64_t y_rows, float* dy, float* d_gates) {
  std::memset(dy, 0, sizeof(float) * size_t(y_rows) * d);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {
      const int64_t s = t * top_k + j;
      const int32_t r = slot_row[s];
      if (r < 0 || r >= y_rows) {
        d_gates[s] = 0.0f;
        continue;
      }
      double dot = 0;
      for (int c = 0; c < d; ++c) {
        dy[int64_t{r} * d + c] = gates[s] * dout[t * d + c];
        dot += double(dout[t * d + c]) * y[int64_t{r} * d + c];
      }
      d_gates[s] = float(dot);
    }
  }
}

void moe_scatter_add(const float* dx_sorted, const int32_t* row_source, int64_t rows, int d, float* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    if (row_source[r] < 0) continue;
    float* dst = dx + int64_t{row_source[r]} * d;
    for (int c = 0; c < d; ++c) dst[c] += dx_sorted[r * d + c];
  }
}

double cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int vocab, float grad_scale,
                     float* dlogits) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits + r * vocab;
    float mx = -INFINITY;
    for (int v = 0; v < vocab; ++v) mx = std::max(mx, z[v]);
    double sum = 0;
    for (int v = 0; v < vocab; ++v) sum += std::exp(double(z[v] - mx));
    const double log_sum = std::log(sum) + mx;
    total += log_sum - z[targets[r]];
    if (dlogits == nullptr) continue;
    for (int v = 0; v < vocab; ++v) {
      const float p = float(std::exp(double(z[v]) - log_sum));
      dlogits[r * vocab + v] = (p - (v == targets[r] ? 1.0f : 0.0f)) * grad_scale;
    }
  }
  return total;
}

}  // namespace blockscale::train
