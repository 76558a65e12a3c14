// The SVG line chart: ranges, nice ticks, frame, grid, polylines, legend.
#include "train/run/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

#include "formats/io/svg.h"          // defines: svg_begin, svg_escape
#include "formats/io/tensor_view.h"  // defines: io::detail::write_file_atomically (temp + fsync + rename)
#include "train/run/printf_string.h"  // defines: printf_string

namespace blockscale::train {
namespace {

// Okabe-Ito, reordered so the first colours read best on white (yellow last).
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#000000", "#F0E442"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);
constexpr double kMarginLeft = 70, kMarginRight = 20, kMarginBottom = 50;
constexpr double kCharWidth = 7;  // rough width of a 12px sans-serif character, for the legend box

bool drawable(double x, double y, bool log_y) {
  return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0);
}

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
  // A single value gets room around it, so it sits mid-axis instead of dividing by zero.
  void widen_if_flat() {
    if (hi > lo) return;
    const double pad = lo != 0 ? std::fabs(lo) * 0.1 : 1.0;
    lo -= pad, hi += pad;
  }
};

// 1, 2, 5 x 10^k values in [lo, hi] (lo > 0); powers of ten only when those are too many; the
// linear nice ticks when fewer than three fit (a range inside one decade, as most loss curves).
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> all, decades;
  for (int k = static_cast<int>(std::floor(std::log10(lo))); k <= static_cast<int>(std::ceil(std::log10(hi)));
       ++k) {
    for (int m : {1, 2, 5}) {
      const double v = k < 0 ? m / std::pow(10.0, -k) : m * std::pow(10.0, k);
      if (v < lo || v > hi) continue;
      all.push_back(v);
      if (m == 1) decades.push_back(v);
    }
  }
  if (all.size() > 12) return decades;
  if (all.size() < 3) return nice_ticks(lo, hi, 5);
  return all;
}

// Tick labels with as many decimals as the tick step needs; k/M/G past 10,000 (token counts).
// Log-axis ticks (1, 2, 5 x 10^k: uneven steps) print as %g.
std::vector<std::string> tick_labels(const std::vector<double>& ticks, bool log_axis = false) {
  if (log_axis) {
    std::vector<std::string> labels;
    for (double t : ticks) labels.push_back(printf_string("%g", t));
    return labels;
  }
  double max_abs = 0, step = 0;
  for (double t : ticks) max_abs = std::max(max_abs, std::fabs(t));
  for (size_t i = 1; i < ticks.size(); ++i)
    step = step == 0 ? ticks[i] - ticks[i - 1] : std::min(step, ticks[i] - ticks[i - 1]);
  double scale = 1;
  const char* suffix = "";
  if (max_abs >= 1e9)
    scale = 1e9, suffix = "G";
  else if (max_abs >= 1e6)
    scale = 1e6, suffix = "M";
  else if (max_abs >= 1e4)
    scale = 1e3, suffix = "k";
  int decimals = 0;
  if (step > 0) decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step / scale) - 1e-9)), 0, 10);
  std::vector<std::string> labels;
  for (double t : ticks) {
    std::string s = printf_string("%.*f", decimals, t / scale);
    labels.push_back(t == 0 ? "0" : s + suffix);
  }
  return labels;
}

// The plot area in pixels and the data ranges it shows (y in log10 units with log_y).
struct Frame {
  double left, top, right, bottom;
  Range x, y;
  bool log_y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const {
    const double u = log_y ? std::log10(v) : v;
    return bottom - (u - y.lo) / (y.hi - y.lo) * (bottom - top);
  }
};

std::string error_svg(const std::string& message) {
  return io::svg_begin(600, 40) + "<text x=\"10\" y=\"24\" fill=\"#B00020\">plot error: " + io::svg_escape(message) +
         "</text>\n</svg>\n";
}

