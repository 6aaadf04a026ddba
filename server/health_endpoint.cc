#include "server/health_endpoint.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/health_calls.h"
#include "server/status_mapping.h"

namespace blockread::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthEndpoint::Service final : public grpc::health::v1::Health::Service {
 public:
  explicit Service(const SharedState& shared) : shared_(shared) {}

  grpc::Status Check(grpc::ServerContext*, const HealthCheckRequest* request,
                     HealthCheckResponse* response) override {
    if (!IsKnownHealthService(request->service())) {
      return ToGrpcStatus(absl::NotFoundError("unknown service: " + request->service()));
    }
    response->set_status(Current());
    return grpc::Status::OK;
  }

  // The current status, then every change, until the client leaves or the server stops. Sync
  // handlers cannot be woken, so the status is polled: probes use Check, and a Watch here only
  // costs a sleeping gRPC thread.
  grpc::Status Watch(grpc::ServerContext* context, const HealthCheckRequest* request,
                     grpc::ServerWriter<HealthCheckResponse>* writer) override {
    if (!IsKnownHealthService(request->service())) {
      return ToGrpcStatus(absl::NotFoundError("unknown service: " + request->service()));
    }
    int sent = -1;
    while (!context->IsCancelled() && !ending_.load()) {
      const HealthCheckResponse::ServingStatus now = Current();
      if (now != sent) {
        HealthCheckResponse response;
        response.set_status(now);
        if (!writer->Write(response)) return grpc::Status::OK;
        sent = now;
      }
      if (shared_.stopping.load() && now == HealthCheckResponse::NOT_SERVING) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return ToGrpcStatus(absl::UnavailableError("server shutting down"));
  }

  void End() { ending_.store(true); }

 private:
  HealthCheckResponse::ServingStatus Current() const {
    return static_cast<HealthCheckResponse::ServingStatus>(
        shared_.health.load(std::memory_order_acquire));
  }

  const SharedState& shared_;
  std::atomic<bool> ending_{false};
};

absl::StatusOr<std::unique_ptr<HealthEndpoint>> HealthEndpoint::Start(const std::string& listen,
                                                                      const SharedState& shared) {
  std::unique_ptr<HealthEndpoint> endpoint(new HealthEndpoint());
  endpoint->service_ = std::make_unique<Service>(shared);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &endpoint->port_);
  builder.RegisterService(endpoint->service_.get());
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  endpoint->server_ = builder.BuildAndStart();
  if (endpoint->server_ == nullptr || endpoint->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("--health-listen: cannot listen on ", listen,
                     " (address in use, or not an address of this machine?)"));
  }
  return endpoint;
}

HealthEndpoint::~HealthEndpoint() {
  if (service_ != nullptr) service_->End();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
}

}  // namespace blockread::server
