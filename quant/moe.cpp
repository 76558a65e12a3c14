// quant/moe.h: argument checks and workspace sizes of the MoE routing and combine; the kernels are
// in quant/moe_route.cu and quant/moe_combine.cu.
#include "quant/moe.h"

#include <initializer_list>
#include <string>

#include "quant/launchers.h"      // defines: cuda_status
#include "quant/moe_launchers.h"

namespace blockscale::quant {
namespace {

constexpr int kMaxExperts = 4096;      // the grouped quantize's limit
constexpr int kMaxCombineTopK = 1024;  // the combine keeps a token's slots in shared memory

bool aligned(const void* p, int n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

struct Span {
  const char* name;
  uintptr_t begin, end;
};
Span span(const char* name, const void* p, int64_t bytes) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  return {name, b, b + static_cast<uintptr_t>(bytes)};
}
Status check_apart(std::initializer_list<Span> spans) {
  for (auto a = spans.begin(); a != spans.end(); ++a)
    for (auto b = a + 1; b != spans.end(); ++b)
      if (a->begin < b->end && b->begin < a->end) return Status::error(std::string(b->name) + ": overlaps " + a->name);
  return Status::ok();
}
Status check_ptr(const char* name, const void* p, int align) {
  if (p == nullptr) return Status::error(std::string(name) + ": must not be null");
  if (!aligned(p, align)) return Status::error(std::string(name) + ": must be " + std::to_string(align) + "-byte aligned");
  return Status::ok();
}
Status check_workspace(size_t need, const void* workspace, size_t bytes) {
  if (need == 0) return Status::ok();
  if (workspace == nullptr || bytes < need)
    return Status::error("workspace: needs " + std::to_string(need) + " bytes (workspace_size), got " +
                         (workspace == nullptr ? std::string("null") : std::to_string(bytes)));
  if (!aligned(workspace, 16)) return Status::error("workspace: must be 16-byte aligned");
  return Status::ok();
}

}  // namespace

// ---- Routing -------------------------------------------------------------------------------------

Status can_implement(const RoutingProblem& p) {
  if (p.tokens < 0) return Status::error("problem.tokens: must be >= 0 (got " + std::to_string(p.tokens) + ")");
  if (p.top_k < 1) return Status::error("problem.top_k: must be >= 1 (got " + std::to_string(p.top_k) + ")");
  if (p.num_experts < 1 || p.num_experts > kMaxExperts)
    return Status::error("problem.num_experts: must be in [1, 4096] (got " + std::to_string(p.num_experts) + ")");
  if (p.tokens * p.top_k >= (int64_t{1} << 31))
    return Status::error("problem.tokens * problem.top_k: must be < 2^31 (sorted rows are int32)");
  return Status::ok();
}

Status can_implement(const RoutingProblem& p, const RoutingInputs& in, const RoutingOutputs& out) {
  BS_RETURN_IF_ERROR(can_implement(p));
  const int64_t slots = p.tokens * p.top_k;
  BS_RETURN_IF_ERROR(check_ptr("outputs.group_ends", out.group_ends, 4));
  if (slots == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr("inputs.expert_ids", in.expert_ids, 4));
  BS_RETURN_IF_ERROR(check_ptr("outputs.row_source", out.row_source, 4));
  BS_RETURN_IF_ERROR(check_ptr("outputs.slot_row", out.slot_row, 4));
  return check_apart({span("inputs.expert_ids", in.expert_ids, 4 * slots),
                      span("outputs.group_ends", out.group_ends, 4 * int64_t{p.num_experts}),
                      span("outputs.row_source", out.row_source, 4 * slots),
                      span("outputs.slot_row", out.slot_row, 4 * slots)});
}

size_t workspace_size(const RoutingProblem& p) {
  if (!can_implement(p)) return 0;
  const int64_t chunks = detail::route_chunks(p.tokens * p.top_k, p.num_experts);
  const int64_t words = (chunks * p.num_experts + 3) / 4 * 4 + p.num_experts;
  return static_cast<size_t>((4 * words + 15) / 16 * 16);
}

Status run(const RoutingProblem& p, const RoutingInputs& in, const RoutingOutputs& out, void* workspace,
           size_t workspace_bytes, cudaStream_t stream) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  BS_RETURN_IF_ERROR(check_workspace(workspace_size(p), workspace, workspace_bytes));
  return detail::launch_moe_route(p, in, out, workspace, stream);
}

