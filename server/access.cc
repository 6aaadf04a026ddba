#include "server/access.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <fstream>
#include <optional>
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

// One segment against one segment pattern, as fnmatch(FNM_PERIOD) would: `*` any run, `?` one
// character, `[...]` a set (ranges, `!` or `^` negation, [:class:]), `\` quotes; a leading dot
// only matches a literal dot. Our own because fnmatch backtracks exponentially on several `*`s.
// This is the classic single-backtrack-point glob match: after a mismatch it retries only from
// the last `*`, so it costs O(|segment| x |pattern|) at worst.
class SegmentGlob {
 public:
  static bool Matches(absl::string_view pattern, absl::string_view text) {
    if (!text.empty() && text[0] == '.' && (pattern.empty() || pattern[0] != '.')) {
      // FNM_PERIOD: only a literal '.' (possibly quoted) matches a leading dot.
      if (!(pattern.size() >= 2 && pattern[0] == '\\' && pattern[1] == '.')) return false;
    }
    size_t p = 0, t = 0;
    size_t star_p = absl::string_view::npos, star_t = 0;
    while (t < text.size()) {
      if (p < pattern.size() && pattern[p] == '*') {
        star_p = ++p;
        star_t = t;
        continue;
      }
      size_t next_p = p;
      if (p < pattern.size() && MatchOne(pattern, &next_p, text[t])) {
        p = next_p;
        ++t;
        continue;
      }
      if (star_p == absl::string_view::npos) return false;
      p = star_p;  // the last star takes one more character
      t = ++star_t;
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
  }

 private:
  // Whether the pattern element at *p (not '*') matches `c`; advances *p past it.
  static bool MatchOne(absl::string_view pattern, size_t* p, char c) {
    const char first = pattern[*p];
    if (first == '?') {
      ++*p;
      return true;
    }
    if (first == '[') {
      if (std::optional<bool> in_set = MatchSet(pattern, p, c)) return *in_set;
      // No closing ']': a literal '['.
    }
    if (first == '\\' && *p + 1 < pattern.size()) ++*p;
    return pattern[(*p)++] == c;
  }

  // A bracket expression at *p: whether `c` is in it, and *p moved past it; nullopt (and *p kept)
  // when it has no closing ']'.
  static std::optional<bool> MatchSet(absl::string_view pattern, size_t* p, char c) {
    size_t i = *p + 1;
    bool negate = false;
    if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
      negate = true;
      ++i;
    }
    bool found = false;
    bool first = true;
    const auto uc = static_cast<unsigned char>(c);
    while (i < pattern.size() && (first || pattern[i] != ']')) {
      first = false;
      if (pattern[i] == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        const size_t close = pattern.find(":]", i + 2);
        if (close != absl::string_view::npos) {
          found |= InClass(pattern.substr(i + 2, close - i - 2), uc);
          i = close + 2;
          continue;
        }
      }
      char low = pattern[i];
      if (low == '\\' && i + 1 < pattern.size()) low = pattern[++i];
      ++i;
      char high = low;
      if (i + 1 < pattern.size() && pattern[i] == '-' && pattern[i + 1] != ']') {
        high = pattern[i + 1];
        if (high == '\\' && i + 2 < pattern.size()) high = pattern[++i + 1];
        i += 2;
      }
      found |= low <= c && c <= high;
    }
    if (i >= pattern.size()) return std::nullopt;
    *p = i + 1;
    // FNM_PATHNAME semantics are per segment already; '/' never reaches here.
    return found != negate;
  }

  static bool InClass(absl::string_view name, unsigned char c) {
    if (name == "alpha") return absl::ascii_isalpha(c);
    if (name == "digit") return absl::ascii_isdigit(c);
    if (name == "alnum") return absl::ascii_isalnum(c);
    if (name == "upper") return absl::ascii_isupper(c);
    if (name == "lower") return absl::ascii_islower(c);
    if (name == "space") return absl::ascii_isspace(c);
    if (name == "xdigit") return absl::ascii_isxdigit(c);
    if (name == "punct") return absl::ascii_ispunct(c);
    if (name == "blank") return absl::ascii_isblank(c);
    if (name == "cntrl") return absl::ascii_iscntrl(c);
    if (name == "print") return absl::ascii_isprint(c);
    if (name == "graph") return absl::ascii_isgraph(c);
    return false;
  }
};

