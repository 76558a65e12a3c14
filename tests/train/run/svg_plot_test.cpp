// The SVG loss chart: well-formed output, escaping, NaN splitting, nice ticks, atomic writing.
#include "train/run/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace blockscale::train {
namespace {

using blockscale_test::TempDir;
const double kNaN = std::nan("");

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t i = text.find(what); i != std::string::npos; i = text.find(what, i + 1)) ++n;
  return n;
}

// Tags open and close in order ("<g ...>" ... "</g>"; "<line .../>" closes itself), no raw '<'
// inside a tag, every '&' starts an entity. Returns "" or the first problem.
std::string check_well_formed(const std::string& svg) {
  std::vector<std::string> open;
  for (size_t i = svg.find('<'); i != std::string::npos; i = svg.find('<', i + 1)) {
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = svg.substr(i + 1, end - i - 1);
    if (tag.empty() || tag.find('<') != std::string::npos) return "bad tag at " + std::to_string(i);
    if (count(tag, "\"") % 2 != 0) return "odd number of quotes in <" + tag + ">";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "unmatched </" + tag.substr(1) + ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    }
  }
  for (size_t i = svg.find('&'); i != std::string::npos; i = svg.find('&', i + 1)) {
    const std::string rest = svg.substr(i, 6);
    if (rest.rfind("&amp;", 0) && rest.rfind("&lt;", 0) && rest.rfind("&gt;", 0) && rest.rfind("&quot;", 0) &&
        rest.rfind("&apos;", 0)) {
      return "raw '&' at " + std::to_string(i);
    }
  }
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

// The texts of the <text> elements inside <g class="NAME">.
std::vector<std::string> group_texts(const std::string& svg, const std::string& name) {
  std::vector<std::string> texts;
  const size_t start = svg.find("<g class=\"" + name + "\"");
  if (start == std::string::npos) return texts;
  const size_t end = svg.find("</g>", start);
  for (size_t i = svg.find("<text", start); i < end; i = svg.find("<text", i + 1)) {
    const size_t open_end = svg.find('>', i) + 1;
    texts.push_back(svg.substr(open_end, svg.find("</text>", i) - open_end));
  }
  return texts;
}

PlotSeries ramp(const std::string& label, int n, double y0, double y1) {
  PlotSeries s{label, {}, {}};
  for (int i = 0; i < n; ++i) {
    s.x.push_back(i * 2000.0 / (n - 1));
    s.y.push_back(y0 + (y1 - y0) * i / (n - 1));
  }
  return s;
}

TEST(SvgPlot, IsWellFormedWithTitleAxesAndLegend) {
  PlotOptions o;
  o.title = "loss: bf16 vs mxfp8";
  const std::string svg = render_svg({ramp("bf16", 50, 5.3, 2.1), ramp("mxfp8", 50, 5.2, 2.2)}, o);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(check_well_formed(svg), "");
  EXPECT_NE(svg.find(">loss: bf16 vs mxfp8</text>"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
  EXPECT_EQ(group_texts(svg, "legend"), (std::vector<std::string>{"bf16", "mxfp8"}));
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "stroke=\"#0072B2\""), 2u);  // first series: its line and its legend swatch
  EXPECT_EQ(count(svg, "stroke=\"#D55E00\""), 2u);
  EXPECT_EQ(svg, render_svg({ramp("bf16", 50, 5.3, 2.1), ramp("mxfp8", 50, 5.2, 2.2)}, o));  // deterministic
}

TEST(SvgPlot, EscapesLabelsAndTitle) {
  PlotOptions o;
  o.title = "a<b & c>d";
  o.x_label = "tokens \"seen\"";
  const std::string svg = render_svg({ramp("nvfp4 <rht> & 'sr'", 3, 3, 2)}, o);
  EXPECT_EQ(check_well_formed(svg), "");
  EXPECT_NE(svg.find("a&lt;b &amp; c&gt;d"), std::string::npos);
  EXPECT_NE(svg.find("tokens &quot;seen&quot;"), std::string::npos);
  EXPECT_NE(svg.find("nvfp4 &lt;rht&gt; &amp; &apos;sr&apos;"), std::string::npos);
  EXPECT_EQ(svg.find("<rht>"), std::string::npos);
}

