// A plaintext endpoint that serves only grpc.health.v1, for probes that speak neither TLS nor
// client certificates (kubelet's gRPC probes, container health checks). It is a second gRPC
// server with gRPC's synchronous threads, never the pinned workers: probes are rare, and the
// BlockRead service is not on it, so it may listen off loopback.
#ifndef BLOCKREAD_SERVER_HEALTH_ENDPOINT_H_
#define BLOCKREAD_SERVER_HEALTH_ENDPOINT_H_

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/shared_state.h"

namespace blockread::server {

// Threading: Start and the destructor on one controlling thread; the RPCs run on gRPC's threads
// and only read `shared.health` and `shared.stopping`.
class HealthEndpoint {
 public:
  // Binds `listen` (ADDR:PORT; port 0 picks a free port). Errors name the address.
  static absl::StatusOr<std::unique_ptr<HealthEndpoint>> Start(const std::string& listen,
                                                               const SharedState& shared);
  // Ends open Watch streams and stops the server.
  ~HealthEndpoint();
  HealthEndpoint(const HealthEndpoint&) = delete;
  HealthEndpoint& operator=(const HealthEndpoint&) = delete;

  int port() const { return port_; }

 private:
  class Service;
  HealthEndpoint() = default;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_HEALTH_ENDPOINT_H_
