// Tests of train/gpu/gpu_ops.h against the CPU reference train/cpu/cpu_ops.h, one op at a time, on seeded
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
// The ops are split over train_gpu_ops_test's sources: this file (argument checks, embedding,
// RMSNorm, attention, SwiGLU), gpu_ops_moe_test.cpp (router, MoE combine backward and scatter-add),
// gpu_ops_loss_optimizer_test.cpp (cross-entropy, sums, AdamW, bf16 conversion); their shared
// helpers are in gpu_ops_test_util.h.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK, expect_error
#include "tests/train/gpu/gpu_ops_test_util.h"
#include "tests/train/gpu/test_inputs.h"  // normal
#include "train/cpu/cpu_ops.h"
#include "train/gpu/gpu_ops.h"

namespace {

using namespace blockscale_test::gpu_ops;  // gpu_ops_test_util.h
namespace cpu = blockscale::train;
namespace gpu = blockscale::train::gpu;
using blockscale_test::expect_error;
using blockscale_test::normal;

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

// float4 accesses where d % 4 == 0 and the pointers are 16-byte aligned, else scalar ones (d % 4 != 0,
// or `offset` floats past an aligned start for every float array); the backward's warps walk runs
// of equal sorted ids from their group of 32 to the run's end: short runs (vocab 1000, 32000), long
// ones (vocab 50), and one run of every token (`only_token` >= 0) crossing many groups.
struct EmbeddingCase {
  int64_t n_tokens;
  int seq_len, d, vocab;
  int offset = 0;
  int32_t only_token = -1;  // >= 0: every token is this id
};
std::string embedding_case_name(const ::testing::TestParamInfo<EmbeddingCase>& info) {
  const EmbeddingCase& c = info.param;
  return "n" + std::to_string(c.n_tokens) + "_seq" + std::to_string(c.seq_len) + "_d" + std::to_string(c.d) +
         "_vocab" + std::to_string(c.vocab) + (c.offset ? "_offset" + std::to_string(c.offset) : "") +
         (c.only_token >= 0 ? "_all" + std::to_string(c.only_token) : "");
}
class EmbeddingTest : public ::testing::TestWithParam<EmbeddingCase> {};

TEST_P(EmbeddingTest, ForwardAndBackwardMatchTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const EmbeddingCase c = GetParam();
  const size_t nd = size_t(c.n_tokens) * c.d;
  const auto tokens = c.only_token >= 0 ? std::vector<int32_t>(size_t(c.n_tokens), c.only_token)
                                        : uniform_ints(c.n_tokens, 0, c.vocab - 1, 1);
  const auto embed = normal(size_t(c.vocab) * c.d, 1.0f, 2), pos = normal(size_t(c.seq_len) * c.d, 1.0f, 3);
  const auto dx = normal(nd, 1.0f, 4);
  const auto d_embed0 = normal(embed.size(), 0.1f, 5), d_pos0 = normal(pos.size(), 0.1f, 6);

  std::vector<float> x_ref(nd), d_embed_ref = d_embed0, d_pos_ref = d_pos0;
  cpu::embedding_forward(tokens.data(), c.n_tokens, c.seq_len, c.d, embed.data(), pos.data(), x_ref.data());
  cpu::embedding_backward(tokens.data(), c.n_tokens, c.seq_len, c.d, dx.data(), d_embed_ref.data(), d_pos_ref.data());

  // Every float array `offset` floats into its buffer.
  auto upload = [&](std::vector<float> h) {
    h.insert(h.begin(), size_t(c.offset), 0.0f);
    return on_device(h);
  };
  auto tail = [&](const DeviceBuffer& b) {
    auto h = host_copy<float>(b);
    return std::vector<float>(h.begin() + c.offset, h.end());
  };
  auto at = [&](DeviceBuffer& b) { return b.as<float>() + c.offset; };
  DeviceBuffer d_tokens = on_device(tokens);
  DeviceBuffer d_embed_in = upload(embed), d_pos_in = upload(pos), d_dx = upload(dx),
               x = poisoned<float>(nd + c.offset);
  ASSERT_OK(gpu::embedding_forward(d_tokens.as<int32_t>(), c.n_tokens, c.seq_len, c.d, c.vocab, at(d_embed_in),
                                   at(d_pos_in), at(x), nullptr));
  EXPECT_TRUE(same_bits(tail(x), x_ref)) << "x";

  size_t ws_bytes = 0;
  ASSERT_OK(gpu::embedding_backward_workspace_bytes(c.n_tokens, c.vocab, &ws_bytes));
  DeviceBuffer ws = poisoned<uint8_t>(ws_bytes);
  std::vector<float> first_embed, first_pos;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer d_embed = upload(d_embed0), d_pos = upload(d_pos0);
    ASSERT_OK(gpu::embedding_backward(d_tokens.as<int32_t>(), c.n_tokens, c.seq_len, c.d, c.vocab, at(d_dx),
                                      at(d_embed), at(d_pos), ws.as<uint8_t>(), ws_bytes, nullptr));
    const auto ge = tail(d_embed), gp = tail(d_pos);
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
                                           EmbeddingCase{4099, 129, 65, 1000},
                                           EmbeddingCase{4096, 1024, 256, 256},  // the step's vocab and layout
                                           EmbeddingCase{4096, 1024, 256, 256, 1},   // unaligned: scalar accesses
                                           EmbeddingCase{2051, 512, 36, 32000},      // runs of one, a part chunk
                                           EmbeddingCase{1, 1, 132, 32000, 0, 31999},  // one row, the last id
                                           EmbeddingCase{3000, 1000, 132, 256, 0, 7},  // one run of every token
                                           EmbeddingCase{100, 10, 2, 5, 0, 4}, EmbeddingCase{4099, 129, 4, 50, 3}),
                         embedding_case_name);

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
// The fast path (d % 4 == 0, d <= 8192, 16-byte aligned: a row group of warps holds each row in
// registers, d_gain partials per chunk of 16+ rows) and the fallback (a warp per row, d_gain
// through column_sum): `offset` floats past an aligned start for every array (1: unaligned).
struct RmsNormCase {
  int64_t rows;
  int d, offset;
};
std::string rmsnorm_case_name(const ::testing::TestParamInfo<RmsNormCase>& info) {
  return "rows" + std::to_string(info.param.rows) + "_d" + std::to_string(info.param.d) +
         (info.param.offset ? "_offset" + std::to_string(info.param.offset) : "");
}
class RmsNormTest : public ::testing::TestWithParam<RmsNormCase> {};

