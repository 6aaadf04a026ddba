// Where `blockread load` sends each read: the run's files and their replicas, and the router that
// picks a replica for a read (client/server_choice.h, as ClusterClient does).
#ifndef BLOCKREAD_CLIENT_LOAD_ROUTER_H_
#define BLOCKREAD_CLIENT_LOAD_ROUTER_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/server_choice.h"

namespace blockread::client::load {

// A file the run reads, and the servers that hold it.
struct FileTarget {
  std::string name;
  uint64_t size = 0;
  std::vector<int> servers;  // indices into the run's servers that hold it (its replicas)
  bool HeldBy(int server) const {
    return std::find(servers.begin(), servers.end(), server) != servers.end();
  }
};

// Servers a read was sent to and that failed it, as bits of their indices (mod 64: with more
// servers a read may skip a replica it has not tried).
inline uint64_t ServerBit(int server) { return uint64_t{1} << (server % 64); }

// Where reads go: to a replica of their file, by the power of two choices on each one's latency
// and reads outstanding, never to a server backed off after failing (client/server_choice.h).
// Shared by the run's threads.
class Router {
 public:
  Router(size_t servers, const BackoffPolicy& backoff) : backoff_(backoff) {
    for (size_t i = 0; i < servers; ++i) health_.push_back(std::make_unique<ServerHealth>());
  }
  ServerHealth& health(int server) { return *health_[server]; }
  // A replica of `file` not in `tried` and not backed off; -1 when there is none now.
  int Choose(const FileTarget& file, uint64_t tried, std::mt19937_64& rng) {
    const int* chosen = ChooseReplica(
        file.servers, [&](int s) -> ServerHealth& { return *health_[s]; },
        [&](int s) { return (tried & ServerBit(s)) != 0; }, rng);
    return chosen == nullptr ? -1 : *chosen;
  }
  // Some replica of `file` could take the read now.
  bool Routable(const FileTarget& file, uint64_t tried) const {
    const auto now = ServerHealth::Clock::now();
    return std::any_of(file.servers.begin(), file.servers.end(), [&](int s) {
      return (tried & ServerBit(s)) == 0 && health_[s]->Available(now);
    });
  }
  void Failed(int server, std::mt19937_64& rng) { health_[server]->Failed(backoff_, rng); }

 private:
  const BackoffPolicy backoff_;
  std::vector<std::unique_ptr<ServerHealth>> health_;
};

}  // namespace blockread::client::load

#endif  // BLOCKREAD_CLIENT_LOAD_ROUTER_H_
