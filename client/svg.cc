#include "client/svg.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace blockread::client {
namespace {

// Coordinates to a tenth of a pixel: enough for any screen, and short.
std::string N(double v) { return absl::StrFormat("%.1f", v); }

}  // namespace

std::string EscapeXml(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Svg::Svg(double width, double height, absl::string_view id, absl::string_view title) {
  absl::StrAppend(&out_, "<svg id=\"", EscapeXml(id), "\" width=\"", N(width), "\" height=\"",
                  N(height), "\" viewBox=\"0 0 ", N(width), " ", N(height),
                  "\" role=\"img\" font-family=\"sans-serif\"><title>", EscapeXml(title),
                  "</title>\n");
}

void Svg::Line(double x1, double y1, double x2, double y2, absl::string_view stroke,
               double stroke_width, bool dashed) {
  absl::StrAppend(&out_, "<line x1=\"", N(x1), "\" y1=\"", N(y1), "\" x2=\"", N(x2), "\" y2=\"",
                  N(y2), "\" stroke=\"", EscapeXml(stroke), "\" stroke-width=\"", N(stroke_width),
                  "\"", dashed ? " stroke-dasharray=\"4 3\"" : "", "/>\n");
}

void Svg::Rect(double x, double y, double w, double h, absl::string_view fill,
               absl::string_view tooltip) {
  absl::StrAppend(&out_, "<rect x=\"", N(x), "\" y=\"", N(y), "\" width=\"", N(w), "\" height=\"",
                  N(h), "\" fill=\"", EscapeXml(fill), "\"");
  if (tooltip.empty()) {
    absl::StrAppend(&out_, "/>\n");
  } else {
    absl::StrAppend(&out_, "><title>", EscapeXml(tooltip), "</title></rect>\n");
  }
}

void Svg::Polyline(const std::vector<std::pair<double, double>>& points, absl::string_view stroke,
                   double stroke_width) {
  absl::StrAppend(&out_, "<polyline fill=\"none\" stroke=\"", EscapeXml(stroke),
                  "\" stroke-width=\"", N(stroke_width), "\" stroke-linejoin=\"round\" points=\"");
  for (const auto& [x, y] : points) absl::StrAppend(&out_, N(x), ",", N(y), " ");
  absl::StrAppend(&out_, "\"/>\n");
}

void Svg::Circle(double cx, double cy, double r, absl::string_view fill,
                 absl::string_view tooltip) {
  absl::StrAppend(&out_, "<circle cx=\"", N(cx), "\" cy=\"", N(cy), "\" r=\"", N(r), "\" fill=\"",
                  EscapeXml(fill), "\"");
  if (tooltip.empty()) {
    absl::StrAppend(&out_, "/>\n");
  } else {
    absl::StrAppend(&out_, "><title>", EscapeXml(tooltip), "</title></circle>\n");
  }
}

void Svg::Text(double x, double y, absl::string_view text, const TextStyle& style) {
  static constexpr const char* kAnchors[] = {"start", "middle", "end"};
  absl::StrAppend(&out_, "<text x=\"", N(x), "\" y=\"", N(y), "\" font-size=\"", N(style.size),
                  "\" text-anchor=\"", kAnchors[static_cast<int>(style.anchor)], "\" fill=\"",
                  EscapeXml(style.fill), "\"", style.bold ? " font-weight=\"bold\"" : "");
  if (style.rotate != 0) {
    absl::StrAppend(&out_, " transform=\"rotate(", N(style.rotate), " ", N(x), " ", N(y), ")\"");
  }
  absl::StrAppend(&out_, ">", EscapeXml(text), "</text>\n");
}

std::string Svg::Finish() && {
  absl::StrAppend(&out_, "</svg>\n");
  return std::move(out_);
}

}  // namespace blockread::client
