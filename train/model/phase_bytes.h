// The fewest bytes the memory-bound phases of one optimizer step move through device memory (each
// input read once, each output written once), from the model, the recipe and the step's shape.
// Divided by the device's copy bandwidth they are each phase's floor, which the run's phase line
// and summary.json show beside its time (train/trainer.cpp). Per phase (the GPU step's names,
// train/gpu/gpu_phase_timer.h), with M = batch x seq_len tokens, R = M x top_k routed rows (dense:
// M), D, F, V, L the widths, vocabulary and layers, P the parameters, G the experts (dense: 1):
//   quantize       every linear layer's operands cast to the recipe, fp32 in (4 bytes) and the
//                  recipe's copies out: per micro-batch the activations (per layer M D + M D + R D
//                  + R F) and gradients (M 3D + M D + R 2F + R D), per step the weights (per layer
//                  4 D^2 + 3 G D F); the LM head's bf16 copies (M D, M V, V D) under every recipe
//                  but fp32 (bf16: the weights' copies, V D included, are the optimizer's). Bytes
//                  out per element: bf16 2; fp8_block 2 + 8/128 (two copies, fp32
//                  scales); mxfp8 2 + 2/32; nvfp4 1 + 2/16 (two 4-bit copies, 1-byte scales).
//                  The routes that multiply bf16 values of the blocks move more: their floor is
//                  still the recipe's.
//   norms          per micro-batch and RMSNorm (2 per layer, 1 final): 8 M D forward (x in, y
//                  out), 16 M D backward (dy and x in, dx read and written: the norm's input
//                  gradient adds into the residual stream's)
//   embedding_loss per micro-batch: 12 M D (token and position rows in, x out), 12 M D backward,
//                  8 M V (the logits read, their gradient written in place)
//   optimizer      per step: 33 P (AdamW reads weights, gradients, both moments and the decay mask,
//                  writes weights and moments; the gradient norm reads the gradients); bf16 35 P
//                  (AdamW also writes every parameter's bf16 copy)
// Other phases (GEMMs, attention, routing, communication) have no floor here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "train/model/model_config.h"

namespace blockscale::train {

// Bytes per optimizer step of `batch` x `grad_accum` sequences, by phase name.
std::vector<std::pair<std::string, double>> step_phase_bytes(const ModelConfig& c, Recipe recipe, int64_t batch,
                                                             int64_t grad_accum);

}  // namespace blockscale::train
