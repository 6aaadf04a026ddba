// `blockread load --report=FILE.html`: a run as one self-contained HTML page (inline SVG charts
// drawn by client/svg.h; no scripts, fonts, stylesheets or images loaded from anywhere), to open
// in any browser or attach to a ticket.
#ifndef BLOCKREAD_CLIENT_LOAD_REPORT_H_
#define BLOCKREAD_CLIENT_LOAD_REPORT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "client/load.h"

namespace blockread::client {

// The page: the command line, server version and settings (given and derived); IOPS and p50/p99
// per second; the latency histogram on a log axis; the mean latency split into client+network,
// server queue and device; the server's per-path share and fallback reasons. Each chart is an
// <svg> with a stable id (iops-chart, latency-chart, histogram-chart, split-chart, paths-chart,
// fallbacks-chart). A pure function of its arguments.
std::string LoadReportHtml(const LoadOptions& options, const LoadResult& result,
                           absl::string_view command_line);

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_LOAD_REPORT_H_
