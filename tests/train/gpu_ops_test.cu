// Tests of train/gpu_ops.h against the CPU reference train/cpu_ops.h, one op at a time, on seeded
// random inputs (never all zeros) and odd sizes; every output buffer starts poisoned (0xFF bytes:
// NaN in fp32 and bf16, -1 in int32) so an element the kernel never writes fails the comparison.
// Tolerances, each stated where it is used:
//   - bit-identical: embedding forward / backward (same additions in the same order), x * factor
//     (scale), the combine's dy (one product), bf16 conversion, AdamW (a host loop of the formula
//     in gpu_ops.h, compiled without fma contraction: -std=c++17 turns GCC's contraction off);
//   - fp32 vs the CPU's double sums: relative 1e-5 of the terms' magnitude (a sum of n fp32 terms in
//     the kernels' chunked / tree order is off by at most ~(n/chunks + log2 n) * 2^-24 of the sum of
//     |terms|: < 3e-6 for every size here; expf/logf add a few ulps);
//   - attention: 1e-2 of the largest reference value (bf16 rounding points; see AttentionTest);
//   - router ids: exact (the logits keep a clear gap between probabilities).
// Determinism: embedding_backward, rmsnorm_backward, attention_backward, load_balance_loss and
// sum / sum_of_squares run twice and compare bits. GPU tests skip without a GPU; the argument
// checks run everywhere.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "formats/scalar_codecs.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK, expect_error
#include "tests/train/test_inputs.h"  // normal, bf16_rounding_inputs
#include "train/cpu_ops.h"
#include "train/gpu_ops.h"
#include "train/optimizer.h"  // clip_factor

namespace {

namespace cpu = blockscale::train;
namespace gpu = blockscale::train::gpu;
using blockscale::train::clip_factor;
using blockscale::runtime::DeviceBuffer;
using blockscale_test::expect_error;

// ---- Device copies, poisoned on allocation (a failure fails the test) -----------------------------

template <class T>
DeviceBuffer poisoned(size_t n) {
  DeviceBuffer b;
  blockscale::Status s = b.alloc(sizeof(T) * n, "output");
  if (s) s = blockscale::runtime::cuda_status(cudaMemset(b.data(), 0xFF, b.size()), "poison");
  EXPECT_OK(s);
  return b;
}
template <class T>
DeviceBuffer on_device(const std::vector<T>& h) {
  DeviceBuffer b;
  EXPECT_OK(b.upload(h, "input"));
  return b;
}
// The contents after the device finished.
template <class T>
std::vector<T> host_copy(const DeviceBuffer& b) {
  std::vector<T> h(b.size() / sizeof(T));
  blockscale::Status s = blockscale::runtime::cuda_status(cudaDeviceSynchronize(), "the kernels");
  if (s) s = b.download(h.data(), b.size(), "output");
  EXPECT_OK(s);
  return h;
}

// ---- Inputs --------------------------------------------------------------------------------------

using blockscale_test::normal;
std::vector<int32_t> uniform_ints(size_t n, int32_t lo, int32_t hi, uint64_t seed) {  // [lo, hi]
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ---- Comparisons ---------------------------------------------------------------------------------

template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (bad++ < 4) first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ:" << first;
}

// |got - want| <= rtol * |want| + atol[i] for every i (atol: one bound per element); NaN fails.
::testing::AssertionResult all_near(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                                    const std::vector<double>& atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  int64_t bad = 0;
  double worst = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]), tol = rtol * std::fabs(want[i]) + atol[i];
    if (err <= tol) continue;
    worst = std::isnan(err) ? err : std::max(worst, err / std::max(tol, 1e-300));
    if (bad++ < 4)
      first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements out of tolerance (worst "
                                       << worst << " x tol):" << first;
}
::testing::AssertionResult all_near(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                                    double atol) {
  return all_near(got, want, rtol, std::vector<double>(want.size(), atol));
}
uint32_t bits(float f) { return blockscale::formats::float_bits(f); }
double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double(x)));
  return m;
}
// max |got - want| <= tol * max |want| (a norm-wise bound for outputs of long bf16 products).
::testing::AssertionResult normwise_near(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  return all_near(got, want, 0.0, tol * max_abs(want));
}

// ---- Argument checks (no GPU needed: every check fails before a launch) ---------------------------

TEST(GpuOpsArguments, NameTheArgumentAndTheRule) {
  float f[4] = {};
  int32_t i[4] = {};
  expect_error(gpu::embedding_forward(i, 4, 0, 2, 10, f, f, f, nullptr), "seq_len");
  expect_error(gpu::embedding_forward(i, 4, 2, 2, 0, f, f, f, nullptr), "vocab");
  expect_error(gpu::embedding_backward(i, 4, 2, 2, 10, nullptr, f, f, f, 16, nullptr), "dx must not be null");
  expect_error(gpu::rmsnorm_forward(nullptr, f, 2, 2, f, f, nullptr), "x must not be null");
  expect_error(gpu::rmsnorm_backward(f, f, f, f, 2, 0, f, f, f, 16, nullptr), "d must be in");
  expect_error(gpu::rmsnorm_backward(f, f, f, f, 2, 2, f, f, nullptr, 0, nullptr), "workspace");
  auto* handle = reinterpret_cast<cublasHandle_t>(f);  // never used: the checks fail first
  expect_error(gpu::attention_forward(f, 1, 4, 1, 8, nullptr, f, f, 16, handle, nullptr), "workspace");
  expect_error(gpu::attention_forward(f, 1, 0, 1, 8, nullptr, f, f, 16, handle, nullptr), "seq");
  expect_error(gpu::attention_backward(f, nullptr, f, 1, 4, 1, 8, f, f, 16, nullptr, nullptr), "cublas");
  expect_error(gpu::swiglu_forward(f, 2, 0, f, nullptr), "f must be in");
  expect_error(gpu::router_forward(f, 2, 257, 1, f, i, f, nullptr), "experts");
  expect_error(gpu::router_forward(f, 2, 2, 3, f, i, f, nullptr), "top_k");
  expect_error(gpu::load_balance_loss(f, i, 2, 4, 1, f, nullptr, 0, nullptr), "workspace");
  expect_error(gpu::router_backward(f, i, f, nullptr, 2, 4, 1, 0.1f, f, f, 16, nullptr), "d_gates");
  expect_error(gpu::moe_combine_backward(f, f, f, i, 2, 0, 4, 4, f, f, nullptr), "top_k");
  expect_error(gpu::moe_scatter_add(f, i, 2, 1, -1, 4, f, nullptr), "rows");
  expect_error(gpu::cross_entropy(f, i, 2, 0, 1.0f, f, f, nullptr), "vocab");
  expect_error(gpu::sum(f, 4, f, nullptr, 0, nullptr), "workspace");
  expect_error(gpu::sum_of_squares(f, 4, nullptr, f, 4096, nullptr), "out_device");
  const gpu::GradScale one{1.0f};
  expect_error(gpu::adamw_step(f, f, one, f, f, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, nullptr, nullptr), "step");
  expect_error(gpu::adamw_step(f, f, one, f, f, 4, 1e-3f, 1.0f, 0.95f, 1e-8f, 0.1f, 1, nullptr, nullptr), "beta1");
  expect_error(gpu::adamw_step(f, f, {1.5f}, f, f, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, nullptr, nullptr),
               "scale.value must be in [0, 1]");
  expect_error(gpu::clip_factor_on_device(f, NAN, f, nullptr), "clip_norm must be finite");
  expect_error(gpu::clip_factor_on_device(f, 1.0f, nullptr, nullptr), "factor must not be null");
  expect_error(gpu::to_bf16(f, 4, nullptr, nullptr), "y must not be null");
}

