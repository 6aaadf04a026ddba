// Who can reach the server, and over what: TLS and mutual TLS for the gRPC port, and the rule
// that plaintext endpoints stay on loopback unless the operator says otherwise.
#ifndef BLOCKREAD_SERVER_TRANSPORT_SECURITY_H_
#define BLOCKREAD_SERVER_TRANSPORT_SECURITY_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "blockread/v1/server_config.pb.h"

namespace blockread::server {

// True when `listen` (ADDR:PORT, [V6ADDR]:PORT or unix:PATH) can only be reached from this
// machine: 127.0.0.0/8, ::1, "localhost", or a Unix socket. Host names other than localhost are
// not resolved and count as reachable from elsewhere.
bool IsLocalOnlyAddress(absl::string_view listen);

// The exposure rules of a config (part of its validation; opens nothing):
// - tls_cert and tls_key come together; tls_client_ca needs them;
// - plaintext gRPC (`listen` without TLS), gRPC without access rules (no `auth`) and the HTTP
//   /metrics endpoint must be on loopback unless allow_insecure is set;
// - health_listen may be anywhere (it serves health only).
// Errors name the setting and what to do.
absl::Status CheckExposure(const v1::ServerConfig& config);

// The credentials for `listen`: insecure, or TLS from tls_cert/tls_key, re-read every
// tls_refresh_interval_s, with client certificates required and verified against tls_client_ca
// when it is set. Fails when a configured file cannot be read now, naming it (the watcher would
// otherwise fail every handshake without a word).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenCredentials(
    const v1::ServerConfig& config);

// One line for the startup log describing the transport ("TLS, client certificates required"),
// or a warning when allow_insecure exposes a plaintext endpoint off loopback ("" otherwise).
std::string TransportSummary(const v1::ServerConfig& config);
std::string InsecureExposureWarning(const v1::ServerConfig& config);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_TRANSPORT_SECURITY_H_
