// AdamW's state sharded across data-parallel ranks (ZeRO stage 1): which parameters each rank
// updates and keeps moments for. The flat parameter vector is cut into the buckets the backward
// sums one at a time (reduction_buckets).
// Each bucket's first world x chunk elements (chunk = size / world) are split evenly, rank r owning
// chunk r: what a reduce-scatter of the bucket leaves on it and an all-gather hands back. The
// bucket's last size mod world elements, its tail, belong to every rank: summed by a small
// all-reduce and updated identically everywhere, counted once (by rank 0) in the gradient norm.
// A rank keeps the moments of its pieces only, packed in piece order: about 1 / world of them.
//
//   defines: ReductionBucket, OptimizerPiece, OptimizerShards, reduction_buckets
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "train/model/params.h"

namespace blockscale::train {

struct ReductionBucket {
  int64_t begin = 0, end = 0;
  int64_t chunk = 0;  // (end - begin) / world: each rank's share
  int64_t tail = 0;   // begin + world x chunk: the tail is [tail, end)
};

// One contiguous range of the parameters that a rank updates: [offset, offset + count) of the
// flat vector, its moments at [state_offset, state_offset + count) of the rank's shard.
struct OptimizerPiece {
  int64_t offset = 0, count = 0, state_offset = 0;
  bool tail = false;  // a bucket's tail: every rank holds it
};

class OptimizerShards {
 public:
  // `buckets` must cover [0, total) without gaps or overlaps, in any order (the order the backward
  // sums them); 0 <= rank < world.
  static Status make(const std::vector<std::pair<int64_t, int64_t>>& buckets, int64_t total, int rank, int world,
                     OptimizerShards* out);

  int rank() const { return rank_; }
  int world() const { return world_; }
  int64_t total() const { return total_; }
  const std::vector<ReductionBucket>& buckets() const { return buckets_; }
  const std::vector<OptimizerPiece>& pieces() const { return pieces_; }  // this rank's, in bucket order
  int64_t state_size() const { return state_size_; }                     // moments (each of m and v) kept here

  // shard[piece.state_offset ...] = full[piece.offset ...] for this rank's pieces.
  void pack(const float* full, float* shard) const;
  // full[piece.offset ...] = shard[piece.state_offset ...], for the tails only when `tails` (a sum
  // over ranks takes them from one rank). Other elements of `full` are left as they are.
  void unpack(const float* shard, float* full, bool tails) const;

 private:
  int rank_ = 0, world_ = 1;
  int64_t total_ = 0, state_size_ = 0;
  std::vector<ReductionBucket> buckets_;
  std::vector<OptimizerPiece> pieces_;
};

// The ranges the backward sums across ranks, in the order it sums them, each as soon as the
// backward has written it: the final norm and the LM head; per layer from the last to the first
// w2, w13, the FFN norm with the router, wo, the attention norm with wqkv; the embeddings. Small
// buckets let the sums overlap the backward down to its last kernels. experts_local (expert
// parallelism): a MoE layer's w2 and w13 are each rank's own, not summed, so not buckets.
std::vector<std::pair<int64_t, int64_t>> reduction_buckets(const ParamLayout& layout, bool experts_local = false);

}  // namespace blockscale::train