// ---- Embedding: bit-identical to the CPU (the same fp32 additions in the same order) ----------------

struct EmbeddingCase {
  int64_t n_tokens;
  int seq_len, d, vocab;
};
class EmbeddingTest : public ::testing::TestWithParam<EmbeddingCase> {};

TEST_P(EmbeddingTest, ForwardAndBackwardMatchTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const EmbeddingCase c = GetParam();
  const size_t nd = size_t(c.n_tokens) * c.d;
  const auto tokens = uniform_ints(c.n_tokens, 0, c.vocab - 1, 1);
  const auto embed = normal(size_t(c.vocab) * c.d, 1.0f, 2), pos = normal(size_t(c.seq_len) * c.d, 1.0f, 3);
  const auto dx = normal(nd, 1.0f, 4);
  const auto d_embed0 = normal(embed.size(), 0.1f, 5), d_pos0 = normal(pos.size(), 0.1f, 6);

  std::vector<float> x_ref(nd), d_embed_ref = d_embed0, d_pos_ref = d_pos0;
  cpu::embedding_forward(tokens.data(), c.n_tokens, c.seq_len, c.d, embed.data(), pos.data(), x_ref.data());
  cpu::embedding_backward(tokens.data(), c.n_tokens, c.seq_len, c.d, dx.data(), d_embed_ref.data(), d_pos_ref.data());

  DeviceBuffer d_tokens = on_device(tokens);
  DeviceBuffer d_embed_in = on_device(embed), d_pos_in = on_device(pos), d_dx = on_device(dx), x = poisoned<float>(nd);
  ASSERT_OK(gpu::embedding_forward(d_tokens.as<int32_t>(), c.n_tokens, c.seq_len, c.d, c.vocab, d_embed_in.as<float>(),
                                   d_pos_in.as<float>(), x.as<float>(), nullptr));
  EXPECT_TRUE(same_bits(host_copy<float>(x), x_ref)) << "x";

  size_t ws_bytes = 0;
  ASSERT_OK(gpu::embedding_backward_workspace_bytes(c.n_tokens, c.vocab, &ws_bytes));
  DeviceBuffer ws = poisoned<uint8_t>(ws_bytes);
  std::vector<float> first_embed, first_pos;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer d_embed = on_device(d_embed0), d_pos = on_device(d_pos0);
    ASSERT_OK(gpu::embedding_backward(d_tokens.as<int32_t>(), c.n_tokens, c.seq_len, c.d, c.vocab, d_dx.as<float>(),
                                      d_embed.as<float>(), d_pos.as<float>(), ws.as<uint8_t>(), ws_bytes, nullptr));
    const auto ge = host_copy<float>(d_embed), gp = host_copy<float>(d_pos);
    EXPECT_TRUE(same_bits(ge, d_embed_ref)) << "d_embed, run " << run;
    EXPECT_TRUE(same_bits(gp, d_pos_ref)) << "d_pos_embed, run " << run;
    if (run == 0) first_embed = ge, first_pos = gp;
    else EXPECT_TRUE(same_bits(ge, first_embed) && same_bits(gp, first_pos)) << "second run differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingTest,
                         ::testing::Values(EmbeddingCase{1, 1, 1, 50}, EmbeddingCase{7, 7, 33, 50},
                                           EmbeddingCase{5, 64, 8, 50},  // fewer tokens than positions
                                           EmbeddingCase{258, 129, 40, 1000}, EmbeddingCase{192, 64, 96, 50},
                                           EmbeddingCase{4099, 129, 65, 1000}));

// Out-of-range tokens: a NaN row forward, skipped backward (d_pos_embed still takes every row).
TEST(EmbeddingRangeTest, OutOfRangeTokensPoisonTheRowAndAreSkipped) {
  SKIP_WITHOUT_GPU();
  const int n = 20, seq = 8, d = 5, vocab = 10;
  auto tokens = uniform_ints(n, 0, vocab - 1, 7);
  tokens[3] = -1, tokens[8] = vocab, tokens[15] = INT_MIN;
  auto is_bad = [&](int t) { return tokens[t] < 0 || tokens[t] >= vocab; };
  const auto embed = normal(size_t(vocab + 1) * d, 1.0f, 8), pos = normal(size_t(seq) * d, 1.0f, 9);
  const auto dx = normal(size_t(n) * d, 1.0f, 10);
  // The CPU reference with every bad token sent to an extra row `vocab`, dropped afterwards.
  std::vector<int32_t> cpu_tokens = tokens;
  for (int t = 0; t < n; ++t)
    if (is_bad(t)) cpu_tokens[t] = vocab;
  std::vector<float> x_ref(size_t(n) * d), d_embed_ref(embed.size(), 0.5f), d_pos_ref(pos.size(), 0.25f);
  cpu::embedding_forward(cpu_tokens.data(), n, seq, d, embed.data(), pos.data(), x_ref.data());
  cpu::embedding_backward(cpu_tokens.data(), n, seq, d, dx.data(), d_embed_ref.data(), d_pos_ref.data());
  d_embed_ref.resize(size_t(vocab) * d);

  DeviceBuffer d_tokens = on_device(tokens);
  DeviceBuffer d_embed_in = on_device(embed), d_pos_in = on_device(pos), d_dx = on_device(dx),
               x = poisoned<float>(size_t(n) * d);
  DeviceBuffer d_embed = on_device(std::vector<float>(size_t(vocab) * d, 0.5f)),
               d_pos = on_device(std::vector<float>(pos.size(), 0.25f));
  ASSERT_OK(gpu::embedding_forward(d_tokens.as<int32_t>(), n, seq, d, vocab, d_embed_in.as<float>(),
                                   d_pos_in.as<float>(), x.as<float>(), nullptr));
  size_t ws_bytes = 0;
  ASSERT_OK(gpu::embedding_backward_workspace_bytes(n, vocab, &ws_bytes));
  DeviceBuffer ws = poisoned<uint8_t>(ws_bytes);
  ASSERT_OK(gpu::embedding_backward(d_tokens.as<int32_t>(), n, seq, d, vocab, d_dx.as<float>(), d_embed.as<float>(),
                                    d_pos.as<float>(), ws.as<uint8_t>(), ws_bytes, nullptr));
  const auto gx = host_copy<float>(x);
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < d; ++c) {
      const float g = gx[size_t(t) * d + c];
      if (is_bad(t)) EXPECT_TRUE(std::isnan(g)) << "token " << t;
      else EXPECT_EQ(bits(g), bits(x_ref[size_t(t) * d + c])) << "token " << t;
    }
  EXPECT_TRUE(same_bits(host_copy<float>(d_embed), d_embed_ref)) << "d_embed";
  EXPECT_TRUE(same_bits(host_copy<float>(d_pos), d_pos_ref)) << "d_pos_embed";
}

