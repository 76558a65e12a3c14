// The accuracy study's table, CSV, JSON and SVG (study_report.h has the conventions).
#include "study/study_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "formats/io/svg.h"          // defines: svg_begin, svg_escape
#include "formats/io/tensor_view.h"  // defines: detail::write_file_atomically

namespace blockscale::study {
namespace {

std::string printf_str(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Table cells.
std::string db(double v) {
  return std::isnan(v) ? "-" : std::isinf(v) ? (v > 0 ? "inf" : "-inf") : printf_str("%.2f", v);
}
std::string sci(double v) {
  return std::isnan(v) ? "-" : std::isinf(v) ? "inf" : v == 0 ? "0" : printf_str("%.3e", v);
}
std::string pct(double share) {
  return std::isnan(share) ? "-" : share == 0 ? "0" : printf_str("%.3g", 100 * share);
}
std::string count(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

// Columns sized to their widest cell; numbers right-aligned.
std::string render(const std::vector<std::vector<std::string>>& rows, size_t left_columns) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      line += (c ? "  " : "") + (c < left_columns ? row[c] + pad : pad + row[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

// CSV fields: quoted when they hold a comma, quote or line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}
std::string csv_num(double v) {
  return std::isnan(v) ? "" : std::isinf(v) ? (v > 0 ? "inf" : "-inf") : printf_str("%.10g", v);
}

// JSON values.
std::string json_str(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      q += '\\';
      q += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      q += buf;
    } else {
      q += static_cast<char>(c);
    }
  }
  return q + "\"";
}
std::string json_num(double v) { return std::isfinite(v) ? printf_str("%.10g", v) : "null"; }
std::string json_int(int64_t v) { return std::to_string(v); }

}  // namespace

std::string format_table(const StudyResult& r) {
  std::string out = "blockscale study: " + count(r.tensors.size(), "tensor") + " x " +
                    count(r.configs.size(), "recipe") + ", rowwise blocks along the last "
                    "dimension (" + printf_str("%.1f", r.seconds) + " s)\n\n";
  std::vector<std::vector<std::string>> rows = {{"tensor", "shape", "recipe", "SQNR dB", "rel err",
                                                 "max abs", "max rel", "sat %", "flush %",
                                                 "scale@min %", "scale@max %"}};
  for (const TensorResult& t : r.tensors)
    for (size_t c = 0; c < r.configs.size(); ++c) {
      const RecipeError& e = t.errors[c];
      rows.push_back({t.name, shape_str(t.shape), r.configs[c].label, db(e.sqnr_db),
                      sci(e.rel_fro_error), sci(e.max_abs_error), sci(e.max_rel_error),
                      pct(e.saturated), pct(e.flushed), e.scale_limits ? pct(e.scale_at_min) : "-",
                      e.scale_limits ? pct(e.scale_at_max) : "-"});
    }
  out += render(rows, 3);
  if (!r.gemms.empty()) {
    rows = {{"gemm A * B^T", "MxNxK", "recipe", "SQNR dB", "rel err", "max abs", "max |A B^T|"}};
    for (const GemmResult& g : r.gemms)
      for (size_t c = 0; c < r.configs.size(); ++c) {
        const GemmError& e = g.errors[c];
        rows.push_back({g.a + " * " + g.b + "^T", shape_str({g.m, g.n, g.k}), r.configs[c].label,
                        db(e.sqnr_db), sci(e.rel_fro_error), sci(e.max_abs_error), sci(g.e_max_abs)});
      }
    out += "\n" + render(rows, 3);
  }
  std::string notes;
  for (const TensorResult& t : r.tensors) {
    if (t.errors.empty() || t.errors[0].excluded == 0) continue;
    int64_t most = 0;
    for (const RecipeError& e : t.errors) most = std::max(most, e.excluded);
    notes += "note: " + t.name + " holds " + std::to_string(t.errors[0].nonfinite) +
             " NaN/Inf values; they and the finite values of their blocks (which dequantize to "
             "NaN) are left out of the metrics: up to " + std::to_string(most) + " elements\n";
  }
  for (const Skipped& s : r.skipped) notes += "skipped " + s.name + ": " + s.reason + "\n";
  return notes.empty() ? out : out + "\n" + notes;
}

std::string format_csv(const StudyResult& r) {
  std::string out =
      "tensor,shape,dtype,recipe,sqnr_db,rel_fro_error,max_abs_error,max_rel_error,saturated,"
      "flushed,scale_at_min,scale_at_max,blocks,elements,nonfinite,excluded\n";
  for (const TensorResult& t : r.tensors)
    for (size_t c = 0; c < r.configs.size(); ++c) {
      const RecipeError& e = t.errors[c];
      const double na = NAN;
      out += csv_field(t.name) + "," + shape_str(t.shape) + "," + t.dtype + "," +
             csv_field(r.configs[c].label) + "," + csv_num(e.sqnr_db) + "," +
             csv_num(e.rel_fro_error) + "," + csv_num(e.max_abs_error) + "," +
             csv_num(e.max_rel_error) + "," + csv_num(e.saturated) + "," + csv_num(e.flushed) + "," +
             csv_num(e.scale_limits ? e.scale_at_min : na) + "," +
             csv_num(e.scale_limits ? e.scale_at_max : na) + "," +
             (e.scale_limits ? std::to_string(e.blocks) : "") + "," + std::to_string(e.elements) +
             "," + std::to_string(e.nonfinite) + "," + std::to_string(e.excluded) + "\n";
    }
  return out;
}

std::string format_gemm_csv(const StudyResult& r) {
  std::string out = "a,b,m,n,k,recipe,sqnr_db,rel_fro_error,max_abs_error,ref_max_abs\n";
  for (const GemmResult& g : r.gemms)
    for (size_t c = 0; c < r.configs.size(); ++c) {
      const GemmError& e = g.errors[c];
      out += csv_field(g.a) + "," + csv_field(g.b) + "," + std::to_string(g.m) + "," +
             std::to_string(g.n) + "," + std::to_string(g.k) + "," + csv_field(r.configs[c].label) +
             "," + csv_num(e.sqnr_db) + "," + csv_num(e.rel_fro_error) + "," +
             csv_num(e.max_abs_error) + "," + csv_num(g.e_max_abs) + "\n";
    }
  return out;
}

std::string format_json(const StudyResult& r, const StudyProvenance& p) {
  std::string o = "{\n  \"blockscale_study\": 1,\n";
  if (p.inputs.empty()) {
    o += "  \"suite\": {\"hidden\": " + json_int(p.hidden) + ", \"seed\": " + std::to_string(p.seed) +
         "},\n";
  } else {
    o += "  \"inputs\": [";
    for (size_t i = 0; i < p.inputs.size(); ++i) o += (i ? ", " : "") + json_str(p.inputs[i]);
    o += "],\n";
  }
  o += "  \"configs\": [";
  for (size_t c = 0; c < r.configs.size(); ++c) {
    const formats::QuantizeOptions& opt = r.configs[c].options;
    const std::string rounding = !formats::is_mx(opt.recipe) ? "null"
                                 : opt.rounding == formats::ScaleRounding::kFloor ? "\"floor\""
                                                                                   : "\"ceil\"";
    o += std::string(c ? ",\n    " : "\n    ") + "{\"label\": " + json_str(r.configs[c].label) +
         ", \"recipe\": " + json_str(formats::format_name(opt.recipe)) +
         ", \"rounding\": " + rounding + "}";
  }
  o += "\n  ],\n  \"tensors\": [";
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorResult& t = r.tensors[i];
    o += std::string(i ? ",\n" : "\n") + "    {\"name\": " + json_str(t.name) + ", \"shape\": [";
    for (size_t d = 0; d < t.shape.size(); ++d) o += (d ? ", " : "") + json_int(t.shape[d]);
    o += "], \"dtype\": " + json_str(t.dtype) + ", \"rows\": " + json_int(t.rows) +
         ", \"cols\": " + json_int(t.cols) + ", \"results\": [";
    for (size_t c = 0; c < r.configs.size(); ++c) {
      const RecipeError& e = t.errors[c];
      const auto limit = [&](double v) { return e.scale_limits ? json_num(v) : std::string("null"); };
      o += std::string(c ? ",\n" : "\n") + "      {\"config\": " + json_str(r.configs[c].label) +
           ", \"sqnr_db\": " + json_num(e.sqnr_db) + ", \"rel_fro_error\": " + json_num(e.rel_fro_error) +
           ", \"max_abs_error\": " + json_num(e.max_abs_error) +
           ", \"max_rel_error\": " + json_num(e.max_rel_error) +
           ", \"saturated\": " + json_num(e.saturated) +
           ", \"flushed\": " + json_num(e.flushed) + ", \"scale_at_min\": " + limit(e.scale_at_min) +
           ", \"scale_at_max\": " + limit(e.scale_at_max) + ", \"blocks\": " +
           (e.scale_limits ? json_int(e.blocks) : "null") + ", \"elements\": " + json_int(e.elements) +
           ", \"nonfinite\": " + json_int(e.nonfinite) + ", \"excluded\": " + json_int(e.excluded) + "}";
    }
    o += "\n    ]}";
  }
  o += "\n  ],\n  \"gemms\": [";
  for (size_t i = 0; i < r.gemms.size(); ++i) {
    const GemmResult& g = r.gemms[i];
    o += std::string(i ? ",\n" : "\n") + "    {\"a\": " + json_str(g.a) + ", \"b\": " + json_str(g.b) +
         ", \"m\": " + json_int(g.m) + ", \"n\": " + json_int(g.n) + ", \"k\": " + json_int(g.k) +
         ", \"ref_max_abs\": " + json_num(g.e_max_abs) + ", \"results\": [";
    for (size_t c = 0; c < r.configs.size(); ++c) {
      const GemmError& e = g.errors[c];
      o += std::string(c ? ",\n" : "\n") + "      {\"config\": " + json_str(r.configs[c].label) +
           ", \"sqnr_db\": " + json_num(e.sqnr_db) + ", \"rel_fro_error\": " + json_num(e.rel_fro_error) +
           ", \"max_abs_error\": " + json_num(e.max_abs_error) + "}";
    }
    o += "\n    ]}";
  }
  o += "\n  ],\n  \"skipped\": [";
  for (size_t i = 0; i < r.skipped.size(); ++i)
    o += std::string(i ? ", " : "") + "{\"name\": " + json_str(r.skipped[i].name) +
         ", \"reason\": " + json_str(r.skipped[i].reason) + "}";
  return o + "],\n  \"seconds\": " + json_num(r.seconds) + "\n}\n";
}

std::string format_svg(const StudyResult& r, const StudyProvenance& p) {
  struct Row {
    std::string label, detail;
    std::vector<double> sqnr;
    std::vector<std::string> tips;
  };
  std::vector<Row> rows;
  for (const TensorResult& t : r.tensors) {
    Row row{t.name, shape_str(t.shape) + " " + t.dtype, {}, {}};
    for (size_t c = 0; c < r.configs.size(); ++c) {
      const RecipeError& e = t.errors[c];
      row.sqnr.push_back(e.sqnr_db);
      row.tips.push_back(t.name + " [" + shape_str(t.shape) + "] " + r.configs[c].label +
                         ": SQNR " + db(e.sqnr_db) + " dB, rel err " + sci(e.rel_fro_error) +
                         ", max abs " + sci(e.max_abs_error) + ", max rel " + sci(e.max_rel_error) +
                         ", saturated " + pct(e.saturated) + "%, flushed " + pct(e.flushed) + "%" +
                         (e.scale_limits ? ", scale at min " + pct(e.scale_at_min) + "%, at max " +
                                               pct(e.scale_at_max) + "%"
                                         : ""));
    }
    rows.push_back(std::move(row));
  }
  for (const GemmResult& g : r.gemms) {
    Row row{"gemm " + g.a + " * " + g.b + "^T", "MxNxK " + shape_str({g.m, g.n, g.k}), {}, {}};
    for (size_t c = 0; c < r.configs.size(); ++c) {
      row.sqnr.push_back(g.errors[c].sqnr_db);
      row.tips.push_back(row.label + " " + r.configs[c].label + ": SQNR " + db(g.errors[c].sqnr_db) +
                         " dB, rel err " + sci(g.errors[c].rel_fro_error) + ", max abs " +
                         sci(g.errors[c].max_abs_error));
    }
    rows.push_back(std::move(row));
  }
  double lo = INFINITY, hi = -INFINITY;
  for (const Row& row : rows)
    for (double v : row.sqnr)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (hi - lo < 1) hi = lo + 1;
  // viridis, dark (low SQNR) to light (high)
  static const int kStops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  auto colour = [&](double t) {
    t = std::min(1.0, std::max(0.0, t)) * 4;
    const int i = std::min(3, static_cast<int>(t));
    const double f = t - i;
    auto mix = [&](int ch) {
      return static_cast<int>(std::lround(kStops[i][ch] + f * (kStops[i + 1][ch] - kStops[i][ch])));
    };
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", mix(0), mix(1), mix(2));
    return std::string(buf);
  };
  size_t label_chars = 10;
  for (const Row& row : rows)
    label_chars = std::max(label_chars, std::max(row.label.size(), row.detail.size()));
  const int cw = 92, ch = 34, left = 16 + static_cast<int>(label_chars) * 7, top = 150;
  const int ncol = static_cast<int>(r.configs.size()), nrow = static_cast<int>(rows.size());
  const int gap = r.gemms.empty() ? 0 : 10;  // sets the GEMM rows apart from the tensors'
  const int width = left + ncol * cw + 100, height = top + nrow * ch + gap + 90;
  std::string s = io::svg_begin(width, height);
  const std::string source = p.inputs.empty()
      ? "built-in suite, hidden " + std::to_string(p.hidden) + ", seed " + std::to_string(p.seed)
      : std::to_string(p.inputs.size()) + " input file" + (p.inputs.size() > 1 ? "s" : "");
  s += "<text x=\"16\" y=\"24\" font-size=\"16\" font-weight=\"bold\">blockscale study: SQNR (dB) of each "
       "recipe, higher is better</text>\n<text x=\"16\" y=\"42\" fill=\"#555\">" +
       io::svg_escape(source) + "; rowwise blocks; hover a cell for every metric</text>\n";
  for (int c = 0; c < ncol; ++c)
    s += "<text transform=\"translate(" + std::to_string(left + c * cw + cw / 2) + "," +
         std::to_string(top - 8) + ") rotate(-35)\">" + io::svg_escape(r.configs[c].label) + "</text>\n";
  for (int i = 0; i < nrow; ++i) {
    const Row& row = rows[i];
    const int y = top + i * ch + (i >= static_cast<int>(r.tensors.size()) ? gap : 0);
    s += "<text x=\"" + std::to_string(left - 8) + "\" y=\"" + std::to_string(y + 15) +
         "\" text-anchor=\"end\">" + io::svg_escape(row.label) + "</text><text x=\"" + std::to_string(left - 8) +
         "\" y=\"" + std::to_string(y + 28) + "\" text-anchor=\"end\" font-size=\"10\" fill=\"#777\">" +
         io::svg_escape(row.detail) + "</text>\n";
    for (int c = 0; c < ncol; ++c) {
      const double v = row.sqnr[c];
      const double t = std::isinf(v) ? 1.0 : (v - lo) / (hi - lo);
      const std::string fill = std::isnan(v) ? "#dddddd" : colour(t);
      const std::string text = std::isnan(v) ? "-" : std::isinf(v) ? "exact" : printf_str("%.1f", v);
      const std::string ink = std::isnan(v) || t > 0.55 ? "black" : "white";
      const int x = left + c * cw;
      s += "<g class=\"cell\"><title>" + io::svg_escape(row.tips[c]) + "</title><rect x=\"" + std::to_string(x) +
           "\" y=\"" + std::to_string(y) + "\" width=\"" + std::to_string(cw - 2) + "\" height=\"" +
           std::to_string(ch - 2) + "\" fill=\"" + fill + "\"/><text x=\"" +
           std::to_string(x + cw / 2 - 1) +
           "\" y=\"" + std::to_string(y + ch / 2 + 3) + "\" text-anchor=\"middle\" fill=\"" + ink + "\">" +
           text + "</text></g>\n";
    }
  }
  // Legend: the colour scale from the lowest to the highest finite SQNR.
  const int ly = top + nrow * ch + gap + 30, lw = std::max(200, std::min(ncol * cw, 480));
  s += "<defs><linearGradient id=\"sqnr\">";
  for (int i = 0; i <= 4; ++i)
    s += "<stop offset=\"" + std::to_string(25 * i) + "%\" stop-color=\"" + colour(i / 4.0) + "\"/>";
  s += "</linearGradient></defs>\n<rect x=\"" + std::to_string(left) + "\" y=\"" + std::to_string(ly) +
       "\" width=\"" + std::to_string(lw) + "\" height=\"14\" fill=\"url(#sqnr)\"/>\n";
  s += "<text x=\"" + std::to_string(left) + "\" y=\"" + std::to_string(ly + 30) + "\">" +
       printf_str("%.1f dB", lo) + "</text><text x=\"" + std::to_string(left + lw) + "\" y=\"" +
       std::to_string(ly + 30) + "\" text-anchor=\"end\">" + printf_str("%.1f dB", hi) +
       "</text><text x=\"" + std::to_string(left + lw + 16) + "\" y=\"" + std::to_string(ly + 12) +
       "\" fill=\"#555\">exact: no error at all; -: nothing measured</text>\n</svg>\n";
  return s;
}

Status write_reports(const StudyResult& r, const StudyProvenance& p, const std::string& dir,
                     std::vector<std::string>* written) {
  namespace fs = std::filesystem;
  if (dir.empty()) return Status::error("--out-dir: empty path");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return Status::error("--out-dir '" + dir + "': cannot create the directory" +
                         (ec ? ": " + ec.message() : std::string(" (a file is in the way)")));
  std::vector<std::pair<std::string, std::string>> files = {
      {"study.csv", format_csv(r)}, {"study.json", format_json(r, p)}, {"study.svg", format_svg(r, p)}};
  if (!r.gemms.empty()) files.insert(files.begin() + 1, {"study_gemm.csv", format_gemm_csv(r)});
  for (const auto& [name, text] : files) {
    const std::string path = (fs::path(dir) / name).string();
    const Status s = io::detail::write_file_atomically(path, text);
    if (!s) return Status::error("--out-dir '" + dir + "': " + s.message());
    if (written) written->push_back(path);
  }
  return Status::ok();
}

}  // namespace blockscale::study
