#include "server/transport_security.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <fstream>

#include "absl/strings/str_cat.h"

namespace blockread::server {
namespace {

// Opens `path` for reading now, so a typo is a startup error rather than silent handshake
// failures from the certificate watcher.
absl::Status CheckReadable(const char* setting, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--", setting, ": cannot read ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenCredentials(
    const v1::ServerConfig& config) {
  if (config.tls_cert().empty()) return grpc::InsecureServerCredentials();
  if (absl::Status s = CheckReadable("tls-cert", config.tls_cert()); !s.ok()) return s;
  if (absl::Status s = CheckReadable("tls-key", config.tls_key()); !s.ok()) return s;
  const bool mutual = !config.tls_client_ca().empty();
  if (mutual) {
    if (absl::Status s = CheckReadable("tls-client-ca", config.tls_client_ca()); !s.ok()) return s;
  }
  // A file watcher, not SslServerCredentials: the files are re-read every interval, so rotated
  // certificates are served without a restart.
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      config.tls_key(), config.tls_cert(), config.tls_client_ca(), config.tls_refresh_interval_s());
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (mutual) {
    options.watch_root_certs();
    // gRPC's default does not even ask for a client certificate, so a CA alone would admit
    // clients without one.
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace blockread::server
