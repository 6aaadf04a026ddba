// Who may read what: the identities of the --auth file, how a call proves one, and which served
// files it may see. Checked once per RPC at the worker's accept point, then per file.
#ifndef BLOCKREAD_SERVER_ACCESS_H_
#define BLOCKREAD_SERVER_ACCESS_H_

#include <grpcpp/server_context.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "blockread/v1/server_config.pb.h"
#include "server/rate_limit.h"

namespace blockread::server {

// `name` matches `pattern` (an `allow` entry): segments are separated by '/', `*`, `?` and
// `[...]` match within one segment (as fnmatch with FNM_PERIOD: a leading dot only matches a
// dot), a `**` segment matches any number of segments, none included. Costs at most
// O(|name| x |pattern|), whatever the pattern: it runs on the pinned worker for every item.
bool AllowPatternMatches(absl::string_view pattern, absl::string_view name);

// One identity, immutable once loaded.
struct Identity {
  std::string name;
  std::string token_digest;  // SHA-256 of the token, 32 raw bytes; empty: no token
  std::string tls_common_name;
  std::vector<std::string> allow;
  bool admin = false;
  bool all_files = false;  // an `allow` of "**": MayRead needs no matching
  // max_iops / max_bytes_per_second: null when the identity has neither.
  std::shared_ptr<RateLimiter> limiter;
  // Never null for identities of an --auth file. Carried over a reload by name, so the counts
  // keep counting.
  std::shared_ptr<IdentityUsage> usage;

  // May this identity read, stat and list served file `file`?
  bool MayRead(absl::string_view file) const;

  // The identity of a call nobody has authenticated (health probes, or a call before the accept
  // point): it may read nothing.
  static const Identity& Nobody();
};

// PERMISSION_DENIED for a read of `file` that `identity` may not make (the name cut to
// storage::kMaxEchoedNameBytes).
absl::Status ReadDenied(const Identity& identity, absl::string_view file);

// The access rules in force: immutable, shared by every worker, replaced whole on reload.
class AccessPolicy {
 public:
  // No --auth: one anonymous identity that may do everything.
  static std::shared_ptr<const AccessPolicy> Open();
  // Parses an AccessConfig textproto. Errors name the file, the line and what is wrong (a name
  // used twice, a token digest that is not 64 hex digits, an identity with no credential).
  // Identities named as in `previous` (the rules being replaced) keep its usage counts, and its
  // limiter state when their limits are unchanged.
  static absl::StatusOr<std::shared_ptr<const AccessPolicy>> Parse(
      absl::string_view text, const std::string& path, const AccessPolicy* previous = nullptr);
  static absl::StatusOr<std::shared_ptr<const AccessPolicy>> Load(
      const std::string& path, const AccessPolicy* previous = nullptr);

  // Who the caller of `context` is: the identity whose tls_common_name is the verified client
  // certificate's common name, else the one whose token the call presents
  // ("authorization: Bearer <token>", compared by digest in constant time). UNAUTHENTICATED
  // when neither names an identity; the message never repeats the token.
  absl::StatusOr<const Identity*> Authenticate(const grpc::ServerContext& context) const;

  bool open() const { return open_; }
  size_t identity_count() const { return identities_.size(); }
  const std::vector<Identity>& identities() const { return identities_; }

 private:
  AccessPolicy() = default;
  bool open_ = false;
  std::vector<Identity> identities_;
};

// The policy in force, replaceable while workers serve (SIGHUP). Threading: Replace from any one
// thread; workers call generation() (one acquire load) per RPC and Current() only when it moved,
// so a check takes no lock in the steady state.
class AccessRules {
 public:
  explicit AccessRules(std::shared_ptr<const AccessPolicy> policy) : policy_(std::move(policy)) {}
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  std::shared_ptr<const AccessPolicy> Current() const {
    std::lock_guard lock(mu_);
    return policy_;
  }
  void Replace(std::shared_ptr<const AccessPolicy> policy) {
    std::lock_guard lock(mu_);
    policy_ = std::move(policy);
    generation_.fetch_add(1, std::memory_order_release);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const AccessPolicy> policy_;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_ACCESS_H_
