// Many servers, one view, no proxy: the client resolves the targets itself, keeps one channel per
// server, learns from each server's ListFiles which servers hold which file, and sends every call
// straight to one of them.
//
// Replicas: servers whose files have the same name, size and declared version (FileInfo.version,
// empty when none is declared). When servers disagree about a name, the largest group of agreeing
// servers holds it (the first in target order on a tie) and the others are not used for it.
//
// Routing: a read goes to one of its file's replicas, chosen by the power of two choices on each
// one's expected wait: its recent latency (a peak EWMA of this client's reads) times the reads
// this client has outstanding to it, plus one (client/server_choice.h). On UNAVAILABLE (a lost
// connection, an unreachable server, or a device of that server gone) it is retried on another
// replica within the caller's deadline; never on any other error (DATA_LOSS, INVALID_ARGUMENT,
// OUT_OF_RANGE, PERMISSION_DENIED ... are the answer). A server that failed is backed off
// (exponentially, with jitter, from 200 ms to 10 s) and tried again by the first read after that;
// while every replica of a file is backed off its reads fail UNAVAILABLE at once, naming the file,
// and nothing is sent.
//
// Membership: the targets are resolved again every resolve_interval and as soon as a server is
// lost; the file table is rebuilt then, and when a server answers NOT_FOUND for a file it listed.
// With a single server there is no table: calls go to it as BlockReadClient's do.
#ifndef BLOCKREAD_CLIENT_CLUSTER_CLIENT_H_
#define BLOCKREAD_CLIENT_CLUSTER_CLIENT_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/blockread_client.h"
#include "client/server_choice.h"

namespace blockread::client {

struct ClusterOptions {
  ClientOptions connection;
  // How often the targets are resolved again (and the servers' file lists read again).
  std::chrono::milliseconds resolve_interval{10000};
  BackoffPolicy backoff;
};

// Server addresses from a --target value: a comma-separated list of host:port, dns:///name:port
// (every address the name resolves to, resolved by this client) or @FILE (the targets listed in
// FILE, one per line or comma-separated, read again at every re-resolve). Errors name the target.
absl::StatusOr<std::vector<std::string>> ResolveTargets(const std::string& targets);

// Thread-safe: any number of threads may call it at once.
class ClusterClient {
 public:
  // Resolves `targets` and, with several servers, reads each one's file list. Servers that cannot
  // be reached now are tried again later; an error only when `targets` resolves to nothing.
  static absl::StatusOr<std::unique_ptr<ClusterClient>> Connect(const std::string& targets,
                                                                const ClusterOptions& options);
  ~ClusterClient();

  // As BlockReadClient::Read, routed and failed over as described above.
  absl::StatusOr<v1::ReadBlockResponse> Read(const std::string& file, uint64_t offset,
                                             uint64_t length, const ReadCallOptions& call);
  absl::StatusOr<v1::FileInfo> Stat(const std::string& file);

  struct ListedFile {
    v1::FileInfo info;
    std::vector<std::string> servers;  // the replicas, in target order
  };
  // Every file of every server whose name starts with `prefix`, with the servers that hold it.
  absl::StatusOr<std::vector<ListedFile>> List(const std::string& prefix = "");

  // The servers now known, in target order.
  std::vector<std::string> servers() const;
  // The client of the first server (for calls about one server: stats, health, explain).
  std::shared_ptr<BlockReadClient> first();

 private:
  struct Server;
  using Clock = std::chrono::steady_clock;

  ClusterClient(std::string targets, const ClusterOptions& options);
  // Resolves the targets and rebuilds the file table when it is due (or `force`), on one thread
  // at a time; the others go on with the table they have.
  void MaybeRefresh(bool force);
  void Refresh();
  // A replica of `file` not in `tried` and not backed off; null when there is none.
  std::shared_ptr<Server> Choose(const std::string& file, const std::set<const Server*>& tried,
                                 bool* known);
  // REQUIRES: mu_ held (for rng_).
  void MarkFailed(Server& server);
  // Calls `attempt(client)` on replicas of `file` until one answers with anything but
  // UNAVAILABLE, or the replicas or the deadline run out.
  template <typename Result, typename Attempt>
  absl::StatusOr<Result> Route(const std::string& file,
                               std::optional<std::chrono::system_clock::time_point> deadline,
                               Attempt attempt);

  const std::string targets_;
  const ClusterOptions options_;
  std::mutex refresh_mu_;  // one refresh at a time
  mutable std::mutex mu_;  // guards what follows
  std::vector<std::shared_ptr<Server>> servers_;
  std::map<std::string, std::vector<std::shared_ptr<Server>>> replicas_;
  std::map<std::string, v1::FileInfo> infos_;
  bool any_listed_ = false;
  Clock::time_point next_refresh_{};
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_CLUSTER_CLIENT_H_