// ---- RMSNorm -------------------------------------------------------------------------------------

struct RowsCase {
  int64_t rows;
  int cols;
};
std::string rows_case_name(const ::testing::TestParamInfo<RowsCase>& info) {
  return "rows" + std::to_string(info.param.rows) + "_cols" + std::to_string(info.param.cols);
}
class RmsNormTest : public ::testing::TestWithParam<RowsCase> {};

TEST_P(RmsNormTest, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = GetParam().rows;
  const int d = GetParam().cols;
  const size_t n = size_t(rows) * d;
  const auto x = normal(n, 1.5f, 21), gain = normal(d, 1.0f, 22), dy = normal(n, 1.0f, 23);
  const auto dx0 = normal(n, 0.5f, 24), d_gain0 = normal(d, 0.5f, 25);
  std::vector<float> y_ref(n), rstd_ref(rows), dx_ref = dx0, d_gain_ref = d_gain0;
  cpu::rmsnorm_forward(x.data(), gain.data(), rows, d, y_ref.data(), rstd_ref.data());
  cpu::rmsnorm_backward(dy.data(), x.data(), gain.data(), rstd_ref.data(), rows, d, dx_ref.data(), d_gain_ref.data());

  DeviceBuffer dev_x = on_device(x), dev_gain = on_device(gain), dev_dy = on_device(dy), y = poisoned<float>(n),
               rstd = poisoned<float>(rows);
  ASSERT_OK(
      gpu::rmsnorm_forward(dev_x.as<float>(), dev_gain.as<float>(), rows, d, y.as<float>(), rstd.as<float>(), nullptr));
  // rstd: an fp32 sum of d positive squares (lanes of d/32 terms, then a 5-level tree) is within
  // (d/32 + 5) * 2^-24 < 1e-5 of the double sum; the square root halves it. y adds two roundings.
  EXPECT_TRUE(all_near(host_copy<float>(rstd), rstd_ref, 1e-5, 0.0)) << "rstd";
  EXPECT_TRUE(all_near(host_copy<float>(y), y_ref, 1e-5, 0.0)) << "y";

  // The backward from the CPU's rstd on both sides. dx: the row's dot is fp32, and gain*dy - x*m
  // can cancel, so each element is bounded by 1e-5 of its terms' magnitudes; d_gain: fp32 chunked
  // column sums, bounded by 1e-5 of the sum of |terms|.
  std::vector<double> dx_atol(n), gain_atol(d);
  for (int c = 0; c < d; ++c) gain_atol[c] = std::fabs(d_gain0[c]);
  for (int64_t r = 0; r < rows; ++r) {
    const double s = rstd_ref[r];
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += double(gain[c]) * dy[r * d + c] * x[r * d + c];
    const double m = dot / d * s * s;
    for (int c = 0; c < d; ++c) {
      const size_t i = size_t(r) * d + c;
      dx_atol[i] = 1e-5 * (std::fabs(dx0[i]) + s * (std::fabs(gain[c] * dy[i]) + std::fabs(x[i] * m)));
      gain_atol[c] += std::fabs(double(dy[i]) * x[i] * s);
    }
  }
  for (auto& a : gain_atol) a *= 1e-5;
  DeviceBuffer dev_rstd = on_device(rstd_ref);
  const size_t ws_bytes = gpu::rmsnorm_backward_workspace_bytes(rows, d);
  DeviceBuffer ws = poisoned<uint8_t>(ws_bytes);
  std::vector<float> first_dx, first_gain;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer dx = on_device(dx0), d_gain = on_device(d_gain0);
    ASSERT_OK(gpu::rmsnorm_backward(dev_dy.as<float>(), dev_x.as<float>(), dev_gain.as<float>(), dev_rstd.as<float>(),
                                    rows, d, dx.as<float>(), d_gain.as<float>(), ws.as<uint8_t>(), ws_bytes, nullptr));
    const auto gdx = host_copy<float>(dx), gg = host_copy<float>(d_gain);
    EXPECT_TRUE(all_near(gdx, dx_ref, 0.0, dx_atol)) << "dx, run " << run;
    EXPECT_TRUE(all_near(gg, d_gain_ref, 0.0, gain_atol)) << "d_gain, run " << run;
    if (run == 0) first_dx = gdx, first_gain = gg;
    else EXPECT_TRUE(same_bits(gdx, first_dx) && same_bits(gg, first_gain)) << "second run differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(RowsCase{1, 1}, RowsCase{7, 33}, RowsCase{129, 100}, RowsCase{1000, 768},
                                           RowsCase{300, 4096}, RowsCase{70001, 17}),  // 70001: 274 row chunks
                         rows_case_name);

// ---- Attention -----------------------------------------------------------------------------------

struct AttentionCase {
  int batch, seq, heads, head_dim;
};
std::string attention_case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const auto& c = info.param;
  return "b" + std::to_string(c.batch) + "_t" + std::to_string(c.seq) + "_h" + std::to_string(c.heads) + "_hd" +
         std::to_string(c.head_dim);
}
class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

struct CublasAndStream {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  ~CublasAndStream() {
    if (handle) cublasDestroy(handle);
    if (stream) cudaStreamDestroy(stream);
  }
};

