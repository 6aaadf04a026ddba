// TLS and mutual TLS for the gRPC port (the exposure rules are in server/exposure.h).
#ifndef BLOCKREAD_SERVER_TRANSPORT_SECURITY_H_
#define BLOCKREAD_SERVER_TRANSPORT_SECURITY_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "blockread/v1/server_config.pb.h"

namespace blockread::server {

// The credentials for `listen`: insecure, or TLS from tls_cert/tls_key, re-read every
// tls_refresh_interval_s, with client certificates required and verified against tls_client_ca
// when it is set. Fails when a configured file cannot be read now, naming it (the watcher would
// otherwise fail every handshake without a word).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenCredentials(
    const v1::ServerConfig& config);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_TRANSPORT_SECURITY_H_
