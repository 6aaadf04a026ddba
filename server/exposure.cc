#include "server/exposure.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace blockread::server {

bool IsLocalOnlyAddress(absl::string_view listen) {
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) return true;
  // gRPC's explicit-family spellings.
  if (!absl::ConsumePrefix(&listen, "ipv4:")) absl::ConsumePrefix(&listen, "ipv6:");
  const size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos) return false;
  absl::string_view host = listen.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) return false;
  if (host == "localhost") return true;
  const std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status CheckExposure(const v1::ServerConfig& config) {
  const bool tls = !config.tls_cert().empty();
  if (tls != !config.tls_key().empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give the certificate chain and its private key");
  }
  if (!config.tls_client_ca().empty() && !tls) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key: client certificates are only checked "
        "over TLS");
  }
  if (config.allow_insecure()) return absl::OkStatus();
  if (!tls && !IsLocalOnlyAddress(config.listen())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", config.listen(),
        " is not a loopback address, and without TLS anyone who reaches it could read every "
        "served file: give --tls-cert and --tls-key (and --tls-client-ca to require client "
        "certificates), or --allow-insecure to serve plaintext anyway"));
  }
  if (config.auth().empty() && !IsLocalOnlyAddress(config.listen())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", config.listen(),
        " is not a loopback address, and without --auth every client that reaches it may read "
        "every served file: give --auth=FILE (identities and what each may read), or "
        "--allow-insecure"));
  }
  if (!config.metrics_listen().empty() && !IsLocalOnlyAddress(config.metrics_listen())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-listen=", config.metrics_listen(),
        " is not a loopback address; /metrics is plaintext HTTP and names devices and files: "
        "keep it on loopback (scrape through a sidecar or an SSH tunnel), or give "
        "--allow-insecure"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SocketFileAccess>> ListenSocketAccess(const v1::ServerConfig& config) {
  absl::string_view path = config.listen();
  const bool has_settings =
      !config.listen_socket_mode().empty() || !config.listen_socket_group().empty();
  if (absl::StartsWith(path, "unix-abstract:") || !absl::ConsumePrefix(&path, "unix:")) {
    if (!has_settings) return std::nullopt;
    return absl::InvalidArgumentError(
        absl::StrCat("--listen-socket-mode and --listen-socket-group set a unix:PATH socket file's "
                     "permissions; --listen=",
                     config.listen(),
                     absl::StartsWith(config.listen(), "unix-abstract:")
                         ? " is an abstract socket, which has no file and no permissions"
                         : " is not a Unix socket"));
  }
  absl::ConsumePrefix(&path, "//");  // unix:///abs/path
  SocketFileAccess access;
  access.path = std::string(path);
  const std::string mode =
      config.listen_socket_mode().empty() ? kDefaultListenSocketMode : config.listen_socket_mode();
  const unsigned long bits =  // NOLINT(runtime/int): strtoul's type
      mode.find_first_not_of("01234567") == std::string::npos
          ? std::strtoul(mode.c_str(), nullptr, 8)
          : ~0ul;
  if (mode.empty() || mode.size() > 4 || bits > 0777) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen-socket-mode: '", mode, "' is not permission bits in octal (e.g. 0660)"));
  }
  access.mode = static_cast<mode_t>(bits);
  const std::string& group = config.listen_socket_group();
  if (!group.empty()) {
    uint32_t gid = 0;
    if (absl::SimpleAtoi(group, &gid)) {
      access.group = static_cast<gid_t>(gid);
    } else {
      std::vector<char> buffer(16384);
      struct group entry;
      struct group* found = nullptr;
      if (getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
          found == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen-socket-group: no group '", group, "' on this machine"));
      }
      access.group = found->gr_gid;
    }
  }
  return access;
}

absl::Status ApplySocketFileAccess(const SocketFileAccess& access) {
  if (access.group.has_value() &&
      chown(access.path.c_str(), static_cast<uid_t>(-1), *access.group) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "cannot give the socket %s to group %u: %s", access.path, *access.group, strerror(errno)));
  }
  if (chmod(access.path.c_str(), access.mode) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "cannot set the socket %s's mode to %04o: %s", access.path, access.mode, strerror(errno)));
  }
  return absl::OkStatus();
}

std::string TransportSummary(const v1::ServerConfig& config) {
  if (config.tls_cert().empty()) return "plaintext";
  return absl::StrFormat(
      "TLS (%s, re-read every %u s)%s", config.tls_cert(), config.tls_refresh_interval_s(),
      config.tls_client_ca().empty()
          ? ""
          : absl::StrCat(", client certificates required, signed by ", config.tls_client_ca()));
}

std::string InsecureExposureWarning(const v1::ServerConfig& config) {
  std::string exposed;
  if (config.tls_cert().empty() && !IsLocalOnlyAddress(config.listen())) {
    exposed = absl::StrCat("plaintext gRPC on ", config.listen());
  }
  if (!config.metrics_listen().empty() && !IsLocalOnlyAddress(config.metrics_listen())) {
    absl::StrAppend(&exposed, exposed.empty() ? "" : " and ", "plaintext /metrics on ",
                    config.metrics_listen());
  }
  if (exposed.empty()) return "";
  return absl::StrCat("--allow-insecure: ", exposed,
                      " is reachable from other machines without encryption or client "
                      "authentication");
}

}  // namespace blockread::server
