// `blockread load`'s results as text and as JSON.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/load.h"
#include "client/load_sampler.h"
#include "client/units.h"

namespace blockread::client {

using load::FormatUs;

std::string LoadResultText(const LoadOptions& o, const LoadResult& r) {
  const wire::HistogramSnapshot& l = r.latency_ns;
  std::string out = absl::StrFormat(
      "%s %s bs=%s qd=%d: %.0f IOPS, %s/s, %u reads in %.2fs\n", o.sequential ? "read" : "randread",
      o.stream ? "stream" : "unary", FormatBytes(static_cast<double>(o.block_size)), o.queue_depth,
      r.iops(), FormatBytes(r.bandwidth()), r.reads, r.seconds);
  absl::StrAppend(&out, "settings: ", LoadSettingsText(o, r.settings), "\n");
  absl::StrAppendFormat(&out, "latency: min %s mean %s p50 %s p90 %s p99 %s p99.9 %s max %s\n",
                        FormatUs(l.Min()), FormatUs(l.Mean()), FormatUs(l.Percentile(0.5)),
                        FormatUs(l.Percentile(0.9)), FormatUs(l.Percentile(0.99)),
                        FormatUs(l.Percentile(0.999)), FormatUs(l.Max()));
  absl::StrAppendFormat(&out,
                        "split (mean): client+network %.1fus, server queue %.1fus, server device "
                        "%.1fus (server total %.1fus)\n",
                        l.Mean() / 1e3 - r.server_total_us, r.server_queue_us, r.server_device_us,
                        r.server_total_us);
  uint64_t errors = 0;
  for (const auto& [code, n] : r.errors) errors += n;
  absl::StrAppendFormat(&out, "reads issued %u, returned %u, errors %u", r.issued, r.returned,
                        errors);
  for (const auto& [code, n] : r.errors) absl::StrAppendFormat(&out, " %s=%u", code, n);
  if (o.hedge_after_percentile > 0) {
    absl::StrAppendFormat(&out, "\nhedged %u reads (%.2f%% of those issued), %u answered first",
                          r.hedged, r.issued > 0 ? 100.0 * r.hedged / r.issued : 0.0, r.hedges_won);
  }
  absl::StrAppend(&out, "\nserver paths:");
  for (const auto& [path, n] : r.server_paths) absl::StrAppendFormat(&out, " %s=%u", path, n);
  absl::StrAppend(&out, "; fallbacks:");
  for (const auto& [reason, n] : r.server_fallbacks) {
    if (n > 0) absl::StrAppendFormat(&out, " %s=%u", reason, n);
  }
  absl::StrAppend(&out, "\n");
  if (!r.verify_failure.empty()) absl::StrAppend(&out, r.verify_failure, "\n");
  return out;
}

std::string LoadResultJson(const LoadOptions& o, const LoadResult& r) {
  const wire::HistogramSnapshot& l = r.latency_ns;
  nlohmann::json out;
  out["options"] = {{"rw", o.sequential ? "read" : "randread"},
                    {"mode", o.stream ? "stream" : "unary"},
                    {"bs", o.block_size},
                    {"qd", o.queue_depth},
                    {"targets", o.targets}};
  out["settings"] = {{"threads", r.settings.threads},
                     {"channels", r.settings.channels},
                     {"streams", r.settings.streams},
                     {"batch", r.settings.batch}};
  out["seconds"] = r.seconds;
  out["reads"] = r.reads;
  out["iops"] = r.iops();
  out["bw_bytes"] = r.bandwidth();
  out["lat_us"] = {{"min", l.Min() / 1e3},
                   {"mean", l.Mean() / 1e3},
                   {"p50", l.Percentile(0.5) / 1e3},
                   {"p90", l.Percentile(0.9) / 1e3},
                   {"p99", l.Percentile(0.99) / 1e3},
                   {"p999", l.Percentile(0.999) / 1e3},
                   {"max", l.Max() / 1e3}};
  out["lat_split_us"] = {{"client_network", l.Mean() / 1e3 - r.server_total_us},
                         {"server_queue", r.server_queue_us},
                         {"server_device", r.server_device_us},
                         {"server_total", r.server_total_us}};
  out["issued"] = r.issued;
  out["returned"] = r.returned;
  out["hedged"] = r.hedged;
  out["hedges_won"] = r.hedges_won;
  out["errors"] = nlohmann::json::object();
  for (const auto& [code, n] : r.errors) out["errors"][code] = n;
  out["per_second"] = nlohmann::json::array();
  for (const LoadSecond& second : r.per_second) {
    out["per_second"].push_back({{"t", second.end_s},
                                 {"seconds", second.seconds},
                                 {"reads", second.reads},
                                 {"iops", second.iops()},
                                 {"bw_bytes", second.bandwidth()},
                                 {"p50_us", second.p50_ns / 1e3},
                                 {"p99_us", second.p99_ns / 1e3}});
  }
  out["server_version"] = r.server_version;
  out["server_paths"] = r.server_paths;
  out["server_fallbacks"] = r.server_fallbacks;
  if (!r.verify_failure.empty()) out["verify_failure"] = r.verify_failure;
  return out.dump(2);
}

}  // namespace blockread::client
