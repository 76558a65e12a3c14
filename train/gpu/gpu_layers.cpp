#include "train/gpu/gpu_layers.h"

#include "gemm/gemm.h"
#include "gemm/grouped.h"
#include "quant/mx_bf16.h"
#include "train/gpu/gpu_ops.h"

namespace blockscale::train {
namespace {

quant::QuantizeProblem quant_problem(Recipe recipe, OperandRole role, SrKey sr, int64_t rows, int64_t cols) {
  quant::QuantizeProblem p = quant::problem_from_options(quantize_options(recipe, role, false, sr),
                                                         formats::DType::kF32, rows, cols, formats::Direction::kBoth);
  // The columnwise copy of an activation or gradient is a wgrad operand.
  p.hadamard_columnwise = role != OperandRole::kWeight && quantize_options(recipe, role, true, sr).hadamard;
  return p;
}

// One quantized copy (rowwise or columnwise) as a GEMM operand, in its role's recipe.
struct Operand {
  const uint8_t* data;
  const void* scales;
  const float* dec;
  formats::Format recipe;
};
Operand row_copy(const Quantized& q, formats::Format r) { return {q.row_data, q.row_scales, q.row_dec, r}; }
Operand col_copy(const Quantized& q, formats::Format r) { return {q.col_data, q.col_scales, q.col_dec, r}; }

// d (m x n, fp32) = A B^T, or d += A B^T (accumulate: wgrad into the fp32 main gradient), for the
// dense and the grouped GEMM alike (their problems and arguments share these fields).
template <typename Problem, typename Arguments>
void describe(const Operand& a_op, const Operand& b_op, int64_t m, int64_t n, int64_t k, float* d, bool accumulate,
              Problem* p, Arguments* a) {
  p->m = m, p->n = n, p->k = k;
  p->a_recipe = a_op.recipe;
  p->b_recipe = b_op.recipe;
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

}  // namespace

// ---- quantization of one operand (both copies) ----
Status GpuLayers::quantize(const std::string& name, Recipe recipe, OperandRole role, SrKey sr, const float* x,
                           int64_t rows, int64_t cols, Quantized* q) {
  const quant::QuantizeProblem p = quant_problem(recipe, role, sr, rows, cols);
  BS_RETURN_IF_ERROR(buf(name + ".rd", quant::rowwise_data_bytes(p), &q->row_data));
  uint8_t *rs, *cs;
  BS_RETURN_IF_ERROR(buf(name + ".rs", quant::rowwise_scale_bytes(p), &rs));
  BS_RETURN_IF_ERROR(buf(name + ".cd", quant::columnwise_data_bytes(p), &q->col_data));
  BS_RETURN_IF_ERROR(buf(name + ".cs", quant::columnwise_scale_bytes(p), &cs));
  BS_RETURN_IF_ERROR(buf(name + ".dec", 2, &q->row_dec));
  q->row_scales = rs;
  q->col_scales = cs;
  q->col_dec = q->row_dec + 1;
  quant::QuantizeInputs in;
  in.x = x;
  quant::QuantizeOutputs out;
  out.rowwise_data = q->row_data;
  out.rowwise_scales = rs;
  out.rowwise_scale_dec = q->row_dec;
  out.columnwise_data = q->col_data;
  out.columnwise_scales = cs;
  out.columnwise_scale_dec = q->col_dec;
  saved_[name] = *q;
  return run_quant(name, p, in, out);
}

Status GpuLayers::run_quant(const std::string& name, const quant::QuantizeProblem& p, const quant::QuantizeInputs& in,
                            const quant::QuantizeOutputs& out) {
  uint8_t* ws = nullptr;
  const size_t ws_bytes = quant::workspace_size(p);
  BS_RETURN_IF_ERROR(buf(name + ".ws", int64_t(ws_bytes), &ws));
  PhaseScope phase(timer_, Phase::kQuantize);
  return quant::run(p, in, out, ws, ws_bytes, stream_);
}

template <typename Problem, typename Arguments>
Status GpuLayers::gemm_run(const Problem& p, const Arguments& a) {
  uint8_t* ws = nullptr;
  const size_t ws_bytes = gemm::workspace_size(p);  // one buffer: the GEMMs run one after another
  if (ws_bytes > 0) BS_RETURN_IF_ERROR(buf("gemm.ws", int64_t(ws_bytes), &ws));
  PhaseScope phase(timer_, Phase::kGemm);
  return gemm::run(p, a, ws, ws_bytes, stream_);
}

// Each expert's weight (experts x n x k) quantized on its own: codes and scales back to back,
// one decode scale per expert and copy (FP8 blockwise: one batched launch; the others one per
// expert).
Status GpuLayers::quantize_experts(const std::string& name, const float* w, int experts, int64_t n, int64_t k, Quantized* q) {
  const quant::QuantizeProblem p = quant_problem(recipe_, OperandRole::kWeight, {}, n, k);
  const int64_t rd = quant::rowwise_data_bytes(p), rs = quant::rowwise_scale_bytes(p);
  const int64_t cd = quant::columnwise_data_bytes(p), cs = quant::columnwise_scale_bytes(p);
  uint8_t *rsp, *csp;
  BS_RETURN_IF_ERROR(buf(name + ".rd", rd * experts, &q->row_data));
  BS_RETURN_IF_ERROR(buf(name + ".rs", rs * experts, &rsp));
  BS_RETURN_IF_ERROR(buf(name + ".cd", cd * experts, &q->col_data));
  BS_RETURN_IF_ERROR(buf(name + ".cs", cs * experts, &csp));
  BS_RETURN_IF_ERROR(buf(name + ".dec", 2 * experts, &q->row_dec));
  q->row_scales = rsp;
  q->col_scales = csp;
  q->col_dec = q->row_dec + experts;
  expert_scale_bytes_[name] = {rs, cs};
  saved_[name] = *q;
  // One launch for every expert: FP8 blockwise, and MX where no 128-row tile spans two experts.
  if (p.recipe == formats::Format::kFp8Block128x128 || (formats::is_mx(p.recipe) && n % 128 == 0)) {
    quant::BatchedQuantizeProblem bp;
    bp.matrix = p;
    bp.batches = experts;
    quant::QuantizeInputs in;
    in.x = w;
    quant::QuantizeOutputs out;
    out.rowwise_data = q->row_data, out.rowwise_scales = rsp;
    out.columnwise_data = q->col_data, out.columnwise_scales = csp;
    PhaseScope phase(timer_, Phase::kQuantize);
    return quant::run(bp, in, out, stream_);
  }
  for (int g = 0; g < experts; ++g) {
    quant::QuantizeInputs in;
    in.x = w + g * n * k;
    quant::QuantizeOutputs out;
    out.rowwise_data = q->row_data + g * rd;
    out.rowwise_scales = rsp + g * rs;
    out.rowwise_scale_dec = q->row_dec + g;
    out.columnwise_data = q->col_data + g * cd;
    out.columnwise_scales = csp + g * cs;
    out.columnwise_scale_dec = q->col_dec + g;
    BS_RETURN_IF_ERROR(run_quant(name, p, in, out));
  }
  return Status::ok();
}

Status GpuLayers::quantize_grouped(const std::string& name, OperandRole role, SrKey sr, const float* x, int64_t rows,
                                   int64_t cols, const int32_t* ends, int experts, Quantized* q, const Gather* gather) {
  quant::GroupedQuantizeProblem p;
  p.dense = quant_problem(recipe_, role, sr, rows, cols);
  p.num_groups = experts;
  if (gather != nullptr) p.input_rows = gather->input_rows;
  q->capacity = quant::grouped_capacity(p);
  uint8_t *rs, *cs;
  BS_RETURN_IF_ERROR(buf(name + ".rd", quant::rowwise_data_bytes(p.dense), &q->row_data));
  BS_RETURN_IF_ERROR(buf(name + ".rs", quant::rowwise_scale_bytes(p.dense), &rs));
  BS_RETURN_IF_ERROR(buf(name + ".cd", quant::grouped_columnwise_data_bytes(p), &q->col_data));
  BS_RETURN_IF_ERROR(buf(name + ".cs", quant::grouped_columnwise_scale_bytes(p), &cs));
  BS_RETURN_IF_ERROR(buf(name + ".dec", 2, &q->row_dec));
  BS_RETURN_IF_ERROR(buf(name + ".ends", experts, &q->padded_ends));
  q->row_scales = rs;
  q->col_scales = cs;
  q->col_dec = q->row_dec + 1;
  quant::GroupedQuantizeInputs in;
  in.x = x;
  in.group_ends = ends;
  if (gather != nullptr) in.row_index = gather->index;
  quant::GroupedQuantizeOutputs out;
  out.dense.rowwise_data = q->row_data;
  out.dense.rowwise_scales = rs;
  out.dense.rowwise_scale_dec = q->row_dec;
  out.dense.columnwise_data = q->col_data;
  out.dense.columnwise_scales = cs;
  out.dense.columnwise_scale_dec = q->col_dec;
  out.padded_group_ends = q->padded_ends;
  saved_[name] = *q;
  uint8_t* ws = nullptr;
  const size_t ws_bytes = quant::workspace_size(p);
  BS_RETURN_IF_ERROR(buf(name + ".ws", int64_t(ws_bytes), &ws));
  PhaseScope phase(timer_, Phase::kQuantize);
  return quant::run(p, in, out, ws, ws_bytes, stream_);
}

formats::Format GpuLayers::format_of(OperandRole role) const { return quantize_options(recipe_, role, false, {}).recipe; }

// ---- linear layers ----
// y (m x n) = x · w^T; the forward keeps x's quantized copies (or bf16 bits) under `name`.
Status GpuLayers::linear_forward(const std::string& name, Recipe recipe, const float* x, const float* w, int64_t m,
                                 int64_t n, int64_t k, float* y) {
  if (nvfp4_bf16(recipe)) return nvfp4_linear_forward(name, x, w, m, n, k, y);
  if (!is_quantized(recipe) || mx_bf16(recipe)) {
    CublasOperands o;
    BS_RETURN_IF_ERROR(cublas_forward_operands(name, recipe, x, w, m, n, k, 1, {}, &o));
    return cublas_gemm(Product::kXWt, o.type, o.x, o.w, m, n, k, y, 0.0f);
  }
  Quantized qx, qw;
  BS_RETURN_IF_ERROR(quantize(name + ".x", recipe, OperandRole::kActivation, {}, x, m, k, &qx));
  BS_RETURN_IF_ERROR(
      weight_copy(name + ".w", [&] { return quantize(name + ".w", recipe, OperandRole::kWeight, {}, w, n, k, &qw); }));
  qw = saved_[name + ".w"];
  gemm::GemmProblem p;
  gemm::GemmArguments a;
  describe(row_copy(qx, format_of(OperandRole::kActivation)), row_copy(qw, format_of(OperandRole::kWeight)), m, n, k,
           y, false, &p, &a);
  return gemm_run(p, a);
}

// dx (m x k) = dy · w (skipped when dx is null); dw += dy^T · x. x's copies come from the forward.
Status GpuLayers::linear_backward(const std::string& name, Recipe recipe, SrKey sr, const float* dy, const float* x,
                                  const float* w, int64_t m, int64_t n, int64_t k, float* dx, float* dw) {
  if (nvfp4_bf16(recipe)) return nvfp4_linear_backward(name, sr, dy, m, n, k, dx, dw);
  if (!is_quantized(recipe) || mx_bf16(recipe)) {
    CublasOperands o;
    BS_RETURN_IF_ERROR(cublas_backward_operands(name, recipe, dy, x, w, m, n, k, 1, {}, &o));
    if (dx) BS_RETURN_IF_ERROR(cublas_gemm(Product::kDyW, o.type, o.dy, o.w_dgrad, m, n, k, dx, 0.0f));
    return cublas_gemm(Product::kDytX, o.type, o.dy_wgrad, o.x_wgrad, m, n, k, dw, wgrad_beta());
  }
  // x's and w's copies are the forward's (nothing writes them between the two).
  Quantized qdy;
  const Quantized qx = saved_[name + ".x"], qw = saved_[name + ".w"];
  BS_RETURN_IF_ERROR(quantize(name + ".dy", recipe, OperandRole::kGradient, sr, dy, m, n, &qdy));
  const formats::Format gradient = format_of(OperandRole::kGradient);
  if (dx) {  // dgrad: dY.row x W.col
    gemm::GemmProblem p;
    gemm::GemmArguments a;
    describe(row_copy(qdy, gradient), col_copy(qw, format_of(OperandRole::kWeight)), m, k, n, dx, false, &p, &a);
    BS_RETURN_IF_ERROR(gemm_run(p, a));
  }
  gemm::GemmProblem p;  // wgrad: dY.col x X.col, accumulated
  gemm::GemmArguments a;
  describe(col_copy(qdy, gradient), col_copy(qx, format_of(OperandRole::kActivation)), n, k, m, dw, !fresh_gradients_,
           &p, &a);
  return gemm_run(p, a);
}

// cuBLAS product of fp32 operands or their bf16 copies (fp32 accumulation and output).
Status GpuLayers::cublas_gemm(Product prod, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                              float* c, float beta, const GpuBlas::Extras& extras) {
  PhaseScope phase(timer_, Phase::kGemm);
  return blas_.product(prod, type, a, b, m, n, k, c, beta, extras);
}

// The bf16 recipe's "quantization": a rounded copy in the named buffer, made once per operand
// (the forward's copies of x and w are the backward's too, as the quantized recipes reuse theirs).
Status GpuLayers::bf16_copy(const std::string& name, const float* x, int64_t count, const void** out) {
  PhaseScope phase(timer_, Phase::kQuantize);
  uint16_t* copy;
  BS_RETURN_IF_ERROR(buf(name, count, &copy));
  *out = copy;
  return gpu::to_bf16(x, count, copy, stream_);
}
// The forward's bf16 copy of an operand (buffers keep their contents between uses).
Status GpuLayers::saved_bf16(const std::string& name, int64_t count, const void** out) {
  uint16_t* copy;
  BS_RETURN_IF_ERROR(buf(name, count, &copy));
  *out = copy;
  return Status::ok();
}

Status GpuLayers::mx_bf16_copies(const std::string& name, const float* x, int64_t rows, int64_t cols, int64_t batches,
                                 const int32_t* ends, int groups, const Gather* gather, MxBf16Copies* out) {
  BS_RETURN_IF_ERROR(saved_mx_bf16(name, rows * cols, out));
  quant::MxBf16Problem p;
  p.recipe = format_of(OperandRole::kActivation);  // mxfp8: E4M3 with ceil scales for every role
  p.rows = rows, p.cols = cols, p.batches = batches, p.num_groups = groups;
  quant::MxBf16Inputs in;
  in.x = x, in.group_ends = ends;
  if (gather != nullptr) in.row_index = gather->index, p.input_rows = gather->input_rows;
  PhaseScope phase(timer_, Phase::kQuantize);
  return quant::run(p, in, quant::MxBf16Outputs{out->row, out->col}, stream_);
}
// The two bf16 copies of an operand (buffers keep their contents between uses). They take twice
// the bf16 recipe's memory, so running out says which route needs less.
Status GpuLayers::saved_mx_bf16(const std::string& name, int64_t count, MxBf16Copies* out) {
  uint16_t *row, *col;
  Status s = buf(name + ".r16", count, &row);
  if (s.is_ok()) s = buf(name + ".c16", count, &col);
  if (!s.is_ok())
    return Status::error(s.message() + " (mxfp8's bf16-values route keeps a rowwise and a columnwise bf16 copy "
                         "of every operand; --gemm-route kernel needs less memory)");
  out->row = row, out->col = col;
  return Status::ok();
}

Status GpuLayers::cublas_forward_operands(const std::string& name, Recipe recipe, const float* x, const float* w,
                                          int64_t rows, int64_t n, int64_t k, int experts, const RowGroups& groups,
                                          CublasOperands* o) {
  *o = CublasOperands{};
  o->x = x, o->w = w;
  if (groups.gather != nullptr && !mx_bf16(recipe))
    return Status::error(name + ": the " + recipe_name(recipe) + " experts take permuted rows, not a gather");
  if (recipe == Recipe::kFp32) return Status::ok();
  o->type = CUDA_R_16BF, o->elem_bytes = 2;
  const int64_t w_rows = experts * n;
  if (mx_bf16(recipe)) {
    MxBf16Copies cx, cw;
    BS_RETURN_IF_ERROR(mx_bf16_copies(name + ".x", x, rows, k, 1, groups.ends, groups.groups, groups.gather, &cx));
    BS_RETURN_IF_ERROR(weight_copy(
        name + ".w", [&] { return mx_bf16_copies(name + ".w", w, w_rows, k, experts, nullptr, 0, nullptr, &cw); }));
    BS_RETURN_IF_ERROR(saved_mx_bf16(name + ".w", w_rows * k, &cw));
    o->x = cx.row, o->w = cw.row;
    return Status::ok();
  }
  BS_RETURN_IF_ERROR(bf16_copy(name + ".x16", x, rows * k, &o->x));
  BS_RETURN_IF_ERROR(weight_copy(name + ".w16", [&] { return bf16_copy(name + ".w16", w, w_rows * k, &o->w); }));
  return saved_bf16(name + ".w16", w_rows * k, &o->w);
}
Status GpuLayers::cublas_backward_operands(const std::string& name, Recipe recipe, const float* dy, const float* x,
                                           const float* w, int64_t rows, int64_t n, int64_t k, int experts,
                                           const RowGroups& groups, CublasOperands* o) {
  *o = CublasOperands{};
  o->dy = o->dy_wgrad = dy, o->w_dgrad = w, o->x_wgrad = x;
  if (recipe == Recipe::kFp32) return Status::ok();
  o->type = CUDA_R_16BF, o->elem_bytes = 2;
  const int64_t w_rows = experts * n;
  if (mx_bf16(recipe)) {
    MxBf16Copies cdy, cx, cw;
    BS_RETURN_IF_ERROR(saved_mx_bf16(name + ".x", rows * k, &cx));
    BS_RETURN_IF_ERROR(saved_mx_bf16(name + ".w", w_rows * k, &cw));
    BS_RETURN_IF_ERROR(mx_bf16_copies(name + ".dy", dy, rows, n, 1, groups.ends, groups.groups, nullptr, &cdy));
    o->dy = cdy.row, o->w_dgrad = cw.col, o->dy_wgrad = cdy.col, o->x_wgrad = cx.col;
    return Status::ok();
  }
  const void *x16, *w16, *dy16;
  BS_RETURN_IF_ERROR(saved_bf16(name + ".x16", rows * k, &x16));
  BS_RETURN_IF_ERROR(saved_bf16(name + ".w16", w_rows * k, &w16));
  BS_RETURN_IF_ERROR(bf16_copy(name + ".dy16", dy, rows * n, &dy16));
  o->dy = o->dy_wgrad = dy16, o->w_dgrad = w16, o->x_wgrad = x16;
  return Status::ok();
}

// ---- grouped (MoE expert) layers: x holds `rows` routed rows sorted by expert (tokens * top_k,
// or with expert parallelism the rows this rank's experts received); `e` experts, host_ends_
// their group ends on the host (cublas_experts() only) ----
Status GpuLayers::grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends, int e,
                                  const float* w, int64_t n, int64_t k, float* y, const Gather* gather) {
  if (nvfp4_bf16(recipe_)) {
    if (gather != nullptr) return Status::error(name + ": the nvfp4 experts take permuted rows, not a gather");
    return nvfp4_grouped_forward(name, x, rows, ends, e, w, n, k, y);
  }
  if (cublas_experts()) {  // one cuBLAS product per expert, sizes from the host
    CublasOperands o;
    BS_RETURN_IF_ERROR(cublas_forward_operands(name, recipe_, x, w, rows, n, k, e, {ends, e, gather}, &o));
    PhaseScope phase(timer_, Phase::kGemm);  // one pair of phase events for the loop, not one per product
    for (int g = 0; g < e; ++g) {
      const int64_t b = g ? host_ends_[g - 1] : 0, r = host_ends_[g] - b;
      if (r > 0)
        BS_RETURN_IF_ERROR(cublas_gemm(Product::kXWt, o.type, o.at(o.x, b * k), o.at(o.w, g * n * k), r, n, k,
                                       y + b * n, 0.0f));
    }
    return Status::ok();
  }
  Quantized qx, qw;
  BS_RETURN_IF_ERROR(quantize_grouped(name + ".x", OperandRole::kActivation, {}, x, rows, k, ends, e, &qx, gather));
  BS_RETURN_IF_ERROR(weight_copy(name + ".w", [&] { return quantize_experts(name + ".w", w, e, n, k, &qw); }));
  qw = saved_[name + ".w"];
  gemm::GroupedGemmProblem p;
  gemm::GroupedGemmArguments a;
  p.mode = gemm::GroupMode::kM;
  p.num_groups = e;
  describe(row_copy(qx, format_of(OperandRole::kActivation)), row_copy(qw, format_of(OperandRole::kWeight)), rows, n,
           k, y, false, &p, &a);
  a.group_ends = ends;
  if (host_sized_experts_) a.host_group_ends = host_ends_.data();
  if (gemm::grouped_b_scale_bytes(p) != expert_scale_bytes_[name + ".w"].first)
    return Status::error(name + ": the grouped GEMM's expert scale stride differs from quant/'s");
  return gemm_run(p, a);
}

Status GpuLayers::grouped_backward(const std::string& name, SrKey sr, const float* dy, const float* x, int64_t rows,
                                   const int32_t* ends, int e, const float* w, int64_t n, int64_t k, float* dx, float* dw) {
  if (nvfp4_bf16(recipe_)) return nvfp4_grouped_backward(name, sr, dy, rows, ends, e, n, k, dx, dw);
  if (cublas_experts()) {
    CublasOperands o;
    BS_RETURN_IF_ERROR(cublas_backward_operands(name, recipe_, dy, x, w, rows, n, k, e, {ends, e, nullptr}, &o));
    PhaseScope phase(timer_, Phase::kGemm);
    for (int g = 0; g < e; ++g) {
      const int64_t b = g ? host_ends_[g - 1] : 0, r = host_ends_[g] - b;
      if (r == 0) continue;
      BS_RETURN_IF_ERROR(cublas_gemm(Product::kDyW, o.type, o.at(o.dy, b * n), o.at(o.w_dgrad, g * n * k), r, n, k,
                                     dx + b * k, 0.0f));
      BS_RETURN_IF_ERROR(cublas_gemm(Product::kDytX, o.type, o.at(o.dy_wgrad, b * n), o.at(o.x_wgrad, b * k), r, n,
                                     k, dw + g * n * k, wgrad_beta()));
    }
    return Status::ok();
  }
  Quantized qdy;
  const Quantized qx = saved_[name + ".x"], qw = saved_[name + ".w"];
  BS_RETURN_IF_ERROR(quantize_grouped(name + ".dy", OperandRole::kGradient, sr, dy, rows, n, ends, e, &qdy));
  const formats::Format gradient = format_of(OperandRole::kGradient);
  gemm::GroupedGemmProblem p;  // dgrad: dY.row x W.col, M-grouped
  gemm::GroupedGemmArguments a;
  p.mode = gemm::GroupMode::kM;
  p.num_groups = e;
  describe(row_copy(qdy, gradient), col_copy(qw, format_of(OperandRole::kWeight)), rows, k, n, dx, false, &p, &a);
  a.group_ends = ends;
  if (host_sized_experts_) a.host_group_ends = host_ends_.data();
  if (gemm::grouped_b_scale_bytes(p) != expert_scale_bytes_[name + ".w"].second)
    return Status::error(name + ": the grouped GEMM's expert scale stride differs from quant/'s (dgrad)");
  BS_RETURN_IF_ERROR(gemm_run(p, a));
  gemm::GroupedGemmProblem pw;  // wgrad: dY.col x X.col over each expert's padded tokens, accumulated
  gemm::GroupedGemmArguments aw;
  pw.mode = gemm::GroupMode::kK;
  pw.num_groups = e;
  describe(col_copy(qdy, gradient), col_copy(qx, format_of(OperandRole::kActivation)), n, k, qdy.capacity, dw,
           !fresh_gradients_, &pw, &aw);
  aw.group_ends = qdy.padded_ends;
  if (host_sized_experts_) {  // quant/'s padded ends: each expert's tokens rounded up to the 1x128 block
    host_padded_ends_.resize(e);
    int64_t end = 0, prev = 0;
    for (int g = 0; g < e; ++g) {
      end += (host_ends_[g] - prev + 127) / 128 * 128;
      prev = host_ends_[g];
      host_padded_ends_[g] = static_cast<int32_t>(end);
    }
    aw.host_group_ends = host_padded_ends_.data();
  }
  return gemm_run(pw, aw);
}

// ---- nvfp4 on the bf16-values route ----
Status GpuLayers::nvfp4_values(const std::string& name, const Quantized& q, int64_t rows, int64_t cols,
                               int64_t col_rows, int batches, bool row, bool col, Nvfp4Values* out) {
  Nvfp4Values& v = saved_values_[name];  // a copy not asked for stays as an earlier call made it
  v.row_dec = q.row_dec, v.col_dec = q.col_dec, v.col_rows = col_rows;
  quant::DequantizeProblem p;
  p.recipe = formats::Format::kNvfp4;
  auto make = [&](const char* suffix, const uint8_t* data, const void* scales, int64_t r, int64_t c,
                  const uint16_t** dst) -> Status {
    uint16_t* values;
    const Status s = buf(name + suffix, batches * r * c, &values);
    if (!s.is_ok())
      return Status::error(s.message() + " (nvfp4's bf16-values route keeps bf16 copies of every operand's "
                           "values; --gemm-route kernel needs less memory)");
    p.rows = r, p.cols = c;
    *dst = values;
    PhaseScope phase(timer_, Phase::kQuantize);
    return quant::nvfp4_block_values_bf16(p, batches, quant::DequantizeInputs{data, scales, nullptr}, values,
                                          stream_);
  };
  if (row) BS_RETURN_IF_ERROR(make(".r16", q.row_data, q.row_scales, rows, cols, &v.row));
  if (col) BS_RETURN_IF_ERROR(make(".c16", q.col_data, q.col_scales, cols, col_rows, &v.col));
  *out = v;
  return Status::ok();
}

Status GpuLayers::nvfp4_alphas(const std::string& name, const float* a_dec, const float* b_dec, int count,
                               float** alphas) {
  BS_RETURN_IF_ERROR(buf(name, count, alphas));
  PhaseScope phase(timer_, Phase::kQuantize);
  return gpu::scale_products(a_dec, b_dec, count, *alphas, stream_);
}

// With 16x16 blocks (the recipe's weights) W.col holds W.row's values transposed, so dgrad reads
// W.row's and the columnwise values are not made.
bool GpuLayers::nvfp4_weight_2d() const { return quantize_options(recipe_, OperandRole::kWeight, false, {}).nvfp4_2d; }

Status GpuLayers::nvfp4_weight(const std::string& name, const float* w, int experts, int64_t n, int64_t k) {
  return weight_copy(name, [&] {
    Quantized q;
    BS_RETURN_IF_ERROR(quantize_experts(name, w, experts, n, k, &q));
    Nvfp4Values v;
    return nvfp4_values(name, q, n, k, n, experts, true, !nvfp4_weight_2d(), &v);
  });
}

// dgrad: dx (rows x k) = dY.row (rows x n) x W (n x k): W.row's values (2D blocks) or W.col's.
Status GpuLayers::nvfp4_dgrad(const uint16_t* dy, const Nvfp4Values& w, int64_t w_offset, int64_t rows, int64_t n,
                              int64_t k, float* dx, const float* alpha) {
  const GpuBlas::Extras extras{0, 0, alpha, false};
  if (nvfp4_weight_2d())
    return cublas_gemm(Product::kDyW, CUDA_R_16BF, dy, w.row + w_offset, rows, n, k, dx, 0.0f, extras);
  return cublas_gemm(Product::kXWt, CUDA_R_16BF, dy, w.col + w_offset, rows, k, n, dx, 0.0f, extras);
}

Status GpuLayers::nvfp4_linear_forward(const std::string& name, const float* x, const float* w, int64_t m, int64_t n,
                                       int64_t k, float* y) {
  Quantized qx;
  BS_RETURN_IF_ERROR(quantize(name + ".x", recipe_, OperandRole::kActivation, {}, x, m, k, &qx));
  Nvfp4Values vx;
  BS_RETURN_IF_ERROR(nvfp4_values(name + ".x", qx, m, k, m, 1, true, false, &vx));
  BS_RETURN_IF_ERROR(nvfp4_weight(name + ".w", w, 1, n, k));
  const Nvfp4Values vw = saved_values_[name + ".w"];
  float* alpha;
  BS_RETURN_IF_ERROR(nvfp4_alphas(name + ".fprop_alpha", vx.row_dec, vw.row_dec, 1, &alpha));
  return cublas_gemm(Product::kXWt, CUDA_R_16BF, vx.row, vw.row, m, n, k, y, 0.0f, {0, 0, alpha, false});
}

// x's and w's copies are the forward's (nothing writes them between the two).
Status GpuLayers::nvfp4_linear_backward(const std::string& name, SrKey sr, const float* dy, int64_t m, int64_t n,
                                        int64_t k, float* dx, float* dw) {
  Quantized qdy;
  BS_RETURN_IF_ERROR(quantize(name + ".dy", recipe_, OperandRole::kGradient, sr, dy, m, n, &qdy));
  Nvfp4Values vdy, vx;
  BS_RETURN_IF_ERROR(nvfp4_values(name + ".dy", qdy, m, n, m, 1, dx != nullptr, true, &vdy));
  BS_RETURN_IF_ERROR(nvfp4_values(name + ".x", saved_[name + ".x"], m, k, m, 1, false, true, &vx));
  const Nvfp4Values vw = saved_values_[name + ".w"];
  float* alpha;
  if (dx) {
    BS_RETURN_IF_ERROR(nvfp4_alphas(name + ".dgrad_alpha", vdy.row_dec, vw.col_dec, 1, &alpha));
    BS_RETURN_IF_ERROR(nvfp4_dgrad(vdy.row, vw, 0, m, n, k, dx, alpha));
  }
  // wgrad: dY.col (n x m) x X.col (k x m)
  BS_RETURN_IF_ERROR(nvfp4_alphas(name + ".wgrad_alpha", vdy.col_dec, vx.col_dec, 1, &alpha));
  return cublas_gemm(Product::kXWt, CUDA_R_16BF, vdy.col, vx.col, n, k, m, dw, wgrad_beta(), {0, 0, alpha, false});
}

Status GpuLayers::nvfp4_grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends,
                                        int e, const float* w, int64_t n, int64_t k, float* y) {
  Quantized qx;
  BS_RETURN_IF_ERROR(quantize_grouped(name + ".x", OperandRole::kActivation, {}, x, rows, k, ends, e, &qx));
  Nvfp4Values vx;
  BS_RETURN_IF_ERROR(nvfp4_values(name + ".x", qx, rows, k, qx.capacity, 1, true, false, &vx));
  BS_RETURN_IF_ERROR(nvfp4_weight(name + ".w", w, e, n, k));
  const Nvfp4Values vw = saved_values_[name + ".w"];
  float* alphas;  // x's decode scale times each expert's
  BS_RETURN_IF_ERROR(nvfp4_alphas(name + ".fprop_alpha", vx.row_dec, vw.row_dec, e, &alphas));
  PhaseScope phase(timer_, Phase::kGemm);
  for (int g = 0; g < e; ++g) {
    const int64_t b = g ? host_ends_[g - 1] : 0, r = host_ends_[g] - b;
    if (r > 0)
      BS_RETURN_IF_ERROR(cublas_gemm(Product::kXWt, CUDA_R_16BF, vx.row + b * k, vw.row + g * n * k, r, n, k,
                                     y + b * n, 0.0f, {0, 0, alphas + g, false}));
  }
  return Status::ok();
}

