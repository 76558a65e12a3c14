// Internal to quant/: the MoE launchers behind quant/moe.h. moe.cpp has checked every argument and
// calls these only for a valid problem.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "quant/moe.h"

namespace blockscale::quant::detail {

// Routing (quant/moe_route.cu): slots per chunk (one warp each) and the number of chunks; the
// workspace holds round_up(chunks * num_experts, 4) + num_experts uint32 counters.
int64_t route_chunk_slots(int num_experts);
int64_t route_chunks(int64_t slots, int num_experts);
Status launch_moe_route(const RoutingProblem& p, const RoutingInputs& in, const RoutingOutputs& out, void* workspace,
                        cudaStream_t stream);

// Un-permute + combine (quant/moe_combine.cu); tokens and cols > 0.
Status launch_moe_combine(const CombineProblem& p, const CombineInputs& in, const CombineOutputs& out,
                          cudaStream_t stream);

}  // namespace blockscale::quant::detail
