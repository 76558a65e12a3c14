// What every SVG document blockscale writes shares (the loss plots of train/run/svg_plot.h, the
// study's SQNR map in study/study_report.h): text escaped for XML, and the document's opening with
// its white background. A document ends with "</svg>\n".
#pragma once

#include <string>
#include <string_view>

namespace blockscale::io {

// `text` with & < > " ' as entities: safe in element text and in attribute values alike.
inline std::string svg_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// The <svg> element of a width x height document (sans-serif, 12 px) and a white background.
inline std::string svg_begin(int width, int height) {
  const std::string w = std::to_string(width), h = std::to_string(height);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " +
         w + " " + h + "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"" + w + "\" height=\"" + h +
         "\" fill=\"white\"/>\n";
}

}  // namespace blockscale::io
