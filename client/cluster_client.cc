#include "client/cluster_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace blockread::client {

struct ClusterClient::Server {
  std::string address;
  std::unique_ptr<BlockReadClient> client;
  ServerHealth health;
  // Guarded by ClusterClient::mu_.
  bool listed = false;              // its file list was read at least once
  std::vector<v1::FileInfo> files;  // as last listed
};

namespace {

// Every address `host` resolves to, as "ip:port" ("[ip6]:port").
absl::StatusOr<std::vector<std::string>> ResolveName(const std::string& target) {
  const absl::string_view name_port = absl::StripPrefix(target, "dns:///");
  const size_t colon = name_port.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target ", target, ": expected dns:///name:port"));
  }
  const std::string host(name_port.substr(0, colon));
  const std::string port(name_port.substr(colon + 1));
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("--target ", target, ": cannot resolve ", host, ": ", gai_strerror(error)));
  }
  std::vector<std::string> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, text,
                sizeof(text));
      addresses.push_back(absl::StrCat(text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof(text));
      addresses.push_back(absl::StrCat("[", text, "]:", port));
    }
  }
  freeaddrinfo(found);
  return addresses;
}

bool Retriable(absl::StatusCode code) { return code == absl::StatusCode::kUnavailable; }

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveTargets(const std::string& targets) {
  std::vector<std::string> addresses;
  for (absl::string_view part : absl::StrSplit(targets, ',', absl::SkipWhitespace())) {
    const std::string target(absl::StripAsciiWhitespace(part));
    if (absl::StartsWith(target, "@")) {
      std::ifstream in(target.substr(1));
      std::stringstream text;
      if (in) text << in.rdbuf();
      if (!in) return absl::NotFoundError(absl::StrCat("--target ", target, ": cannot read it"));
      std::string listed = text.str();
      std::replace(listed.begin(), listed.end(), '\n', ',');
      if (absl::StrContains(listed, '@')) {
        return absl::InvalidArgumentError(
            absl::StrCat("--target ", target, ": a target file cannot name another"));
      }
      auto inner = ResolveTargets(listed);
      if (!inner.ok()) return inner.status();
      addresses.insert(addresses.end(), inner->begin(), inner->end());
    } else if (absl::StartsWith(target, "dns:")) {
      auto resolved = ResolveName(target);
      if (!resolved.ok()) return resolved.status();
      addresses.insert(addresses.end(), resolved->begin(), resolved->end());
    } else {
      addresses.push_back(target);
    }
  }
  // Each server once, in the order first named.
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (std::string& a : addresses) {
    if (seen.insert(a).second) unique.push_back(std::move(a));
  }
  if (unique.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--target '", targets, "' names no server"));
  }
  return unique;
}

ClusterClient::ClusterClient(std::string targets, const ClusterOptions& options)
    : targets_(std::move(targets)), options_(options) {}

ClusterClient::~ClusterClient() = default;

absl::StatusOr<std::unique_ptr<ClusterClient>> ClusterClient::Connect(
    const std::string& targets, const ClusterOptions& options) {
  auto addresses = ResolveTargets(targets);
  if (!addresses.ok()) return addresses.status();
  std::unique_ptr<ClusterClient> cluster(new ClusterClient(targets, options));
  for (const std::string& address : *addresses) {
    auto server = std::make_shared<Server>();
    server->address = address;
    server->client = BlockReadClient::Connect(address, options.connection);
    cluster->servers_.push_back(std::move(server));
  }
  cluster->Refresh();
  return cluster;
}

std::vector<std::string> ClusterClient::servers() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> addresses;
  for (const auto& server : servers_) addresses.push_back(server->address);
  return addresses;
}

std::shared_ptr<BlockReadClient> ClusterClient::first() {
  std::lock_guard lock(mu_);
  const std::shared_ptr<Server>& server = servers_.front();
  return std::shared_ptr<BlockReadClient>(server, server->client.get());
}

void ClusterClient::MaybeRefresh(bool force) {
  {
    std::lock_guard lock(mu_);
    if (!force && Clock::now() < next_refresh_) return;
  }
  std::unique_lock refreshing(refresh_mu_, std::try_to_lock);
  if (!refreshing.owns_lock()) {
    if (!force) return;  // another thread is at it
    refreshing.lock();   // a forced refresh waits for it, then goes on with the new table
    return;
  }
  Refresh();
}

