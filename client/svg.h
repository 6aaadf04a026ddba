// A small SVG writer for the load report (client/load_report.h): shapes in pixels, every text
// escaped, nothing that loads or runs anything (no scripts, links, fonts or stylesheets), so the
// output embeds as is in a self-contained HTML page. Not thread-safe; one writer per picture.
#ifndef BLOCKREAD_CLIENT_SVG_H_
#define BLOCKREAD_CLIENT_SVG_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace blockread::client {

// &, <, >, " and ' as XML entities: for text and attribute values.
std::string EscapeXml(absl::string_view text);

class Svg {
 public:
  enum class Anchor { kStart, kMiddle, kEnd };
  struct TextStyle {
    Anchor anchor = Anchor::kStart;
    double size = 12;
    bool bold = false;
    double rotate = 0;  // degrees, about (x, y)
    absl::string_view fill = "#222";
  };

  // An <svg> of `width` x `height` pixels with the element id `id` and an accessible <title>.
  Svg(double width, double height, absl::string_view id, absl::string_view title);

  void Line(double x1, double y1, double x2, double y2, absl::string_view stroke,
            double stroke_width = 1, bool dashed = false);
  // `tooltip`, if given, becomes the rectangle's <title> (shown on hover).
  void Rect(double x, double y, double w, double h, absl::string_view fill,
            absl::string_view tooltip = "");
  void Polyline(const std::vector<std::pair<double, double>>& points, absl::string_view stroke,
                double stroke_width = 2);
  void Circle(double cx, double cy, double r, absl::string_view fill,
              absl::string_view tooltip = "");
  void Text(double x, double y, absl::string_view text, const TextStyle& style);
  void Text(double x, double y, absl::string_view text) { Text(x, y, text, TextStyle()); }

  // The finished element; the writer is spent.
  std::string Finish() &&;

 private:
  std::string out_;
};

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_SVG_H_
