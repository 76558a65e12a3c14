// The block-scaled kernels' route of the linear layers (train/gpu/gpu_linear_route.h): fp8_block,
// mxfp8 and nvfp4 quantized by quant/ (both copies of an operand in one pass) and multiplied by
// gemm/. The experts use the grouped forms: M-grouped fprop / dgrad over the routed tokens,
// K-grouped wgrad over each expert's padded tokens, both sized on the device; each expert's weight
// is its own operand.
#include "gemm/gemm.h"
#include "gemm/grouped.h"
#include "train/gpu/gpu_linear_route.h"

namespace blockscale::train {
namespace {

// One quantized copy (rowwise or columnwise) as a GEMM operand, in its role's format.
struct Operand {
  const uint8_t* data;
  const void* scales;
  const float* dec;
  formats::Format format;
};
Operand row_copy(const Quantized& q, formats::Format f) { return {q.row_data, q.row_scales, q.row_dec, f}; }
Operand col_copy(const Quantized& q, formats::Format f) { return {q.col_data, q.col_scales, q.col_dec, f}; }

// d (m x n, fp32) = A B^T, or d += A B^T (accumulate: wgrad into the fp32 main gradient), for the
// dense and the grouped GEMM alike (their problems and arguments share these fields).
template <typename Problem, typename Arguments>
void describe(const Operand& a_op, const Operand& b_op, int64_t m, int64_t n, int64_t k, float* d, bool accumulate,
              Problem* p, Arguments* a) {
  p->m = m, p->n = n, p->k = k;
  p->a_recipe = a_op.format;
  p->b_recipe = b_op.format;
  p->d_type = formats::DType::kF32;
  p->ldd = n;
  a->a_data = a_op.data, a->a_scales = a_op.scales, a->a_scale_dec = a_op.dec;
  a->b_data = b_op.data, a->b_scales = b_op.scales, a->b_scale_dec = b_op.dec;
  a->d = d;
  if (!accumulate) return;
  p->c_type = formats::DType::kF32;
  p->ldc = n;
  p->beta = 1.0f;
  a->c = d;
}

class KernelRoute final : public LinearRoute {
 public:
  KernelRoute(LayerWorkspace& ws, bool host_sized_experts) : ws_(ws), host_sized_experts_(host_sized_experts) {}
  bool needs_host_ends() const override { return host_sized_experts_; }

  Status forward(const std::string& name, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
                 float* y) override {
    const Recipe recipe = ws_.recipe();
    Quantized qx, qw;
    BS_RETURN_IF_ERROR(ws_.quantize(name + ".x", recipe, OperandRole::kActivation, {}, x, m, k, &qx));
    BS_RETURN_IF_ERROR(ws_.weight_copy(
        name + ".w", [&] { return ws_.quantize(name + ".w", recipe, OperandRole::kWeight, {}, w, n, k, &qw); }));
    qw = ws_.saved(name + ".w");
    gemm::GemmProblem p;
    gemm::GemmArguments a;
    describe(row_copy(qx, activation()), row_copy(qw, weight()), m, n, k, y, false, &p, &a);
    return ws_.gemm_run(p, a);
  }

  Status backward(const std::string& name, SrKey sr, const float* dy, const float*, const float*, int64_t m,
                  int64_t n, int64_t k, float* dx, float* dw) override {
    // x's and w's copies are the forward's (nothing writes them between the two).
    Quantized qdy;
    const Quantized qx = ws_.saved(name + ".x"), qw = ws_.saved(name + ".w");
    BS_RETURN_IF_ERROR(ws_.quantize(name + ".dy", ws_.recipe(), OperandRole::kGradient, sr, dy, m, n, &qdy));
    if (dx) {  // dgrad: dY.row x W.col
      gemm::GemmProblem p;
      gemm::GemmArguments a;
      describe(row_copy(qdy, gradient()), col_copy(qw, weight()), m, k, n, dx, false, &p, &a);
      BS_RETURN_IF_ERROR(ws_.gemm_run(p, a));
    }
    gemm::GemmProblem p;  // wgrad: dY.col x X.col, accumulated
    gemm::GemmArguments a;
    describe(col_copy(qdy, gradient()), col_copy(qx, activation()), n, k, m, dw, !ws_.fresh_gradients(), &p, &a);
    return ws_.gemm_run(p, a);
  }

