// A unary RPC answered at once by a handler on the worker thread (metadata RPCs, health Check).
#ifndef BLOCKREAD_SERVER_UNARY_CALL_H_
#define BLOCKREAD_SERVER_UNARY_CALL_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_unary_call.h>

#include "server/call.h"
#include "server/worker.h"

namespace blockread::server {

template <typename Service, typename Request, typename Response>
class UnaryCall final : public Call {
 public:
  using RequestMethod = void (Service::*)(grpc::ServerContext*, Request*,
                                          grpc::ServerAsyncResponseWriter<Response>*,
                                          grpc::CompletionQueue*, grpc::ServerCompletionQueue*,
                                          void*);
  // Fills the response, or returns the error to answer with.
  using Handler = grpc::Status (*)(Worker& worker, const Request& request, Response* response);

  // Starts waiting for the next call of `method` on the worker's queue; finished calls are
  // counted as `counted_as`.
  static void Post(Worker* worker, Service* service, RequestMethod method, Handler handler,
                   RpcMethod counted_as) {
    new UnaryCall(worker, service, method, handler, counted_as);
  }

  void OnEvent(uint8_t event, bool ok) override {
    if (event == kFinish || !ok) {  // finished, or never matched (shutdown)
      delete this;
      return;
    }
    if (!worker_->accepting_operations()) {
      delete this;
      return;
    }
    Post(worker_, service_, method_, handler_, counted_as_);
    const grpc::Status status = handler_(*worker_, request_, &response_);
    worker_->mutable_counters().CountRpc(counted_as_, status.error_code());
    if (status.ok()) {
      responder_.Finish(response_, status, &finish_tag_);
    } else {
      responder_.FinishWithError(status, &finish_tag_);
    }
  }

 private:
  enum Event : uint8_t { kRequest, kFinish };
  UnaryCall(Worker* worker, Service* service, RequestMethod method, Handler handler,
            RpcMethod counted_as)
      : worker_(worker),
        service_(service),
        method_(method),
        handler_(handler),
        counted_as_(counted_as),
        responder_(&context_) {
    (service_->*method_)(&context_, &request_, &responder_, worker_->queue(), worker_->queue(),
                         &request_tag_);
  }

  Worker* const worker_;
  Service* const service_;
  const RequestMethod method_;
  const Handler handler_;
  const RpcMethod counted_as_;
  grpc::ServerContext context_;
  Request request_;
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> responder_;
  CallTag request_tag_{this, kRequest};
  CallTag finish_tag_{this, kFinish};
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_UNARY_CALL_H_
