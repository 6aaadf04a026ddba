#include "server/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/grpcpp.h"
#include "proto/wire/labels.h"
#include "server/info_calls.h"
#include "server/proto_conversions.h"
#include "server/status_mapping.h"
#include "server/worker.h"

namespace blockread::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr double kNsPerSecond = 1e9;

// Histogram edges in ns: 2^k from 1024 ns (about 1 us) to 2^33 ns (about 8.6 s), one per
// octave like Prometheus's own default spacing. Each is an edge of storage::LatencyBuckets, so
// "values below the edge" is a sum of whole server buckets, exact rather than interpolated;
// values are integral ns, so "< edge" and "<= le" differ by at most one nanosecond. One edge per
// octave keeps a scrape small: the histograms are most of its bytes, and serializing them most
// of its cost (finer percentiles are in GetStats, which sends the server's own buckets).
struct HistogramEdge {
  uint64_t ns;
  // The double nearest the decimal value, so the label reads "8.192e-06" rather than the
  // "8.192000000000001e-06" of a plain division.
  double seconds;
};

// Computed once; scrapes only read it.
const std::vector<HistogramEdge>& HistogramEdges() {
  static const auto* edges = [] {
    auto* out = new std::vector<HistogramEdge>;
    for (int k = 10; k <= 33; ++k) {
      const uint64_t ns = uint64_t{1} << k;
      out->push_back({ns, std::stod(absl::StrFormat("%de-9", ns))});
    }
    return out;
  }();
  return *edges;
}

// Appends one family to `out` and fills it. Holds an index, not a reference: builders of later
// families append to the same vector.
class FamilyBuilder {
 public:
  FamilyBuilder(std::vector<MetricFamily>& out, std::string name, std::string help, MetricType type)
      : out_(out), index_(out.size()) {
    MetricFamily& family = out.emplace_back();
    family.name = std::move(name);
    family.help = std::move(help);
    family.type = type;
  }

  ClientMetric& Add(std::vector<ClientMetric::Label> labels) {
    ClientMetric& metric = out_[index_].metric.emplace_back();
    metric.label = std::move(labels);
    return metric;
  }
  void Counter(std::vector<ClientMetric::Label> labels, double value) {
    Add(std::move(labels)).counter.value = value;
  }
  void Gauge(std::vector<ClientMetric::Label> labels, double value) {
    Add(std::move(labels)).gauge.value = value;
  }
  void Histogram(std::vector<ClientMetric::Label> labels, const v1::Histogram& in) {
    ClientMetric::Histogram& out = Add(std::move(labels)).histogram;
    // in.buckets() are ascending; a server bucket lies wholly below an edge when its inclusive
    // upper bound is below it.
    uint64_t cumulative = 0;
    int next = 0;
    for (const HistogramEdge& edge : HistogramEdges()) {
      while (next < in.buckets_size() && in.buckets(next).upper_bound_ns() < edge.ns) {
        cumulative += in.buckets(next++).count();
      }
      out.bucket.push_back({cumulative, edge.seconds});
    }
    for (; next < in.buckets_size(); ++next) cumulative += in.buckets(next).count();
    // The count is the buckets' sum, not in.count(): the snapshot reads buckets and count while
    // the worker records, so the two can differ by a read in flight, and +Inf must never be
    // below a finite bucket.
    out.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
    out.sample_count = cumulative;
    out.sample_sum = static_cast<double>(in.sum_ns()) / kNsPerSecond;
  }

 private:
  std::vector<MetricFamily>& out_;
  const size_t index_;
};

// Counts by code name: every read error code first (0 when the stats do not list it: they list
// only non-zero counts, and a dashboard should see 0, not "no data"), then any other code listed.
std::vector<std::pair<std::string, uint64_t>> WithEveryReadErrorCode(
    const google::protobuf::RepeatedPtrField<v1::ErrorCount>& counts) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (absl::StatusCode code : kReadErrorCodes) out.emplace_back(StatusCodeName(code), 0);
  for (const v1::ErrorCount& count : counts) {
    auto known = std::find_if(out.begin(), out.end(),
                              [&](const auto& entry) { return entry.first == count.code(); });
    if (known != out.end()) {
      known->second += count.count();
    } else {
      out.emplace_back(count.code(), count.count());
    }
  }
  return out;
}

