// formats/moe.h, the CPU reference of MoE routing: hand-computed small cases (dropped slots, empty
// experts, every token on one expert, top_k 1 and > 1), the gather's zero rows, and the combine's
// arithmetic (fma in j order, dropped slots skipped) checked bit for bit.
#include "formats/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

namespace bf = blockscale::formats;
using V = std::vector<int32_t>;

bf::MoeRouting route(const V& ids, int64_t tokens, int top_k, int experts) {
  bf::MoeRouting r;
  const blockscale::Status s = bf::moe_route(ids.data(), tokens, top_k, experts, &r);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return r;
}

TEST(MoeRoute, TopKOne) {
  // tokens 0..4 -> experts 2, 0, 2, 1, 0
  const bf::MoeRouting r = route({2, 0, 2, 1, 0}, 5, 1, 3);
  EXPECT_EQ(r.group_ends, (V{2, 3, 5}));
  EXPECT_EQ(r.row_source, (V{1, 4, 3, 0, 2}));
  EXPECT_EQ(r.slot_row, (V{3, 0, 4, 2, 1}));
}

TEST(MoeRoute, TopKTwoStableBySlot) {
  // token 0 -> (1, 0), token 1 -> (0, 1), token 2 -> (1, 1): expert 1 gets slots 0, 3, 4, 5
  const bf::MoeRouting r = route({1, 0, 0, 1, 1, 1}, 3, 2, 2);
  EXPECT_EQ(r.group_ends, (V{2, 6}));
  EXPECT_EQ(r.row_source, (V{0, 1, 0, 1, 2, 2}));
  EXPECT_EQ(r.slot_row, (V{2, 0, 1, 3, 4, 5}));
}

TEST(MoeRoute, DroppedSlotsAndEmptyExperts) {
  // 4 experts, experts 0 and 2 empty; -1, 4 and INT32_MIN are dropped.
  const int32_t lo = std::numeric_limits<int32_t>::min();
  const bf::MoeRouting r = route({3, -1, 1, 4, lo, 3}, 3, 2, 4);
  EXPECT_EQ(r.group_ends, (V{0, 1, 1, 3}));
  EXPECT_EQ(r.row_source, (V{1, 0, 2, -1, -1, -1}));  // rows past the routed total: -1
  EXPECT_EQ(r.slot_row, (V{1, -1, 0, -1, -1, 2}));
}

