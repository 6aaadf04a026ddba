// The Prometheus /metrics endpoint. Each scrape builds the same GetStatsResponse that GetStats
// returns (CollectStats: every worker's stats shard merged at scrape time, with relaxed loads) and
// translates it into metric families, so the two views cannot disagree and the read path pays
// nothing for being scraped: no lock, no atomic read-modify-write, no registry updates.
//
// Names follow Prometheus conventions (base units, _total counters, _seconds, _bytes) and every
// label has a bounded set of values (paths, stages, fallback reasons, status codes, devices,
// methods, workers; --auth identities only when there are at most kMaxIdentityLabels): never a
// file, offset or client-chosen value.
#ifndef BLOCKREAD_SERVER_METRICS_H_
#define BLOCKREAD_SERVER_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blockread/v1/blockread.pb.h"
#include "prometheus/metric_family.h"
#include "server/shared_state.h"

namespace prometheus {
class Exposer;
}

namespace blockread::server {

inline constexpr int kMaxIdentityLabels = 16;

// The metric families for one GetStats snapshot. Latency histograms are re-bucketed to edges at
// 2^k nanoseconds (1 us .. 8.6 s), each an edge of the server's own log-linear buckets, so every
// cumulative count is exact rather than interpolated.
std::vector<prometheus::MetricFamily> MetricFamiliesFromStats(const v1::GetStatsResponse& stats);

// Serves /metrics over HTTP from prometheus-cpp's exposer (its own civetweb threads, not the
// pinned workers; started on the process's CPUs that no worker is pinned to, when it has such).
// Threading: Start (after the workers are up) and the destructor on any one non-worker thread;
// scrapes run on the exposer's threads and only read `shared` through CollectStats. Destroy it
// before the workers.
class MetricsEndpoint {
 public:
  // Binds `listen` (HOST:PORT; port 0 picks a free port). Fails with the address and cause when
  // it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& listen,
                                                                const SharedState& shared);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The port actually bound.
  int port() const { return port_; }

 private:
  class Collector;
  MetricsEndpoint() = default;

  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_METRICS_H_
