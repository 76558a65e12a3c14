// The cuBLASLt route of the linear layers (train/gpu/gpu_linear_route.h): fp32 operands as they
// are, bf16 copies rounded once per operand (the forward's copies of x and w serve the backward
// too), or mxfp8's rowwise and columnwise MX values as bf16 (quant/mx_bf16.h, one pass). The
// experts run one product each, with the group sizes on the host (as Megatron's grouped linear
// layers take their splits).
#include "quant/mx_bf16.h"
#include "train/gpu/gpu_linear_route.h"
#include "train/gpu/gpu_ops.h"

namespace blockscale::train {
namespace {

class CublasRoute final : public LinearRoute {
 public:
  CublasRoute(Recipe recipe, LayerWorkspace& ws) : recipe_(recipe), ws_(ws) {}
  bool needs_host_ends() const override { return true; }

  Status forward(const std::string& name, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
                 float* y) override {
    Operands o;
    BS_RETURN_IF_ERROR(forward_operands(name, x, w, m, n, k, 1, {}, &o));
    return ws_.cublas_gemm(Product::kXWt, o.type, o.x, o.w, m, n, k, y, 0.0f);
  }

  Status backward(const std::string& name, SrKey, const float* dy, const float* x, const float* w, int64_t m,
                  int64_t n, int64_t k, float* dx, float* dw) override {
    Operands o;
    BS_RETURN_IF_ERROR(backward_operands(name, dy, x, w, m, n, k, 1, {}, &o));
    if (dx) BS_RETURN_IF_ERROR(ws_.cublas_gemm(Product::kDyW, o.type, o.dy, o.w_dgrad, m, n, k, dx, 0.0f));
    return ws_.cublas_gemm(Product::kDytX, o.type, o.dy_wgrad, o.x_wgrad, m, n, k, dw, ws_.wgrad_beta());
  }

  Status grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends, int e,
                         const float* w, int64_t n, int64_t k, float* y, const Gather* gather) override {
    Operands o;
    BS_RETURN_IF_ERROR(forward_operands(name, x, w, rows, n, k, e, {ends, e, gather}, &o));
    const std::vector<int32_t>& host_ends = ws_.host_ends();
    PhaseScope phase(ws_.timer(), Phase::kGemm);  // one pair of phase events for the loop, not one per product
    for (int g = 0; g < e; ++g) {
      const int64_t b = g ? host_ends[g - 1] : 0, r = host_ends[g] - b;
      if (r > 0)
        BS_RETURN_IF_ERROR(ws_.cublas_gemm(Product::kXWt, o.type, o.at(o.x, b * k), o.at(o.w, g * n * k), r, n, k,
                                           y + b * n, 0.0f));
    }
    return Status::ok();
  }

  Status grouped_backward(const std::string& name, SrKey, const float* dy, const float* x, int64_t rows,
                          const int32_t* ends, int e, const float* w, int64_t n, int64_t k, float* dx,
                          float* dw) override {
    Operands o;
    BS_RETURN_IF_ERROR(backward_operands(name, dy, x, w, rows, n, k, e, {ends, e, nullptr}, &o));
    const std::vector<int32_t>& host_ends = ws_.host_ends();
    PhaseScope phase(ws_.timer(), Phase::kGemm);
    for (int g = 0; g < e; ++g) {
      const int64_t b = g ? host_ends[g - 1] : 0, r = host_ends[g] - b;
      if (r == 0) continue;  // an expert without tokens keeps its gradient
      BS_RETURN_IF_ERROR(ws_.cublas_gemm(Product::kDyW, o.type, o.at(o.dy, b * n), o.at(o.w_dgrad, g * n * k), r, n,
                                         k, dx + b * k, 0.0f));
      BS_RETURN_IF_ERROR(ws_.cublas_gemm(Product::kDytX, o.type, o.at(o.dy_wgrad, b * n), o.at(o.x_wgrad, b * k), r,
                                         n, k, dw + g * n * k, ws_.wgrad_beta()));
    }
    return Status::ok();
  }

