#include "server/health_calls.h"

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_stream.h>

#include "server/unary_call.h"

namespace blockread::server {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using HealthService = grpc::health::v1::Health::AsyncService;

bool IsKnownService(const std::string& service) {
  return service.empty() || service == "blockread.v1.BlockRead";
}

grpc::Status Check(Worker& worker, const HealthCheckRequest& request,
                   HealthCheckResponse* response) {
  if (!IsKnownService(request.service())) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service: " + request.service());
  }
  response->set_status(static_cast<HealthCheckResponse::ServingStatus>(
      worker.shared().health.load(std::memory_order_acquire)));
  return grpc::Status::OK;
}

// A Watch stream: the current status at once, then every change, until the client goes away or
// the server stops.
class WatchCall final : public Call, public HealthWatcher {
 public:
  static void Post(Worker* worker) { new WatchCall(worker); }

  void OnEvent(uint8_t event, bool ok) override {
    switch (event) {
      case kRequest:
        if (!ok) {
          delete this;
          return;
        }
        if (worker_->accepting_operations()) Post(worker_);
        done_pending_ = true;
        if (!IsKnownService(request_.service())) {
          Send(HealthCheckResponse::SERVICE_UNKNOWN);
        } else {
          worker_->AddWatcher(this);
          watching_ = true;
          Send(worker_->shared().health.load(std::memory_order_acquire));
        }
        return;
      case kWrite: {
        writing_ = false;
        if (!ok) {
          MaybeDelete();
          return;
        }
        if (pending_status_ >= 0) {
          const int status = pending_status_;
          pending_status_ = -1;
          Send(status);
        } else {
          SendChangeOrFinish();
        }
        MaybeDelete();
        return;
      }
      case kFinish:
        finishing_ = false;
        finished_ = true;
        MaybeDelete();
        return;
      case kDone:
        done_pending_ = false;
        if (!finishing_ && !finished_) {
          worker_->mutable_counters().CountRpc(RpcMethod::kHealthWatch,
                                               grpc::StatusCode::CANCELLED);
        }
        MaybeDelete();
        return;
    }
  }

  void OnHealthChanged() override {
    if (!writing_) SendChangeOrFinish();
  }

 private:
  enum Event : uint8_t { kRequest, kWrite, kFinish, kDone };
  explicit WatchCall(Worker* worker) : worker_(worker), stream_(&context_) {
    context_.AsyncNotifyWhenDone(&done_tag_);
    worker_->shared().health_service.RequestWatch(&context_, &request_, &stream_, worker_->queue(),
                                                  worker_->queue(), &request_tag_);
  }

  // With no write in flight: send the current status if the client has not seen it; once the
  // server is stopping and NOT_SERVING has gone out, end the stream so it does not hold the
  // graceful shutdown until its deadline.
  void SendChangeOrFinish() {
    if (!watching_) return;
    const SharedState& shared = worker_->shared();
    const int current = shared.health.load(std::memory_order_acquire);
    if (last_sent_ != current) {
      Send(current);
    } else if (shared.stopping.load() && current == HealthCheckResponse::NOT_SERVING &&
               !finishing_ && !finished_ && worker_->accepting_operations()) {
      finishing_ = true;
      worker_->mutable_counters().CountRpc(RpcMethod::kHealthWatch, grpc::StatusCode::UNAVAILABLE);
      stream_.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"),
                     &finish_tag_);
    }
  }

  void Send(int status) {
    if (!done_pending_ || finishing_ || finished_ || !worker_->accepting_operations()) return;
    if (writing_) {  // one write at a time; only the latest status matters
      pending_status_ = status;
      return;
    }
    response_.set_status(static_cast<HealthCheckResponse::ServingStatus>(status));
    last_sent_ = status;
    writing_ = true;
    stream_.Write(response_, &write_tag_);
  }

  void MaybeDelete() {
    if (done_pending_ || writing_ || finishing_) return;
    if (watching_) worker_->RemoveWatcher(this);
    delete this;
  }

  Worker* const worker_;
  grpc::ServerContext context_;
  HealthCheckRequest request_;
  HealthCheckResponse response_;
  grpc::ServerAsyncWriter<HealthCheckResponse> stream_;
  CallTag request_tag_{this, kRequest};
  CallTag write_tag_{this, kWrite};
  CallTag finish_tag_{this, kFinish};
  CallTag done_tag_{this, kDone};
  bool done_pending_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  bool writing_ = false;
  bool watching_ = false;
  int pending_status_ = -1;
  int last_sent_ = -1;
};

}  // namespace

void PostHealthCalls(Worker* worker) {
  HealthService* service = &worker->shared().health_service;
  UnaryCall<HealthService, HealthCheckRequest, HealthCheckResponse>::Post(
      worker, service, &HealthService::RequestCheck, &Check, RpcMethod::kHealthCheck);
  WatchCall::Post(worker);
}

}  // namespace blockread::server
