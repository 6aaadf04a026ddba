#include "server/exposure.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/match.h"
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
