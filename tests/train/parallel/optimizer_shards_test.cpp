// Tests of train/parallel/optimizer_shards.h: every parameter is updated by exactly one rank
// (a bucket's chunk) or by all of them (its tail), the shares match what a reduce-scatter of each
// bucket leaves on a rank, the moments a rank keeps are its pieces packed in order, and the
// buckets of a model cover its parameters in the order the backward sums them.
#include "train/parallel/optimizer_shards.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tests/status_test.h"  // defines: ASSERT_OK, mentions
#include "tests/train/tiny_model.h"
#include "train/model/model_config.h"

namespace blockscale::train {
namespace {

using blockscale_test::mentions;

TEST(OptimizerShards, EveryParameterHasOneOwnerOrEveryRank) {
  // Buckets in the backward's order (last first), sizes below, at and above the world size.
  const std::vector<std::pair<int64_t, int64_t>> buckets = {{40, 43}, {10, 40}, {3, 10}, {0, 3}};
  for (int world : {1, 2, 3, 4, 7}) {
    std::vector<int> owners(43, 0), tails(43, 0);
    int64_t states = 0;
    for (int r = 0; r < world; ++r) {
      OptimizerShards s;
      ASSERT_OK(OptimizerShards::make(buckets, 43, r, world, &s));
      int64_t packed = 0;
      for (const OptimizerPiece& p : s.pieces()) {
        EXPECT_EQ(p.state_offset, packed) << "pieces are packed in order";
        packed += p.count;
        for (int64_t i = p.offset; i < p.offset + p.count; ++i) (p.tail ? tails : owners)[i] += 1;
      }
      EXPECT_EQ(s.state_size(), packed);
      states += s.state_size();
      for (const ReductionBucket& b : s.buckets()) {  // rank r's chunk is the reduce-scatter's
        EXPECT_EQ(b.chunk, (b.end - b.begin) / world);
        EXPECT_EQ(b.tail, b.begin + world * b.chunk);
      }
    }
    int64_t tail_elements = 0;
    for (int i = 0; i < 43; ++i) {
      EXPECT_TRUE((owners[i] == 1 && tails[i] == 0) || (owners[i] == 0 && tails[i] == world))
          << "element " << i << " world " << world << ": " << owners[i] << " owners, " << tails[i] << " tails";
      tail_elements += tails[i] > 0;
    }
    EXPECT_EQ(states, 43 - tail_elements + world * tail_elements);
  }
}

TEST(OptimizerShards, PackAndUnpackMoveThisRanksShare) {
  OptimizerShards s;
  ASSERT_OK(OptimizerShards::make({{0, 10}, {10, 17}}, 17, 1, 3, &s));  // chunks 3 and 2, tails 1 and 1
  std::vector<float> full(17);
  std::iota(full.begin(), full.end(), 0.0f);
  std::vector<float> shard(s.state_size());
  s.pack(full.data(), shard.data());
  EXPECT_EQ(shard, (std::vector<float>{3, 4, 5, 9, 12, 13, 16}));
  std::vector<float> back(17, -1.0f);
  s.unpack(shard.data(), back.data(), false);
  EXPECT_EQ(back, (std::vector<float>{-1, -1, -1, 3, 4, 5, -1, -1, -1, -1, -1, -1, 12, 13, -1, -1, -1}));
  s.unpack(shard.data(), back.data(), true);
  EXPECT_EQ(back[9], 9.0f);
  EXPECT_EQ(back[16], 16.0f);
}

TEST(OptimizerShards, RefusesBucketsThatDoNotTileTheParameters) {
  OptimizerShards s;
  EXPECT_TRUE(mentions(OptimizerShards::make({{0, 5}, {6, 10}}, 10, 0, 2, &s), "without gaps or overlaps"));
  EXPECT_TRUE(mentions(OptimizerShards::make({{0, 6}, {5, 10}}, 10, 0, 2, &s), "without gaps or overlaps"));
  EXPECT_TRUE(mentions(OptimizerShards::make({{0, 5}}, 10, 0, 2, &s), "end at 5, not at 10"));
  EXPECT_TRUE(mentions(OptimizerShards::make({{0, 10}}, 10, 2, 2, &s), "rank 2 of 2"));
}

TEST(OptimizerShards, AModelsBucketsAreTheBackwardsInItsOrder) {
  const ModelConfig c = blockscale_test::tiny_model_config().model;
  const ParamLayout layout = make_param_layout(c);
  const auto buckets = reduction_buckets(layout);
  ASSERT_EQ(buckets.size(), 5 * size_t(c.n_layers) + 2);
  EXPECT_EQ(buckets.front().second, layout.total);                  // the final norm and LM head first
  EXPECT_EQ(buckets.back().first, 0);                               // the embeddings last
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_EQ(buckets[i].second, buckets[i - 1].first);
  for (int l = 0; l < c.n_layers; ++l) {  // w2, w13, the FFN norm (+ router), wo, the attention norm (+ wqkv)
    const LayerParams& p = layout.layers[l];
    const size_t first = 1 + 5 * size_t(c.n_layers - 1 - l);
    int i = 0;
    for (int t : {p.w2, p.w13, p.ffn_norm, p.wo, p.attn_norm})
      EXPECT_EQ(buckets[first + i++].first, layout.at(t).offset) << "layer " << l << ", bucket " << i;
  }
  // Expert parallelism: the experts' w2 and w13 are no buckets; the rest are the same.
  const auto shared = reduction_buckets(layout, /*experts_local=*/true);
  ASSERT_EQ(shared.size(), 3 * size_t(c.n_layers) + 2);
  for (const auto& b : shared)
    for (const LayerParams& p : layout.layers) {
      EXPECT_NE(b.first, layout.at(p.w13).offset) << "w13 is a bucket";
      EXPECT_NE(b.first, layout.at(p.w2).offset) << "w2 is a bucket";
    }
  OptimizerShards s;
  ASSERT_OK(OptimizerShards::make(buckets, layout.total, 0, 2, &s));
}

}  // namespace
}  // namespace blockscale::train