// dgrad per expert: dY.row (its rows) x the expert's W; wgrad per expert: dY.col x X.col over its
// padded token columns (quant/ pads each expert's tokens to the NVFP4 block of 16; the padding's
// values are the RHT of zero rows, which the two copies share).
Status GpuLayers::nvfp4_grouped_backward(const std::string& name, SrKey sr, const float* dy, int64_t rows,
                                         const int32_t* ends, int e, int64_t n, int64_t k, float* dx, float* dw) {
  Quantized qdy;
  BS_RETURN_IF_ERROR(quantize_grouped(name + ".dy", OperandRole::kGradient, sr, dy, rows, n, ends, e, &qdy));
  const Quantized qx = saved_[name + ".x"];
  Nvfp4Values vdy, vx;
  BS_RETURN_IF_ERROR(nvfp4_values(name + ".dy", qdy, rows, n, qdy.capacity, 1, true, true, &vdy));
  BS_RETURN_IF_ERROR(nvfp4_values(name + ".x", qx, rows, k, qx.capacity, 1, false, true, &vx));
  const Nvfp4Values vw = saved_values_[name + ".w"];
  float *dgrad_alphas, *wgrad_alpha;
  BS_RETURN_IF_ERROR(nvfp4_alphas(name + ".dgrad_alpha", vdy.row_dec, vw.col_dec, e, &dgrad_alphas));
  BS_RETURN_IF_ERROR(nvfp4_alphas(name + ".wgrad_alpha", vdy.col_dec, vx.col_dec, 1, &wgrad_alpha));
  constexpr int64_t kBlock = 16;
  PhaseScope phase(timer_, Phase::kGemm);
  int64_t padded = 0;  // the expert's first token column in the columnwise copies
  for (int g = 0; g < e; ++g) {
    const int64_t b = g ? host_ends_[g - 1] : 0, r = host_ends_[g] - b, pr = (r + kBlock - 1) / kBlock * kBlock;
    if (r == 0) continue;
    BS_RETURN_IF_ERROR(nvfp4_dgrad(vdy.row + b * n, vw, g * n * k, r, n, k, dx + b * k, dgrad_alphas + g));
    BS_RETURN_IF_ERROR(cublas_gemm(Product::kXWt, CUDA_R_16BF, vdy.col + padded, vx.col + padded, n, k, pr,
                                   dw + g * n * k, wgrad_beta(), {qdy.capacity, qx.capacity, wgrad_alpha, true}));
    padded += pr;
  }
  return Status::ok();
}

}  // namespace blockscale::train
