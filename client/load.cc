#include "client/load.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/blockread_client.h"
#include "client/cluster_client.h"
#include "client/load_run.h"
#include "client/load_sampler.h"
#include "client/load_threads.h"
#include "proto/wire/labels.h"

namespace blockread::client {
namespace {

using load::FileTarget;
using load::MonotonicNowNs;
using load::Router;
using load::Run;
using load::Sampler;
using load::StreamThread;
using load::ThreadStats;
using load::UnaryThread;

absl::Status AddStats(const v1::GetStatsResponse& stats, int sign,
                      std::map<std::string, uint64_t>& paths,
                      std::map<std::string, uint64_t>& fallbacks) {
  for (const v1::PathStats& p : stats.paths()) paths[wire::PathLabel(p.path())] += sign * p.reads();
  for (const v1::FallbackCount& f : stats.fallbacks()) {
    fallbacks[wire::FallbackLabel(f.reason())] += sign * f.count();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& o) {
  auto derived = DeriveLoadSettings(o);
  if (!derived.ok()) return derived.status();
  const LoadSettings& settings = *derived;
  Run run(o);
  // The servers and which files each holds: the cluster client's table (one server: its list).
  ClusterOptions cluster_options;
  cluster_options.connection = o.connection;
  auto cluster = ClusterClient::Connect(absl::StrJoin(o.targets, ","), cluster_options);
  if (!cluster.ok()) return cluster.status();
  const std::vector<std::string> servers = (*cluster)->servers();
  auto listed = (*cluster)->List();
  if (!listed.ok()) return listed.status();
  const auto index_of = [&](const std::string& address) {
    return static_cast<int>(std::find(servers.begin(), servers.end(), address) - servers.begin());
  };
  const auto add_file = [&](const ClusterClient::ListedFile& f) {
    FileTarget file{f.info.name(), f.info.size(), {}};
    for (const std::string& address : f.servers) file.servers.push_back(index_of(address));
    run.files.push_back(std::move(file));
  };
  if (o.files.empty()) {
    for (const ClusterClient::ListedFile& f : *listed) {
      if (f.info.size() >= o.block_size) add_file(f);
    }
    if (run.files.empty()) {
      return absl::NotFoundError(
          absl::StrCat("no file on ", absl::StrJoin(o.targets, ","), " holds a --bs read"));
    }
  } else {
    for (const std::string& name : o.files) {
      const auto found = std::find_if(listed->begin(), listed->end(),
                                      [&](const auto& f) { return f.info.name() == name; });
      if (found == listed->end()) {
        return absl::NotFoundError(absl::StrCat("--file ", name, ": no server of ",
                                                absl::StrJoin(o.targets, ","), " serves it"));
      }
      if (found->info.size() < o.block_size) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " (", found->info.size(), " bytes) is smaller than --bs"));
      }
      add_file(*found);
    }
  }
  run.router = std::make_unique<Router>(servers.size(), cluster_options.backoff);
  // settings.channels channels to each server (thread t's lanes use channels t, t + threads, ...).
  std::vector<std::vector<std::unique_ptr<BlockReadClient>>> clients(servers.size());
  for (size_t s = 0; s < servers.size(); ++s) {
    for (int c = 0; c < settings.channels; ++c) {
      clients[s].push_back(BlockReadClient::Connect(servers[s], o.connection));
    }
  }
  if (!o.verify_file.empty()) {
    run.verify_fd = open(o.verify_file.c_str(), O_RDONLY | O_CLOEXEC);
    if (run.verify_fd < 0) {
      return absl::NotFoundError(
          absl::StrCat("--verify-file: cannot open ", o.verify_file, ": ", strerror(errno)));
    }
  }

  // Server stats over the run: after minus before, of the servers that answered both times.
  std::map<std::string, uint64_t> paths, fallbacks;
  std::vector<std::optional<v1::GetStatsResponse>> stats_before(servers.size());
  for (size_t s = 0; s < servers.size(); ++s) {
    auto before = BlockReadClient::Connect(servers[s], o.connection)->Stats();
    if (before.ok()) stats_before[s] = *std::move(before);
  }