using Segments = std::vector<absl::string_view>;

// A place in a name: the segment starting at byte `begin` runs to the next '/'. The name is never
// split into a vector (it may have half a million segments).
struct NameCursor {
  absl::string_view name;
  size_t begin;  // name.size() + 1: past the last segment
  bool at_end() const { return begin > name.size(); }
  absl::string_view segment() const {
    const size_t slash = std::min(name.find('/', begin), name.size());
    return name.substr(begin, slash - begin);
  }
  void Advance() { begin += segment().size() + 1; }
};

// pattern[p_begin, p_end) (no "**" in it) against the name's segments from `at`; on a match,
// `*after` is where they end.
bool BlockMatchesAt(const Segments& pattern, size_t p_begin, size_t p_end, NameCursor at,
                    NameCursor* after) {
  for (size_t p = p_begin; p < p_end; ++p, at.Advance()) {
    if (at.at_end() || !SegmentGlob::Matches(pattern[p], at.segment())) return false;
  }
  if (after != nullptr) *after = at;
  return true;
}

// The pattern is blocks of plain segments separated by "**". The first block must match the
// name's first segments and the last its last ones; each block between may then match at its
// leftmost place, since taking the leftmost leaves the most room for the blocks after it (the
// same argument as for '*' within a segment). No backtracking: O(|name| x |pattern|) segment
// matches at worst, where trying every split for every "**" was O(|name|^stars).
bool SegmentsMatch(const Segments& pattern, absl::string_view name) {
  std::vector<size_t> stars;
  for (size_t p = 0; p < pattern.size(); ++p) {
    if (pattern[p] == "**") stars.push_back(p);
  }
  NameCursor n{name, 0};
  if (stars.empty()) {
    return BlockMatchesAt(pattern, 0, pattern.size(), n, &n) && n.at_end();
  }
  // The last block: the name's last `tail` segments, found from the end.
  const size_t tail = pattern.size() - stars.back() - 1;
  NameCursor tail_start{name, name.size() + 1};
  for (size_t i = 0; i < tail; ++i) {
    if (tail_start.begin == 0) return false;  // fewer segments than the tail
    const size_t slash =
        tail_start.begin >= 2 ? name.rfind('/', tail_start.begin - 2) : absl::string_view::npos;
    tail_start.begin = slash == absl::string_view::npos ? 0 : slash + 1;
  }
  if (!BlockMatchesAt(pattern, stars.back() + 1, pattern.size(), tail_start, nullptr)) {
    return false;
  }
  // The head block, then each middle block at its leftmost place, all before the tail.
  if (!BlockMatchesAt(pattern, 0, stars.front(), n, &n) || n.begin > tail_start.begin) {
    return false;
  }
  for (size_t s = 0; s + 1 < stars.size(); ++s) {
    for (;; n.Advance()) {
      if (n.begin >= tail_start.begin && stars[s + 1] > stars[s] + 1) return false;
      NameCursor after = n;
      if (BlockMatchesAt(pattern, stars[s] + 1, stars[s + 1], n, &after) &&
          after.begin <= tail_start.begin) {
        n = after;
        break;
      }
      if (n.at_end()) return false;
    }
  }
  return true;
}

std::string Sha256(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

// `text` cut at every '/'.
Segments SplitSegments(absl::string_view text) {
  Segments segments;
  size_t begin = 0;
  for (;;) {
    const size_t slash = text.find('/', begin);
    if (slash == absl::string_view::npos) break;
    segments.push_back(text.substr(begin, slash - begin));
    begin = slash + 1;
  }
  segments.push_back(text.substr(begin));
  return segments;
}

}  // namespace

bool AllowPatternMatches(absl::string_view pattern, absl::string_view name) {
  return SegmentsMatch(SplitSegments(pattern), name);
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