// Tolerance: q, k, v and dout are rounded to bf16 the same way on both sides, so the products
// differ only by fp32 (cuBLAS) vs double accumulation, ~1e-6 relative, until a value is rounded to
// bf16 again (P, dS): where the two land on either side of a bf16 rounding boundary they differ by
// one bf16 ulp (<= 2^-7 relative). Such flips are rare (~1e-6 / 2^-8 per element) and each moves
// an output by <= 2^-7 of one of its terms, so outputs stay well within 1e-2 of the largest
// reference value, while an indexing error is O(1). P itself: within one bf16 ulp, < 1% flipped.
TEST_P(AttentionTest, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const AttentionCase c = GetParam();
  const int B = c.batch, T = c.seq, H = c.heads, hd = c.head_dim;
  const size_t rows = size_t(B) * T, width = 3 * size_t(H) * hd, square = size_t(B) * H * T * T;
  const auto qkv = normal(rows * width, 1.0f, 31), dout = normal(rows * H * hd, 1.0f, 32);
  std::vector<float> probs_ref(square), out_ref(rows * H * hd);
  cpu::attention_forward(qkv.data(), B, T, H, hd, probs_ref.data(), out_ref.data());

  CublasAndStream cs;
  ASSERT_EQ(cublasCreate(&cs.handle), CUBLAS_STATUS_SUCCESS);
  ASSERT_CUDA(cudaStreamCreate(&cs.stream));  // not the default stream: the handle must follow it
  const size_t ws_bytes = gpu::attention_workspace_bytes(B, T, H, hd);
  DeviceBuffer ws = poisoned<uint8_t>(ws_bytes);
  DeviceBuffer d_qkv = on_device(qkv), d_dout = on_device(dout), out = poisoned<float>(rows * H * hd),
               dqkv = poisoned<float>(rows * width);
  DeviceBuffer probs = poisoned<uint16_t>(square);
  ASSERT_OK(gpu::attention_forward(d_qkv.as<float>(), B, T, H, hd, probs.as<uint16_t>(), out.as<float>(),
                                   ws.as<uint8_t>(), ws_bytes, cs.handle, cs.stream));
  ASSERT_CUDA(cudaStreamSynchronize(cs.stream));
  const auto p_bits = host_copy<uint16_t>(probs);
  std::vector<float> p(square);
  int64_t above_diagonal = 0, flips = 0, far = 0;
  for (size_t idx = 0; idx < square; ++idx) {
    const size_t i = idx / T % T, j = idx % T;
    p[idx] = blockscale::formats::bf16_bits_to_float(p_bits[idx]);
    if (j > i) {
      above_diagonal += p_bits[idx] != 0;
      continue;
    }
    if (p[idx] == probs_ref[idx]) continue;
    ++flips;
    if (!(std::fabs(p[idx] - probs_ref[idx]) <= 0x1p-7 * std::fabs(probs_ref[idx]))) ++far;
  }
  EXPECT_EQ(above_diagonal, 0) << "probabilities above the diagonal must be +0";
  EXPECT_EQ(far, 0) << "probabilities more than one bf16 ulp from the CPU's";
  EXPECT_LE(flips, 1 + int64_t(square) / 100) << "probabilities one bf16 ulp off";
  EXPECT_TRUE(normwise_near(host_copy<float>(out), out_ref, 1e-2)) << "out";

  // The backward from the GPU's probabilities on both sides.
  std::vector<float> dqkv_ref(rows * width);
  cpu::attention_backward(qkv.data(), p.data(), dout.data(), B, T, H, hd, dqkv_ref.data());
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    ASSERT_CUDA(cudaMemset(dqkv.as<float>(), 0xFF, dqkv.size()));
    ASSERT_OK(gpu::attention_backward(d_qkv.as<float>(), probs.as<uint16_t>(), d_dout.as<float>(), B, T, H, hd,
                                      dqkv.as<float>(), ws.as<uint8_t>(), ws_bytes, cs.handle, cs.stream));
    ASSERT_CUDA(cudaStreamSynchronize(cs.stream));
    const auto g = host_copy<float>(dqkv);
    for (int part = 0; part < 3; ++part) {  // q, k, v columns of each row, compared separately
      std::vector<float> got, want;
      for (size_t r = 0; r < rows; ++r)
        for (size_t col = part * width / 3; col < (part + 1) * width / 3; ++col) {
          got.push_back(g[r * width + col]);
          want.push_back(dqkv_ref[r * width + col]);
        }
      EXPECT_TRUE(normwise_near(got, want, 1e-2)) << "d" << "qkv"[part] << ", run " << run;
    }
    if (run == 0) first = g;
    else EXPECT_TRUE(same_bits(g, first)) << "second backward differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(AttentionCase{1, 1, 1, 8}, AttentionCase{2, 7, 3, 24},
                                           AttentionCase{1, 33, 2, 17}, AttentionCase{1, 64, 2, 64},
                                           AttentionCase{2, 129, 2, 40}, AttentionCase{1, 256, 4, 128},
                                           AttentionCase{1, 1024, 2, 128}),  // the training step's seq
                         attention_case_name);

// ---- SwiGLU --------------------------------------------------------------------------------------

class SwigluTest : public ::testing::TestWithParam<RowsCase> {};

TEST_P(SwigluTest, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = GetParam().rows;
  const int f = GetParam().cols;
  const auto u = normal(size_t(rows) * 2 * f, 2.0f, 41), da = normal(size_t(rows) * f, 1.0f, 42);
  std::vector<float> a_ref(da.size()), du_ref(u.size());
  cpu::swiglu_forward(u.data(), rows, f, a_ref.data());
  cpu::swiglu_backward(u.data(), da.data(), rows, f, du_ref.data());
  DeviceBuffer d_u = on_device(u), d_da = on_device(da), a = poisoned<float>(da.size()), du = poisoned<float>(u.size());
  ASSERT_OK(gpu::swiglu_forward(d_u.as<float>(), rows, f, a.as<float>(), nullptr));
  ASSERT_OK(gpu::swiglu_backward(d_u.as<float>(), d_da.as<float>(), rows, f, du.as<float>(), nullptr));
  // The device expf and the host's differ by a few ulps: 1e-5 relative; du's gate half also gets
  // 1e-6 of the largest value, where 1 + g * (1 - sig) crosses zero (g ~ -1.28) and cancels.
  EXPECT_TRUE(all_near(host_copy<float>(a), a_ref, 1e-5, 0.0)) << "a";
  EXPECT_TRUE(all_near(host_copy<float>(du), du_ref, 1e-5, 1e-6 * max_abs(du_ref))) << "du";
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwigluTest,
                         ::testing::Values(RowsCase{1, 1}, RowsCase{7, 33}, RowsCase{300, 100}, RowsCase{129, 1000}),
                         rows_case_name);