void ClusterClient::Refresh() {
  const auto now = Clock::now();
  // Membership: the servers the targets name now, keeping the ones already known.
  std::vector<std::shared_ptr<Server>> servers;
  {
    std::lock_guard lock(mu_);
    next_refresh_ = now + options_.resolve_interval;
    servers = servers_;
  }
  if (auto addresses = ResolveTargets(targets_); addresses.ok()) {
    std::vector<std::shared_ptr<Server>> current;
    for (const std::string& address : *addresses) {
      auto known = std::find_if(servers.begin(), servers.end(),
                                [&](const auto& s) { return s->address == address; });
      if (known != servers.end()) {
        current.push_back(*known);
        continue;
      }
      auto server = std::make_shared<Server>();
      server->address = address;
      server->client = BlockReadClient::Connect(address, options_.connection);
      current.push_back(std::move(server));
    }
    servers = std::move(current);
  }
  // One server: no table, every call goes to it.
  if (servers.size() > 1) {
    for (const auto& server : servers) {
      if (!server->health.Available(now)) continue;  // backed off: keep what it listed
      // Outside the lock: the listing is a few calls. Bounded, so a hung server costs 2 s once.
      ClientOptions quick = options_.connection;
      quick.timeout = std::chrono::milliseconds(2000);
      auto listed = BlockReadClient(server->client->channel(), quick).List();
      std::lock_guard lock(mu_);
      if (listed.ok()) {
        server->files = *std::move(listed);
        server->listed = true;
        server->health.Succeeded();
      } else {
        MarkFailed(*server);
      }
    }
  }
  // The table: for each name, the largest group of servers that agree on its size and declared
  // version (README "Scale-out": the replica rule).
  using Content = std::pair<uint64_t, std::string>;  // size, version
  std::map<std::string, std::vector<std::shared_ptr<Server>>> replicas;
  std::map<std::string, v1::FileInfo> infos;
  std::map<std::string, std::map<Content, std::vector<std::shared_ptr<Server>>>> by_content;
  std::map<std::pair<std::string, Content>, v1::FileInfo> info_by_content;
  bool any_listed = false;
  {
    std::lock_guard lock(mu_);
    for (const auto& server : servers) {
      any_listed |= server->listed;
      for (const v1::FileInfo& info : server->files) {
        const Content content{info.size(), info.version()};
        by_content[info.name()][content].push_back(server);
        info_by_content.emplace(std::make_pair(info.name(), content), info);
      }
    }
  }
  for (auto& [name, groups] : by_content) {
    const std::vector<std::shared_ptr<Server>>* best = nullptr;
    Content best_content;
    for (const auto& [content, group] : groups) {
      // Ties go to the group whose first server comes first in target order.
      const auto position = [&](const std::shared_ptr<Server>& s) {
        return std::find(servers.begin(), servers.end(), s) - servers.begin();
      };
      if (best == nullptr || group.size() > best->size() ||
          (group.size() == best->size() && position(group[0]) < position((*best)[0]))) {
        best = &group;
        best_content = content;
      }
    }
    replicas[name] = *best;
    infos[name] = info_by_content[{name, best_content}];
  }
  std::lock_guard lock(mu_);
  servers_ = std::move(servers);
  replicas_ = std::move(replicas);
  infos_ = std::move(infos);
  any_listed_ = any_listed;
}

void ClusterClient::MarkFailed(Server& server) {
  server.health.Failed(options_.backoff, rng_);
  next_refresh_ = Clock::now();  // a server was lost: resolve again at the next call
}

std::shared_ptr<ClusterClient::Server> ClusterClient::Choose(const std::string& file,
                                                             const std::set<const Server*>& tried,
                                                             bool* known) {
  std::lock_guard lock(mu_);
  const auto found = replicas_.find(file);
  *known = found != replicas_.end();
  if (!*known) return nullptr;
  const std::shared_ptr<Server>* chosen = ChooseReplica(
      found->second,
      [](const std::shared_ptr<Server>& server) -> ServerHealth& { return server->health; },
      [&](const std::shared_ptr<Server>& server) { return tried.count(server.get()) > 0; }, rng_);
  return chosen == nullptr ? nullptr : *chosen;
}

