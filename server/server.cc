#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/config.h"
#include "server/demo_data.h"
#include "server/exposure.h"
#include "server/health_calls.h"
#include "server/health_endpoint.h"
#include "server/info_calls.h"
#include "server/privileges.h"
#include "server/read_calls.h"
#include "server/transport_security.h"
#include "server/worker.h"
#include "storage/clock.h"
#include "storage/log.h"
#include "storage/manifest.h"

namespace blockread::server {

absl::Status AddConfiguredSources(const v1::ServerConfig& config, storage::Catalog& catalog) {
  for (const std::string& spec : config.device()) {
    const size_t eq = spec.find('=');
    absl::Status added = catalog.AddWholeDevice(spec.substr(0, eq), spec.substr(eq + 1));
    if (!added.ok()) return added;
  }
  if (!config.manifest().empty()) {
    if (absl::Status s = storage::LoadManifest(config.manifest(), catalog); !s.ok()) return s;
  }
  catalog.set_max_open_files(config.max_open_files());
  for (const std::string& path : config.serve_files()) {
    auto added = catalog.ImportTree(path);
    if (!added.ok()) return added.status();
  }
  if (config.device().empty() && config.manifest().empty() && config.serve_files().empty()) {
    if (absl::Status demo = AddDemoData(config.data_dir(), catalog); !demo.ok()) return demo;
  }
  // Named versions first, so that "*" gives the rest theirs.
  for (bool wildcard : {false, true}) {
    for (const std::string& spec : config.file_version()) {
      const size_t eq = spec.find('=');
      const std::string name = spec.substr(0, eq);
      if ((name == "*") != wildcard) continue;
      if (absl::Status declared = catalog.DeclareVersion(name, spec.substr(eq + 1));
          !declared.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--file-version: '", spec, "': no served file is named '", name, "'"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// Each connection is a descriptor: raise the soft RLIMIT_NOFILE (often 1024) to kWantedOpenFiles,
// or as far as the hard limit lets an unprivileged process, so idle connections in the thousands
// fit beside the devices and files.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= kWantedOpenFiles) return;
  rlimit wanted{kWantedOpenFiles, std::max<rlim_t>(limit.rlim_max, kWantedOpenFiles)};
  if (setrlimit(RLIMIT_NOFILE, &wanted) != 0) {  // not root: up to the hard limit only
    wanted = {limit.rlim_max, limit.rlim_max};
    setrlimit(RLIMIT_NOFILE, &wanted);
  }
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < 4096) {
    storage::LogWarning(absl::StrFormat(
        "open-file limit is %u (RLIMIT_NOFILE; the hard limit allows no more): fewer than ~%u "
        "client connections fit; raise it (ulimit -n, LimitNOFILE=) for more",
        limit.rlim_cur, limit.rlim_cur > 256 ? limit.rlim_cur - 256 : 0));
  }
}

}  // namespace

BlockReadServer::BlockReadServer(const v1::ServerConfig& config) : config_(config) {}

absl::StatusOr<std::unique_ptr<BlockReadServer>> BlockReadServer::Start(
    const v1::ServerConfig& config, bool worker_threads) {
  std::unique_ptr<BlockReadServer> server(new BlockReadServer(config));
  RaiseOpenFileLimit();
  if (absl::Status s = AddConfiguredSources(server->config_, server->catalog_); !s.ok()) return s;
  server->catalog_.SealDevices();  // before the workers make their engines, on their threads
  auto cpus = ParseCpuList(server->config_.cpus());
  if (!cpus.ok()) return cpus.status();
  // Once for the process, before any worker: auto's fallback is logged once, and io_uring's
  // refusal stops startup before anything listens. The workers get the engine it settled on.
  auto io_engine = storage::ResolveIoEngine(EngineConfigFrom(server->config_).io_engine);
  if (!io_engine.ok()) return io_engine.status();
  server->config_.set_io_engine(storage::IoEngineName(*io_engine));

  std::shared_ptr<const AccessPolicy> access = AccessPolicy::Open();
  if (!server->config_.auth().empty()) {
    auto loaded = AccessPolicy::Load(server->config_.auth());
    if (!loaded.ok()) return loaded.status();
    access = *std::move(loaded);
  }
  server->shared_ =
      std::make_unique<SharedState>(server->config_, server->catalog_, std::move(access));
  SharedState& shared = *server->shared_;
  shared.handlers = {&ReadBlockCall::Post, &ReadBlocksCall::Post, &PostInfoCalls, &PostHealthCalls};
  shared.start_ns = storage::MonotonicNowNs();
  if (server->config_.reflection()) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto credentials = ListenCredentials(server->config_);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(server->config_.listen(), *credentials, &server->port_);
  builder.RegisterService(&shared.service);
  builder.RegisterService(&shared.health_service);
  // A stale server on the same port must make us fail, not silently share the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Responses carry up to max_read_bytes (a stream message gathers up to one more MiB).
  builder.SetMaxSendMessageSize(static_cast<int>(server->config_.max_read_bytes() + (2 << 20)));
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(server->config_.keepalive_time_ms()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  // Server-wide bounds (gRPC 1.51 has no connection cap): streams per connection, idle
  // connections closed, and one memory quota for every connection's buffers.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(server->config_.max_concurrent_streams()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(server->config_.max_connection_idle_ms()));
  // Clients that resolve a name re-resolve when a connection ends: without an age, a long-lived
  // client never finds servers that joined (grpc/grpc#12295).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             static_cast<int>(server->config_.max_connection_age_ms()));
  if (server->config_.max_connection_age_grace_ms() > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(server->config_.max_connection_age_grace_ms()));
  }
  grpc::ResourceQuota quota("blockread-server");
  quota.Resize(size_t{server->config_.grpc_memory_mb()} << 20);
  builder.SetResourceQuota(quota);
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  for (size_t i = 0; i < cpus->size(); ++i) queues.push_back(builder.AddCompletionQueue());
  // A unix:PATH socket is created owner-only, then given its configured mode and group, so no
  // other user can connect in between.
  absl::StatusOr<std::optional<SocketFileAccess>> socket_access =
      ListenSocketAccess(server->config_);
  if (!socket_access.ok()) return socket_access.status();
  const bool unix_socket = socket_access->has_value();
  const mode_t umask_before = unix_socket ? umask(0177) : 0;
  server->server_ = builder.BuildAndStart();
  if (unix_socket) umask(umask_before);
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", server->config_.listen(),
                     " (address in use, or not an address of this machine?)"));
  }
  for (size_t i = 0; i < cpus->size(); ++i) {
    server->workers_.push_back(
        std::make_unique<Worker>(static_cast<int>(i), (*cpus)[i], shared, std::move(queues[i])));
    shared.workers.push_back(server->workers_.back().get());
  }
  absl::Status failure;
  if (worker_threads) {
    for (Worker* worker : shared.workers) worker->Start();
    for (Worker* worker : shared.workers) {
      absl::Status ready = worker->WaitUntilReady();
      if (failure.ok() && !ready.ok()) failure = ready;
    }
  }
  if (failure.ok() && unix_socket) failure = ApplySocketFileAccess(**socket_access);
  if (!failure.ok()) {
    server->Shutdown();
    return failure;
  }
  if (!server->config_.metrics_listen().empty()) {
    auto metrics = MetricsEndpoint::Start(server->config_.metrics_listen(), shared);
    if (!metrics.ok()) {
      server->Shutdown();
      return metrics.status();
    }
    server->metrics_ = std::move(*metrics);
  }
  if (!server->config_.health_listen().empty()) {
    auto health = HealthEndpoint::Start(server->config_.health_listen(), shared);
    if (!health.ok()) {
      server->Shutdown();
      return health.status();
    }
    server->health_endpoint_ = std::move(*health);
  }
  if (worker_threads) {
    server->device_monitor_ = std::thread([raw = server.get()] { raw->MonitorDevices(); });
  }
  if (!server->config_.user().empty()) {
    // Last: every descriptor, port and thread the server needs is open by now.
    if (absl::Status dropped = DropPrivileges(server->config_.user(), server->catalog_);
        !dropped.ok()) {
      server->Shutdown();
      return dropped;
    }
  }
  if (std::string warning = InsecureExposureWarning(server->config_); !warning.empty()) {
    storage::LogWarning(warning);
  }
  shared.health.store(grpc::health::v1::HealthCheckResponse::SERVING);
  for (Worker* worker : shared.workers) worker->Wake();  // tell open Watch streams
  storage::LogInfo(absl::StrFormat(
      "serving %d files from %d devices with %d pinned workers (CPUs %s), simple_max_bytes=%u, "
      "io_engine=%s, %s",
      server->catalog_.file_count(), server->catalog_.device_count(), cpus->size(),
      server->config_.cpus().empty() ? "from the affinity mask" : server->config_.cpus(),
      server->config_.simple_max_bytes(), server->config_.io_engine(),
      TransportSummary(server->config_)));
  return server;
}