// ---- Router --------------------------------------------------------------------------------------

struct RouterCase {
  int64_t tokens;
  int experts, top_k;
};
std::string router_case_name(const ::testing::TestParamInfo<RouterCase>& info) {
  const auto& c = info.param;
  return "t" + std::to_string(c.tokens) + "_e" + std::to_string(c.experts) + "_k" + std::to_string(c.top_k);
}
class RouterTest : public ::testing::TestWithParam<RouterCase> {};

// Each token's experts get offset + 0.1 * (a random permutation of 0..experts-1): neighbouring
// probabilities differ by a factor e^0.1, far beyond fp32 noise, so the top-k is unambiguous.
std::vector<float> gapped_logits(int64_t tokens, int experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> offset(0.0f, 1.0f);
  std::vector<float> z(size_t(tokens) * experts);
  std::vector<int> rank(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    const float o = offset(rng);
    for (int e = 0; e < experts; ++e) z[t * experts + e] = o + 0.1f * rank[e];
  }
  return z;
}

TEST_P(RouterTest, ForwardLossAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const RouterCase c = GetParam();
  const size_t te = size_t(c.tokens) * c.experts, slots = size_t(c.tokens) * c.top_k;
  const auto logits = gapped_logits(c.tokens, c.experts, 51);
  std::vector<float> probs_ref(te), gates_ref(slots);
  std::vector<int32_t> ids_ref(slots);
  cpu::router_forward(logits.data(), c.tokens, c.experts, c.top_k, probs_ref.data(), ids_ref.data(), gates_ref.data());

  DeviceBuffer d_logits = on_device(logits), probs = poisoned<float>(te), gates = poisoned<float>(slots);
  DeviceBuffer ids = poisoned<int32_t>(slots);
  ASSERT_OK(gpu::router_forward(d_logits.as<float>(), c.tokens, c.experts, c.top_k, probs.as<float>(),
                                ids.as<int32_t>(), gates.as<float>(), nullptr));
  // Probabilities: expf vs exp and an fp32 vs double sum of <= 256 terms: 1e-5 relative.
  EXPECT_TRUE(same_bits(host_copy<int32_t>(ids), ids_ref)) << "expert_ids";
  EXPECT_TRUE(all_near(host_copy<float>(probs), probs_ref, 1e-5, 0.0)) << "probs";
  EXPECT_TRUE(all_near(host_copy<float>(gates), gates_ref, 1e-5, 0.0)) << "gates";

  // The loss and the backward take the CPU's routing on both sides.
  DeviceBuffer d_probs = on_device(probs_ref), d_gates_in = on_device(gates_ref);
  DeviceBuffer d_ids = on_device(ids_ref);
  const size_t ws_bytes = gpu::router_workspace_bytes(c.tokens, c.experts);
  DeviceBuffer ws = poisoned<uint8_t>(ws_bytes);
  const float loss_ref = cpu::load_balance_loss(probs_ref.data(), ids_ref.data(), c.tokens, c.experts, c.top_k);
  std::vector<float> first_loss;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer loss = poisoned<float>(1);
    ASSERT_OK(gpu::load_balance_loss(d_probs.as<float>(), d_ids.as<int32_t>(), c.tokens, c.experts, c.top_k,
                                     loss.as<float>(), ws.as<uint8_t>(), ws_bytes, nullptr));
    const auto l = host_copy<float>(loss);
    EXPECT_TRUE(all_near(l, {loss_ref}, 1e-5, 0.0)) << "load-balancing loss (fp32 column sums of probabilities)";
    if (run == 0) first_loss = l;
    else EXPECT_TRUE(same_bits(l, first_loss)) << "second loss differs";
  }

  const auto d_gates = normal(slots, 1.0f, 53);
  const float aux_weight = 0.01f;
  std::vector<float> dlogits_ref(te);
  cpu::router_backward(probs_ref.data(), ids_ref.data(), gates_ref.data(), d_gates.data(), c.tokens, c.experts,
                       c.top_k, aux_weight, dlogits_ref.data());
  DeviceBuffer d_d_gates = on_device(d_gates), dlogits = poisoned<float>(te);
  ASSERT_OK(gpu::router_backward(d_probs.as<float>(), d_ids.as<int32_t>(), d_gates_in.as<float>(),
                                 d_d_gates.as<float>(), c.tokens, c.experts, c.top_k, aux_weight, dlogits.as<float>(),
                                 ws.as<uint8_t>(), ws_bytes, nullptr));
  // p * (dp - sum dp * p): the sum is fp32 here, double there; it can cancel, so the bound is
  // 1e-5 of each value plus 1e-5 of the largest.
  EXPECT_TRUE(all_near(host_copy<float>(dlogits), dlogits_ref, 1e-5, 1e-5 * max_abs(dlogits_ref))) << "dlogits";
}

INSTANTIATE_TEST_SUITE_P(Shapes, RouterTest,
                         ::testing::Values(RouterCase{1, 1, 1}, RouterCase{7, 5, 1}, RouterCase{7, 5, 2},
                                           RouterCase{257, 8, 2}, RouterCase{100, 64, 1}, RouterCase{33, 256, 2},
                                           RouterCase{3000, 8, 2}),
                         router_case_name);

TEST(RouterTieTest, EqualProbabilitiesPickTheLowerIndex) {
  SKIP_WITHOUT_GPU();
  const int experts = 5, top_k = 2;
  const std::vector<float> logits = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f,  // all tied
                                     1.0f,  3.0f,  3.0f,  0.0f,  3.0f};  // three tied at the top
  DeviceBuffer d_logits = on_device(logits), probs = poisoned<float>(10), gates = poisoned<float>(4);
  DeviceBuffer ids = poisoned<int32_t>(4);
  ASSERT_OK(gpu::router_forward(d_logits.as<float>(), 2, experts, top_k, probs.as<float>(), ids.as<int32_t>(),
                                gates.as<float>(), nullptr));
  EXPECT_EQ(host_copy<int32_t>(ids), (std::vector<int32_t>{0, 1, 1, 2}));
  EXPECT_EQ(host_copy<float>(gates),
            (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));  // equal probabilities, renormalised
}

// ---- MoE combine backward and scatter-add ----------------------------------------------------------