TEST(SvgPlot, NanSplitsASeriesAndALonePointIsAMarker) {
  PlotSeries s{"fp8_block", {0, 1, 2, 3, 4, 5, 6, 7, 8}, {5, 4.5, kNaN, 4, 3.8, INFINITY, 3.5, kNaN, 3.2}};
  const std::string svg = render_svg({s}, PlotOptions());
  EXPECT_EQ(check_well_formed(svg), "");
  EXPECT_EQ(count(svg, "<polyline"), 2u);  // [0,1] and [3,4]
  EXPECT_EQ(count(svg, "<circle"), 2u);    // 6 and 8, alone between gaps
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  const std::string one = render_svg({PlotSeries{"single", {10}, {3.0}}}, PlotOptions());
  EXPECT_EQ(count(one, "<polyline"), 0u);
  EXPECT_EQ(count(one, "<circle"), 1u);
  EXPECT_EQ(check_well_formed(one), "");
}

TEST(SvgPlot, NiceTicksAreRoundValuesInsideTheRange) {
  const std::vector<double> t = nice_ticks(2.1, 5.3, 5);
  EXPECT_EQ(t, (std::vector<double>{2.5, 3.0, 3.5, 4.0, 4.5, 5.0}));
  EXPECT_EQ(nice_ticks(0.1, 0.7, 6),
            (std::vector<double>{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7}));  // no 0.30000000000000004
  EXPECT_EQ(nice_ticks(0, 2000, 4), (std::vector<double>{0, 500, 1000, 1500, 2000}));
  EXPECT_EQ(nice_ticks(3, 3, 5), (std::vector<double>{3}));
  EXPECT_TRUE(nice_ticks(5, 1, 5).empty());
  EXPECT_TRUE(nice_ticks(kNaN, 1, 5).empty());
  EXPECT_TRUE(nice_ticks(-1e308, 1e308, 5).empty());  // the span overflows
  EXPECT_EQ(nice_ticks(0, 1e300, 4).size(), 6u);      // 0, 2e299, ..., 1e300
  const std::vector<double> around_zero = nice_ticks(-1.23, 0.31, 5);
  EXPECT_EQ(around_zero.front(), -1.2);
  EXPECT_EQ(around_zero.back(), 0.2);
  for (double lo : {-7.3, 0.0, 0.013, 2.1, 980.0}) {
    for (double width : {0.02, 1.0, 3.2, 55.0, 12345.0}) {
      const std::vector<double> ticks = nice_ticks(lo, lo + width, 5);
      ASSERT_GE(ticks.size(), 2u) << lo << " " << width;
      const double step = ticks[1] - ticks[0];
      const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
      EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-6 || std::fabs(mantissa - 2) < 1e-6 ||
                  std::fabs(mantissa - 5) < 1e-6)
          << step;
      for (double v : ticks) {
        EXPECT_GE(v, lo);
        EXPECT_LE(v, lo + width);
        EXPECT_FALSE(std::signbit(v) && v == 0);
      }
    }
  }
}

TEST(SvgPlot, TickLabelsForAKnownRange) {
  // y in [2.1, 5.3] plus the 5% margin is [1.94, 5.46]: ticks every 0.5 from 2.0 to 5.0.
  const std::string svg = render_svg({ramp("bf16", 11, 5.3, 2.1)}, PlotOptions());
  EXPECT_EQ(group_texts(svg, "y-ticks"),
            (std::vector<std::string>{"2.0", "2.5", "3.0", "3.5", "4.0", "4.5", "5.0"}));
  EXPECT_EQ(group_texts(svg, "x-ticks"), (std::vector<std::string>{"0", "200", "400", "600", "800", "1000",
                                                                   "1200", "1400", "1600", "1800", "2000"}));
  PlotSeries tokens{"mxfp8", {0, 50000}, {3, 2}};
  EXPECT_EQ(group_texts(render_svg({tokens}, PlotOptions()), "x-ticks"),
            (std::vector<std::string>{"0", "10k", "20k", "30k", "40k", "50k"}));
}

