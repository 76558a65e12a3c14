// The model's parameters as named tensors in one flat fp32 buffer (the master weights), so the
// optimizer, the gradient all-reduce and the checkpoint each see one contiguous array.
//
// Names and shapes (l = layer index; E experts, F = d_ff, D = d_model, V = vocab, T = seq_len):
//   embed [V, D]   pos_embed [T, D]
//   l.attn_norm [D]   l.wqkv [3D, D]   l.wo [D, D]   l.ffn_norm [D]
//   MoE:   l.router [E, D]   l.w13 [E, 2F, D] (rows 0..F-1: gate W1, F..2F-1: up W3)   l.w2 [E, D, F]
//   dense: l.w13 [2F, D]   l.w2 [D, F]
//   final_norm [D]   lm_head [V, D]
// Linear weights are [out, in] (y = x · W^T), the K-major operand the GEMMs take.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/model/model_config.h"

namespace blockscale::train {

struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in floats, into the flat buffer
  int64_t size = 0;
  bool weight_decay = false;  // matrices decay; norms do not
};

struct LayerParams {  // indices into ParamLayout::tensors
  int attn_norm, wqkv, wo, ffn_norm, router, w13, w2;  // router = -1 for a dense FFN
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;
  std::vector<LayerParams> layers;
  int embed = 0, pos_embed = 0, final_norm = 0, lm_head = 0;
  int64_t total = 0;  // floats

  const ParamTensor& at(int index) const { return tensors[index]; }
};

ParamLayout make_param_layout(const ModelConfig& c);

// Deterministic initialisation from `seed`: matrices ~ N(0, 0.02), the output projections (wo,
// w2) scaled by 1/sqrt(2 * layers), norms 1. params.size() == layout.total.
void init_params(const ParamLayout& layout, const ModelConfig& c, uint64_t seed, float* params);

}  // namespace blockscale::train