void draw_axes(const Frame& f, const PlotOptions& o, std::string* svg) {
  const std::vector<double> xt =
      nice_ticks(f.x.lo, f.x.hi, std::max(2, static_cast<int>((f.right - f.left) / 100)));
  const double ylo = o.log_y ? std::pow(10.0, f.y.lo) : f.y.lo,
               yhi = o.log_y ? std::pow(10.0, f.y.hi) : f.y.hi;
  const std::vector<double> yt =
      o.log_y ? log_ticks(ylo, yhi)
              : nice_ticks(ylo, yhi, std::max(2, static_cast<int>((f.bottom - f.top) / 60)));
  const std::vector<std::string> xl = tick_labels(xt), yl = tick_labels(yt, o.log_y);
  *svg += "<g stroke=\"#E0E0E0\" stroke-width=\"1\">\n";
  for (double t : xt)
    *svg += printf_string("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", f.px(t), f.top,
                          f.px(t), f.bottom);
  for (double t : yt)
    *svg += printf_string("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", f.left, f.py(t),
                          f.right, f.py(t));
  *svg += "</g>\n";
  *svg += printf_string(
      "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#444444\"/>\n",
      f.left, f.top, f.right - f.left, f.bottom - f.top);
  *svg += "<g class=\"x-ticks\" text-anchor=\"middle\">\n";
  for (size_t i = 0; i < xt.size(); ++i)
    *svg += printf_string("<text x=\"%.2f\" y=\"%.2f\">", f.px(xt[i]), f.bottom + 18) + xl[i] + "</text>\n";
  *svg += "</g>\n<g class=\"y-ticks\" text-anchor=\"end\">\n";
  for (size_t i = 0; i < yt.size(); ++i) {
    *svg += printf_string("<text x=\"%.2f\" y=\"%.2f\">", f.left - 6, f.py(yt[i]) + 4) + yl[i] + "</text>\n";
  }
  *svg += "</g>\n";
  *svg += printf_string("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">", (f.left + f.right) / 2,
                        f.bottom + 40) +
          io::svg_escape(o.x_label) + "</text>\n";
  *svg += printf_string("<text transform=\"translate(16,%.2f) rotate(-90)\" text-anchor=\"middle\">",
                        (f.top + f.bottom) / 2) +
          io::svg_escape(o.y_label) + (o.log_y ? " (log scale)" : "") + "</text>\n";
}

std::string stroke_style(size_t i) {
  std::string s = std::string("stroke=\"") + kPalette[i % kPaletteSize] + "\" stroke-width=\"1.5\"";
  if (i >= static_cast<size_t>(kPaletteSize)) s += " stroke-dasharray=\"6,3\"";  // colours repeat: dash them
  return s;
}

void draw_series(const Frame& f, const PlotSeries& s, size_t index, std::string* svg) {
  const char* colour = kPalette[index % kPaletteSize];
  std::vector<std::pair<double, double>> run;  // consecutive drawable points
  auto flush = [&] {
    if (run.size() == 1) {
      *svg += printf_string("<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", run[0].first,
                            run[0].second, colour);
    } else if (run.size() > 1) {
      *svg += "<polyline fill=\"none\" " + stroke_style(index) + " points=\"";
      for (size_t i = 0; i < run.size(); ++i)
        *svg += printf_string(i ? " %.2f,%.2f" : "%.2f,%.2f", run[i].first, run[i].second);
      *svg += "\"/>\n";
    }
    run.clear();
  };
  *svg += "<g class=\"series\">\n";
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (drawable(s.x[i], s.y[i], f.log_y)) {
      run.emplace_back(f.px(s.x[i]), f.py(s.y[i]));
    } else {
      flush();
    }
  }
  flush();
  *svg += "</g>\n";
}

void draw_legend(const Frame& f, const std::vector<PlotSeries>& series, std::string* svg) {
  size_t chars = 0;
  for (const PlotSeries& s : series) chars = std::max(chars, s.label.size());
  const double w = 42 + kCharWidth * static_cast<double>(chars),
               h = 8 + 18 * static_cast<double>(series.size());
  const double x = std::max(f.left + 4, f.right - 10 - w), y = f.top + 10;
  *svg += printf_string(
      "<g class=\"legend\">\n<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"white\" "
      "fill-opacity=\"0.85\" stroke=\"#BBBBBB\"/>\n",
      x, y, w, h);
  for (size_t i = 0; i < series.size(); ++i) {
    const double row = y + 16 + 18 * static_cast<double>(i);
    *svg += printf_string("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" ", x + 8, row - 4, x + 30,
                          row - 4) +
            stroke_style(i) + "/>\n";
    *svg +=
        printf_string("<text x=\"%.2f\" y=\"%.2f\">", x + 36, row) + io::svg_escape(series[i].label) + "</text>\n";
  }
  *svg += "</g>\n";
}

}  // namespace

