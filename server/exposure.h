// Who can reach the server's endpoints: the rule that plaintext endpoints, and endpoints
// without access rules, stay on loopback unless the operator says otherwise. Part of config
// validation, so gRPC-free (the fuzz build compiles it); the TLS credentials themselves are in
// server/transport_security.h.
#ifndef BLOCKREAD_SERVER_EXPOSURE_H_
#define BLOCKREAD_SERVER_EXPOSURE_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
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

// The access control of a unix:PATH listen socket: its file's permission bits and group.
// Connecting needs write permission on the file; whoever connects then authenticates as over TCP
// (tokens, or TLS client certificates; without --auth every client may read everything).
inline constexpr char kDefaultListenSocketMode[] = "0660";
struct SocketFileAccess {
  std::string path;
  mode_t mode = 0;
  std::optional<gid_t> group;  // unset: the server's own
};

// From listen, listen_socket_mode and listen_socket_group: nullopt unless `listen` is unix:PATH.
// Errors name the setting: a mode that is not octal permission bits, a group that does not
// exist, or either setting with an address that has no socket file (TCP, unix-abstract:).
absl::StatusOr<std::optional<SocketFileAccess>> ListenSocketAccess(const v1::ServerConfig& config);

// Sets the socket file's mode and group; the error names the file and the cause.
absl::Status ApplySocketFileAccess(const SocketFileAccess& access);

// One line for the startup log describing the transport ("TLS, client certificates required"),
// or a warning when allow_insecure exposes a plaintext endpoint off loopback ("" otherwise).
std::string TransportSummary(const v1::ServerConfig& config);
std::string InsecureExposureWarning(const v1::ServerConfig& config);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_EXPOSURE_H_
