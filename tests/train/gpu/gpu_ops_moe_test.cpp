// Tests of train/gpu/gpu_ops.h's MoE ops against train/cpu/cpu_ops.h: the router (forward, load-balance
// loss, backward; ties) and the MoE combine backward and scatter-add. Poisoned outputs, tolerances
// and determinism as gpu_ops_test.cpp's header states; helpers in gpu_ops_test_util.h. GPU tests
// skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK
#include "tests/train/gpu/gpu_ops_test_util.h"
#include "tests/train/gpu/test_inputs.h"  // normal
#include "train/cpu/cpu_ops.h"
#include "train/gpu/gpu_ops.h"

namespace {

using namespace blockscale_test::gpu_ops;  // gpu_ops_test_util.h
namespace cpu = blockscale::train;
namespace gpu = blockscale::train::gpu;
using blockscale_test::normal;

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

}  // namespace
