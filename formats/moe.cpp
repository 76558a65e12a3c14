// formats/moe.h: the CPU reference of MoE routing, gather and un-permute + combine. Plain loops:
// this is the definition the GPU kernels (quant/moe_*.cu) are tested against.
#include "formats/moe.h"

#include <string>
#include <utility>

namespace blockscale::formats {
namespace {

Status check_routing_shape(int64_t tokens, int top_k, int num_experts) {
  if (tokens < 0) return Status::error("tokens: must be >= 0 (got " + std::to_string(tokens) + ")");
  if (top_k < 1) return Status::error("top_k: must be >= 1 (got " + std::to_string(top_k) + ")");
  if (num_experts < 1) return Status::error("num_experts: must be >= 1 (got " + std::to_string(num_experts) + ")");
  if (tokens * top_k >= (int64_t{1} << 31))
    return Status::error("tokens * top_k: must be < 2^31 (sorted rows are int32)");
  return Status::ok();
}

}  // namespace

Status moe_route(const int32_t* expert_ids, int64_t tokens, int top_k, int num_experts, MoeRouting* out) {
  BS_RETURN_IF_ERROR(check_routing_shape(tokens, top_k, num_experts));
  const int64_t slots = tokens * top_k;
  if (slots > 0 && expert_ids == nullptr) return Status::error("expert_ids: must not be null");
  if (out == nullptr) return Status::error("out: must not be null");
  std::vector<int64_t> count(static_cast<size_t>(num_experts), 0);
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t e = expert_ids[s];
    if (e >= 0 && e < num_experts) ++count[static_cast<size_t>(e)];
  }
  MoeRouting r;
  r.group_ends.resize(static_cast<size_t>(num_experts));
  std::vector<int64_t> next(static_cast<size_t>(num_experts));  // next free sorted row per expert
  int64_t total = 0;
  for (int g = 0; g < num_experts; ++g) {
    next[static_cast<size_t>(g)] = total;
    total += count[static_cast<size_t>(g)];
    r.group_ends[static_cast<size_t>(g)] = static_cast<int32_t>(total);
  }
  r.row_source.assign(static_cast<size_t>(slots), -1);
  r.slot_row.assign(static_cast<size_t>(slots), -1);
  for (int64_t s = 0; s < slots; ++s) {  // ascending slots: stable inside each expert
    const int32_t e = expert_ids[s];
    if (e < 0 || e >= num_experts) continue;
    const int64_t row = next[static_cast<size_t>(e)]++;
    r.row_source[static_cast<size_t>(row)] = static_cast<int32_t>(s / top_k);
    r.slot_row[static_cast<size_t>(s)] = static_cast<int32_t>(row);
  }
  *out = std::move(r);
  return Status::ok();
}

Status moe_gather(const float* x, int64_t x_rows, int64_t cols, int64_t ld, const int32_t* row_index, int64_t rows,
                  std::vector<float>* out) {
  if (x_rows < 0 || cols < 0 || rows < 0) return Status::error("x_rows, cols, rows: must be >= 0");
  if (ld < cols) return Status::error("ld: must be >= cols");
  if (rows > 0 && row_index == nullptr) return Status::error("row_index: must not be null");
  if (x_rows > 0 && cols > 0 && x == nullptr) return Status::error("x: must not be null");
  if (out == nullptr) return Status::error("out: must not be null");
  out->assign(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = row_index[r];
    if (src < 0 || src >= x_rows) continue;  // out of range: a zero row
    for (int64_t c = 0; c < cols; ++c) (*out)[static_cast<size_t>(r * cols + c)] = x[src * ld + c];
  }
  return Status::ok();
}

Status moe_unpermute_combine(const float* y, int64_t y_rows, int64_t cols, int64_t ld_y, const float* gates,
                             const int32_t* slot_row, int64_t tokens, int top_k, std::vector<float>* out) {
  if (y_rows < 0 || cols < 0 || tokens < 0) return Status::error("y_rows, cols, tokens: must be >= 0");
  if (top_k < 1) return Status::error("top_k: must be >= 1");
  if (ld_y < cols) return Status::error("ld_y: must be >= cols");
  if (tokens > 0 && (gates == nullptr || slot_row == nullptr))
    return Status::error("gates, slot_row: must not be null");
  if (out == nullptr) return Status::error("out: must not be null");
  out->assign(static_cast<size_t>(tokens * cols), 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      float acc = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        const int64_t s = t * top_k + j;
        const int64_t row = slot_row[s];
        if (row < 0 || row >= y_rows) continue;  // dropped
        acc = moe_combine_step(acc, gates[s], y[row * ld_y + c]);
      }
      (*out)[static_cast<size_t>(t * cols + c)] = acc;
    }
  }
  return Status::ok();
}

}  // namespace blockscale::formats