 private:
  // The operands cuBLASLt multiplies, per product: fprop x · w^T, dgrad dy · w, wgrad dy^T · x.
  // fp32: the tensors themselves; bf16: one rounded copy of each; mxfp8: the rowwise MX values for
  // fprop and dgrad's dy, columnwise for the rest.
  struct Operands {
    cudaDataType type = CUDA_R_32F;
    size_t elem_bytes = 4;
    const void *x = nullptr, *w = nullptr;               // fprop
    const void *dy = nullptr, *w_dgrad = nullptr;        // dgrad
    const void *dy_wgrad = nullptr, *x_wgrad = nullptr;  // wgrad
    const void* at(const void* p, int64_t elems) const { return static_cast<const char*>(p) + elems * elem_bytes; }
  };
  // The rows of x and dy by expert (device ends, optionally gathered): mxfp8's columnwise blocks
  // start at each expert's first row. bf16 / fp32 take the rows as they are (no gather).
  struct RowGroups {
    const int32_t* ends = nullptr;
    int groups = 0;
    const Gather* gather = nullptr;
  };
  struct MxBf16Copies {
    uint16_t* row = nullptr;
    uint16_t* col = nullptr;
  };
  bool mx() const { return recipe_ == Recipe::kMxfp8; }

  // The bf16 recipe's "quantization": a rounded copy in the named buffer.
  Status bf16_copy(const std::string& name, const float* x, int64_t count, const void** out) {
    PhaseScope phase(ws_.timer(), Phase::kQuantize);
    uint16_t* copy;
    BS_RETURN_IF_ERROR(ws_.buf(name, count, &copy));
    *out = copy;
    return gpu::to_bf16(x, count, copy, ws_.stream());
  }
  // The forward's bf16 copy of an operand (buffers keep their contents between uses).
  Status saved_bf16(const std::string& name, int64_t count, const void** out) {
    uint16_t* copy;
    BS_RETURN_IF_ERROR(ws_.buf(name, count, &copy));
    *out = copy;
    return Status::ok();
  }
  // An operand's MX values as bf16, rowwise and columnwise (rows x cols each, x's layout), in the
  // buffers name.r16 / name.c16: dense (`batches` stacked matrices) or grouped (ends on the
  // device, optionally gathered).
  Status mx_bf16_copies(const std::string& name, const float* x, int64_t rows, int64_t cols, int64_t batches,
                        const int32_t* ends, int groups, const Gather* gather, MxBf16Copies* out) {
    BS_RETURN_IF_ERROR(saved_mx_bf16(name, rows * cols, out));
    quant::MxBf16Problem p;
    p.recipe = ws_.format_of(OperandRole::kActivation);  // mxfp8: E4M3 with ceil scales for every role
    p.rows = rows, p.cols = cols, p.batches = batches, p.num_groups = groups;
    quant::MxBf16Inputs in;
    in.x = x, in.group_ends = ends;
    if (gather != nullptr) in.row_index = gather->index, p.input_rows = gather->input_rows;
    PhaseScope phase(ws_.timer(), Phase::kQuantize);
    return quant::run(p, in, quant::MxBf16Outputs{out->row, out->col}, ws_.stream());
  }
  // The two bf16 copies of an operand an earlier call made. They take twice the bf16 recipe's
  // memory, so running out says which route needs less.
  Status saved_mx_bf16(const std::string& name, int64_t count, MxBf16Copies* out) {
    uint16_t *row, *col;
    Status s = ws_.buf(name + ".r16", count, &row);
    if (s.is_ok()) s = ws_.buf(name + ".c16", count, &col);
    if (!s.is_ok())
      return Status::error(s.message() + " (mxfp8's bf16-values route keeps a rowwise and a columnwise bf16 copy "
                           "of every operand; --gemm-route kernel needs less memory)");
    out->row = row, out->col = col;
    return Status::ok();
  }

