// nvfp4's bf16-values route of the linear layers (train/gpu/gpu_linear_route.h): quant/'s copies
// as for the kernels, then their block values as bf16 (quant::nvfp4_block_values_bf16, each copy
// in its stored orientation), multiplied by cuBLASLt with alpha = S_dec_a * S_dec_b on the
// device: fprop X.row x W.row, dgrad dY.row x W.col (= W.row's values with 2D blocks), wgrad
// dY.col x X.col (the experts' over each one's padded token columns of the grouped columnwise
// copies). The experts run one product each, sized on the host.
#include <map>

#include "train/gpu/gpu_linear_route.h"
#include "train/gpu/gpu_ops.h"

namespace blockscale::train {
namespace {

class Nvfp4ValuesRoute final : public LinearRoute {
 public:
  explicit Nvfp4ValuesRoute(LayerWorkspace& ws) : ws_(ws) {}
  bool needs_host_ends() const override { return true; }

  Status forward(const std::string& name, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
                 float* y) override {
    Quantized qx;
    BS_RETURN_IF_ERROR(ws_.quantize(name + ".x", Recipe::kNvfp4, OperandRole::kActivation, {}, x, m, k, &qx));
    Values vx;
    BS_RETURN_IF_ERROR(values(name + ".x", qx, m, k, m, 1, true, false, &vx));
    BS_RETURN_IF_ERROR(weight(name + ".w", w, 1, n, k));
    const Values vw = saved_values_[name + ".w"];
    float* alpha;
    BS_RETURN_IF_ERROR(alphas(name + ".fprop_alpha", vx.row_dec, vw.row_dec, 1, &alpha));
    return ws_.cublas_gemm(Product::kXWt, CUDA_R_16BF, vx.row, vw.row, m, n, k, y, 0.0f, {0, 0, alpha, false});
  }

  // x's and w's copies are the forward's (nothing writes them between the two).
  Status backward(const std::string& name, SrKey sr, const float* dy, const float*, const float*, int64_t m,
                  int64_t n, int64_t k, float* dx, float* dw) override {
    Quantized qdy;
    BS_RETURN_IF_ERROR(ws_.quantize(name + ".dy", Recipe::kNvfp4, OperandRole::kGradient, sr, dy, m, n, &qdy));
    Values vdy, vx;
    BS_RETURN_IF_ERROR(values(name + ".dy", qdy, m, n, m, 1, dx != nullptr, true, &vdy));
    BS_RETURN_IF_ERROR(values(name + ".x", ws_.saved(name + ".x"), m, k, m, 1, false, true, &vx));
    const Values vw = saved_values_[name + ".w"];
    float* alpha;
    if (dx) {
      BS_RETURN_IF_ERROR(alphas(name + ".dgrad_alpha", vdy.row_dec, w_dgrad_dec(vw), 1, &alpha));
      BS_RETURN_IF_ERROR(dgrad(vdy.row, vw, 0, m, n, k, dx, alpha));
    }
    // wgrad: dY.col (n x m) x X.col (k x m)
    BS_RETURN_IF_ERROR(alphas(name + ".wgrad_alpha", vdy.col_dec, vx.col_dec, 1, &alpha));
    return ws_.cublas_gemm(Product::kXWt, CUDA_R_16BF, vdy.col, vx.col, n, k, m, dw, ws_.wgrad_beta(),
                           {0, 0, alpha, false});
  }

