#include "train/gpu/gpu_layer_workspace.h"

#include "gemm/gemm.h"
#include "gemm/grouped.h"

namespace blockscale::train {
namespace {

quant::QuantizeProblem quant_problem(Recipe recipe, OperandRole role, SrKey sr, int64_t rows, int64_t cols) {
  quant::QuantizeProblem p = quant::problem_from_options(quantize_options(recipe, role, false, sr),
                                                         formats::DType::kF32, rows, cols, formats::Direction::kBoth);
  // The columnwise copy of an activation or gradient is a wgrad operand.
  p.hadamard_columnwise = role != OperandRole::kWeight && quantize_options(recipe, role, true, sr).hadamard;
  return p;
}

}  // namespace

// ---- quantization of one operand (both copies) ----
Status LayerWorkspace::quantize(const std::string& name, Recipe recipe, OperandRole role, SrKey sr, const float* x,
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

Status LayerWorkspace::run_quant(const std::string& name, const quant::QuantizeProblem& p, const quant::QuantizeInputs& in,
                            const quant::QuantizeOutputs& out) {
  uint8_t* ws = nullptr;
  const size_t ws_bytes = quant::workspace_size(p);
  BS_RETURN_IF_ERROR(buf(name + ".ws", int64_t(ws_bytes), &ws));
  PhaseScope phase(timer_, Phase::kQuantize);
  return quant::run(p, in, out, ws, ws_bytes, stream_);
}


// Each expert's weight (experts x n x k) quantized on its own: codes and scales back to back,
// one decode scale per expert and copy (FP8 blockwise: one batched launch; the others one per
// expert).
Status LayerWorkspace::quantize_experts(const std::string& name, const float* w, int experts, int64_t n, int64_t k, Quantized* q,
                                        formats::Direction directions) {
  quant::QuantizeProblem p = quant_problem(recipe_, OperandRole::kWeight, {}, n, k);
  p.directions = directions;
  const int64_t rd = quant::rowwise_data_bytes(p), rs = quant::rowwise_scale_bytes(p);
  const int64_t cd = quant::columnwise_data_bytes(p), cs = quant::columnwise_scale_bytes(p);
  uint8_t *rsp = nullptr, *csp = nullptr;
  *q = Quantized{};
  if (directions != formats::Direction::kColumnwise) {
    BS_RETURN_IF_ERROR(buf(name + ".rd", rd * experts, &q->row_data));
    BS_RETURN_IF_ERROR(buf(name + ".rs", rs * experts, &rsp));
  }
  if (directions != formats::Direction::kRowwise) {
    BS_RETURN_IF_ERROR(buf(name + ".cd", cd * experts, &q->col_data));
    BS_RETURN_IF_ERROR(buf(name + ".cs", cs * experts, &csp));
  }
  BS_RETURN_IF_ERROR(buf(name + ".dec", 2 * experts, &q->row_dec));
  q->row_scales = rsp;
  q->col_scales = csp;
  q->col_dec = q->row_dec + experts;
  expert_scale_bytes_[name] = {rs, cs};
  saved_[name] = *q;
  // One launch for every expert where quant/ batches the problem: FP8 blockwise, MX where no
  // 128-row tile spans two experts, NVFP4's rowwise copy alone (one amax pass, one quantize launch).
  quant::BatchedQuantizeProblem bp;
  bp.matrix = p;
  bp.batches = experts;
  if (quant::can_implement(bp).is_ok()) {
    quant::QuantizeInputs in;
    in.x = w;
    quant::QuantizeOutputs out;
    out.rowwise_data = q->row_data, out.rowwise_scales = rsp, out.rowwise_scale_dec = q->row_dec;
    out.columnwise_data = q->col_data, out.columnwise_scales = csp;
    uint8_t* ws = nullptr;
    const size_t ws_bytes = quant::workspace_size(bp);
    BS_RETURN_IF_ERROR(buf(name + ".ws", int64_t(ws_bytes), &ws));
    PhaseScope phase(timer_, Phase::kQuantize);
    return quant::run(bp, in, out, ws, ws_bytes, stream_);
  }
  for (int g = 0; g < experts; ++g) {
    quant::QuantizeInputs in;
    in.x = w + g * n * k;
    quant::QuantizeOutputs out;
    if (rsp != nullptr) {
      out.rowwise_data = q->row_data + g * rd;
      out.rowwise_scales = rsp + g * rs;
      out.rowwise_scale_dec = q->row_dec + g;
    }
    if (csp != nullptr) {
      out.columnwise_data = q->col_data + g * cd;
      out.columnwise_scales = csp + g * cs;
      out.columnwise_scale_dec = q->col_dec + g;
    }
    BS_RETURN_IF_ERROR(run_quant(name, p, in, out));
  }
  return Status::ok();
}

Status LayerWorkspace::quantize_grouped(const std::string& name, OperandRole role, SrKey sr, const float* x, int64_t rows,
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

formats::Format LayerWorkspace::format_of(OperandRole role) const { return quantize_options(recipe_, role, false, {}).recipe; }

template <typename Problem, typename Arguments>
Status LayerWorkspace::gemm_run(const Problem& p, const Arguments& a) {
  uint8_t* ws = nullptr;
  const size_t ws_bytes = gemm::workspace_size(p);  // one buffer: the GEMMs run one after another
  if (ws_bytes > 0) BS_RETURN_IF_ERROR(buf("gemm.ws", int64_t(ws_bytes), &ws));
  PhaseScope phase(timer_, Phase::kGemm);
  return gemm::run(p, a, ws, ws_bytes, stream_);
}

// cuBLAS product of fp32 operands or their bf16 copies (fp32 accumulation and output).
Status LayerWorkspace::cublas_gemm(Product prod, cudaDataType type, const void* a, const void* b, int64_t m, int64_t n, int64_t k,
                              float* c, float beta, const GpuBlas::Extras& extras) {
  PhaseScope phase(timer_, Phase::kGemm);
  return blas_.product(prod, type, a, b, m, n, k, c, beta, extras);
}

template Status LayerWorkspace::gemm_run(const gemm::GemmProblem&, const gemm::GemmArguments&);
template Status LayerWorkspace::gemm_run(const gemm::GroupedGemmProblem&, const gemm::GroupedGemmArguments&);

}  // namespace blockscale::train