// ---- Combine -------------------------------------------------------------------------------------

Status can_implement(const CombineProblem& p) {
  if (p.tokens < 0) return Status::error("problem.tokens: must be >= 0 (got " + std::to_string(p.tokens) + ")");
  if (p.top_k < 1 || p.top_k > kMaxCombineTopK)
    return Status::error("problem.top_k: must be in [1, 1024] (got " + std::to_string(p.top_k) + ")");
  if (p.tokens * p.top_k >= (int64_t{1} << 31))
    return Status::error("problem.tokens * problem.top_k: must be < 2^31 (slots are int32-indexed)");
  if (p.cols < 0 || p.cols > (int64_t{1} << 31))
    return Status::error("problem.cols: must be in [0, 2^31] (got " + std::to_string(p.cols) + ")");
  if (p.y_rows < 0 || p.y_rows > (int64_t{1} << 31))
    return Status::error("problem.y_rows: must be in [0, 2^31] (got " + std::to_string(p.y_rows) + ")");
  if (p.ld_y < p.cols || p.ld_y > (int64_t{1} << 31))
    return Status::error("problem.ld_y: must be >= cols and <= 2^31 (got " + std::to_string(p.ld_y) + ")");
  if (p.ld_out < p.cols || p.ld_out > (int64_t{1} << 31))
    return Status::error("problem.ld_out: must be >= cols and <= 2^31 (got " + std::to_string(p.ld_out) + ")");
  if (p.out_type != CombineOutputType::kBf16 && p.out_type != CombineOutputType::kFp32)
    return Status::error("problem.out_type: unknown value");
  return Status::ok();
}

Status can_implement(const CombineProblem& p, const CombineInputs& in, const CombineOutputs& out) {
  BS_RETURN_IF_ERROR(can_implement(p));
  if (p.tokens == 0 || p.cols == 0) return Status::ok();
  const int out_bytes = p.out_type == CombineOutputType::kBf16 ? 2 : 4;
  BS_RETURN_IF_ERROR(check_ptr("inputs.gates", in.gates, 4));
  BS_RETURN_IF_ERROR(check_ptr("inputs.slot_row", in.slot_row, 4));
  BS_RETURN_IF_ERROR(check_ptr("outputs.out", out.out, out_bytes));
  const int64_t slots = p.tokens * p.top_k;
  const int64_t out_span = ((p.tokens - 1) * p.ld_out + p.cols) * out_bytes;
  // The inputs are only read: they may overlap each other, never the output.
  const Span o = span("outputs.out", out.out, out_span);
  if (p.y_rows > 0) {  // y_rows == 0: every slot is dropped and y is never read
    BS_RETURN_IF_ERROR(check_ptr("inputs.y", in.y, 2));
    BS_RETURN_IF_ERROR(check_apart({span("inputs.y", in.y, ((p.y_rows - 1) * p.ld_y + p.cols) * 2), o}));
  }
  BS_RETURN_IF_ERROR(check_apart({span("inputs.gates", in.gates, 4 * slots), o}));
  return check_apart({span("inputs.slot_row", in.slot_row, 4 * slots), o});
}

size_t workspace_size(const CombineProblem&) { return 0; }

Status run(const CombineProblem& p, const CombineInputs& in, const CombineOutputs& out, void*, size_t,
           cudaStream_t stream) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  if (p.tokens == 0 || p.cols == 0) return Status::ok();
  return detail::launch_moe_combine(p, in, out, stream);
}

}  // namespace blockscale::quant