struct MoeCase {
  int64_t tokens;
  int top_k, d;
};
std::string moe_case_name(const ::testing::TestParamInfo<MoeCase>& info) {
  const auto& c = info.param;
  return "t" + std::to_string(c.tokens) + "_k" + std::to_string(c.top_k) + "_d" + std::to_string(c.d);
}
class MoeTest : public ::testing::TestWithParam<MoeCase> {};

// A routing as quant::run(RoutingProblem) leaves it: about one slot in 8 dropped (-1), the routed
// slots on distinct sorted rows 0..rows-1 (a random permutation), row_source the inverse.
struct Routing {
  std::vector<int32_t> slot_row, row_source;
  int64_t rows = 0;
};
Routing make_routing(int64_t tokens, int top_k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Routing r;
  r.slot_row.assign(size_t(tokens) * top_k, -1);
  std::vector<size_t> routed;
  for (size_t s = 0; s < r.slot_row.size(); ++s)
    if (rng() % 8 != 0) routed.push_back(s);
  std::vector<int32_t> perm(routed.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  r.rows = int64_t(routed.size());
  r.row_source.resize(routed.size());
  for (size_t i = 0; i < routed.size(); ++i) {
    r.slot_row[routed[i]] = perm[i];
    r.row_source[perm[i]] = int32_t(routed[i] / top_k);
  }
  return r;
}

TEST_P(MoeTest, CombineBackwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const MoeCase c = GetParam();
  const size_t slots = size_t(c.tokens) * c.top_k;
  Routing routing = make_routing(c.tokens, c.top_k, 71);
  const int64_t y_rows = int64_t(slots);  // rows past routing.rows are named by no slot: zeroed
  if (slots >= 4) routing.slot_row[1] = int32_t(y_rows + 3);  // past y: skipped like a dropped slot
  const auto dout = normal(size_t(c.tokens) * c.d, 1.0f, 72), y = normal(size_t(y_rows) * c.d, 1.0f, 73);
  const auto gates = normal(slots, 0.5f, 74);
  std::vector<float> dy_ref(size_t(y_rows) * c.d), d_gates_ref(slots);
  cpu::moe_combine_backward(dout.data(), y.data(), gates.data(), routing.slot_row.data(), c.tokens, c.top_k, c.d,
                            y_rows, dy_ref.data(), d_gates_ref.data());
  DeviceBuffer d_dout = on_device(dout), d_y = on_device(y), d_gates_in = on_device(gates),
               dy = poisoned<float>(dy_ref.size()), d_gates = poisoned<float>(slots);
  DeviceBuffer d_slot_row = on_device(routing.slot_row);
  ASSERT_OK(gpu::moe_combine_backward(d_dout.as<float>(), d_y.as<float>(), d_gates_in.as<float>(),
                                      d_slot_row.as<int32_t>(), c.tokens, c.top_k, c.d, y_rows, dy.as<float>(),
                                      d_gates.as<float>(), nullptr));
  EXPECT_TRUE(same_bits(host_copy<float>(dy), dy_ref)) << "dy (one product per element)";
  // d_gates: an fp32 dot of d terms, within 1e-5 of the sum of |terms| (dropped slots: exactly 0).
  std::vector<double> atol(slots, 0.0);
  for (size_t s = 0; s < slots; ++s) {
    const int32_t r = routing.slot_row[s];
    if (r < 0 || r >= y_rows) continue;
    for (int col = 0; col < c.d; ++col)
      atol[s] += 1e-5 * std::fabs(double(dout[s / c.top_k * c.d + col]) * y[size_t(r) * c.d + col]);
  }
  EXPECT_TRUE(all_near(host_copy<float>(d_gates), d_gates_ref, 0.0, atol)) << "d_gates";
}

TEST_P(MoeTest, ScatterAddPerTokenMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const MoeCase c = GetParam();
  const Routing routing = make_routing(c.tokens, c.top_k, 81);
  const auto dx_sorted = normal(size_t(routing.rows) * c.d, 1.0f, 82), dx0 = normal(size_t(c.tokens) * c.d, 1.0f, 83);
  std::vector<float> dx_ref = dx0;
  cpu::moe_scatter_add(dx_sorted.data(), routing.row_source.data(), routing.rows, c.d, dx_ref.data());
  DeviceBuffer d_sorted = on_device(dx_sorted), dx = on_device(dx0);
  DeviceBuffer d_slot_row = on_device(routing.slot_row);
  ASSERT_OK(gpu::moe_scatter_add(d_sorted.as<float>(), d_slot_row.as<int32_t>(), c.tokens, c.top_k, routing.rows, c.d,
                                 dx.as<float>(), nullptr));
  // The same <= top_k + 1 terms added in another order (slot order here, sorted-row order there):
  // within 1e-6 of the sum of their magnitudes.
  std::vector<double> atol(dx0.size());
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int col = 0; col < c.d; ++col) {
      double mag = std::fabs(dx0[t * c.d + col]);
      for (int j = 0; j < c.top_k; ++j) {
        const int32_t r = routing.slot_row[t * c.top_k + j];
        if (r >= 0) mag += std::fabs(dx_sorted[size_t(r) * c.d + col]);
      }
      atol[t * c.d + col] = 1e-6 * mag;
    }
  EXPECT_TRUE(all_near(host_copy<float>(dx), dx_ref, 0.0, atol)) << "dx";
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeTest,
                         ::testing::Values(MoeCase{1, 1, 1}, MoeCase{7, 2, 33}, MoeCase{129, 2, 100},
                                           MoeCase{64, 1, 65}, MoeCase{1000, 2, 40}),
                         moe_case_name);

// ---- Cross-entropy -------------------------------------------------------------------------------

struct CrossEntropyCase {
  int64_t rows;
  int vocab;
};
std::string ce_case_name(const ::testing::TestParamInfo<CrossEntropyCase>& info) {
  return "rows" + std::to_string(info.param.rows) + "_vocab" + std::to_string(info.param.vocab);
}
class CrossEntropyTest : public ::testing::TestWithParam<CrossEntropyCase> {};

