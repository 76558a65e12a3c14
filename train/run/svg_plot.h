// A dependency-free SVG line chart of loss curves: to compare recipes (bf16, fp8_block, mxfp8,
// nvfp4) side by side and to put in docs/. Output is deterministic (same input, same bytes):
// coordinates print as %.2f, colours come from a fixed palette.
//
// What is drawn: a title, a framed plot area with grid lines at "nice" ticks (1, 2 or 5 x 10^k
// apart) and their labels, the two axis labels, one polyline per run of consecutive finite
// points of each series (a NaN/Inf point splits a series; a lone finite point is a circle
// marker), and a legend (top right, inside the plot) with each label in its series' colour.
// The x range is that of the finite points; the y range gets a 5% margin either side. With
// log_y, points with y <= 0 are skipped like NaN and ticks are 1/2/5 x 10^k values.
//
//   defines: PlotSeries, PlotOptions, check_plot, nice_ticks, render_svg, write_svg
#pragma once

#include <string>
#include <vector>

#include "formats/status.h"

namespace blockscale::train {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
};

struct PlotOptions {
  std::string title;
  std::string x_label = "step";
  std::string y_label = "loss";
  int width = 800, height = 500;
  bool log_y = false;
};

// The rules a plot's input must follow: at least one series; x and y of equal, non-zero size in
// each; at least one drawable (finite, and > 0 with log_y) point in all; width in [200, 10000]
// and height in [150, 10000]. Errors name the series by index and label.
Status check_plot(const std::vector<PlotSeries>& series, const PlotOptions& options);

// Tick values in [lo, hi], a multiple of one step of 1, 2 or 5 x 10^k chosen so that about
// `target_count` ticks fit (d3's rule). {lo} when lo == hi; empty when lo > hi, either is
// non-finite, or hi - lo overflows or is below 1e-300.
std::vector<double> nice_ticks(double lo, double hi, int target_count);

// The whole SVG document. Input that check_plot rejects yields a small SVG showing the error
// (so a caller that skips validation still gets a file that says what went wrong).
std::string render_svg(const std::vector<PlotSeries>& series, const PlotOptions& options);

// check_plot, then render_svg written to `path` atomically (temp file, fsync, rename): an error
// leaves neither a partial file nor the temporary behind.
Status write_svg(const std::string& path, const std::vector<PlotSeries>& series, const PlotOptions& options);

}  // namespace blockscale::train