template <typename Result, typename Attempt>
absl::StatusOr<Result> ClusterClient::Route(
    const std::string& file, std::optional<std::chrono::system_clock::time_point> deadline,
    Attempt attempt) {
  MaybeRefresh(false);
  std::shared_ptr<Server> only;
  {
    std::lock_guard lock(mu_);
    if (servers_.size() == 1) only = servers_.front();
  }
  if (only != nullptr) return attempt(*only->client);

  std::set<const Server*> tried;
  bool refreshed = false;
  absl::Status last;
  for (;;) {
    bool known = false;
    std::shared_ptr<Server> server = Choose(file, tried, &known);
    if (server == nullptr) {
      if (!known && !refreshed) {  // a file new to the table, or the table is empty
        refreshed = true;
        MaybeRefresh(true);
        continue;
      }
      std::lock_guard lock(mu_);
      if (known) {
        std::vector<std::string> holders;
        for (const auto& s : replicas_.at(file)) holders.push_back(s->address);
        return absl::UnavailableError(
            absl::StrCat("file '", file, "': no server holding it is reachable now (",
                         absl::StrJoin(holders, ", "), ")", last.ok() ? "" : ": ", last.message()));
      }
      // Not listed by any server that answered: NOT_FOUND only when every server did.
      std::vector<std::string> unlisted;
      for (const auto& s : servers_) {
        if (!s->listed || s->health.failures() > 0) unlisted.push_back(s->address);
      }
      if (unlisted.empty()) {
        return absl::NotFoundError(absl::StrCat("file '", file, "' is not served by any of the ",
                                                servers_.size(), " servers"));
      }
      return absl::UnavailableError(absl::StrCat(
          "file '", file, "' is not served by any reachable server; ", unlisted.size(), " of ",
          servers_.size(), " could not be asked (", absl::StrJoin(unlisted, ", "), ")"));
    }
    server->health.outstanding.fetch_add(1, std::memory_order_relaxed);
    const auto sent = Clock::now();
    absl::StatusOr<Result> result = attempt(*server->client);
    server->health.outstanding.fetch_sub(1, std::memory_order_relaxed);
    if (result.ok()) {
      const auto answered = Clock::now();
      server->health.Answered(answered - sent, answered);
      server->health.Succeeded();
      return result;
    }
    const absl::StatusCode code = result.status().code();
    if (code == absl::StatusCode::kNotFound && !refreshed) {
      // It listed the file and no longer has it: read the lists again, try the others.
      refreshed = true;
      tried.insert(server.get());
      MaybeRefresh(true);
      continue;
    }
    if (!Retriable(code)) return result;
    // The server answered (a device of it is gone) or could not be reached: another replica.
    // Only a server that cannot be reached is backed off.
    if (server->client->channel()->GetState(false) != GRPC_CHANNEL_READY) {
      std::lock_guard lock(mu_);
      MarkFailed(*server);
    }
    tried.insert(server.get());
    last = result.status();
    if (deadline && std::chrono::system_clock::now() >= *deadline) return result;
  }
}

absl::StatusOr<v1::ReadBlockResponse> ClusterClient::Read(const std::string& file, uint64_t offset,
                                                          uint64_t length,
                                                          const ReadCallOptions& call) {
  // One deadline for every attempt: the caller's.
  ReadCallOptions attempt = call;
  if (!attempt.deadline && options_.connection.timeout.count() > 0) {
    attempt.deadline = std::chrono::system_clock::now() + options_.connection.timeout;
  }
  return Route<v1::ReadBlockResponse>(file, attempt.deadline, [&](BlockReadClient& client) {
    return client.Read(file, offset, length, attempt);
  });
}

absl::StatusOr<v1::FileInfo> ClusterClient::Stat(const std::string& file) {
  return Route<v1::FileInfo>(file, std::nullopt,
                             [&](BlockReadClient& client) { return client.Stat(file); });
}

absl::StatusOr<std::vector<ClusterClient::ListedFile>> ClusterClient::List(
    const std::string& prefix) {
  std::shared_ptr<Server> only;
  {
    std::lock_guard lock(mu_);
    if (servers_.size() == 1) only = servers_.front();
  }
  std::vector<ListedFile> listed;
  if (only != nullptr) {
    auto files = only->client->List(prefix);
    if (!files.ok()) return files.status();
    for (v1::FileInfo& info : *files) listed.push_back({std::move(info), {only->address}});
    return listed;
  }
  MaybeRefresh(true);
  std::lock_guard lock(mu_);
  if (!any_listed_) {
    std::vector<std::string> addresses;
    for (const auto& s : servers_) addresses.push_back(s->address);
    return absl::UnavailableError(
        absl::StrCat("no server reachable (", absl::StrJoin(addresses, ", "), ")"));
  }
  for (const auto& [name, holders] : replicas_) {
    if (!absl::StartsWith(name, prefix)) continue;
    ListedFile file{infos_.at(name), {}};
    for (const auto& s : holders) file.servers.push_back(s->address);
    listed.push_back(std::move(file));
  }
  return listed;
}

}  // namespace blockread::client
