#include "server/health_calls.h"

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_stream.h>

#include "server/status_mapping.h"
#include "server/unary_call.h"

namespace blockread::server {

bool IsKnownHealthService(const std::string& service) {
  return service.empty() || service == "blockread.v1.BlockRead";
}
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using HealthService = grpc::health::v1::Health::AsyncService;

grpc::Status Check(Worker& worker, const Identity&, const HealthCheckRequest& request,
                   HealthCheckResponse* response) {
  if (!IsKnownHealthService(request.service())) {
    return ToGrpcStatus(absl::NotFoundError("unknown service: " + request.service()));
  }
  response->set_status(static_cast<HealthCheckResponse::ServingStatus>(
      worker.shared().health.load(std::memory_order_acquire)));
  return grpc::Status::OK;
}

// A Watch stream: the current status at once, then every change, until the client goes away or
// the server stops.
class WatchCall final : public Call, public HealthWatcher {
 public:
  static void Post(Worker& worker) { new WatchCall(worker); }

  void OnHealthChanged() override {
    if (!writing_) SendChangeOrFinish();
  }

 private:
  static constexpr uint8_t kWrite = kFirstMethodEvent;
  static constexpr uint8_t kFinish = kFirstMethodEvent + 1;

  explicit WatchCall(Worker& worker) : Call(worker, RpcMethod::kHealthWatch), stream_(&context_) {
    RequestCall([&](void* tag) {
      worker_.shared().health_service.RequestWatch(&context_, &request_, &stream_, worker_.queue(),
                                                   worker_.queue(), tag);
    });
  }
  ~WatchCall() override { StopWatching(); }

  void PostNext() override { Post(worker_); }

  void OnRequest() override {
    if (!IsKnownHealthService(request_.service())) {
      Send(HealthCheckResponse::SERVICE_UNKNOWN);
      return;
    }
    worker_.AddWatcher(this);
    watching_ = true;
    Send(worker_.shared().health.load(std::memory_order_acquire));
  }

  void Refuse(const grpc::Status& status) override { FinishWith(status); }

  void OnDone() override {
    over_ = true;
    StopWatching();
  }

  void OnEvent(uint8_t event, bool ok) override {
    if (event != kWrite) return;  // kFinish: the stream is closed; nothing left to do
    writing_ = false;
    if (!ok) return;
    if (pending_status_ >= 0) {
      const int status = pending_status_;
      pending_status_ = -1;
      Send(status);
    } else {
      SendChangeOrFinish();
    }
  }

  void StopWatching() {
    if (!watching_) return;
    watching_ = false;
    worker_.RemoveWatcher(this);
  }

  // With no write in flight: send the current status if the client has not seen it; once the
  // server is stopping and NOT_SERVING has gone out, end the stream so it does not hold the
  // graceful shutdown until its deadline.
  void SendChangeOrFinish() {
    if (!watching_) return;
    const SharedState& shared = worker_.shared();
    const int current = shared.health.load(std::memory_order_acquire);
    if (last_sent_ != current) {
      Send(current);
    } else if (shared.stopping.load() && current == HealthCheckResponse::NOT_SERVING) {
      FinishWith(ToGrpcStatus(absl::UnavailableError("server shutting down")));
    }
  }

  void FinishWith(const grpc::Status& status) {
    if (over_ || finish_sent() || !may_start_operations()) return;
    CountFinish(status.error_code());
    stream_.Finish(status, Op(finish_tag_));
  }

  void Send(int status) {
    if (over_ || finish_sent() || !may_start_operations()) return;
    if (writing_) {  // one write at a time; only the latest status matters
      pending_status_ = status;
      return;
    }
    response_.set_status(static_cast<HealthCheckResponse::ServingStatus>(status));
    last_sent_ = status;
    writing_ = true;
    stream_.Write(response_, Op(write_tag_));
  }

  HealthCheckRequest request_;
  HealthCheckResponse response_;
  grpc::ServerAsyncWriter<HealthCheckResponse> stream_;
  CallTag write_tag_{this, kWrite};
  CallTag finish_tag_{this, kFinish};
  bool over_ = false;  // the done notice came: the RPC is over
  bool writing_ = false;
  bool watching_ = false;
  int pending_status_ = -1;
  int last_sent_ = -1;
};

}  // namespace

void PostHealthCalls(Worker& worker) {
  HealthService* service = &worker.shared().health_service;
  UnaryCall<HealthService, HealthCheckRequest, HealthCheckResponse>::Post(
      worker, service, &HealthService::RequestCheck, &Check, RpcMethod::kHealthCheck);
  WatchCall::Post(worker);
}

}  // namespace blockread::server
