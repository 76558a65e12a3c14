// blockscale._cuda's GEMM bindings over gemm/gemm.h and gemm/grouped.h: the dense GEMM and the
// M- / K-grouped (MoE) GEMMs, on operands as blockscale._cuda.quantize writes them. D (and the
// workspace) come from the caller; expert ends stay on the device (no host synchronisation).
#include <nanobind/stl/string.h>

#include <string>

#include "gemm/gemm.h"
#include "gemm/grouped.h"
#include "python/src/cuda_args.h"
#include "quant/quantize.h"

namespace blockscale::python {
namespace {

using namespace nb::literals;

// One quantized operand: K-major codes (2D rows x row bytes, or 3D experts x rows x row bytes)
// and its scales in the GEMM layout of its recipe.
struct Operand {
  const char* data_name;
  const char* scales_name;
  formats::Format format;
  int64_t rows = 0;       // rows of one matrix
  int64_t row_bytes = 0;  // bytes of one row of codes
  int64_t k = 0;          // elements along K
};

Operand check_operand(CallDevice& dev, const char* data_name, const Array& data, const char* format_name,
                      const std::string& format, size_t ndim) {
  Operand o{data_name, nullptr, format_arg(format_name, format)};
  dev.require(data_name, data);
  require_dtype(data_name, data, {formats::DType::kU8});
  require_ndim(data_name, data, ndim);
  require_contiguous(data_name, data);
  o.rows = static_cast<int64_t>(data.shape(ndim - 2));
  o.row_bytes = static_cast<int64_t>(data.shape(ndim - 1));
  o.k = formats::is_fp4(o.format) ? 2 * o.row_bytes : o.row_bytes;
  return o;
}

// Bytes of one matrix's scales: those quant/ writes for a rows x k rowwise copy.
int64_t scale_bytes(const Operand& o) {
  quant::QuantizeProblem p;
  p.recipe = o.format;
  p.rows = o.rows;
  p.cols = o.k;
  p.ld = o.k;
  return quant::rowwise_scale_bytes(p);
}

void check_scales(CallDevice& dev, const char* name, const Array& scales, const Operand& o, int64_t bytes) {
  dev.require(name, scales);
  require_dtype(name, scales, {formats::is_fp8_block(o.format) ? formats::DType::kF32 : formats::DType::kU8});
  require_bytes(name, scales, bytes, (std::string("the scales quantize writes for ") + o.data_name).c_str());
}

const float* check_scale_dec(CallDevice& dev, const char* name, const Array& t, const Operand& o, int64_t floats) {
  if (o.format != formats::Format::kNvfp4) return nullptr;
  dev.require(name, t);
  require_dtype(name, t, {formats::DType::kF32});
  require_bytes(name, t, 4 * floats, floats == 1 ? "one float" : "one float per expert");
  return static_cast<const float*>(t.data());
}

void check_same_k(const Operand& a, const Operand& b) {
  if (a.row_bytes != b.row_bytes)
    fail(std::string(b.data_name) + ": columns (" + std::to_string(b.row_bytes) + ") must equal " + a.data_name +
         "'s columns (" + std::to_string(a.row_bytes) + ")");
}

// The fields the dense and the grouped problems share, from the checked operands.
template <typename Problem>
void set_operands(Problem& p, const Operand& a, const Operand& b, float alpha, float beta) {
  p.m = a.rows;
  p.n = b.rows;
  p.k = a.k;
  p.a_recipe = a.format;
  p.b_recipe = b.format;
  p.alpha = alpha;
  p.beta = beta;
}

// D (or C): rows x cols row-major (unit stride along columns); returns the row stride. A 3D
// tensor (experts x rows x cols) must stack its matrices back to back with that row stride.
int64_t check_output(CallDevice& dev, const char* name, const Array& t, int64_t groups, int64_t rows, int64_t cols) {
  dev.require(name, t);
  const std::string want = groups > 0 ? "(" + std::to_string(groups) + ", " + std::to_string(rows) + ", " +
                                            std::to_string(cols) + ")"
                                      : "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
  require_ndim(name, t, groups > 0 ? 3 : 2);
  const size_t o = groups > 0 ? 1 : 0;
  if ((groups > 0 && static_cast<int64_t>(t.shape(0)) != groups) || static_cast<int64_t>(t.shape(o)) != rows ||
      static_cast<int64_t>(t.shape(o + 1)) != cols)
    fail(std::string(name) + ": shape " + shape_string(t) + " must be " + want);
  if (cols > 1 && t.stride(o + 1) != 1) fail(std::string(name) + ": the last dimension must be contiguous (stride 1)");
  const int64_t ld = rows > 1 ? t.stride(o) : cols;
  if (ld < cols) fail(std::string(name) + ": row stride (" + std::to_string(ld) + ") must be >= its columns");
  if (groups > 1 && t.stride(0) != rows * ld)
    fail(std::string(name) + ": the experts' matrices must be back to back (stride " + std::to_string(t.stride(0)) +
         " in dimension 0 where " + std::to_string(rows * ld) + " is needed)");
  return ld;
}

void* check_workspace(CallDevice& dev, const Array& w, size_t need) {
  if (need == 0 || !w.is_valid()) return nullptr;  // the library runs without (FP8: perhaps slower)
  dev.require("workspace", w);
  require_dtype("workspace", w, {formats::DType::kU8});
  require_contiguous("workspace", w);
  return w.data();
}

// The common tail of both GEMMs: C, alpha / beta, the dtypes of C and D.
template <typename Problem>
const void* check_c(CallDevice& dev, Problem& p, const Array& c, int64_t groups) {
  if (p.beta != 0.0f && p.beta != 1.0f) fail("beta: must be 0 or 1 (got " + std::to_string(p.beta) + ")");
  if (p.beta == 0.0f) return nullptr;  // C is not read
  if (!c.is_valid()) fail("c: required when beta is 1 (pass d itself to accumulate in place)");
  p.c_type = require_dtype("c", c, {formats::DType::kBf16, formats::DType::kF32});
  p.ldc = check_output(dev, "c", c, groups, p.m, p.n);
  return c.data();
}

void gemm_dense(const Array& a_data, const Array& a_scales, const std::string& a_format, const Array& b_data,
                const Array& b_scales, const std::string& b_format, const Array& d, const Array& c, float alpha,
                float beta, const Array& a_scale_dec, const Array& b_scale_dec, const Array& workspace, uintptr_t stream) {
  CallDevice dev;
  Operand a = check_operand(dev, "a_data", a_data, "a_format", a_format, 2);
  Operand b = check_operand(dev, "b_data", b_data, "b_format", b_format, 2);
  check_same_k(a, b);
  check_scales(dev, "a_scales", a_scales, a, scale_bytes(a));
  check_scales(dev, "b_scales", b_scales, b, scale_bytes(b));
  gemm::GemmProblem p;
  set_operands(p, a, b, alpha, beta);
  p.d_type = require_dtype("d", d, {formats::DType::kBf16, formats::DType::kF32});
  p.ldd = check_output(dev, "d", d, 0, p.m, p.n);
  gemm::GemmArguments args;
  args.c = check_c(dev, p, c, 0);
  check_arg(gemm::can_implement(p));
  args.a_data = static_cast<const uint8_t*>(a_data.data());
  args.a_scales = a_scales.data();
  args.b_data = static_cast<const uint8_t*>(b_data.data());
  args.b_scales = b_scales.data();
  args.a_scale_dec = check_scale_dec(dev, "a_scale_dec", a_scale_dec, a, 1);
  args.b_scale_dec = check_scale_dec(dev, "b_scale_dec", b_scale_dec, b, 1);
  args.d = d.data();
  const size_t ws = gemm::workspace_size(p);
  void* w = check_workspace(dev, workspace, ws);
  const size_t w_bytes = w ? static_cast<size_t>(nbytes(workspace)) : 0;
  DeviceGuard guard(dev.id());
  check_arg(gemm::can_implement(p, args));
  check_run(gemm::run(p, args, w, w_bytes, stream_arg(stream)));
}

void gemm_grouped(const std::string& mode, const Array& a_data, const Array& a_scales, const std::string& a_format,
                  const Array& b_data, const Array& b_scales, const std::string& b_format, const Array& group_ends,
                  const Array& d, const Array& c, float alpha, float beta, const Array& a_scale_dec,
                  const Array& b_scale_dec, uintptr_t stream) {
  gemm::GroupedGemmProblem p;
  if (mode == "m") {
    p.mode = gemm::GroupMode::kM;
  } else if (mode == "k") {
    p.mode = gemm::GroupMode::kK;
  } else {
    fail("mode: '" + mode + "' is not one of m (fprop, dgrad), k (wgrad)");
  }
  const bool m_grouped = p.mode == gemm::GroupMode::kM;
  CallDevice dev;
  Operand a = check_operand(dev, "a_data", a_data, "a_format", a_format, 2);
  // kM: one weight matrix per expert (experts x n x k); kK: the columnwise copy of X (n x capacity).
  Operand b = check_operand(dev, "b_data", b_data, "b_format", b_format, m_grouped ? 3 : 2);
  check_same_k(a, b);
  dev.require("group_ends", group_ends);
  require_dtype("group_ends", group_ends, {formats::DType::kI32});
  require_ndim("group_ends", group_ends, 1);
  require_contiguous("group_ends", group_ends);
  p.num_groups = static_cast<int>(group_ends.shape(0));
  if (m_grouped && static_cast<int64_t>(b_data.shape(0)) != p.num_groups)
    fail("b_data: experts (" + std::to_string(b_data.shape(0)) + ", dimension 0) must equal group_ends' length (" +
         std::to_string(p.num_groups) + ")");
  set_operands(p, a, b, alpha, beta);
  check_scales(dev, "a_scales", a_scales, a, scale_bytes(a));
  p.d_type = require_dtype("d", d, {formats::DType::kBf16, formats::DType::kF32});
  const int64_t groups = m_grouped ? 0 : p.num_groups;  // kK: D holds one m x n matrix per expert
  p.ldd = check_output(dev, "d", d, groups, p.m, p.n);
  gemm::GroupedGemmArguments args;
  args.c = check_c(dev, p, c, groups);
  check_arg(gemm::can_implement(p));
  check_scales(dev, "b_scales", b_scales, b,
               m_grouped ? int64_t{p.num_groups} * gemm::grouped_b_scale_bytes(p) : gemm::grouped_b_scale_bytes(p));
  args.a_data = static_cast<const uint8_t*>(a_data.data());
  args.a_scales = a_scales.data();
  args.b_data = static_cast<const uint8_t*>(b_data.data());
  args.b_scales = b_scales.data();
  args.a_scale_dec = check_scale_dec(dev, "a_scale_dec", a_scale_dec, a, 1);
  args.b_scale_dec = check_scale_dec(dev, "b_scale_dec", b_scale_dec, b, m_grouped ? p.num_groups : 1);
  args.group_ends = static_cast<const int32_t*>(group_ends.data());
  args.d = d.data();
  DeviceGuard guard(dev.id());
  check_arg(gemm::can_implement(p, args));
  // No host_group_ends: the expert sizes stay on the device, so no workspace is used.
  check_run(gemm::run(p, args, nullptr, 0, stream_arg(stream)));
}

size_t gemm_workspace_size(const std::string& a_format, const std::string& b_format, int64_t m, int64_t n, int64_t k) {
  gemm::GemmProblem p;
  p.a_recipe = format_arg("a_format", a_format);
  p.b_recipe = format_arg("b_format", b_format);
  p.m = m;
  p.n = n;
  p.k = k;
  p.ldd = n;
  return gemm::workspace_size(p);
}

}  // namespace

void register_gemm(nb::module_& m) {
  m.def("gemm", &gemm_dense, "a_data"_a.none(), "a_scales"_a.none(), "a_format"_a, "b_data"_a.none(),
        "b_scales"_a.none(), "b_format"_a, "d"_a.none(), "c"_a.none(), "alpha"_a, "beta"_a, "a_scale_dec"_a.none(),
        "b_scale_dec"_a.none(), "workspace"_a.none(), "stream"_a, "d = alpha * A B^T (+ c when beta is 1), gemm/gemm.h");
  m.def("grouped_gemm", &gemm_grouped, "mode"_a, "a_data"_a.none(), "a_scales"_a.none(), "a_format"_a,
        "b_data"_a.none(), "b_scales"_a.none(), "b_format"_a, "group_ends"_a.none(), "d"_a.none(), "c"_a.none(),
        "alpha"_a, "beta"_a, "a_scale_dec"_a.none(), "b_scale_dec"_a.none(), "stream"_a,
        "the M- or K-grouped (MoE) GEMM of gemm/grouped.h");
  m.def("gemm_workspace_size", &gemm_workspace_size, "a_format"_a, "b_format"_a, "m"_a, "n"_a, "k"_a);
}

}  // namespace blockscale::python