TEST_P(CrossEntropyTest, LossesAndGradientMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = GetParam().rows;
  const int vocab = GetParam().vocab;
  const size_t n = size_t(rows) * vocab;
  const auto logits = normal(n, 2.0f, 91);
  const auto targets = uniform_ints(rows, 0, vocab - 1, 92);
  const float grad_scale = 1.0f / float(rows);
  std::vector<float> loss_ref(rows), dlogits_ref(n);
  for (int64_t r = 0; r < rows; ++r)  // one row at a time: the CPU returns only the sum
    loss_ref[r] = float(cpu::cross_entropy(logits.data() + r * vocab, targets.data() + r, 1, vocab, grad_scale,
                                           dlogits_ref.data() + r * vocab));
  const double total_ref = cpu::cross_entropy(logits.data(), targets.data(), rows, vocab, grad_scale, nullptr);

  // loss: the fp32 sum of exps (per-thread runs of <= 256 terms, then a tree) is within
  // (256 + 8) * 2^-24 ~ 1.6e-5 of the double one at worst (~1e-6 typically), which becomes an
  // absolute error of the logsumexp; plus a few ulps of it (< 20 here): 3e-5 absolute. dlogits:
  // p = expf(z - logsumexp) inherits that as a relative error: 3e-5; the target's p - 1 cancels,
  // so plus 3e-5 of grad_scale.
  DeviceBuffer d_targets = on_device(targets);
  enum Mode { kSeparate, kInPlace, kLossOnly };
  for (Mode mode : {kSeparate, kInPlace, kLossOnly}) {
    SCOPED_TRACE(mode == kSeparate ? "separate dlogits" : mode == kInPlace ? "dlogits aliasing logits" : "no dlogits");
    DeviceBuffer d_logits = on_device(logits), losses = poisoned<float>(rows),
                 dlogits = poisoned<float>(mode == kSeparate ? n : 0);
    float* dl = mode == kSeparate ? dlogits.as<float>() : mode == kInPlace ? d_logits.as<float>() : nullptr;
    ASSERT_OK(gpu::cross_entropy(d_logits.as<float>(), d_targets.as<int32_t>(), rows, vocab, grad_scale,
                                 losses.as<float>(), dl, nullptr));
    const auto gl = host_copy<float>(losses);
    EXPECT_TRUE(all_near(gl, loss_ref, 0.0, 3e-5)) << "losses";
    if (mode == kSeparate)
      EXPECT_TRUE(all_near(host_copy<float>(dlogits), dlogits_ref, 3e-5, 3e-5 * grad_scale)) << "dlogits";
    if (mode == kInPlace)
      EXPECT_TRUE(all_near(host_copy<float>(d_logits), dlogits_ref, 3e-5, 3e-5 * grad_scale)) << "dlogits";
    if (mode == kLossOnly) EXPECT_TRUE(same_bits(host_copy<float>(d_logits), logits)) << "logits must be untouched";
    DeviceBuffer total = poisoned<float>(1);
    DeviceBuffer ws = poisoned<uint8_t>(gpu::reduction_workspace_bytes(rows));
    ASSERT_OK(gpu::sum(losses.as<float>(), rows, total.as<float>(), ws.as<uint8_t>(), ws.size(), nullptr));
    EXPECT_NEAR(host_copy<float>(total)[0], total_ref, 3e-5 * rows + 1e-5 * std::fabs(total_ref)) << "summed loss";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyTest,
                         ::testing::Values(CrossEntropyCase{1, 50}, CrossEntropyCase{7, 1000}, CrossEntropyCase{129, 50},
                                           CrossEntropyCase{5, 65536}, CrossEntropyCase{3, 50257}),
                         ce_case_name);

TEST(CrossEntropyTargetTest, OutOfRangeTargetGivesNanLossAndNoOneHot) {
  SKIP_WITHOUT_GPU();
  const int vocab = 50;
  const auto logits = normal(2 * vocab, 2.0f, 93);
  DeviceBuffer d_logits = on_device(logits), losses = poisoned<float>(2), dlogits = poisoned<float>(2 * vocab);
  DeviceBuffer targets = on_device(std::vector<int32_t>{-1, vocab});
  ASSERT_OK(gpu::cross_entropy(d_logits.as<float>(), targets.as<int32_t>(), 2, vocab, 0.5f, losses.as<float>(),
                               dlogits.as<float>(), nullptr));
  for (float l : host_copy<float>(losses)) EXPECT_TRUE(std::isnan(l));
  const auto g = host_copy<float>(dlogits);
  for (int r = 0; r < 2; ++r) {  // softmax * 0.5: positive, summing to 0.5
    double s = 0;
    for (int v = 0; v < vocab; ++v) {
      EXPECT_GT(g[r * vocab + v], 0.0f);
      s += g[r * vocab + v];
    }
    EXPECT_NEAR(s, 0.5, 1e-5);
  }
}

// ---- Sums, scale ---------------------------------------------------------------------------------

class ReductionTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ReductionTest, SumsMatchDoubleAndRepeatBitForBit) {
  SKIP_WITHOUT_GPU();
  const int64_t n = GetParam();
  const auto x = normal(size_t(n), 1.0f, 101);
  double sum_ref = 0, sq_ref = 0, abs_ref = 0;
  for (float v : x) sum_ref += v, sq_ref += double(v) * v, abs_ref += std::fabs(v);
  DeviceBuffer d_x = on_device(x);
  DeviceBuffer ws = poisoned<uint8_t>(gpu::reduction_workspace_bytes(n));
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer out = poisoned<float>(2);
    ASSERT_OK(gpu::sum(d_x.as<float>(), n, out.as<float>(), ws.as<uint8_t>(), ws.size(), nullptr));
    ASSERT_OK(gpu::sum_of_squares(d_x.as<float>(), n, out.as<float>() + 1, ws.as<uint8_t>(), ws.size(), nullptr));
    const auto o = host_copy<float>(out);
    // Per-thread runs of <= 16 (or n / 262144) terms, then trees of 256 and <= 1024: the error is
    // far below 1e-5 of the sum of |terms| (which bounds the sum's cancellation too).
    EXPECT_NEAR(o[0], sum_ref, 1e-5 * abs_ref) << "sum";
    EXPECT_NEAR(o[1], sq_ref, 1e-5 * sq_ref) << "sum_of_squares";
    if (run == 0) first = o;
    else EXPECT_TRUE(same_bits(o, first)) << "second run differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReductionTest, ::testing::Values(1, 1000, (1 << 20) + 3, 5000003));

// ---- AdamW ---------------------------------------------------------------------------------------

struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// The formula of gpu_ops.h written as a host loop (ISO C++: GCC does not contract into fma).
void adamw_host(std::vector<float>& p, const std::vector<float>& grads, float grad_scale, std::vector<float>& m,
                std::vector<float>& v, const AdamWHyper& h, int64_t step, const std::vector<uint8_t>* mask) {
  const float bias1 = 1.0f - float(std::pow(double(h.beta1), double(step)));
  const float bias2 = 1.0f - float(std::pow(double(h.beta2), double(step)));
  for (size_t i = 0; i < p.size(); ++i) {
    const float g = grads[i] * grad_scale;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    const float mhat = m[i] / bias1, vhat = v[i] / bias2;
    float u = mhat / (std::sqrt(vhat) + h.eps);
    if (mask == nullptr || (*mask)[i] != 0) u = u + h.weight_decay * p[i];
    p[i] = p[i] - h.lr * u;
  }
}

// Offset 0: the float4 path (and its scalar tail, n % 4 == 3); offset 1: every pointer one element
// off 16-byte alignment, the scalar path.
TEST(AdamWTest, MatchesTheHostFormulaBitForBit) {
  SKIP_WITHOUT_GPU();
  const size_t n = 4103;
  const AdamWHyper h;
  std::vector<uint8_t> mask(n);
  for (size_t i = 0; i < n; ++i) mask[i] = uint8_t(i % 3 != 0);
  for (const size_t offset : {size_t{0}, size_t{1}})
    for (const bool masked : {false, true}) {
      SCOPED_TRACE(std::string(masked ? "decay mask" : "no mask: every element decays") + ", offset " +
                   std::to_string(offset));
      std::vector<float> p = normal(n, 0.02f, 121), m(n, 0.0f), v(n, 0.0f);
      const auto at = [offset](std::vector<float> x) {
        x.insert(x.begin(), offset, 0.0f);
        return x;
      };
      std::vector<uint8_t> shifted_mask = mask;
      shifted_mask.insert(shifted_mask.begin(), offset, uint8_t{0});
      DeviceBuffer d_p = on_device(at(p)), d_m = on_device(at(m)), d_v = on_device(at(v));
      DeviceBuffer d_mask = on_device(shifted_mask);
      const auto tail = [offset](const std::vector<float>& x) {
        return std::vector<float>(x.begin() + offset, x.end());
      };
      for (const int64_t step : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1000}}) {
        const auto g = normal(n, 1e-2f, 122 + uint64_t(step));
        const float grad_scale = step == 2 ? 0.37f : 1.0f;  // clipping, at one step
        DeviceBuffer d_g = on_device(at(g));
        adamw_host(p, g, grad_scale, m, v, h, step, masked ? &mask : nullptr);
        ASSERT_OK(gpu::adamw_step(d_p.as<float>() + offset, d_g.as<float>() + offset, {grad_scale},
                                  d_m.as<float>() + offset, d_v.as<float>() + offset, int64_t(n), h.lr, h.beta1,
                                  h.beta2, h.eps, h.weight_decay, step,
                                  masked ? d_mask.as<uint8_t>() + offset : nullptr, nullptr));
        EXPECT_TRUE(same_bits(tail(host_copy<float>(d_g)), g)) << "grads are not written, step " << step;
        EXPECT_TRUE(same_bits(tail(host_copy<float>(d_p)), p)) << "params, step " << step;
        EXPECT_TRUE(same_bits(tail(host_copy<float>(d_m)), m)) << "m, step " << step;
        EXPECT_TRUE(same_bits(tail(host_copy<float>(d_v)), v)) << "v, step " << step;
      }
    }
}