  Status grouped_forward(const std::string& name, const float* x, int64_t rows, const int32_t* ends, int e,
                         const float* w, int64_t n, int64_t k, float* y, const Gather* gather) override {
    if (gather != nullptr) return Status::error(name + ": the nvfp4 experts take permuted rows, not a gather");
    Quantized qx;
    BS_RETURN_IF_ERROR(ws_.quantize_grouped(name + ".x", OperandRole::kActivation, {}, x, rows, k, ends, e, &qx));
    Values vx;
    BS_RETURN_IF_ERROR(values(name + ".x", qx, rows, k, qx.capacity, 1, true, false, &vx));
    BS_RETURN_IF_ERROR(weight(name + ".w", w, e, n, k));
    const Values vw = saved_values_[name + ".w"];
    float* fprop_alphas;  // x's decode scale times each expert's
    BS_RETURN_IF_ERROR(alphas(name + ".fprop_alpha", vx.row_dec, vw.row_dec, e, &fprop_alphas));
    const std::vector<int32_t>& host_ends = ws_.host_ends();
    PhaseScope phase(ws_.timer(), Phase::kGemm);
    for (int g = 0; g < e; ++g) {
      const int64_t b = g ? host_ends[g - 1] : 0, r = host_ends[g] - b;
      if (r > 0)
        BS_RETURN_IF_ERROR(ws_.cublas_gemm(Product::kXWt, CUDA_R_16BF, vx.row + b * k, vw.row + g * n * k, r, n, k,
                                           y + b * n, 0.0f, {0, 0, fprop_alphas + g, false}));
    }
    return Status::ok();
  }

  // dgrad per expert: dY.row (its rows) x the expert's W; wgrad per expert: dY.col x X.col over its
  // padded token columns (quant/ pads each expert's tokens to the NVFP4 block of 16; the padding's
  // values are the RHT of zero rows, which the two copies share).
  Status grouped_backward(const std::string& name, SrKey sr, const float* dy, const float*, int64_t rows,
                          const int32_t* ends, int e, const float*, int64_t n, int64_t k, float* dx,
                          float* dw) override {
    Quantized qdy;
    BS_RETURN_IF_ERROR(ws_.quantize_grouped(name + ".dy", OperandRole::kGradient, sr, dy, rows, n, ends, e, &qdy));
    const Quantized qx = ws_.saved(name + ".x");
    Values vdy, vx;
    BS_RETURN_IF_ERROR(values(name + ".dy", qdy, rows, n, qdy.capacity, 1, true, true, &vdy));
    BS_RETURN_IF_ERROR(values(name + ".x", qx, rows, k, qx.capacity, 1, false, true, &vx));
    const Values vw = saved_values_[name + ".w"];
    float *dgrad_alphas, *wgrad_alpha;
    BS_RETURN_IF_ERROR(alphas(name + ".dgrad_alpha", vdy.row_dec, w_dgrad_dec(vw), e, &dgrad_alphas));
    BS_RETURN_IF_ERROR(alphas(name + ".wgrad_alpha", vdy.col_dec, vx.col_dec, 1, &wgrad_alpha));
    constexpr int64_t kBlock = 16;
    const std::vector<int32_t>& host_ends = ws_.host_ends();
    PhaseScope phase(ws_.timer(), Phase::kGemm);
    int64_t padded = 0;  // the expert's first token column in the columnwise copies
    for (int g = 0; g < e; ++g) {
      const int64_t b = g ? host_ends[g - 1] : 0, r = host_ends[g] - b, pr = (r + kBlock - 1) / kBlock * kBlock;
      if (r == 0) continue;
      BS_RETURN_IF_ERROR(dgrad(vdy.row + b * n, vw, g * n * k, r, n, k, dx + b * k, dgrad_alphas + g));
      BS_RETURN_IF_ERROR(ws_.cublas_gemm(Product::kXWt, CUDA_R_16BF, vdy.col + padded, vx.col + padded, n, k, pr,
                                         dw + g * n * k, ws_.wgrad_beta(),
                                         {qdy.capacity, qx.capacity, wgrad_alpha, true}));
      padded += pr;
    }
    return Status::ok();
  }

