#include "train/parallel/optimizer_shards.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace blockscale::train {

Status OptimizerShards::make(const std::vector<std::pair<int64_t, int64_t>>& buckets, int64_t total, int rank,
                             int world, OptimizerShards* out) {
  if (world < 1 || rank < 0 || rank >= world)
    return Status::error("optimizer shards: rank " + std::to_string(rank) + " of " + std::to_string(world));
  std::vector<std::pair<int64_t, int64_t>> sorted = buckets;
  std::sort(sorted.begin(), sorted.end());
  int64_t at = 0;
  for (const auto& [b, e] : sorted) {
    if (b != at || e <= b)
      return Status::error("optimizer shards: the buckets must cover [0, " + std::to_string(total) +
                           ") without gaps or overlaps (bucket [" + std::to_string(b) + ", " + std::to_string(e) +
                           ") after " + std::to_string(at) + ")");
    at = e;
  }
  if (at != total)
    return Status::error("optimizer shards: the buckets end at " + std::to_string(at) + ", not at " +
                         std::to_string(total));
  OptimizerShards s;
  s.rank_ = rank, s.world_ = world, s.total_ = total;
  for (const auto& [b, e] : buckets) {
    ReductionBucket k;
    k.begin = b, k.end = e, k.chunk = (e - b) / world, k.tail = b + world * k.chunk;
    s.buckets_.push_back(k);
    if (k.chunk > 0) {
      s.pieces_.push_back({b + rank * k.chunk, k.chunk, s.state_size_, false});
      s.state_size_ += k.chunk;
    }
    if (k.tail < e) {
      s.pieces_.push_back({k.tail, e - k.tail, s.state_size_, true});
      s.state_size_ += e - k.tail;
    }
  }
  *out = std::move(s);
  return Status::ok();
}

void OptimizerShards::pack(const float* full, float* shard) const {
  for (const OptimizerPiece& p : pieces_) std::memcpy(shard + p.state_offset, full + p.offset, p.count * sizeof(float));
}

void OptimizerShards::unpack(const float* shard, float* full, bool tails) const {
  for (const OptimizerPiece& p : pieces_)
    if (tails || !p.tail) std::memcpy(full + p.offset, shard + p.state_offset, p.count * sizeof(float));
}

std::vector<std::pair<int64_t, int64_t>> reduction_buckets(const ParamLayout& layout, bool experts_local) {
  const int n_layers = static_cast<int>(layout.layers.size());
  auto layer_begin = [&](int l) {
    return l < n_layers ? layout.at(layout.layers[l].attn_norm).offset : layout.at(layout.final_norm).offset;
  };
  std::vector<std::pair<int64_t, int64_t>> out;
  out.emplace_back(layer_begin(n_layers), layout.total);
  for (int l = n_layers - 1; l >= 0; --l) {
    const LayerParams& p = layout.layers[l];
    const int64_t wo = layout.at(p.wo).offset, ffn = layout.at(p.ffn_norm).offset;
    const int64_t w13 = layout.at(p.w13).offset, w2 = layout.at(p.w2).offset;
    if (!experts_local || p.router < 0) {
      out.emplace_back(w2, layer_begin(l + 1));
      out.emplace_back(w13, w2);
    }
    out.emplace_back(ffn, w13);  // the FFN norm and the router
    out.emplace_back(wo, ffn);
    out.emplace_back(layer_begin(l), wo);  // the attention norm and wqkv
  }
  out.emplace_back(0, layer_begin(0));
  return out;
}

}  // namespace blockscale::train