// While alive, restricts the calling thread to the process's CPUs that no worker is pinned to
// (when there are any), so threads it creates start there; restores the mask on destruction.
class ScopedAffinityOffWorkers {
 public:
  explicit ScopedAffinityOffWorkers(const SharedState& shared) {
    CPU_ZERO(&saved_);
    if (pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_) != 0) return;
    cpu_set_t others = saved_;
    for (const Worker* worker : shared.workers) CPU_CLR(worker->cpu(), &others);
    if (CPU_COUNT(&others) == 0) return;
    changed_ = pthread_setaffinity_np(pthread_self(), sizeof(others), &others) == 0;
  }
  ~ScopedAffinityOffWorkers() {
    if (changed_) pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
  }
  ScopedAffinityOffWorkers(const ScopedAffinityOffWorkers&) = delete;
  ScopedAffinityOffWorkers& operator=(const ScopedAffinityOffWorkers&) = delete;

 private:
  cpu_set_t saved_;
  bool changed_ = false;
};

}  // namespace

std::vector<MetricFamily> MetricFamiliesFromStats(const v1::GetStatsResponse& stats) {
  std::vector<MetricFamily> out;
  FamilyBuilder(out, "blockread_build_info", "The server's version; the value is always 1.",
                MetricType::Gauge)
      .Gauge({{"version", stats.version()}, {"grpc_version", grpc::Version()}}, 1);
  FamilyBuilder(out, "blockread_uptime_seconds", "Time since the server started.",
                MetricType::Gauge)
      .Gauge({}, static_cast<double>(stats.uptime_ns()) / kNsPerSecond);

  FamilyBuilder files(out, "blockread_files",
                      "Imported files by how they are read now: leased (from the raw device), "
                      "file (through the file itself), unavailable (removed or replaced), "
                      "not_open (opened on their first read).",
                      MetricType::Gauge);
  files.Gauge({{"route", "leased"}}, static_cast<double>(stats.files().leased()));
  files.Gauge({{"route", "file"}}, static_cast<double>(stats.files().file_route()));
  files.Gauge({{"route", "unavailable"}}, static_cast<double>(stats.files().unavailable()));
  files.Gauge({{"route", "not_open"}}, static_cast<double>(stats.files().not_open()));
  FamilyBuilder(out, "blockread_open_file_slots",
                "How many served files may be open at once (--max-open-files, capped by "
                "RLIMIT_NOFILE).",
                MetricType::Gauge)
      .Gauge({}, static_cast<double>(stats.files().open_slots()));
  FamilyBuilder(out, "blockread_file_opens_total",
                "Served files opened because a read asked for them.", MetricType::Counter)
      .Counter({}, static_cast<double>(stats.files().opens()));
  FamilyBuilder(out, "blockread_file_evictions_total",
                "Open served files closed to make room for others (least recently read first).",
                MetricType::Counter)
      .Counter({}, static_cast<double>(stats.files().evictions()));

  FamilyBuilder reads(out, "blockread_reads_total", "Reads finished, by the path that served them.",
                      MetricType::Counter);
  FamilyBuilder bytes(out, "blockread_read_bytes_total", "Bytes returned, by path.",
                      MetricType::Counter);
  FamilyBuilder errors(out, "blockread_read_errors_total",
                       "Reads that failed on a path (device errors), by path and status code.",
                       MetricType::Counter);
  FamilyBuilder durations(out, "blockread_read_duration_seconds",
                          "Read latency by path and stage: queue (arrival to a free slot), "
                          "device (slot to last I/O completion), total (arrival to completion).",
                          MetricType::Histogram);
  for (const v1::PathStats& path : stats.paths()) {
    const std::string label = wire::PathLabel(path.path());
    reads.Counter({{"path", label}}, static_cast<double>(path.reads()));
    bytes.Counter({{"path", label}}, static_cast<double>(path.bytes()));
    for (const auto& [code, count] : WithEveryReadErrorCode(path.errors_by_code())) {
      errors.Counter({{"path", label}, {"code", code}}, static_cast<double>(count));
    }
    durations.Histogram({{"path", label}, {"stage", "queue"}}, path.queue_latency());
    durations.Histogram({{"path", label}, {"stage", "device"}}, path.device_latency());
    durations.Histogram({{"path", label}, {"stage", "total"}}, path.total_latency());
  }
  FamilyBuilder rejected(out, "blockread_read_rejections_total",
                         "Reads refused before a path was chosen (bad range, unknown or stale "
                         "file), by status code.",
                         MetricType::Counter);
  for (const auto& [code, count] : WithEveryReadErrorCode(stats.rejected())) {
    rejected.Counter({{"code", code}}, static_cast<double>(count));
  }
  FamilyBuilder(out, "blockread_reads_shed_total",
                "Reads answered DEADLINE_EXCEEDED before any I/O: their device's reads take "
                "longer now (recent p99) than their deadline left them.",
                MetricType::Counter)
      .Counter({}, static_cast<double>(stats.shed()));
  FamilyBuilder(out, "blockread_name_waits_total",
                "Times a read was held back while a name change in a served directory that may "
                "concern its name was being applied.",
                MetricType::Counter)
      .Counter({}, static_cast<double>(stats.name_waits()));
  FamilyBuilder fallbacks(out, "blockread_fallbacks_total",
                          "Reads that took the generic path, by the reason they did not take "
                          "the simple one.",
                          MetricType::Counter);
  for (const v1::FallbackCount& fallback : stats.fallbacks()) {
    fallbacks.Counter({{"reason", wire::FallbackLabel(fallback.reason())}},
                      static_cast<double>(fallback.count()));
  }

  FamilyBuilder device_reads(out, "blockread_device_reads_total", "Device I/Os completed.",
                             MetricType::Counter);
  FamilyBuilder device_bytes(out, "blockread_device_read_bytes_total", "Bytes read from a device.",
                             MetricType::Counter);
  FamilyBuilder device_errors(out, "blockread_device_errors_total", "Device I/Os that failed.",
                              MetricType::Counter);
  FamilyBuilder device_up(out, "blockread_device_up",
                          "1 while the device is usable; 0 once its path is gone, until the "
                          "server reopens it.",
                          MetricType::Gauge);
  FamilyBuilder device_inflight(out, "blockread_device_inflight",
                                "Device I/Os submitted and not yet completed.", MetricType::Gauge);
  FamilyBuilder poll_mode(out, "blockread_device_poll_mode",
                          "Workers reaping the device in each mode: iopoll (IORING_SETUP_IOPOLL "
                          "on the device's poll queues) or interrupt (busy-reaping the CQ ring).",
                          MetricType::Gauge);
  FamilyBuilder backend_workers(
      out, "blockread_device_backend_workers",
      "Workers reading the device through each I/O backend (io_uring, io_uring_iopoll, psync).",
      MetricType::Gauge);
  for (const v1::DeviceStats& device : stats.devices()) {
    const ClientMetric::Label name{"device", device.name()};
    for (int kind = 0; kind < storage::kBackendKindCount; ++kind) {
      const char* label = BackendLabel(static_cast<storage::BackendKind>(kind));
      const auto it = device.backend_workers().find(label);
      backend_workers.Gauge({name, {"backend", label}},
                            it == device.backend_workers().end() ? 0 : it->second);
    }
    device_reads.Counter({name}, static_cast<double>(device.reads()));
    device_bytes.Counter({name}, static_cast<double>(device.bytes()));
    device_errors.Counter({name}, static_cast<double>(device.errors()));
    device_inflight.Gauge({name}, static_cast<double>(device.inflight()));
    device_up.Gauge({name}, device.down() ? 0.0 : 1.0);
    poll_mode.Gauge({name, {"mode", PollModeLabel(storage::PollMode::kIoPoll)}},
                    device.iopoll_workers());
    poll_mode.Gauge({name, {"mode", PollModeLabel(storage::PollMode::kInterrupt)}},
                    device.interrupt_workers());
  }

  FamilyBuilder rpcs(out, "blockread_rpcs_total", "RPCs finished, by method and status code.",
                     MetricType::Counter);
  FamilyBuilder busy(out, "blockread_worker_busy_seconds_total",
                     "Worker loop time that found work.", MetricType::Counter);
  FamilyBuilder idle(out, "blockread_worker_idle_seconds_total",
                     "Worker loop time that found none (spinning or blocked).",
                     MetricType::Counter);
  FamilyBuilder empty_polls(out, "blockread_worker_empty_polls_total",
                            "Worker loop turns that found no work: what polling costs.",
                            MetricType::Counter);
  FamilyBuilder slots_held(out, "blockread_worker_slots_held",
                           "Engine slots held for zero-copy responses (gathered or in gRPC's "
                           "hands, not yet written to the socket).",
                           MetricType::Gauge);
  FamilyBuilder slot_waits(out, "blockread_worker_slot_waits_total",
                           "Reads that waited for a free slot while some were held for "
                           "zero-copy responses.",
                           MetricType::Counter);
  for (const v1::WorkerStats& worker : stats.workers()) {
    const ClientMetric::Label label{"worker", absl::StrCat(worker.worker())};
    busy.Counter({label}, static_cast<double>(worker.busy_ns()) / kNsPerSecond);
    idle.Counter({label}, static_cast<double>(worker.idle_ns()) / kNsPerSecond);
    empty_polls.Counter({label}, static_cast<double>(worker.empty_polls()));
    slots_held.Gauge({label}, static_cast<double>(worker.slots_held()));
    slot_waits.Counter({label}, static_cast<double>(worker.slot_waits()));
  }
  // Every method with code OK, at 0 until it has been called; then whatever the stats list.
  struct RpcSeries {
    std::string method, code;
    uint64_t count;
  };
  std::vector<RpcSeries> rpc_series;
  for (int method = 0; method < kRpcMethodCount; ++method) {
    rpc_series.push_back(
        {RpcMethodName(static_cast<RpcMethod>(method)), StatusCodeName(absl::StatusCode::kOk), 0});
  }
  for (const v1::RpcCount& rpc : stats.rpcs()) {
    auto known = std::find_if(rpc_series.begin(), rpc_series.end(), [&](const RpcSeries& s) {
      return s.method == rpc.method() && s.code == rpc.code();
    });
    if (known != rpc_series.end()) {
      known->count += rpc.count();
    } else {
      rpc_series.push_back({rpc.method(), rpc.code(), rpc.count()});
    }
  }
  for (const RpcSeries& rpc : rpc_series) {
    rpcs.Counter({{"method", rpc.method}, {"code", rpc.code}}, static_cast<double>(rpc.count));
  }
  // An identity label only for a small, configured set (the --auth file's names): never a
  // client-chosen value, never an unbounded one. Larger sets are in GetStats only.
  if (stats.identities_size() > 0 && stats.identities_size() <= kMaxIdentityLabels) {
    FamilyBuilder identity_reads(out, "blockread_identity_reads_total",
                                 "Reads answered OK, by --auth identity.", MetricType::Counter);
    FamilyBuilder identity_bytes(out, "blockread_identity_read_bytes_total",
                                 "Bytes returned, by --auth identity.", MetricType::Counter);
    FamilyBuilder identity_paced(out, "blockread_identity_paced_reads_total",
                                 "Reads that waited for their identity's rate limit.",
                                 MetricType::Counter);
    FamilyBuilder identity_pace_wait(out, "blockread_identity_pace_wait_seconds_total",
                                     "Time reads waited for their identity's rate limit.",
                                     MetricType::Counter);
    FamilyBuilder identity_refused(out, "blockread_identity_refused_reads_total",
                                   "Reads refused (RESOURCE_EXHAUSTED): the rate limit would have "
                                   "started them after their deadline.",
                                   MetricType::Counter);
    for (const v1::IdentityStats& identity : stats.identities()) {
      const ClientMetric::Label label{"identity", identity.name()};
      identity_reads.Counter({label}, static_cast<double>(identity.reads()));
      identity_bytes.Counter({label}, static_cast<double>(identity.bytes()));
      identity_paced.Counter({label}, static_cast<double>(identity.paced()));
      identity_pace_wait.Counter({label},
                                 static_cast<double>(identity.pace_wait_ns()) / kNsPerSecond);
      identity_refused.Counter({label}, static_cast<double>(identity.refused()));
    }
  }
  return out;
}

class MetricsEndpoint::Collector : public prometheus::Collectable {
 public:
  explicit Collector(const SharedState& shared) : shared_(shared) {}
  std::vector<MetricFamily> Collect() const override {
    return MetricFamiliesFromStats(CollectStats(shared_));
  }

 private:
  const SharedState& shared_;
};

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& listen,
                                                                        const SharedState& shared) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  {
    // The exposer's threads inherit the creating thread's CPU mask: keep them off the workers'
    // CPUs when the process has others, so a scrape never preempts a polling worker.
    const ScopedAffinityOffWorkers off_workers(shared);
    try {
      // One serving thread: scrapes are rare.
      endpoint->exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
    }
  }
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen));
  }
  endpoint->port_ = ports.front();
  endpoint->collector_ = std::make_shared<Collector>(shared);
  endpoint->exposer_->RegisterCollectable(endpoint->collector_);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  // Stop serving before the collector (and what it reads) can go away.
  exposer_.reset();
}

}  // namespace blockread::server
