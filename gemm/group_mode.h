// A GEMM's grouping: one dense problem, M-grouped (MoE fprop and dgrad: experts split the rows)
// or K-grouped (MoE wgrad: experts split the reduction). gemm/grouped.h takes kM or kK; the
// kernels' schedules (common/grouped_schedule.h) take all three as a template parameter.
#pragma once

namespace blockscale::gemm {

enum class GroupMode { kDense, kM, kK };

}  // namespace blockscale::gemm
