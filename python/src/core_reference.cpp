// blockscale._core: the fp64 reference GEMMs on quantized operands (formats/reference_gemm.h, what
// the GPU GEMMs are tested against) and the accuracy study's error metrics (study/study.h, the
// figures `blockscale study` reports).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "formats/reference_gemm.h"
#include "python/src/core_args.h"
#include "study/study.h"

using namespace nanobind::literals;

namespace blockscale::python {
namespace {

using F64Array = nb::ndarray<const double, nb::numpy, nb::c_contig, nb::device::cpu>;

// C's data when beta reads it: `elements` doubles, or an error naming c.
const double* c_data(const std::optional<F64Array>& c, double beta, size_t elements) {
  if (beta == 0.0) return nullptr;
  if (!c) throw nb::value_error("c: needed when beta != 0");
  if (c->size() != elements)
    throw nb::value_error(("c: " + std::to_string(c->size()) + " elements, the product has " +
                           std::to_string(elements)).c_str());
  return c->data();
}

nb::ndarray<nb::numpy, double> dense(const nb::dict& a, const nb::dict& b, double alpha, double beta,
                                     std::optional<F64Array> c) {
  const formats::QuantizedMatrix qa = from_dict(a, "a"), qb = from_dict(b, "b");
  const double* cp = c_data(c, beta, size_t(qa.rows) * size_t(qb.rows));
  std::vector<double> d;
  {
    nb::gil_scoped_release release;
    check(formats::reference_gemm(qa, qb, alpha, beta, cp, qb.rows, &d));
  }
  return to_numpy(d, {size_t(qa.rows), size_t(qb.rows)});
}

nb::ndarray<nb::numpy, double> m_grouped(const nb::dict& a, const std::vector<nb::dict>& b,
                                         const std::vector<int64_t>& group_ends, double alpha, double beta,
                                         std::optional<F64Array> c) {
  const formats::QuantizedMatrix qa = from_dict(a, "a");
  std::vector<formats::QuantizedMatrix> qb;
  for (size_t g = 0; g < b.size(); ++g) qb.push_back(from_dict(b[g], "b[" + std::to_string(g) + "]"));
  const int64_t n = qb.empty() ? 0 : qb[0].rows;
  const double* cp = c_data(c, beta, size_t(qa.rows) * size_t(n));
  std::vector<double> d;
  {
    nb::gil_scoped_release release;
    check(formats::reference_gemm_m_grouped(qa, qb, group_ends, alpha, beta, cp, n, &d));
  }
  return to_numpy(d, {size_t(qa.rows), size_t(n)});
}

nb::ndarray<nb::numpy, double> k_grouped(const nb::dict& a, const nb::dict& b,
                                         const std::vector<int64_t>& padded_group_ends, double alpha, double beta,
                                         std::optional<F64Array> c) {
  const formats::QuantizedMatrix qa = from_dict(a, "a"), qb = from_dict(b, "b");
  const size_t groups = padded_group_ends.size();
  const double* cp = c_data(c, beta, groups * size_t(qa.rows) * size_t(qb.rows));
  std::vector<double> d;
  {
    nb::gil_scoped_release release;
    check(formats::reference_gemm_k_grouped(qa, qb, padded_group_ends, alpha, beta, cp, &d));
  }
  return to_numpy(d, {groups, size_t(qa.rows), size_t(qb.rows)});
}

// One tensor's error under `options` (study::RecipeError's fields).
nb::dict recipe_error(F32Matrix x, const std::string& format, const std::string& rounding, bool block_2d, bool pow2) {
  const formats::QuantizeOptions o = quantize_options(format, rounding, false, 0, false, block_2d, pow2);
  const int64_t rows = int64_t(x.shape(0)), cols = int64_t(x.shape(1));
  study::RecipeError e;
  {
    nb::gil_scoped_release release;
    const study::TensorSource src =
        study::memory_source("x", {rows, cols}, rows, cols, std::vector<float>(x.data(), x.data() + x.size()));
    check(study::measure_recipe_error(src, o, &e));
  }
  nb::dict d;
  d["elements"] = e.elements;
  d["nonfinite"] = e.nonfinite;
  d["excluded"] = e.excluded;
  d["sqnr_db"] = e.sqnr_db;
  d["rel_fro_error"] = e.rel_fro_error;
  d["max_abs_error"] = e.max_abs_error;
  d["max_rel_error"] = e.max_rel_error;
  d["saturated"] = e.saturated;
  d["flushed"] = e.flushed;
  if (e.scale_limits) {
    d["scale_at_min"] = e.scale_at_min;
    d["scale_at_max"] = e.scale_at_max;
  }
  return d;
}

// A · B^T with both operands quantized rowwise under `options`, against the unquantized product.
nb::dict gemm_error(F32Matrix a, F32Matrix b, const std::string& format, const std::string& rounding, bool block_2d,
                    bool pow2) {
  const formats::QuantizeOptions o = quantize_options(format, rounding, false, 0, false, block_2d, pow2);
  if (a.shape(1) != b.shape(1))
    throw nb::value_error(("b: " + std::to_string(b.shape(1)) + " columns, a has " + std::to_string(a.shape(1)) +
                           " (both are K-major: A [M, K], B [N, K])").c_str());
  study::GemmError e;
  {
    nb::gil_scoped_release release;
    study::GemmReference ref;
    check(study::gemm_reference(std::vector<float>(a.data(), a.data() + a.size()), int64_t(a.shape(0)),
                                std::vector<float>(b.data(), b.data() + b.size()), int64_t(b.shape(0)),
                                int64_t(a.shape(1)), &ref));
    check(study::measure_gemm(ref, o, &e));
  }
  nb::dict d;
  d["rel_fro_error"] = e.rel_fro_error;
  d["sqnr_db"] = e.sqnr_db;
  d["max_abs_error"] = e.max_abs_error;
  return d;
}

}  // namespace

void bind_reference(nb::module_& m) {
  m.def("reference_gemm", &dense, "a"_a, "b"_a, "alpha"_a, "beta"_a, "c"_a.none());
  m.def("reference_gemm_m_grouped", &m_grouped, "a"_a, "b"_a, "group_ends"_a, "alpha"_a, "beta"_a, "c"_a.none());
  m.def("reference_gemm_k_grouped", &k_grouped, "a"_a, "b"_a, "padded_group_ends"_a, "alpha"_a, "beta"_a,
        "c"_a.none());
  m.def("recipe_error", &recipe_error, "x"_a, "format"_a, "rounding"_a, "block_2d"_a, "pow2"_a);
  m.def("gemm_error", &gemm_error, "a"_a, "b"_a, "format"_a, "rounding"_a, "block_2d"_a, "pow2"_a);
}

}  // namespace blockscale::python
