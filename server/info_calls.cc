#include "server/info_calls.h"

#include <algorithm>
#include <array>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/config.h"
#include "server/proto_conversions.h"
#include "server/status_mapping.h"
#include "server/unary_call.h"
#include "storage/clock.h"
#include "storage/read_path.h"

namespace blockread::server {
namespace {

// The one GetStats device entry (and /metrics device label) of every imported file's own device.
constexpr char kFileRouteDevicesName[] = "file-route";

using Service = BlockReadService;

constexpr uint32_t kDefaultPageSize = 100;
constexpr uint32_t kMaxPageSize = 1000;
// Explain lists at most this many extents (a range of a very fragmented file could touch more).
constexpr int kMaxExplainedExtents = 4096;

void HistogramToProto(const storage::HistogramSnapshot& in, v1::Histogram* out) {
  for (int i = 0; i < storage::LatencyBuckets::kCount; ++i) {
    if (in.buckets[i] == 0) continue;
    v1::Histogram::Bucket* bucket = out->add_buckets();
    bucket->set_upper_bound_ns(storage::LatencyBuckets::UpperBound(i));
    bucket->set_count(in.buckets[i]);
  }
  out->set_count(in.count);
  out->set_sum_ns(in.sum);
}

// Appends the non-zero counts, by status code name.
void ErrorCountsToProto(const storage::ErrorCountsSnapshot& in,
                        google::protobuf::RepeatedPtrField<v1::ErrorCount>* out) {
  for (int code = 0; code < storage::kStatusCodeCount; ++code) {
    if (in[code] == 0) continue;
    v1::ErrorCount* count = out->Add();
    count->set_code(StatusCodeName(static_cast<absl::StatusCode>(code)));
    count->set_count(in[code]);
  }
}

// A file as `caller` may see it: the devices holding it only for admins.
v1::FileInfo DescribeFileFor(const Identity& caller, const storage::Catalog& catalog,
                             const storage::FileMap& map) {
  v1::FileInfo info = DescribeFile(catalog, map);
  if (!caller.admin) info.clear_devices();
  return info;
}

grpc::Status StatFile(Worker& worker, const Identity& caller, const v1::StatFileRequest& request,
                      v1::FileInfo* response) {
  // A file the caller may not read does not exist for it: the same answer as an unknown name.
  if (!caller.MayRead(request.file()))
    return ToGrpcStatus(storage::UnknownFileError(request.file()));
  // A file asked about is likely read next: opened meanwhile if it is not open.
  worker.shared().catalog.Prefetch(request.file());
  auto map = worker.shared().catalog.ResolveWithoutOpening(request.file());
  if (!map.ok()) return ToGrpcStatus(map.status());
  *response = DescribeFileFor(caller, worker.shared().catalog, **map);
  return grpc::Status::OK;
}

grpc::Status ListFiles(Worker& worker, const Identity& caller, const v1::ListFilesRequest& request,
                       v1::ListFilesResponse* response) {
  const uint32_t page_size =
      request.page_size() == 0 ? kDefaultPageSize : std::min(request.page_size(), kMaxPageSize);
  storage::Catalog& catalog = worker.shared().catalog;
  // Read before the names: a page never claims a generation newer than what it lists.
  response->set_generation(catalog.names_generation());
  const std::vector<std::string> names = catalog.FileNames();
  const std::string& prefix = request.prefix();
  // The page token is the last name of the previous page: stable while files are listed.
  auto it = request.page_token().empty() || request.page_token() < prefix
                ? std::lower_bound(names.begin(), names.end(), prefix)
                : std::upper_bound(names.begin(), names.end(), request.page_token());
  const auto end = std::find_if(
      it, names.end(), [&](const std::string& name) { return !absl::StartsWith(name, prefix); });
  for (; it != end && static_cast<uint32_t>(response->files_size()) < page_size; ++it) {
    if (!caller.MayRead(*it)) continue;
    auto map = catalog.ResolveWithoutOpening(*it);
    if (!map.ok()) continue;  // removed since import: not listable now
    *response->add_files() = DescribeFileFor(caller, catalog, **map);
  }
  if (it != end && response->files_size() > 0) {
    response->set_next_page_token(response->files(response->files_size() - 1).name());
  }
  return grpc::Status::OK;
}

grpc::Status GetStats(Worker& worker, const Identity& caller, const v1::GetStatsRequest&,
                      v1::GetStatsResponse* response) {
  *response = CollectStats(worker.shared());
  // Device names, paths and backends are layout: admin only. Everyone gets the per-path and
  // fallback counts and the version (what the load report needs).
  // Other identities' usage is theirs: a caller who is not admin sees only its own.
  if (!caller.admin) {
    response->clear_devices();
    auto* identities = response->mutable_identities();
    identities->erase(
        std::remove_if(identities->begin(), identities->end(),
                       [&](const v1::IdentityStats& entry) { return entry.name() != caller.name; }),
        identities->end());
  }
  return grpc::Status::OK;
}

std::string DescribeDecision(const storage::FileMap& map, uint64_t size,
                             const storage::PathDecision& decision, uint64_t offset,
                             uint64_t length, uint64_t simple_max_bytes) {
  using storage::FallbackReason;
  if (decision.path == storage::ReadPathKind::kSimple) {
    return absl::StrFormat(
        "simple: %u bytes at a multiple of the block size %u, inside one mapped extent, within "
        "simple_max_bytes = %u",
        length, map.block_size(), simple_max_bytes);
  }
  switch (decision.fallback) {
    case FallbackReason::kDisabled:
      return "generic: the simple path is off (simple_max_bytes = 0)";
    case FallbackReason::kTooLarge:
      return absl::StrFormat("generic: %u bytes is more than simple_max_bytes = %u", length,
                             simple_max_bytes);
    case FallbackReason::kUnaligned:
      return absl::StrFormat(
          "generic: offset %u or length %u is not a multiple of the block size %u", offset, length,
          map.block_size());
    case FallbackReason::kBeyondEof:
      return absl::StrFormat("generic: the read runs past the end of the file (%u bytes)", size);
    case FallbackReason::kNotMapped:
      return "generic: the range is a hole or unwritten extent (read as zeros)";
    case FallbackReason::kSpansExtents:
      return "generic: the range crosses an extent boundary";
  }
  return "generic";
}

grpc::Status Explain(Worker& worker, const Identity&, const v1::ExplainRequest& request,
                     v1::ExplainResponse* response) {  // admin only: see Worker::Accept
  const storage::EngineConfig config = EngineConfigFrom(worker.shared().config);
  if (absl::Status valid = storage::ValidateReadRange(config, request.offset(), request.length());
      !valid.ok()) {
    return ToGrpcStatus(valid);
  }
  storage::Catalog& catalog = worker.shared().catalog;
  // Explained as the read would find it: a file that is not open is opened first (a diagnostic,
  // so the worker may wait briefly; never long, see ResolveWaitingAtMost).
  auto map = catalog.ResolveWaitingAtMost(request.file(), absl::Milliseconds(500));
  if (!map.ok()) return ToGrpcStatus(map.status());
  const storage::FileMap& file = **map;
  const uint64_t size = file.SizeNow();
  auto decision = storage::DecideReadPath(file, size, request.offset(), request.length(),
                                          config.simple_max_bytes);
  if (!decision.ok()) return ToGrpcStatus(decision.status());
  *response->mutable_file() = DescribeFile(catalog, file);
  response->set_path(ToProto(decision->path));
  response->set_fallback(ToProto(decision->path, decision->fallback));
  response->set_reason(DescribeDecision(file, size, *decision, request.offset(), request.length(),
                                        config.simple_max_bytes));
  const uint64_t end =
      std::min(request.offset() + request.length(), storage::RoundUp(size, file.block_size()));
  for (uint64_t pos = request.offset();
       pos < end && response->extents_size() < kMaxExplainedExtents;) {
    const storage::Extent e = file.Lookup(pos);
    v1::ExtentInfo* info = response->add_extents();
    info->set_logical_offset(e.logical_offset);
    info->set_length(e.length);
    info->set_type(ToProto(e.type));
    if (e.device != storage::kNoDevice) {
      info->set_device(catalog.device(e.device).name());
      info->set_physical_offset(e.physical_offset);
    }
    pos = e.logical_end();
  }
  return grpc::Status::OK;
}

// One device's entry of GetStats; `in` is null for a device the workers do not know yet.
void FillDeviceStats(const std::string& name, const std::string& path,
                     const storage::DeviceSnapshot* in, v1::DeviceStats* out) {
  out->set_name(name);
  out->set_path(path);
  if (in == nullptr) return;
  out->set_reads(in->reads);
  out->set_bytes(in->bytes);
  out->set_errors(in->errors);
  out->set_inflight(in->inflight);
  uint64_t by_mode[storage::kPollModeCount] = {};
  uint64_t workers = 0;
  const char* backend = "mixed";
  for (int kind = 0; kind < storage::kBackendKindCount; ++kind) {
    const auto backend_kind = static_cast<storage::BackendKind>(kind);
    const uint64_t count = in->workers_by_backend[kind];
    (*out->mutable_backend_workers())[BackendLabel(backend_kind)] = static_cast<uint32_t>(count);
    by_mode[static_cast<int>(PollModeOf(backend_kind))] += count;
    workers += count;
  }
  for (int kind = 0; kind < storage::kBackendKindCount; ++kind) {
    if (workers > 0 && in->workers_by_backend[kind] == workers) {
      backend = BackendLabel(static_cast<storage::BackendKind>(kind));
    }
  }
  out->set_backend(backend);
  const uint64_t interrupt = by_mode[static_cast<int>(storage::PollMode::kInterrupt)];
  const uint64_t iopoll = by_mode[static_cast<int>(storage::PollMode::kIoPoll)];
  out->set_poll_mode(iopoll == 0      ? PollModeLabel(storage::PollMode::kInterrupt)
                     : interrupt == 0 ? PollModeLabel(storage::PollMode::kIoPoll)
                                      : "mixed");
  out->set_iopoll_workers(static_cast<uint32_t>(iopoll));
  out->set_interrupt_workers(static_cast<uint32_t>(interrupt));
}

}  // namespace

v1::FileInfo DescribeFile(const storage::Catalog& catalog, const storage::FileMap& map) {
  v1::FileInfo info;
  info.set_name(map.name());
  info.set_size(map.SizeNow());
  info.set_block_size(map.block_size());
  info.set_extent_count(map.extents().size());
  info.set_source(ToProto(map.source()));
  info.set_route_note(catalog.RouteNote(map.name()));
  info.set_version(catalog.DeclaredVersion(map.name()));
  std::set<storage::DeviceId> devices;
  for (const storage::Extent& e : map.extents()) {
    if (e.device != storage::kNoDevice) devices.insert(e.device);
  }
  for (storage::DeviceId id : devices) info.add_devices(catalog.device(id).name());
  return info;
}

v1::GetStatsResponse CollectStats(const SharedState& shared) {
  storage::StatsSnapshot snapshot;
  v1::GetStatsResponse response;
  const uint64_t now_ns = storage::MonotonicNowNs();
  std::array<storage::ErrorCountsSnapshot, kRpcMethodCount> rpcs{};
  for (const Worker* worker : shared.workers) {
    const storage::StatsShard* shard = worker->stats();
    if (shard != nullptr) snapshot.Add(*shard);
    v1::WorkerStats* out = response.add_workers();
    out->set_worker(static_cast<uint32_t>(worker->index()));
    out->set_cpu(static_cast<uint32_t>(worker->cpu()));
    out->set_reads(worker->counters().reads.Load());
    out->set_busy_ns(worker->counters().busy_ns.Load());
    out->set_idle_ns(worker->counters().IdleNs(now_ns));
    out->set_empty_polls(worker->counters().empty_polls.Load());
    out->set_slots_held(worker->counters().slots_held.Load());
    out->set_slot_waits(worker->counters().slot_waits.Load());
    for (int method = 0; method < kRpcMethodCount; ++method) {
      for (int code = 0; code < storage::kStatusCodeCount; ++code) {
        rpcs[method][code] += worker->counters().rpcs[method][code].Load();
      }
    }
  }
  for (int method = 0; method < kRpcMethodCount; ++method) {
    for (int code = 0; code < storage::kStatusCodeCount; ++code) {
      if (rpcs[method][code] == 0) continue;
      v1::RpcCount* rpc = response.add_rpcs();
      rpc->set_method(RpcMethodName(static_cast<RpcMethod>(method)));
      rpc->set_code(StatusCodeName(static_cast<absl::StatusCode>(code)));
      rpc->set_count(rpcs[method][code]);
    }
  }
  if (const std::shared_ptr<const AccessPolicy> access = shared.access.Current(); !access->open()) {
    for (const Identity& identity : access->identities()) {
      v1::IdentityStats* out = response.add_identities();
      out->set_name(identity.name);
      const IdentityUsage& usage = *identity.usage;
      out->set_reads(usage.reads.load(std::memory_order_relaxed));
      out->set_bytes(usage.bytes.load(std::memory_order_relaxed));
      out->set_paced(usage.paced.load(std::memory_order_relaxed));
      out->set_pace_wait_ns(usage.pace_wait_ns.load(std::memory_order_relaxed));
      out->set_refused(usage.refused.load(std::memory_order_relaxed));
      if (identity.limiter != nullptr) {
        out->set_max_iops(identity.limiter->max_iops());
        out->set_max_bytes_per_second(identity.limiter->max_bytes_per_second());
      }
    }
  }
  response.set_shed(snapshot.shed);
  response.set_name_waits(snapshot.name_waits);
  for (int p = 0; p < storage::kReadPathCount; ++p) {
    const storage::PathSnapshot& in = snapshot.paths[p];
    v1::PathStats* out = response.add_paths();
    out->set_path(ToProto(static_cast<storage::ReadPathKind>(p)));
    out->set_reads(in.requests);
    out->set_bytes(in.bytes);
    out->set_errors(in.error_count());
    ErrorCountsToProto(in.errors, out->mutable_errors_by_code());
    HistogramToProto(in.queue_ns, out->mutable_queue_latency());
    HistogramToProto(in.device_ns, out->mutable_device_latency());
    HistogramToProto(in.total_ns, out->mutable_total_latency());
  }
  for (int r = 0; r < storage::kFallbackReasonCount; ++r) {
    v1::FallbackCount* out = response.add_fallbacks();
    out->set_reason(
        ToProto(storage::ReadPathKind::kGeneric, static_cast<storage::FallbackReason>(r)));
    out->set_count(snapshot.fallbacks[r]);
  }
  // Imported files are read each through a device of its own (its descriptor, see
  // storage/catalog.h): those are summed into one entry, so that neither GetStats nor /metrics
  // grows a series per served file, or names one.
  v1::DeviceStats* file_routes = nullptr;
  for (storage::DeviceId id = 0; id < shared.catalog.device_count(); ++id) {
    const storage::Device& device = shared.catalog.device(id);
    const storage::DeviceSnapshot* in =
        id < snapshot.devices.size() ? &snapshot.devices[id] : nullptr;
    if (device.kind() != storage::DeviceKind::kFileRoute) {
      v1::DeviceStats* out = response.add_devices();
      FillDeviceStats(device.name(), device.path(), in, out);
      out->set_down(!shared.catalog.device_up(id));
      continue;
    }
    if (file_routes == nullptr) {
      // Every file-route device is read the same way by a given worker: the first one's
      // backend fields stand for all.
      file_routes = response.add_devices();
      FillDeviceStats(kFileRouteDevicesName, "", in, file_routes);
      continue;
    }
    if (in != nullptr) {
      file_routes->set_reads(file_routes->reads() + in->reads);
      file_routes->set_bytes(file_routes->bytes() + in->bytes);
      file_routes->set_errors(file_routes->errors() + in->errors);
      file_routes->set_inflight(file_routes->inflight() + in->inflight);
    }
  }
  const storage::RouteCounts routes = shared.catalog.route_counts();
  if (file_routes != nullptr) {
    // The file-route devices are the open-file cache's slots.
    file_routes->set_path(absl::StrCat("(", routes.open_slots,
                                       " open-file slots, each read through its own descriptor)"));
  }
  ErrorCountsToProto(snapshot.rejected, response.mutable_rejected());
  response.set_uptime_ns(now_ns - shared.start_ns);
  response.set_version(BLOCKREAD_VERSION);
  response.mutable_files()->set_leased(routes.leased);
  response.mutable_files()->set_file_route(routes.file_route);
  response.mutable_files()->set_unavailable(routes.unavailable);
  response.mutable_files()->set_not_open(routes.not_open);
  response.mutable_files()->set_open_slots(routes.open_slots);
  response.mutable_files()->set_opens(routes.opens);
  response.mutable_files()->set_evictions(routes.evictions);
  return response;
}

void PostInfoCalls(Worker& worker) {
  Service* service = &worker.shared().service;
  UnaryCall<Service, v1::StatFileRequest, v1::FileInfo>::Post(
      worker, service, &Service::RequestStatFile, &StatFile, RpcMethod::kStatFile);
  UnaryCall<Service, v1::ListFilesRequest, v1::ListFilesResponse>::Post(
      worker, service, &Service::RequestListFiles, &ListFiles, RpcMethod::kListFiles);
  UnaryCall<Service, v1::GetStatsRequest, v1::GetStatsResponse>::Post(
      worker, service, &Service::RequestGetStats, &GetStats, RpcMethod::kGetStats);
  UnaryCall<Service, v1::ExplainRequest, v1::ExplainResponse>::Post(
      worker, service, &Service::RequestExplain, &Explain, RpcMethod::kExplain);
}

}  // namespace blockread::server
