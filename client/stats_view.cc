#include "client/stats_view.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/units.h"
#include "proto/wire/labels.h"

namespace blockread::client {
namespace {

using wire::HistogramSnapshot;
using wire::LatencyBuckets;

HistogramSnapshot Minus(HistogramSnapshot now, const HistogramSnapshot& before) {
  for (int i = 0; i < LatencyBuckets::kCount; ++i) now.buckets[i] -= before.buckets[i];
  now.count -= before.count;
  now.sum -= before.sum;
  return now;
}

const v1::PathStats* FindPath(const v1::GetStatsResponse* stats, v1::ReadPath path) {
  if (stats == nullptr) return nullptr;
  for (const v1::PathStats& p : stats->paths()) {
    if (p.path() == path) return &p;
  }
  return nullptr;
}

nlohmann::json Percentiles(const HistogramSnapshot& h) {
  return {{"p50", h.Percentile(0.5) / 1e3},
          {"p99", h.Percentile(0.99) / 1e3},
          {"mean", h.Mean() / 1e3},
          {"count", h.count}};
}

nlohmann::json ErrorCounts(const google::protobuf::RepeatedPtrField<v1::ErrorCount>& counts) {
  nlohmann::json out = nlohmann::json::object();
  for (const v1::ErrorCount& c : counts) out[c.code()] = c.count();
  return out;
}

// True when every counter of `now` is at least the one in `before` (same server, no restart).
bool IsEarlierOfSameServer(const v1::GetStatsResponse& now, const v1::GetStatsResponse& before) {
  if (before.uptime_ns() > now.uptime_ns()) return false;
  for (const v1::PathStats& p : now.paths()) {
    const v1::PathStats* old = FindPath(&before, p.path());
    if (old != nullptr && old->reads() > p.reads()) return false;
  }
  return true;
}

}  // namespace

HistogramSnapshot ToSnapshot(const v1::Histogram& histogram) {
  HistogramSnapshot out;
  for (const v1::Histogram::Bucket& b : histogram.buckets()) {
    out.buckets[LatencyBuckets::IndexOf(b.upper_bound_ns())] += b.count();
  }
  out.count = histogram.count();
  out.sum = histogram.sum_ns();
  return out;
}

nlohmann::json StatsViewJson(const v1::GetStatsResponse& now, const v1::GetStatsResponse* before) {
  if (before != nullptr && !IsEarlierOfSameServer(now, *before)) before = nullptr;
  const double interval_s =
      static_cast<double>(now.uptime_ns() - (before ? before->uptime_ns() : 0)) / 1e9;
  auto rate = [&](uint64_t n) { return interval_s > 0 ? static_cast<double>(n) / interval_s : 0; };

  nlohmann::json out;
  out["version"] = now.version();
  out["uptime_s"] = static_cast<double>(now.uptime_ns()) / 1e9;
  out["interval_s"] = interval_s;
  out["interval"] = before ? "since the previous sample" : "since the server started";

  uint64_t interval_reads_all = 0;
  for (const v1::PathStats& p : now.paths()) {
    const v1::PathStats* old = FindPath(before, p.path());
    interval_reads_all += p.reads() - (old ? old->reads() : 0);
  }
  for (const v1::PathStats& p : now.paths()) {
    const v1::PathStats* old = FindPath(before, p.path());
    const uint64_t reads = p.reads() - (old ? old->reads() : 0);
    const uint64_t bytes = p.bytes() - (old ? old->bytes() : 0);
    nlohmann::json latency;
    const v1::PathStats empty;
    const v1::PathStats& base = old ? *old : empty;
    latency["queue"] =
        Percentiles(Minus(ToSnapshot(p.queue_latency()), ToSnapshot(base.queue_latency())));
    latency["device"] =
        Percentiles(Minus(ToSnapshot(p.device_latency()), ToSnapshot(base.device_latency())));
    latency["total"] =
        Percentiles(Minus(ToSnapshot(p.total_latency()), ToSnapshot(base.total_latency())));
    out["paths"][wire::PathLabel(p.path())] = {
        {"reads", p.reads()},
        {"bytes", p.bytes()},
        {"errors", p.errors()},
        {"errors_by_code", ErrorCounts(p.errors_by_code())},
        {"interval_reads", reads},
        {"iops", rate(reads)},
        {"mib_s", rate(bytes) / (1 << 20)},
        {"share", interval_reads_all ? static_cast<double>(reads) / interval_reads_all : 0.0},
        {"latency_us", latency}};
  }
  std::map<v1::FallbackReason, uint64_t> old_fallbacks;
  if (before) {
    for (const v1::FallbackCount& f : before->fallbacks()) old_fallbacks[f.reason()] = f.count();
  }
  for (const v1::FallbackCount& f : now.fallbacks()) {
    out["fallbacks"][wire::FallbackLabel(f.reason())] = f.count();
    out["fallbacks_interval"][wire::FallbackLabel(f.reason())] =
        f.count() - old_fallbacks[f.reason()];
  }
  out["rejected"] = ErrorCounts(now.rejected());
  out["devices"] = nlohmann::json::array();
  for (int i = 0; i < now.devices_size(); ++i) {
    const v1::DeviceStats& d = now.devices(i);
    const uint64_t old_reads =
        before && i < before->devices_size() ? before->devices(i).reads() : 0;
    out["devices"].push_back({{"name", d.name()},
                              {"path", d.path()},
                              {"reads", d.reads()},
                              {"bytes", d.bytes()},
                              {"errors", d.errors()},
                              {"inflight", d.inflight()},
                              {"iops", rate(d.reads() - old_reads)},
                              {"backend", d.backend()},
                              {"poll_mode", d.poll_mode()},
                              {"iopoll_workers", d.iopoll_workers()},
                              {"interrupt_workers", d.interrupt_workers()}});
  }
  out["workers"] = nlohmann::json::array();
  for (int i = 0; i < now.workers_size(); ++i) {
    const v1::WorkerStats& w = now.workers(i);
    const v1::WorkerStats* old =
        before && i < before->workers_size() ? &before->workers(i) : nullptr;
    const uint64_t busy = w.busy_ns() - (old ? old->busy_ns() : 0);
    const uint64_t idle = w.idle_ns() - (old ? old->idle_ns() : 0);
    out["workers"].push_back(
        {{"worker", w.worker()},
         {"cpu", w.cpu()},
         {"reads", w.reads()},
         {"busy_s", static_cast<double>(w.busy_ns()) / 1e9},
         {"idle_s", static_cast<double>(w.idle_ns()) / 1e9},
         {"empty_polls", w.empty_polls()},
         {"busy_share", busy + idle ? static_cast<double>(busy) / (busy + idle) : 0.0},
         {"empty_polls_per_s", rate(w.empty_polls() - (old ? old->empty_polls() : 0))}});
  }
  out["rpcs"] = nlohmann::json::array();
  for (const v1::RpcCount& r : now.rpcs()) {
    out["rpcs"].push_back({{"method", r.method()}, {"code", r.code()}, {"count", r.count()}});
  }
  return out;
}

std::string StatsViewText(const v1::GetStatsResponse& now, const v1::GetStatsResponse* before) {
  const nlohmann::json v = StatsViewJson(now, before);
  std::string out = absl::StrFormat(
      "blockread-server %s, up %.1fs; rates over %.1fs (%s)\n\n", v["version"].get<std::string>(),
      v["uptime_s"].get<double>(), v["interval_s"].get<double>(), v["interval"].get<std::string>());
  absl::StrAppendFormat(&out, "%-8s %12s %10s %9s %10s %10s %10s %10s %7s %7s\n", "path", "reads",
                        "IOPS", "MiB/s", "p50", "p99", "dev p50", "dev p99", "share", "errors");
  for (const auto& [name, p] : v["paths"].items()) {
    const nlohmann::json& total = p["latency_us"]["total"];
    const nlohmann::json& device = p["latency_us"]["device"];
    absl::StrAppendFormat(
        &out, "%-8s %12u %10.0f %9.2f %8.1fus %8.1fus %8.1fus %8.1fus %6.1f%% %7u\n", name,
        p["reads"].get<uint64_t>(), p["iops"].get<double>(), p["mib_s"].get<double>(),
        total["p50"].get<double>(), total["p99"].get<double>(), device["p50"].get<double>(),
        device["p99"].get<double>(), 100 * p["share"].get<double>(), p["errors"].get<uint64_t>());
  }
  absl::StrAppend(&out, "\nfallbacks (interval/total):");
  for (const auto& [reason, count] : v["fallbacks"].items()) {
    absl::StrAppendFormat(&out, " %s=%u/%u", reason,
                          v["fallbacks_interval"][reason].get<uint64_t>(), count.get<uint64_t>());
  }
  if (!v["rejected"].empty()) {
    absl::StrAppend(&out, "\nrejected:");
    for (const auto& [code, count] : v["rejected"].items()) {
      absl::StrAppendFormat(&out, " %s=%u", code, count.get<uint64_t>());
    }
  }
  absl::StrAppendFormat(&out, "\n\n%-12s %-24s %12s %10s %10s %8s %9s %s\n", "device", "path",
                        "reads", "IOPS", "bytes", "errors", "inflight", "backend");
  for (const nlohmann::json& d : v["devices"]) {
    absl::StrAppendFormat(&out, "%-12s %-24s %12u %10.0f %10s %8u %9u %s\n",
                          d["name"].get<std::string>(), d["path"].get<std::string>(),
                          d["reads"].get<uint64_t>(), d["iops"].get<double>(),
                          FormatBytes(d["bytes"].get<double>()), d["errors"].get<uint64_t>(),
                          d["inflight"].get<uint64_t>(), d["backend"].get<std::string>());
  }
  absl::StrAppendFormat(&out, "\n%-7s %4s %12s %7s %14s\n", "worker", "cpu", "reads", "busy",
                        "empty polls/s");
  for (const nlohmann::json& w : v["workers"]) {
    absl::StrAppendFormat(&out, "%-7u %4u %12u %6.1f%% %14.0f\n", w["worker"].get<uint32_t>(),
                          w["cpu"].get<uint32_t>(), w["reads"].get<uint64_t>(),
                          100 * w["busy_share"].get<double>(),
                          w["empty_polls_per_s"].get<double>());
  }
  return out;
}

}  // namespace blockread::client