  Status grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends, int e,
                         const float* w, int64_t n, int64_t k, float* y, const Gather* gather) override {
    Quantized qx, qw;
    BS_RETURN_IF_ERROR(ws_.quantize_grouped(name + ".x", OperandRole::kActivation, {}, x, rows, k, ends, e, &qx, gather));
    BS_RETURN_IF_ERROR(ws_.weight_copy(name + ".w", [&] { return ws_.quantize_experts(name + ".w", w, e, n, k, &qw); }));
    qw = ws_.saved(name + ".w");
    gemm::GroupedGemmProblem p;
    gemm::GroupedGemmArguments a;
    p.mode = gemm::GroupMode::kM;
    p.num_groups = e;
    describe(row_copy(qx, activation()), row_copy(qw, weight()), rows, n, k, y, false, &p, &a);
    a.group_ends = ends;
    if (host_sized_experts_) a.host_group_ends = ws_.host_ends().data();
    if (gemm::grouped_b_scale_bytes(p) != ws_.expert_scale_bytes(name + ".w").first)
      return Status::error(name + ": the grouped GEMM's expert scale stride differs from quant/'s");
    return ws_.gemm_run(p, a);
  }

  Status grouped_backward(const std::string& name, SrKey sr, const float* dy, const float*, int64_t rows,
                          const int32_t* ends, int e, const float*, int64_t n, int64_t k, float* dx,
                          float* dw) override {
    Quantized qdy;
    const Quantized qx = ws_.saved(name + ".x"), qw = ws_.saved(name + ".w");
    BS_RETURN_IF_ERROR(ws_.quantize_grouped(name + ".dy", OperandRole::kGradient, sr, dy, rows, n, ends, e, &qdy));
    gemm::GroupedGemmProblem p;  // dgrad: dY.row x W.col, M-grouped
    gemm::GroupedGemmArguments a;
    p.mode = gemm::GroupMode::kM;
    p.num_groups = e;
    describe(row_copy(qdy, gradient()), col_copy(qw, weight()), rows, k, n, dx, false, &p, &a);
    a.group_ends = ends;
    if (host_sized_experts_) a.host_group_ends = ws_.host_ends().data();
    if (gemm::grouped_b_scale_bytes(p) != ws_.expert_scale_bytes(name + ".w").second)
      return Status::error(name + ": the grouped GEMM's expert scale stride differs from quant/'s (dgrad)");
    BS_RETURN_IF_ERROR(ws_.gemm_run(p, a));
    gemm::GroupedGemmProblem pw;  // wgrad: dY.col x X.col over each expert's padded tokens, accumulated
    gemm::GroupedGemmArguments aw;
    pw.mode = gemm::GroupMode::kK;
    pw.num_groups = e;
    describe(col_copy(qdy, gradient()), col_copy(qx, activation()), n, k, qdy.capacity, dw, !ws_.fresh_gradients(),
             &pw, &aw);
    aw.group_ends = qdy.padded_ends;
    if (host_sized_experts_) {  // quant/'s padded ends: each expert's tokens rounded up to the 1x128 block
      const std::vector<int32_t>& ends_host = ws_.host_ends();
      host_padded_ends_.resize(e);
      int64_t end = 0, prev = 0;
      for (int g = 0; g < e; ++g) {
        end += (ends_host[g] - prev + 127) / 128 * 128;
        prev = ends_host[g];
        host_padded_ends_[g] = static_cast<int32_t>(end);
      }
      aw.host_group_ends = host_padded_ends_.data();
    }
    return ws_.gemm_run(pw, aw);
  }

 private:
  formats::Format activation() const { return ws_.format_of(OperandRole::kActivation); }
  formats::Format weight() const { return ws_.format_of(OperandRole::kWeight); }
  formats::Format gradient() const { return ws_.format_of(OperandRole::kGradient); }

  LayerWorkspace& ws_;
  const bool host_sized_experts_;
  std::vector<int32_t> host_padded_ends_;  // the host ends with each expert padded to 128 tokens (wgrad)
};

}  // namespace

std::unique_ptr<LinearRoute> kernel_route(LayerWorkspace& ws, bool host_sized_experts) {
  return std::make_unique<KernelRoute>(ws, host_sized_experts);
}

}  // namespace blockscale::train