  run.start_ns = MonotonicNowNs();
  run.measure_start_ns = run.start_ns + static_cast<uint64_t>(o.ramp_s * 1e9);
  run.measure_end_ns =
      o.number > 0 ? UINT64_MAX : run.measure_start_ns + static_cast<uint64_t>(o.runtime_s * 1e9);
  // All recorders exist before the first thread starts: threads hold references into them.
  std::vector<std::unique_ptr<ThreadStats>> stats;
  for (int t = 0; t < o.threads; ++t) stats.push_back(std::make_unique<ThreadStats>());
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    // A thread's lanes (its streams, or the channels its unary calls take turns on) use channels
    // t, t + threads, t + 2 * threads, ... (mod channels), so every channel gets used.
    const int lanes = o.stream ? settings.streams
                               : std::max(1, (settings.channels - t + o.threads - 1) / o.threads);
    std::vector<std::vector<v1::BlockRead::Stub*>> stubs(servers.size());
    for (size_t s = 0; s < servers.size(); ++s) {
      for (int l = 0; l < lanes; ++l) {
        stubs[s].push_back(&clients[s][(t + l * o.threads) % clients[s].size()]->stub());
      }
    }
    ThreadStats& thread_stats = *stats[t];
    threads.emplace_back([&run, &o, &settings, &thread_stats, stubs = std::move(stubs), t] {
      if (o.stream) {
        StreamThread(run, stubs, t, settings, thread_stats);
      } else {
        UnaryThread(run, stubs, t, thread_stats);
      }
    });
  }

  Sampler sampler(run, stats, o.progress && isatty(STDERR_FILENO));
  for (auto& t : threads) t.join();
  const uint64_t end_ns = std::min(MonotonicNowNs(), run.measure_end_ns);
  if (run.verify_fd >= 0) close(run.verify_fd);

  LoadResult result;
  result.settings = settings;
  result.per_second = sampler.Stop(end_ns);
  result.seconds = (end_ns - std::min(end_ns, run.measure_start_ns)) / 1e9;
  uint64_t queue = 0, device = 0, server = 0;
  for (auto& s : stats) {
    result.reads += s->reads.Load();
    result.bytes += s->bytes.Load();
    result.issued += s->issued.Load();
    result.returned += s->returned.Load();
    result.hedged += s->hedged.Load();
    result.hedges_won += s->hedges_won.Load();
    s->latency_ns.AddTo(result.latency_ns);
    queue += s->queue_ns.Load();
    device += s->device_ns.Load();
    server += s->server_ns.Load();
    for (const auto& [code, n] : s->errors) result.errors[code] += n;
  }
  if (result.reads > 0) {
    result.server_queue_us = queue / 1e3 / result.reads;
    result.server_device_us = device / 1e3 / result.reads;
    result.server_total_us = server / 1e3 / result.reads;
  }
  std::vector<std::string> versions;
  for (size_t s = 0; s < servers.size(); ++s) {
    auto after = BlockReadClient::Connect(servers[s], o.connection)->Stats();
    // A server that restarted meanwhile counts from 0 again: its difference means nothing.
    if (!after.ok() || !stats_before[s] || after->uptime_ns() < stats_before[s]->uptime_ns()) {
      continue;
    }
    AddStats(*stats_before[s], -1, paths, fallbacks).IgnoreError();
    AddStats(*after, 1, paths, fallbacks).IgnoreError();
    if (std::find(versions.begin(), versions.end(), after->version()) == versions.end()) {
      versions.push_back(after->version());
    }
  }
  result.server_version = absl::StrJoin(versions, ", ");
  result.server_paths = paths;
  result.server_fallbacks = fallbacks;
  result.verify_failure = run.failure;
  return result;
}

}  // namespace blockread::client
