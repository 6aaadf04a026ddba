#include "server/access.h"

#include <fnmatch.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/config.h"
#include "storage/catalog.h"

namespace blockread::server {
namespace {

bool SegmentsMatch(const std::vector<absl::string_view>& pattern, size_t p,
                   const std::vector<absl::string_view>& name, size_t n) {
  for (; p < pattern.size(); ++p, ++n) {
    if (pattern[p] == "**") {
      // Any number of segments, none included: try every rest of the name.
      for (size_t rest = n; rest <= name.size(); ++rest) {
        if (SegmentsMatch(pattern, p + 1, name, rest)) return true;
      }
      return false;
    }
    if (n == name.size()) return false;
    const std::string segment_pattern(pattern[p]), segment(name[n]);
    if (fnmatch(segment_pattern.c_str(), segment.c_str(), FNM_PERIOD) != 0) return false;
  }
  return n == name.size();
}

std::string Sha256(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

}  // namespace

bool AllowPatternMatches(absl::string_view pattern, absl::string_view name) {
  const std::vector<absl::string_view> pattern_segments = absl::StrSplit(pattern, '/');
  const std::vector<absl::string_view> name_segments = absl::StrSplit(name, '/');
  return SegmentsMatch(pattern_segments, 0, name_segments, 0);
}

bool Identity::MayRead(absl::string_view file) const {
  if (all_files) return true;
  for (const std::string& pattern : allow) {
    if (AllowPatternMatches(pattern, file)) return true;
  }
  return false;
}

const Identity& Identity::Nobody() {
  static const Identity* const nobody = [] {
    auto* identity = new Identity();
    identity->name = "unauthenticated";
    return identity;
  }();
  return *nobody;
}

absl::Status ReadDenied(const Identity& identity, absl::string_view file) {
  return absl::PermissionDeniedError(absl::StrCat(
      "identity '", identity.name, "' may not read file '", storage::EchoedName(file), "'"));
}

std::shared_ptr<const AccessPolicy> AccessPolicy::Open() {
  std::shared_ptr<AccessPolicy> policy(new AccessPolicy());
  policy->open_ = true;
  Identity anyone;
  anyone.name = "anonymous";
  anyone.allow = {"**"};
  anyone.admin = true;
  anyone.all_files = true;
  policy->identities_.push_back(std::move(anyone));
  return policy;
}

absl::StatusOr<std::shared_ptr<const AccessPolicy>> AccessPolicy::Parse(
    absl::string_view text, const std::string& path, const AccessPolicy* previous) {
  v1::AccessConfig config;
  if (absl::Status parsed = ParseTextProto(std::string(text), path, &config); !parsed.ok()) {
    return parsed;
  }
  std::shared_ptr<AccessPolicy> policy(new AccessPolicy());
  absl::flat_hash_set<std::string> names, digests, common_names;
  for (int i = 0; i < config.identity_size(); ++i) {
    const v1::Identity& entry = config.identity(i);
    const std::string where = absl::StrFormat("%s: identity #%d (%s)", path, i + 1, entry.name());
    if (entry.name().empty()) return absl::InvalidArgumentError(where + ": no name");
    if (!names.insert(entry.name()).second) {
      return absl::InvalidArgumentError(where + ": the name is used twice");
    }
    Identity identity;
    identity.name = entry.name();
    if (!entry.token_sha256().empty()) {
      const std::string& hex = entry.token_sha256();
      if (hex.size() != 2 * SHA256_DIGEST_LENGTH ||
          !std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
        return absl::InvalidArgumentError(
            where + ": token_sha256 is not 64 hex digits (printf %s \"$TOKEN\" | sha256sum)");
      }
      std::string digest = absl::HexStringToBytes(hex);
      if (!digests.insert(digest).second) {
        return absl::InvalidArgumentError(where + ": the same token as another identity");
      }
      identity.token_digest = std::move(digest);
    }
    identity.tls_common_name = entry.tls_common_name();
    if (!identity.tls_common_name.empty() &&
        !common_names.insert(identity.tls_common_name).second) {
      return absl::InvalidArgumentError(where + ": tls_common_name is used twice");
    }
    if (identity.token_digest.empty() && identity.tls_common_name.empty()) {
      return absl::InvalidArgumentError(where + ": neither token_sha256 nor tls_common_name");
    }
    for (const std::string& pattern : entry.allow()) {
      if (pattern.empty() || pattern.starts_with('/')) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": allow \"", pattern, "\" is not a relative file name pattern"));
      }
      identity.allow.push_back(pattern);
      if (pattern == "**") identity.all_files = true;
    }
    identity.admin = entry.admin();
    const Identity* before = nullptr;
    if (previous != nullptr) {
      for (const Identity& old : previous->identities_) {
        if (old.name == identity.name && old.usage != nullptr) before = &old;
      }
    }
    identity.usage = before != nullptr ? before->usage : std::make_shared<IdentityUsage>();
    if (entry.max_iops() != 0 || entry.max_bytes_per_second() != 0) {
      const bool same_limits =
          before != nullptr && before->limiter != nullptr &&
          before->limiter->max_iops() == entry.max_iops() &&
          before->limiter->max_bytes_per_second() == entry.max_bytes_per_second();
      identity.limiter = same_limits ? before->limiter
                                     : std::make_shared<RateLimiter>(entry.max_iops(),
                                                                     entry.max_bytes_per_second());
    }
    policy->identities_.push_back(std::move(identity));
  }
  return std::shared_ptr<const AccessPolicy>(std::move(policy));
}

absl::StatusOr<std::shared_ptr<const AccessPolicy>> AccessPolicy::Load(
    const std::string& path, const AccessPolicy* previous) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--auth: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path, previous);
}

absl::StatusOr<const Identity*> AccessPolicy::Authenticate(
    const grpc::ServerContext& context) const {
  if (open_) return &identities_.front();
  // A verified client certificate (only present when the server requires and checks them).
  if (const auto auth = context.auth_context(); auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& common_name : auth->FindPropertyValues("x509_common_name")) {
      const absl::string_view cn(common_name.data(), common_name.size());
      for (const Identity& identity : identities_) {
        if (!identity.tls_common_name.empty() && identity.tls_common_name == cn) return &identity;
      }
    }
  }
  const auto& metadata = context.client_metadata();
  const auto header = metadata.find("authorization");
  if (header == metadata.end()) {
    return absl::UnauthenticatedError(
        "no credential: send a token (authorization: Bearer <token>) or a client certificate "
        "the server knows");
  }
  absl::string_view value(header->second.data(), header->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ")) {
    return absl::UnauthenticatedError("the authorization header is not \"Bearer <token>\"");
  }
  const std::string digest = Sha256(value);
  // Every digest is compared, in constant time, so timing tells nothing about the token.
  const Identity* found = nullptr;
  for (const Identity& identity : identities_) {
    if (identity.token_digest.size() == digest.size() &&
        CRYPTO_memcmp(identity.token_digest.data(), digest.data(), digest.size()) == 0) {
      found = &identity;
    }
  }
  if (found == nullptr) return absl::UnauthenticatedError("unknown token");
  return found;
}

}  // namespace blockread::server
