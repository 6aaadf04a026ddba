// blockread-server assembled: the catalog from the configured sources, the gRPC server, one
// pinned worker per CPU, health, graceful shutdown.
#ifndef BLOCKREAD_SERVER_SERVER_H_
#define BLOCKREAD_SERVER_SERVER_H_

#include <grpcpp/server.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"
#include "blockread/v1/server_config.pb.h"
#include "server/health_endpoint.h"
#include "server/metrics.h"
#include "server/shared_state.h"
#include "server/worker.h"
#include "storage/catalog.h"

namespace blockread::server {

// Opens the configured sources into `catalog`: --device entries, --manifest, --serve-files, or,
// when none is given, the demo device under --data-dir.
absl::Status AddConfiguredSources(const v1::ServerConfig& config, storage::Catalog& catalog);

// Threading: Start, Shutdown and the destructor from one controlling thread.
class BlockReadServer {
 public:
  // Everything up and serving (health SERVING) on return, or the first error: a source that does
  // not open, an address that cannot be bound, a worker whose CPU or engine cannot be set up.
  // `config` must be finalized (see server/config.h).
  //
  // `worker_threads` false is for tests that step the workers themselves: no thread is started,
  // and the test calls worker(i).Setup() and then PollOnce() on a thread of its own.
  static absl::StatusOr<std::unique_ptr<BlockReadServer>> Start(const v1::ServerConfig& config,
                                                                bool worker_threads = true);
  ~BlockReadServer();

  // The port actually bound (differs from the configured one when that is 0).
  int port() const { return port_; }
  // The --health-listen port actually bound; 0 when there is none.
  int health_port() const { return health_endpoint_ != nullptr ? health_endpoint_->port() : 0; }
  // The /metrics port actually bound; 0 when metrics are off.
  int metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }
  const storage::Catalog& catalog() const { return catalog_; }
  Worker& worker(size_t index) { return *workers_[index]; }

  // Re-reads the --auth file and puts it in force for new RPCs; a file that does not load keeps
  // the rules in force, and the error is logged and returned. Any thread.
  absl::Status ReloadAccess();

  // Graceful stop: health goes NOT_SERVING, no new RPCs are accepted, RPCs in flight get
  // shutdown_grace_ms to finish (then they are cancelled; reads already on the device still
  // complete before their buffers are released), the workers drain and exit. Idempotent.
  void Shutdown();

 private:
  explicit BlockReadServer(const v1::ServerConfig& config);

  v1::ServerConfig config_;
  storage::Catalog catalog_;
  std::unique_ptr<SharedState> shared_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<MetricsEndpoint> metrics_;  // reads the workers: stopped before them
  std::unique_ptr<HealthEndpoint> health_endpoint_;
  int port_ = 0;
  bool shut_down_ = false;

  // The device monitor: Catalog::CheckDevices() every kDeviceCheckIntervalMs, on its own thread,
  // until Shutdown().
  void MonitorDevices();
  std::thread device_monitor_;
  std::mutex monitor_mu_;
  std::condition_variable monitor_cv_;
  bool monitor_stop_ = false;  // guarded by monitor_mu_
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_SERVER_H_
