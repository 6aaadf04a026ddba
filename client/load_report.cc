#include "client/load_report.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/svg.h"
#include "client/units.h"

namespace blockread::client {
namespace {

constexpr double kWidth = 760;
constexpr const char* kBlue = "#1f77b4";
constexpr const char* kOrange = "#ff7f0e";
constexpr const char* kGreen = "#2ca02c";
constexpr const char* kRed = "#d62728";
constexpr const char* kPurple = "#9467bd";
constexpr const char* kGrid = "#ddd";
constexpr const char* kPalette[] = {kBlue,   kOrange,   kGreen,    kRed,
                                    kPurple, "#8c564b", "#e377c2", "#7f7f7f"};

std::string Us(double us) {
  if (us >= 1000) return absl::StrFormat("%.3g ms", us / 1000);
  return absl::StrFormat("%.3g µs", us);
}

std::string Count(double n) {
  if (n >= 1e6) return absl::StrFormat("%.3gM", n / 1e6);
  if (n >= 1e3) return absl::StrFormat("%.3gk", n / 1e3);
  return absl::StrFormat("%.3g", n);
}

// A linear axis from 0: a round step (1, 2 or 5 times a power of ten) giving at most 5 steps.
struct LinearAxis {
  explicit LinearAxis(double max_value) {
    if (!(max_value > 0)) max_value = 1;
    const double raw = max_value / 5;
    const double power = std::pow(10, std::floor(std::log10(raw)));
    step = power * (raw <= power ? 1 : raw <= 2 * power ? 2 : raw <= 5 * power ? 5 : 10);
    max = step * std::ceil(max_value / step);
  }
  double step = 1, max = 1;
};

// The plot area of a chart, in the SVG's pixels, and the mapping of values onto it.
struct Plot {
  double left = 70, top = 30, width = kWidth - 70 - 130, height = 180;
  double bottom() const { return top + height; }
  double right() const { return left + width; }
};

// Horizontal grid lines and labels of a linear y axis, and the axis titles.
void DrawYAxis(Svg& svg, const Plot& p, const LinearAxis& y, std::string (*label)(double),
               absl::string_view title) {
  for (double v = 0; v <= y.max + y.step / 2; v += y.step) {
    const double py = p.bottom() - v / y.max * p.height;
    svg.Line(p.left, py, p.right(), py, kGrid);
    svg.Text(p.left - 6, py + 4, label(v), {.anchor = Svg::Anchor::kEnd, .size = 11});
  }
  svg.Text(16, p.top + p.height / 2, title,
           {.anchor = Svg::Anchor::kMiddle, .size = 12, .rotate = -90});
}

// Seconds on the x axis, 0 to `end_s`.
void DrawTimeAxis(Svg& svg, const Plot& p, double end_s) {
  const LinearAxis x(end_s);
  for (double v = 0; v <= end_s + 1e-9; v += x.step) {
    const double px = p.left + v / end_s * p.width;
    svg.Line(px, p.bottom(), px, p.bottom() + 4, "#888");
    svg.Text(px, p.bottom() + 16, absl::StrFormat("%g", v),
             {.anchor = Svg::Anchor::kMiddle, .size = 11});
  }
  svg.Line(p.left, p.bottom(), p.right(), p.bottom(), "#888");
  svg.Text(p.left + p.width / 2, p.bottom() + 32, "seconds into the measured run",
           {.anchor = Svg::Anchor::kMiddle, .size = 12});
}

void Legend(Svg& svg, const Plot& p,
            const std::vector<std::pair<std::string, std::string>>& items) {
  double y = p.top + 6;
  for (const auto& [name, color] : items) {
    svg.Rect(p.right() + 14, y - 9, 12, 12, color);
    svg.Text(p.right() + 32, y + 1, name, {.size = 12});
    y += 20;
  }
}

struct Series {
  std::string name;
  std::string color;
  std::vector<double> values;  // one per second of the run
};

// A line chart over the run's seconds.
std::string TimeChart(absl::string_view id, absl::string_view title, absl::string_view y_title,
                      std::string (*label)(double), const std::vector<double>& end_s,
                      const std::vector<Series>& series) {
  Plot p;
  Svg svg(kWidth, p.bottom() + 44, id, title);
  double top = 0;
  for (const Series& s : series) {
    for (double v : s.values) top = std::max(top, v);
  }
  const LinearAxis y(top);
  const double span = end_s.empty() ? 1 : std::max(end_s.back(), 1e-3);
  DrawYAxis(svg, p, y, label, y_title);
  DrawTimeAxis(svg, p, span);
  std::vector<std::pair<std::string, std::string>> legend;
  for (const Series& s : series) {
    std::vector<std::pair<double, double>> points;
    for (size_t i = 0; i < s.values.size(); ++i) {
      points.emplace_back(p.left + end_s[i] / span * p.width,
                          p.bottom() - s.values[i] / y.max * p.height);
    }
    svg.Polyline(points, s.color);
    for (size_t i = 0; i < points.size(); ++i) {
      svg.Circle(points[i].first, points[i].second, 2.5, s.color,
                 absl::StrCat(s.name, " at ", absl::StrFormat("%.1f", end_s[i]),
                              " s: ", label(s.values[i])));
    }
    legend.emplace_back(s.name, s.color);
  }
  if (end_s.empty()) {
    svg.Text(p.left + p.width / 2, p.top + p.height / 2, "no complete interval",
             {.anchor = Svg::Anchor::kMiddle});
  }
  Legend(svg, p, legend);
  return std::move(svg).Finish();
}

// The latency histogram: each non-empty bucket a bar from its lower to its upper bound on a log
// axis of microseconds, height the share of reads; p50 and p99 marked.
std::string HistogramChart(const wire::HistogramSnapshot& h) {
  Plot p;
  Svg svg(kWidth, p.bottom() + 44, "histogram-chart", "Latency histogram (log axis)");
  uint64_t total = 0;
  int first = -1, last = -1;
  for (int i = 0; i < wire::LatencyBuckets::kCount; ++i) {
    if (h.buckets[i] == 0) continue;
    total += h.buckets[i];
    if (first < 0) first = i;
    last = i;
  }
  if (total == 0) {
    svg.Text(p.left + p.width / 2, p.top + p.height / 2, "no successful reads",
             {.anchor = Svg::Anchor::kMiddle});
    return std::move(svg).Finish();
  }
  // Whole decades of microseconds around the non-empty buckets.
  const double lo_us = std::max(wire::LatencyBuckets::LowerBound(first), uint64_t{1}) / 1e3;
  const double hi_us = (wire::LatencyBuckets::UpperBound(last) + 1) / 1e3;
  const double lo = std::floor(std::log10(lo_us)),
               hi = std::max(lo + 1, std::ceil(std::log10(hi_us)));
  auto x_of = [&](double us) {
    return p.left + (std::log10(std::max(us, 1e-3)) - lo) / (hi - lo) * p.width;
  };
  double top = 0;
  for (int i = first; i <= last; ++i) top = std::max(top, 100.0 * h.buckets[i] / total);
  const LinearAxis y(top);
  DrawYAxis(
      svg, p, y, [](double v) { return absl::StrFormat("%g%%", v); }, "share of reads");
  for (double d = lo; d <= hi + 1e-9; d += 1) {
    const double px = x_of(std::pow(10, d));
    svg.Line(px, p.top, px, p.bottom() + 4, kGrid);
    svg.Text(px, p.bottom() + 16, Us(std::pow(10, d)),
             {.anchor = Svg::Anchor::kMiddle, .size = 11});
  }
  svg.Line(p.left, p.bottom(), p.right(), p.bottom(), "#888");
  svg.Text(p.left + p.width / 2, p.bottom() + 32, "latency (client-observed, log scale)",
           {.anchor = Svg::Anchor::kMiddle, .size = 12});
  for (int i = first; i <= last; ++i) {
    if (h.buckets[i] == 0) continue;
    const double from_us = wire::LatencyBuckets::LowerBound(i) / 1e3;
    const double to_us = (wire::LatencyBuckets::UpperBound(i) + 1) / 1e3;
    const double share = 100.0 * h.buckets[i] / total;
    const double x0 = x_of(from_us), x1 = x_of(to_us);
    svg.Rect(x0, p.bottom() - share / y.max * p.height, std::max(x1 - x0 - 0.5, 0.5),
             share / y.max * p.height, kBlue,
             absl::StrFormat("%s to %s: %u reads (%.2f%%)", Us(from_us), Us(to_us), h.buckets[i],
                             share));
  }
  const std::pair<double, const char*> marks[] = {{0.5, "p50"}, {0.99, "p99"}};
  for (const auto& [q, name] : marks) {
    const double us = h.Percentile(q) / 1e3;
    const double px = x_of(us);
    svg.Line(px, p.top, px, p.bottom(), kRed, 1.5, true);
    svg.Text(px + 3, p.top - 4 + (q > 0.9 ? 0 : 12), absl::StrCat(name, " ", Us(us)),
             {.size = 11, .fill = kRed});
  }
  return std::move(svg).Finish();
}

struct Segment {
  std::string name;
  double value;
  std::string color;
};

// One horizontal bar split into segments (a share of the whole each), with a legend that gives
// each segment's value as `value_label` writes it.
std::string StackedBar(absl::string_view id, absl::string_view title,
                       const std::vector<Segment>& segments, std::string (*value_label)(double)) {
  const double height = 60 + 20 * segments.size();
  Svg svg(kWidth, height, id, title);
  double total = 0;
  for (const Segment& s : segments) total += std::max(s.value, 0.0);
  const double left = 20, width = kWidth - 40, top = 10, bar = 30;
  if (total <= 0) {
    svg.Text(left, top + 20, "nothing to show");
    return std::move(svg).Finish();
  }
  double x = left;
  double y = top + bar + 24;
  for (const Segment& s : segments) {
    const double v = std::max(s.value, 0.0);
    const double w = v / total * width;
    const std::string text =
        absl::StrFormat("%s: %s (%.1f%%)", s.name, value_label(s.value), 100 * v / total);
    if (w > 0) svg.Rect(x, top, w, bar, s.color, text);
    if (w > 48) {
      svg.Text(x + w / 2, top + bar / 2 + 4, absl::StrFormat("%.0f%%", 100 * v / total),
               {.anchor = Svg::Anchor::kMiddle, .size = 11, .fill = "#fff"});
    }
    x += w;
    svg.Rect(left, y - 10, 12, 12, s.color);
    svg.Text(left + 18, y, text, {.size = 12});
    y += 20;
  }
  return std::move(svg).Finish();
}

// Horizontal bars, one per (label, count), longest first.
std::string Bars(absl::string_view id, absl::string_view title,
                 std::vector<std::pair<std::string, uint64_t>> bars, absl::string_view empty) {
  std::sort(bars.begin(), bars.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  const double row = 22, left = 180, width = kWidth - left - 120;
  Svg svg(kWidth, 16 + row * std::max<size_t>(bars.size(), 1), id, title);
  if (bars.empty()) {
    svg.Text(20, 24, empty);
    return std::move(svg).Finish();
  }
  uint64_t total = 0, top = 0;
  for (const auto& [name, n] : bars) {
    total += n;
    top = std::max(top, n);
  }
  double y = 8;
  for (size_t i = 0; i < bars.size(); ++i) {
    const auto& [name, n] = bars[i];
    const double w = top == 0 ? 0 : static_cast<double>(n) / top * width;
    const std::string text = absl::StrFormat("%u (%.1f%%)", n, 100.0 * n / total);
    svg.Text(left - 8, y + 14, name, {.anchor = Svg::Anchor::kEnd, .size = 12});
    svg.Rect(left, y + 2, std::max(w, 1.0), row - 6, kPalette[i % std::size(kPalette)],
             absl::StrCat(name, ": ", text));
    svg.Text(left + w + 6, y + 14, text, {.size = 12});
    y += row;
  }
  return std::move(svg).Finish();
}

std::string Row(absl::string_view name, absl::string_view value_html) {
  return absl::StrCat("<tr><th>", EscapeXml(name), "</th><td>", value_html, "</td></tr>\n");
}

}  // namespace

std::string LoadReportHtml(const LoadOptions& o, const LoadResult& r,
                           absl::string_view command_line) {
  const wire::HistogramSnapshot& l = r.latency_ns;
  std::string html = R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>blockread load report</title>
<style>
body { font-family: sans-serif; color: #222; margin: 24px; max-width: 800px; }
h1 { font-size: 22px; } h2 { font-size: 16px; margin: 28px 0 6px; }
table { border-collapse: collapse; font-size: 14px; }
th { text-align: left; padding: 2px 16px 2px 0; font-weight: 600; vertical-align: top; }
td { padding: 2px 0; } code { font-size: 13px; word-break: break-all; }
</style></head><body>
<h1>blockread load report</h1>
)";
  uint64_t errors = 0;
  for (const auto& [code, n] : r.errors) errors += n;
  std::string error_text = absl::StrCat(errors);
  for (const auto& [code, n] : r.errors) absl::StrAppend(&error_text, " ", code, "=", n);
  absl::StrAppend(
      &html, "<table id=\"summary\">\n",
      Row("command", absl::StrCat("<code>", EscapeXml(command_line), "</code>")),
      Row("server version", EscapeXml(r.server_version.empty() ? "unknown" : r.server_version)),
      Row("targets", EscapeXml(absl::StrJoin(o.targets, ", "))),
      Row("workload", EscapeXml(absl::StrFormat(
                          "%s %s, bs %s, qd %d", o.sequential ? "read" : "randread",
                          o.stream ? "stream" : "unary",
                          FormatBytes(static_cast<double>(o.block_size)), o.queue_depth))),
      Row("settings", EscapeXml(LoadSettingsText(o, r.settings))),
      Row("result", EscapeXml(absl::StrFormat("%s IOPS, %s/s, %u reads in %.2f s", Count(r.iops()),
                                              FormatBytes(r.bandwidth()), r.reads, r.seconds))),
      Row("latency",
          EscapeXml(absl::StrFormat(
              "min %s, mean %s, p50 %s, p90 %s, p99 %s, p99.9 %s, max %s", Us(l.Min() / 1e3),
              Us(l.Mean() / 1e3), Us(l.Percentile(0.5) / 1e3), Us(l.Percentile(0.9) / 1e3),
              Us(l.Percentile(0.99) / 1e3), Us(l.Percentile(0.999) / 1e3), Us(l.Max() / 1e3)))),
      Row("errors", EscapeXml(error_text)), "</table>\n");
  if (!r.verify_failure.empty()) {
    absl::StrAppend(&html, "<p><b>Verification failed:</b> ", EscapeXml(r.verify_failure),
                    "</p>\n");
  }

  std::vector<double> end_s;
  Series iops{"IOPS", kBlue, {}}, p50{"p50", kGreen, {}}, p99{"p99", kOrange, {}};
  for (const LoadSecond& s : r.per_second) {
    end_s.push_back(s.end_s);
    iops.values.push_back(s.iops());
    p50.values.push_back(s.p50_ns / 1e3);
    p99.values.push_back(s.p99_ns / 1e3);
  }
  absl::StrAppend(
      &html, "<h2>IOPS per second</h2>\n",
      TimeChart("iops-chart", "IOPS per second", "reads per second", Count, end_s, {iops}),
      "<h2>Latency per second</h2>\n",
      TimeChart("latency-chart", "p50 and p99 latency per second", "latency", Us, end_s,
                {p50, p99}));
  absl::StrAppend(&html, "<h2>Latency histogram</h2>\n", HistogramChart(l));

  // The mean client-observed latency, split by the server's timing in each response: what the
  // server did not spend is the client's and the network's; "server other" is the server's time
  // outside the queue and the device (parsing, copying, handing the response to gRPC).
  const double mean_us = l.Mean() / 1e3;
  const double other_us = r.server_total_us - r.server_queue_us - r.server_device_us;
  absl::StrAppend(&html, "<h2>Latency split (mean ", EscapeXml(Us(mean_us)), ")</h2>\n",
                  StackedBar("split-chart", "Mean latency split",
                             {{"client + network", mean_us - r.server_total_us, kBlue},
                              {"server queue", r.server_queue_us, kOrange},
                              {"server device", r.server_device_us, kGreen},
                              {"server other", other_us, kPurple}},
                             [](double us) { return Us(us); }));
  std::vector<Segment> paths;
  for (const auto& [path, n] : r.server_paths) {
    paths.push_back({path, static_cast<double>(n), kPalette[paths.size() % std::size(kPalette)]});
  }
  absl::StrAppend(&html, "<h2>Server paths</h2>\n",
                  StackedBar("paths-chart", "Reads per server path", paths,
                             [](double n) { return absl::StrFormat("%.0f reads", n); }));
  std::vector<std::pair<std::string, uint64_t>> fallbacks;
  for (const auto& [reason, n] : r.server_fallbacks) {
    if (n > 0) fallbacks.emplace_back(reason, n);
  }
  absl::StrAppend(
      &html, "<h2>Fallback reasons</h2>\n",
      Bars("fallbacks-chart", "Reads that fell back to the generic path, by reason", fallbacks,
           "no fallbacks: every read the simple path could serve, it served"),
      "<p style=\"font-size:12px;color:#666\">Server figures are the GetStats "
      "difference over the run, summed over the targets; they include reads from "
      "other clients of the same servers.</p>\n</body></html>\n");
  return html;
}

}  // namespace blockread::client