 private:
  // The block values of an operand's quantized copies as bf16 in name.r16 (batches x rows x cols)
  // and name.c16 (batches x cols x col_rows: rows, or the grouped copy's capacity), each made only
  // when asked for; and the copies' tensor decode scales (one per batch).
  struct Values {
    const uint16_t* row = nullptr;
    const uint16_t* col = nullptr;
    const float* row_dec = nullptr;
    const float* col_dec = nullptr;
    int64_t col_rows = 0;
  };
  Status values(const std::string& name, const Quantized& q, int64_t rows, int64_t cols, int64_t col_rows,
                int batches, bool row, bool col, Values* out) {
    Values& v = saved_values_[name];  // a copy not asked for stays as an earlier call made it
    v.row_dec = q.row_dec, v.col_dec = q.col_dec, v.col_rows = col_rows;
    quant::DequantizeProblem p;
    p.recipe = formats::Format::kNvfp4;
    auto make = [&](const char* suffix, const uint8_t* data, const void* scales, int64_t r, int64_t c,
                    const uint16_t** dst) -> Status {
      uint16_t* values = nullptr;
      const Status s = ws_.buf(name + suffix, batches * r * c, &values);
      if (!s.is_ok())
        return Status::error(s.message() + " (nvfp4's bf16-values route keeps bf16 copies of every operand's "
                             "values; --gemm-route kernel needs less memory)");
      p.rows = r, p.cols = c;
      *dst = values;
      PhaseScope phase(ws_.timer(), Phase::kQuantize);
      return quant::nvfp4_block_values_bf16(p, batches, quant::DequantizeInputs{data, scales, nullptr}, values,
                                            ws_.stream());
    };
    if (row) BS_RETURN_IF_ERROR(make(".r16", q.row_data, q.row_scales, rows, cols, &v.row));
    if (col) BS_RETURN_IF_ERROR(make(".c16", q.col_data, q.col_scales, cols, col_rows, &v.col));
    *out = v;
    return Status::ok();
  }
  // alphas[i] = a_dec[0] * b_dec[i] (i < count) in the buffer `name`.
  Status alphas(const std::string& name, const float* a_dec, const float* b_dec, int count, float** out) {
    BS_RETURN_IF_ERROR(ws_.buf(name, count, out));
    PhaseScope phase(ws_.timer(), Phase::kQuantize);
    return gpu::scale_products(a_dec, b_dec, count, *out, ws_.stream());
  }
  // With 16x16 blocks (the recipe's weights) W.col holds W.row's values transposed, so dgrad reads
  // W.row's and the columnwise values are not made.
  bool weight_2d() const { return quantize_options(Recipe::kNvfp4, OperandRole::kWeight, false, {}).nvfp4_2d; }
  // The weight's quantized copies and their bf16 values, made once per weight change. With 2D
  // blocks only the rowwise copy is quantized: nothing reads W.col.
  Status weight(const std::string& name, const float* w, int experts, int64_t n, int64_t k) {
    return ws_.weight_copy(name, [&] {
      Quantized q;
      const formats::Direction copies = weight_2d() ? formats::Direction::kRowwise : formats::Direction::kBoth;
      BS_RETURN_IF_ERROR(ws_.quantize_experts(name, w, experts, n, k, &q, copies));
      Values v;
      return values(name, q, n, k, n, experts, true, !weight_2d(), &v);
    });
  }
  // The decode scales of the weight values dgrad reads: W.row's with 2D blocks, else W.col's.
  const float* w_dgrad_dec(const Values& w) const { return weight_2d() ? w.row_dec : w.col_dec; }
  // dgrad: dx (rows x k) = dY.row (rows x n) x W (n x k): W.row's values (2D blocks) or W.col's.
  Status dgrad(const uint16_t* dy, const Values& w, int64_t w_offset, int64_t rows, int64_t n, int64_t k, float* dx,
               const float* alpha) {
    const GpuBlas::Extras extras{0, 0, alpha, false};
    if (weight_2d())
      return ws_.cublas_gemm(Product::kDyW, CUDA_R_16BF, dy, w.row + w_offset, rows, n, k, dx, 0.0f, extras);
    return ws_.cublas_gemm(Product::kXWt, CUDA_R_16BF, dy, w.col + w_offset, rows, k, n, dx, 0.0f, extras);
  }

  LayerWorkspace& ws_;
  std::map<std::string, Values> saved_values_;  // the bf16 values of each operand's copies, by name
};

}  // namespace

std::unique_ptr<LinearRoute> nvfp4_values_route(LayerWorkspace& ws) { return std::make_unique<Nvfp4ValuesRoute>(ws); }

}  // namespace blockscale::train