TEST(MoeRoute, AllOnOneExpert) {
  const bf::MoeRouting r = route({2, 2, 2, 2, 2, 2, 2, 2}, 4, 2, 5);
  EXPECT_EQ(r.group_ends, (V{0, 0, 8, 8, 8}));
  EXPECT_EQ(r.row_source, (V{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(r.slot_row, (V{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(MoeRoute, EverythingDroppedAndEmpty) {
  const bf::MoeRouting r = route({-1, 7, -3}, 3, 1, 2);
  EXPECT_EQ(r.group_ends, (V{0, 0}));
  EXPECT_EQ(r.row_source, (V{-1, -1, -1}));
  EXPECT_EQ(r.slot_row, (V{-1, -1, -1}));
  const bf::MoeRouting e = route({}, 0, 3, 2);
  EXPECT_EQ(e.group_ends, (V{0, 0}));
  EXPECT_TRUE(e.row_source.empty());
}

TEST(MoeRoute, PermutationProperties) {
  // A larger random routing: slot_row and row_source are inverse on the routed slots, rows of one
  // expert are in slot order.
  const int64_t tokens = 1000;
  const int top_k = 3, experts = 7;
  V ids(tokens * top_k);
  uint32_t z = 12345;
  for (auto& e : ids) {
    z = z * 1664525u + 1013904223u;
    e = static_cast<int32_t>(z >> 24) % 9 - 1;  // -1..7: some dropped (-1, 7)
  }
  const bf::MoeRouting r = route(ids, tokens, top_k, experts);
  int64_t last_row = -1;
  std::vector<int64_t> last_slot_of_expert(experts, -1);
  for (int64_t s = 0; s < tokens * top_k; ++s) {
    const int32_t row = r.slot_row[s];
    if (ids[s] < 0 || ids[s] >= experts) {
      EXPECT_EQ(row, -1);
      continue;
    }
    ASSERT_GE(row, 0);
    EXPECT_EQ(r.row_source[row], s / top_k);
    const int g = ids[s];
    EXPECT_GE(row, g ? r.group_ends[g - 1] : 0);
    EXPECT_LT(row, r.group_ends[g]);
    EXPECT_GT(s, last_slot_of_expert[g]);
    last_slot_of_expert[g] = s;
    last_row = std::max<int64_t>(last_row, row);
  }
  EXPECT_EQ(last_row + 1, r.group_ends.back());
}

TEST(MoeRoute, RefusesBadShapes) {
  bf::MoeRouting r;
  const int32_t id = 0;
  EXPECT_FALSE(bf::moe_route(&id, -1, 1, 1, &r).is_ok());
  EXPECT_NE(bf::moe_route(&id, 1, 0, 1, &r).message().find("top_k"), std::string::npos);
  EXPECT_NE(bf::moe_route(&id, 1, 1, 0, &r).message().find("num_experts"), std::string::npos);
  EXPECT_NE(bf::moe_route(&id, int64_t{1} << 30, 2, 1, &r).message().find("2^31"), std::string::npos);
  EXPECT_FALSE(bf::moe_route(nullptr, 1, 1, 1, &r).is_ok());
}

TEST(MoeGather, RowsAndOutOfRangeZeros) {
  const std::vector<float> x = {1, 2, 9, 3, 4, 9, 5, 6, 9};  // 3 x 2, ld 3
  std::vector<float> out;
  const V idx = {2, -1, 0, 3, 1};
  ASSERT_TRUE(bf::moe_gather(x.data(), 3, 2, 3, idx.data(), 5, &out).is_ok());
  EXPECT_EQ(out, (std::vector<float>{5, 6, 0, 0, 1, 2, 0, 0, 3, 4}));
}

TEST(MoeCombine, FmaInSlotOrderDroppedSkipped) {
  // y: 3 sorted rows x 2 cols, ld 2; 2 tokens, top_k 2.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> y = {1.0f, 2.0f, 3.0f, nan, 0.5f, -4.0f};
  const std::vector<float> gates = {0.25f, 0.75f, nan, 2.0f};
  const V slot_row = {2, 0, -1, 1};  // token 1's first slot dropped: its NaN gate is never used
  std::vector<float> out;
  ASSERT_TRUE(bf::moe_unpermute_combine(y.data(), 3, 2, 2, gates.data(), slot_row.data(), 2, 2, &out).is_ok());
  EXPECT_EQ(out[0], 0.25f * 0.5f + 0.75f * 1.0f);
  EXPECT_EQ(out[1], 0.25f * -4.0f + 0.75f * 2.0f);
  EXPECT_EQ(out[2], 6.0f);
  EXPECT_TRUE(std::isnan(out[3]));  // a routed NaN does reach the token
}

TEST(MoeCombine, OneFusedRoundingPerStep) {
  // gate * y + acc with one rounding: 1 + 2^-24 is not representable alone, fma keeps the product
  // exact: (1 + 2^-23) * (1 - 2^-23) = 1 - 2^-46, plus acc = -1 gives -2^-46 exactly.
  const float a = 1.0f + std::ldexp(1.0f, -23), b = 1.0f - std::ldexp(1.0f, -23);
  const std::vector<float> y = {b, -1.0f};
  const std::vector<float> gates = {1.0f, a};
  const V slot_row = {1, 0};  // j = 0: acc = 1 * -1; j = 1: acc = fma(a, b, -1)
  std::vector<float> out;
  ASSERT_TRUE(bf::moe_unpermute_combine(y.data(), 2, 1, 1, gates.data(), slot_row.data(), 1, 2, &out).is_ok());
  EXPECT_EQ(out[0], -std::ldexp(1.0f, -46));
  // An out-of-range row is dropped like -1; no slot routed gives +0.
  const V far = {2, -5};
  ASSERT_TRUE(bf::moe_unpermute_combine(y.data(), 2, 1, 1, gates.data(), far.data(), 1, 2, &out).is_ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FALSE(std::signbit(out[0]));
}

TEST(MoeCombine, Bf16RoundingIsRne) {
  EXPECT_EQ(bf::float_to_bf16_bits_rn(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie to even
  EXPECT_EQ(bf::float_to_bf16_bits_rn(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
}

}  // namespace