// The clipping factor read on the device from a sum of squares: the host's clip_factor, bit for bit.
TEST(AdamWTest, ClipsOnTheDeviceAsTheHostDoes) {
  SKIP_WITHOUT_GPU();
  const size_t n = 1031;
  const AdamWHyper h;
  struct Case {
    float sum_sq, clip_norm;
  };
  // Clipped (two norms, one not a square), not clipped, exactly at the limit, clipping off.
  const Case cases[] = {{2.5f, 1.0f}, {1234.567f, 0.3f}, {0.25f, 1.0f}, {4.0f, 2.0f}, {9.0f, 0.0f}};
  for (const Case k : cases) {
    const float factor = clip_factor(std::sqrt(double(k.sum_sq)), k.clip_norm);
    SCOPED_TRACE("sum of squares " + std::to_string(k.sum_sq) + ", clip_norm " + std::to_string(k.clip_norm) +
                 ", factor " + std::to_string(factor));
    std::vector<float> p = normal(n, 0.02f, 141), m = normal(n, 1e-3f, 142), v(n, 1e-6f);
    const auto g = normal(n, 1e-1f, 143);
    DeviceBuffer d_p = on_device(p), d_m = on_device(m), d_v = on_device(v), d_g = on_device(g),
                 d_sum_sq = on_device(std::vector<float>{k.sum_sq}), d_factor = poisoned<float>(1);
    adamw_host(p, g, factor, m, v, h, 7, nullptr);
    ASSERT_OK(gpu::clip_factor_on_device(d_sum_sq.as<float>(), k.clip_norm, d_factor.as<float>(), nullptr));
    EXPECT_TRUE(same_bits(host_copy<float>(d_factor), std::vector<float>{factor})) << "the factor";
    ASSERT_OK(gpu::adamw_step(d_p.as<float>(), d_g.as<float>(), {1.0f, d_factor.as<float>()}, d_m.as<float>(),
                              d_v.as<float>(), int64_t(n), h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, 7, nullptr,
                              nullptr));
    EXPECT_TRUE(same_bits(host_copy<float>(d_p), p)) << "params";
    EXPECT_TRUE(same_bits(host_copy<float>(d_m), m)) << "m";
    EXPECT_TRUE(same_bits(host_copy<float>(d_v), v)) << "v";
  }
  // The cases above must clip: a factor of 1 everywhere would not test the device's formula.
  EXPECT_LT(clip_factor(std::sqrt(2.5), 1.0f), 1.0f);
  EXPECT_LT(clip_factor(std::sqrt(double(1234.567f)), 0.3f), 1.0f);
}

// ---- bf16 conversion -----------------------------------------------------------------------------

// From element 0: the float4 path with a 3-element tail; from element 1 on, the scalar path.
TEST(ToBf16Test, MatchesTheFormatsCodecBitForBit) {
  SKIP_WITHOUT_GPU();
  const auto x = blockscale_test::bf16_rounding_inputs(131);
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = blockscale::formats::float_to_bf16_bits_rn(x[i]);
  DeviceBuffer d_x = on_device(x);
  for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    DeviceBuffer y = poisoned<uint16_t>(x.size());
    ASSERT_OK(gpu::to_bf16(d_x.as<float>() + offset, int64_t(x.size()) - offset, y.as<uint16_t>() + offset, nullptr));
    auto got = host_copy<uint16_t>(y);
    if (offset) got[0] = want[0];  // not written
    EXPECT_TRUE(same_bits(got, want));
  }
}

}  // namespace