  // x (rows x k) and w (experts stacked n x k matrices); the forward's copies of x and w serve the
  // backward, which makes a new one of dy (rows x n).
  Status forward_operands(const std::string& name, const float* x, const float* w, int64_t rows, int64_t n,
                          int64_t k, int experts, const RowGroups& groups, Operands* o) {
    *o = Operands{};
    o->x = x, o->w = w;
    if (groups.gather != nullptr && !mx())
      return Status::error(name + ": the " + recipe_name(recipe_) + " experts take permuted rows, not a gather");
    if (recipe_ == Recipe::kFp32) return Status::ok();
    o->type = CUDA_R_16BF, o->elem_bytes = 2;
    const int64_t w_rows = experts * n;
    if (mx()) {
      MxBf16Copies cx, cw;
      BS_RETURN_IF_ERROR(mx_bf16_copies(name + ".x", x, rows, k, 1, groups.ends, groups.groups, groups.gather, &cx));
      BS_RETURN_IF_ERROR(ws_.weight_copy(
          name + ".w", [&] { return mx_bf16_copies(name + ".w", w, w_rows, k, experts, nullptr, 0, nullptr, &cw); }));
      BS_RETURN_IF_ERROR(saved_mx_bf16(name + ".w", w_rows * k, &cw));
      o->x = cx.row, o->w = cw.row;
      return Status::ok();
    }
    BS_RETURN_IF_ERROR(bf16_copy(name + ".x16", x, rows * k, &o->x));
    return bf16_weight(name, w, w_rows * k, &o->w);
  }
  // A weight's bf16 copy: the optimizer's mirror where the backend keeps one, else made once per
  // weight change in name.w16.
  Status bf16_weight(const std::string& name, const float* w, int64_t count, const void** out) {
    if (const uint16_t* mirrored = ws_.bf16_mirror_of(w, count)) {
      *out = mirrored;
      return Status::ok();
    }
    BS_RETURN_IF_ERROR(ws_.weight_copy(name + ".w16", [&] { return bf16_copy(name + ".w16", w, count, out); }));
    return saved_bf16(name + ".w16", count, out);
  }
  Status backward_operands(const std::string& name, const float* dy, const float* x, const float* w, int64_t rows,
                           int64_t n, int64_t k, int experts, const RowGroups& groups, Operands* o) {
    *o = Operands{};
    o->dy = o->dy_wgrad = dy, o->w_dgrad = w, o->x_wgrad = x;
    if (recipe_ == Recipe::kFp32) return Status::ok();
    o->type = CUDA_R_16BF, o->elem_bytes = 2;
    const int64_t w_rows = experts * n;
    if (mx()) {
      MxBf16Copies cdy, cx, cw;
      BS_RETURN_IF_ERROR(saved_mx_bf16(name + ".x", rows * k, &cx));
      BS_RETURN_IF_ERROR(saved_mx_bf16(name + ".w", w_rows * k, &cw));
      BS_RETURN_IF_ERROR(mx_bf16_copies(name + ".dy", dy, rows, n, 1, groups.ends, groups.groups, nullptr, &cdy));
      o->dy = cdy.row, o->w_dgrad = cw.col, o->dy_wgrad = cdy.col, o->x_wgrad = cx.col;
      return Status::ok();
    }
    const void *x16 = nullptr, *w16 = nullptr, *dy16 = nullptr;
    BS_RETURN_IF_ERROR(saved_bf16(name + ".x16", rows * k, &x16));
    BS_RETURN_IF_ERROR(bf16_weight(name, w, w_rows * k, &w16));
    BS_RETURN_IF_ERROR(bf16_copy(name + ".dy16", dy, rows * n, &dy16));
    o->dy = o->dy_wgrad = dy16, o->w_dgrad = w16, o->x_wgrad = x16;
    return Status::ok();
  }

  Recipe recipe_;
  LayerWorkspace& ws_;
};

}  // namespace

std::unique_ptr<LinearRoute> cublas_route(Recipe recipe, LayerWorkspace& ws) {
  return std::make_unique<CublasRoute>(recipe, ws);
}

}  // namespace blockscale::train
