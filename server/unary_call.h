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
  // Fills the response, or returns the error to answer with. `caller` is who made the call (the
  // accept point has authenticated it): handlers show it only what it may see.
  using Handler = grpc::Status (*)(Worker& worker, const Identity& caller, const Request& request,
                                   Response* response);

  // Starts waiting for the next call of `method` on the worker's queue; finished calls are
  // counted as `counted_as`.
  static void Post(Worker& worker, Service* service, RequestMethod method, Handler handler,
                   RpcMethod counted_as) {
    new UnaryCall(worker, service, method, handler, counted_as);
  }

 private:
  static constexpr uint8_t kFinish = kFirstMethodEvent;

  UnaryCall(Worker& worker, Service* service, RequestMethod method, Handler handler,
            RpcMethod counted_as)
      : Call(worker, counted_as),
        service_(service),
        method_(method),
        handler_(handler),
        responder_(&context_) {
    (service_->*method_)(&context_, &request_, &responder_, worker_.queue(), worker_.queue(),
                         RequestTag());
  }

  void PostNext() override { Post(worker_, service_, method_, handler_, method()); }
  void OnRequest() override {
    FinishUnary(responder_, response_, handler_(worker_, identity(), request_, &response_),
                finish_tag_);
  }
  void Refuse(const grpc::Status& status) override {
    FinishUnary(responder_, response_, status, finish_tag_);
  }
  void OnEvent(uint8_t, bool) override {}  // kFinish: the answer is out; nothing left to do

  Service* const service_;
  const RequestMethod method_;
  const Handler handler_;
  Request request_;
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> responder_;
  CallTag finish_tag_{this, kFinish};
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_UNARY_CALL_H_
