// The accuracy study's outputs: a plain-text table, CSV, a JSON document, and an SVG heatmap
// (tensors x recipes, coloured by SQNR) that a browser opens without anything else.
//
// Conventions shared by every format:
//   - shares (saturated, flushed, scale_at_min, scale_at_max) are fractions in [0, 1] in CSV and
//     JSON and percentages in the table;
//   - SQNR is +inf for an exact quantization (no error at all): "inf" in the table and CSV, null
//     in JSON (which has no infinity) with rel_fro_error 0 saying why;
//   - not applicable (the scale-limit shares of FP8 blockwise, whose scales are fp32, or a metric
//     with no element to measure): "-" in the table, an empty CSV field, null in JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "study/study.h"

namespace blockscale::study {

// Where the tensors came from, for the JSON document and the SVG's caption.
struct StudyProvenance {
  std::vector<std::string> inputs;  // --in files; empty: the built-in suite
  int64_t hidden = 0;               // the suite's hidden size
  uint64_t seed = 0;                // the suite's seed
};

// One row per tensor x config, then (if any) one row per GEMM pair x config, then notes
// (non-finite inputs, skipped tensors).
std::string format_table(const StudyResult& r);

// study.csv: one row per tensor x config:
//   tensor,shape,dtype,recipe,sqnr_db,rel_fro_error,max_abs_error,max_rel_error,saturated,
//   flushed,scale_at_min,scale_at_max,blocks,elements,nonfinite,excluded
std::string format_csv(const StudyResult& r);
// study_gemm.csv: one row per GEMM pair x config:
//   a,b,m,n,k,recipe,sqnr_db,rel_fro_error,max_abs_error,ref_max_abs
std::string format_gemm_csv(const StudyResult& r);

// {"blockscale_study": 1, "inputs" or "suite", "configs", "tensors", "gemms", "skipped",
//  "seconds"}; see format_json() for the keys of each entry.
std::string format_json(const StudyResult& r, const StudyProvenance& p);

// A heatmap: one row per tensor and GEMM pair, one column per config, each cell a
// <g class="cell"> holding its rect, its SQNR and a tooltip <title>.
std::string format_svg(const StudyResult& r, const StudyProvenance& p);

// Writes study.csv, study.json, study.svg (and study_gemm.csv when there are GEMM pairs) into
// `dir`, created if missing; each file goes to a temporary name first and is renamed into place.
// `written` receives the paths.
Status write_reports(const StudyResult& r, const StudyProvenance& p, const std::string& dir,
                     std::vector<std::string>* written);

}  // namespace blockscale::study
