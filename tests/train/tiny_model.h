// The tiny MoE model the train tests run on the CPU: V 64, D 32, L 1, H 2, E 4, K 2, F 32, T 32, B 2.
#pragma once

#include "train/trainer.h"

namespace blockscale_test {

inline blockscale::train::TrainConfig tiny_model_config() {
  blockscale::train::TrainConfig c;
  c.model.vocab = 64;
  c.model.d_model = 32;
  c.model.n_layers = 1;
  c.model.n_heads = 2;
  c.model.n_experts = 4;
  c.model.top_k = 2;
  c.model.d_ff = 32;
  c.model.seq_len = 32;
  c.batch = 2;
  return c;
}

}  // namespace blockscale_test