absl::Status BlockReadServer::ReloadAccess() {
  if (config_.auth().empty()) return absl::OkStatus();
  auto loaded = AccessPolicy::Load(config_.auth(), shared_->access.Current().get());
  if (!loaded.ok()) {
    storage::LogError(
        absl::StrCat("--auth: keeping the access rules in force: ", loaded.status().message()));
    return loaded.status();
  }
  const size_t identities = (*loaded)->identity_count();
  shared_->access.Replace(*std::move(loaded));
  storage::LogInfo(
      absl::StrFormat("--auth: reloaded %s (%d identities)", config_.auth(), identities));
  return absl::OkStatus();
}

void BlockReadServer::MonitorDevices() {
  pthread_setname_np(pthread_self(), "blockread-devs");
  std::unique_lock lock(monitor_mu_);
  while (!monitor_cv_.wait_for(lock, std::chrono::milliseconds(kDeviceCheckIntervalMs),
                               [&] { return monitor_stop_; })) {
    lock.unlock();
    catalog_.CheckDevices();
    lock.lock();
  }
}

void BlockReadServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (device_monitor_.joinable()) {
    {
      std::lock_guard lock(monitor_mu_);
      monitor_stop_ = true;
    }
    monitor_cv_.notify_all();
    device_monitor_.join();
  }
  metrics_.reset();
  if (shared_ != nullptr) {
    shared_->health.store(grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    shared_->stopping.store(true);
    for (Worker* worker : shared_->workers) worker->Wake();
  }
  if (server_ != nullptr) {
    // Stops accepting; RPCs in flight may finish until the deadline, then they are cancelled.
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(config_.shutdown_grace_ms()));
  }
  if (shared_ != nullptr) {
    for (Worker* worker : shared_->workers) worker->RequestStop();
    for (Worker* worker : shared_->workers) worker->Join();
  }
  // Probes saw NOT_SERVING through the drain; now the health endpoint goes too.
  health_endpoint_.reset();
  if (server_ != nullptr) server_->Wait();
}

BlockReadServer::~BlockReadServer() {
  Shutdown();
  // Workers (and their queues, engines and slot lenders) go before the gRPC server object. gRPC
  // may still hold slices of engine buffers then (zero-copy responses on connections being torn
  // down) and release them later, on its own threads, as late as this object's destruction or
  // after: those buffers and their loans belong to each lender's reference-counted ledger, which
  // the last slice frees, and a release touches nothing else (server/slot_lender.h).
  workers_.clear();
}

}  // namespace blockread::server