Status check_plot(const std::vector<PlotSeries>& series, const PlotOptions& options) {
  if (options.width < 200 || options.width > 10000) {
    return Status::error("options.width: must be in [200, 10000], got " + std::to_string(options.width));
  }
  if (options.height < 150 || options.height > 10000) {
    return Status::error("options.height: must be in [150, 10000], got " + std::to_string(options.height));
  }
  if (series.empty()) return Status::error("series: empty (nothing to plot)");
  bool any_point = false;
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::string name = "series[" + std::to_string(i) + "] ('" + s.label + "')";
    if (s.x.size() != s.y.size()) {
      return Status::error(name + ": x has " + std::to_string(s.x.size()) + " points, y has " +
                           std::to_string(s.y.size()) + " (they must match)");
    }
    if (s.x.empty()) return Status::error(name + ": no points");
    for (size_t j = 0; j < s.x.size() && !any_point; ++j) any_point = drawable(s.x[j], s.y[j], options.log_y);
  }
  if (!any_point) {
    return Status::error(std::string("series: no finite point") +
                         (options.log_y ? " with y > 0 (log_y)" : "") + " in any series");
  }
  return Status::ok();
}

std::vector<double> nice_ticks(double lo, double hi, int target_count) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi || target_count < 1) return {};
  if (lo == hi) return {lo};
  const double rough = (hi - lo) / target_count;
  if (!std::isfinite(rough) || rough < 1e-300) return {};  // overflowing or subnormal spans: no ticks
  int power = static_cast<int>(std::floor(std::log10(rough)));
  const double error = rough / std::pow(10.0, power);
  int factor = error >= std::sqrt(50.0) ? 10 : error >= std::sqrt(10.0) ? 5 : error >= std::sqrt(2.0) ? 2 : 1;
  if (factor == 10) factor = 1, ++power;
  // Tick k is k * factor * 10^power; dividing by 10^-power keeps 0.3 exactly 0.3, not 0.30000000000000004.
  const double unit = std::pow(10.0, std::abs(power));
  auto value = [&](long long k) {
    return power < 0 ? static_cast<double>(k * factor) / unit : static_cast<double>(k * factor) * unit;
  };
  const double step = value(1);
  // The 1e-9 slack lets 0.7 / 0.1 = 6.999... still reach the tick at 0.7; the range check is exact.
  std::vector<double> ticks;
  if (!std::isfinite(step) || step <= 0) return ticks;
  for (long long k = static_cast<long long>(std::ceil(lo / step - 1e-9));
       k <= static_cast<long long>(std::floor(hi / step + 1e-9)); ++k) {
    const double v = value(k);
    if (v >= lo && v <= hi) ticks.push_back(v == 0 ? 0.0 : v);  // no "-0"
  }
  return ticks;
}

std::string render_svg(const std::vector<PlotSeries>& series, const PlotOptions& options) {
  const Status valid = check_plot(series, options);
  if (!valid) return error_svg(valid.message());
  Frame f{kMarginLeft,
          options.title.empty() ? 20.0 : 40.0,
          options.width - kMarginRight,
          options.height - kMarginBottom,
          Range(),
          Range(),
          options.log_y};
  for (const PlotSeries& s : series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!drawable(s.x[i], s.y[i], options.log_y)) continue;
      f.x.add(s.x[i]);
      f.y.add(options.log_y ? std::log10(s.y[i]) : s.y[i]);
    }
  }
  f.x.widen_if_flat();
  f.y.widen_if_flat();
  const double margin = 0.05 * (f.y.hi - f.y.lo);
  f.y.lo -= margin, f.y.hi += margin;

  std::string svg = io::svg_begin(options.width, options.height);
  if (!options.title.empty()) {
    svg += printf_string("<text x=\"%.2f\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">",
                         options.width / 2.0) +
           io::svg_escape(options.title) + "</text>\n";
  }
  draw_axes(f, options, &svg);
  for (size_t i = 0; i < series.size(); ++i) draw_series(f, series[i], i, &svg);
  draw_legend(f, series, &svg);
  return svg + "</svg>\n";
}

Status write_svg(const std::string& path, const std::vector<PlotSeries>& series, const PlotOptions& options) {
  const Status valid = check_plot(series, options);
  if (!valid) return Status::error("write_svg: " + valid.message());
  try {
    const Status s = io::detail::write_file_atomically(path, render_svg(series, options));
    if (!s) return Status::error("write_svg: " + s.message());
    return Status::ok();
  } catch (const std::exception& e) {
    return Status::error("write_svg: '" + path + "': " + e.what());
  }
}

}  // namespace blockscale::train