TEST(SvgPlot, LogScaleUsesOneTwoFiveTicksAndSkipsNonPositivePoints) {
  PlotOptions o;
  o.log_y = true;
  PlotSeries s{"bf16", {0, 1, 2, 3, 4}, {50, 20, 0, 5, 2}};  // 0 has no logarithm: a gap
  const std::string svg = render_svg({s}, o);
  EXPECT_EQ(check_well_formed(svg), "");
  EXPECT_EQ(group_texts(svg, "y-ticks"), (std::vector<std::string>{"2", "5", "10", "20", "50"}));
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("loss (log scale)"), std::string::npos);
  // Inside one decade 1/2/5 x 10^k gives too few ticks: linear nice ticks, placed logarithmically.
  const std::string narrow = render_svg({ramp("bf16", 11, 5.3, 2.1)}, o);
  EXPECT_EQ(group_texts(narrow, "y-ticks"), (std::vector<std::string>{"3", "4", "5"}));
}

TEST(SvgPlot, ManySeriesCycleThePaletteWithDashes) {
  std::vector<PlotSeries> series;
  for (int i = 0; i < 9; ++i) series.push_back(ramp("run" + std::to_string(i), 4, 4.0 + i * 0.1, 2.0));
  const std::string svg = render_svg(series, PlotOptions());
  EXPECT_EQ(count(svg, "<polyline"), 9u);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2u);  // the ninth series' line and legend swatch
  EXPECT_EQ(group_texts(svg, "legend").size(), 9u);
}

TEST(SvgPlot, CheckPlotNamesTheBrokenRule) {
  EXPECT_NE(check_plot({}, PlotOptions()).message().find("series: empty"), std::string::npos);
  const Status mismatch =
      check_plot({ramp("ok", 3, 1, 2), PlotSeries{"mxfp8", {1, 2, 3}, {1, 2}}}, PlotOptions());
  EXPECT_NE(mismatch.message().find("series[1] ('mxfp8'): x has 3 points, y has 2"), std::string::npos);
  EXPECT_NE(check_plot({PlotSeries{"e", {}, {}}}, PlotOptions()).message().find("no points"),
            std::string::npos);
  EXPECT_NE(
      check_plot({PlotSeries{"nan", {0, 1}, {kNaN, kNaN}}}, PlotOptions()).message().find("no finite point"),
      std::string::npos);
  PlotOptions log;
  log.log_y = true;
  EXPECT_FALSE(check_plot({PlotSeries{"neg", {0, 1}, {-1, 0}}}, log).is_ok());
  PlotOptions tiny;
  tiny.width = 10;
  EXPECT_NE(check_plot({ramp("ok", 3, 1, 2)}, tiny).message().find("options.width"), std::string::npos);
  // render_svg on bad input: a small, still well-formed SVG that says what is wrong.
  const std::string error = render_svg({}, PlotOptions());
  EXPECT_EQ(check_well_formed(error), "");
  EXPECT_NE(error.find("plot error: series: empty"), std::string::npos);
}

TEST(SvgPlot, WriteSvgIsAtomicAndRejectsBadInput) {
  TempDir tmp;
  const std::vector<PlotSeries> series = {ramp("bf16", 20, 4, 2)};
  ASSERT_TRUE(write_svg(tmp.file("loss.svg"), series, PlotOptions()).is_ok());
  std::ifstream in(tmp.file("loss.svg"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), render_svg(series, PlotOptions()));

  EXPECT_NE(write_svg(tmp.file("a.svg"), {}, PlotOptions()).message().find("write_svg: series: empty"),
            std::string::npos);
  EXPECT_FALSE(write_svg(tmp.file("b.svg"), {PlotSeries{"x", {1, 2}, {1}}}, PlotOptions()).is_ok());
  const Status no_dir = write_svg(tmp.file("missing/c.svg"), series, PlotOptions());
  ASSERT_FALSE(no_dir.is_ok());
  EXPECT_NE(no_dir.message().find("missing"), std::string::npos);
  // A directory where the file should go: the temporary is written, the rename fails, and the
  // temporary must not be left behind.
  std::filesystem::create_directory(tmp.file("taken.svg"));
  EXPECT_FALSE(write_svg(tmp.file("taken.svg"), series, PlotOptions()).is_ok());
  EXPECT_EQ(tmp.num_entries(), 2u);  // loss.svg and the directory, nothing else
}

}  // namespace
}  // namespace blockscale::train