// h on the device `offset` floats into its buffer; at(b) is where it starts, tail(b) reads it back.
struct Shifted {
  int offset;
  DeviceBuffer upload(std::vector<float> h) const {
    h.insert(h.begin(), size_t(offset), 0.0f);
    return on_device(h);
  }
  DeviceBuffer poisoned_floats(size_t n) const { return poisoned<float>(n + offset); }
  float* at(DeviceBuffer& b) const { return b.as<float>() + offset; }
  std::vector<float> tail(const DeviceBuffer& b) const {
    std::vector<float> h = host_copy<float>(b);
    return std::vector<float>(h.begin() + offset, h.end());
  }
};

TEST_P(RmsNormTest, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = GetParam().rows;
  const int d = GetParam().d;
  const Shifted sh{GetParam().offset};
  const size_t n = size_t(rows) * d;
  const auto x = normal(n, 1.5f, 21), gain = normal(d, 1.0f, 22), dy = normal(n, 1.0f, 23);
  const auto dx0 = normal(n, 0.5f, 24), d_gain0 = normal(d, 0.5f, 25);
  std::vector<float> y_ref(n), rstd_ref(rows), dx_ref = dx0, d_gain_ref = d_gain0;
  cpu::rmsnorm_forward(x.data(), gain.data(), rows, d, y_ref.data(), rstd_ref.data());
  cpu::rmsnorm_backward(dy.data(), x.data(), gain.data(), rstd_ref.data(), rows, d, dx_ref.data(), d_gain_ref.data());

  DeviceBuffer dev_x = sh.upload(x), dev_gain = sh.upload(gain), dev_dy = sh.upload(dy), y = sh.poisoned_floats(n),
               rstd = poisoned<float>(rows);
  ASSERT_OK(gpu::rmsnorm_forward(sh.at(dev_x), sh.at(dev_gain), rows, d, sh.at(y), rstd.as<float>(), nullptr));
  // rstd: an fp32 sum of d positive squares in a tree of depth h is within h 2^-24 of the double
  // sum, and the square root halves that: h = 16 + 5 + 16 on the fast path (16 terms per thread,
  // 5 shuffle levels, up to 16 warps in order), d/32 + 5 on the fallback (lanes of d/32 terms), so
  // < 1e-5 for every d here (< 10000). y adds two roundings.
  EXPECT_TRUE(all_near(host_copy<float>(rstd), rstd_ref, 1e-5, 0.0)) << "rstd";
  EXPECT_TRUE(all_near(sh.tail(y), y_ref, 1e-5, 0.0)) << "y";

  // The backward from the CPU's rstd on both sides. dx: the row's dot is fp32 (the same tree as
  // rstd's), and gain*dy - x*m can cancel, so each element is bounded by 1e-5 of its terms'
  // magnitudes; d_gain: fp32 sums of rows in chunks, then of the chunks (each group's rows, the
  // groups, 32 strided runs of chunks, the runs: depth < 100 for every shape here), bounded by 1e-5
  // of the sum of |terms|.
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
    DeviceBuffer dx = sh.upload(dx0), d_gain = sh.upload(d_gain0);
    ASSERT_OK(gpu::rmsnorm_backward(sh.at(dev_dy), sh.at(dev_x), sh.at(dev_gain), dev_rstd.as<float>(), rows, d,
                                    sh.at(dx), sh.at(d_gain), ws.as<uint8_t>(), ws_bytes, nullptr));
    const auto gdx = sh.tail(dx), gg = sh.tail(d_gain);
    EXPECT_TRUE(all_near(gdx, dx_ref, 0.0, dx_atol)) << "dx, run " << run;
    EXPECT_TRUE(all_near(gg, d_gain_ref, 0.0, gain_atol)) << "d_gain, run " << run;
    if (run == 0) first_dx = gdx, first_gain = gg;
    else EXPECT_TRUE(same_bits(gdx, first_dx) && same_bits(gg, first_gain)) << "second run differs";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RmsNormTest,
    ::testing::Values(
        // fast path: rows = 1; 9 chunks (the last of 1 row) through 8 one-warp groups, 25 lanes
        // holding a float4; groups of 2 warps (the 4th float4s past d); of 8; of 16 (d = 8192, a
        // block of 512 threads); the width-2048 step's shape (256 chunks of 16 rows, 2 groups of 4
        // warps); 256 chunks of 274 rows (the last of 131) through 8 groups; d = 4
        RmsNormCase{1, 2048, 0}, RmsNormCase{129, 100, 0}, RmsNormCase{1000, 768, 0}, RmsNormCase{300, 4096, 0},
        RmsNormCase{33, 8192, 0}, RmsNormCase{4096, 2048, 0}, RmsNormCase{70001, 8, 0}, RmsNormCase{5, 4, 0},
        // fallback: d % 4 != 0 (70001: 274 row chunks), d > 8192, unaligned pointers
        RmsNormCase{1, 1, 0}, RmsNormCase{7, 33, 0}, RmsNormCase{64, 1026, 0}, RmsNormCase{70001, 17, 0},
        RmsNormCase{3, 8196, 0}, RmsNormCase{50, 2048, 1}, RmsNormCase{1, 4, 1}),
    rmsnorm_case_name);

// ---- Attention -----------------------------------------------------------------------------------

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
    for (int part = 0; part < 3; ++part)  // q, k, v columns of each row, compared separately
      EXPECT_TRUE(normwise_near(qkv_part(g, width, part), qkv_part(dqkv_ref, width, part), 1e-2))
          << "d" << "qkv"[part] << ", run " << run;
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

}  // namespace
