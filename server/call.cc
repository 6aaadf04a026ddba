#include "server/call.h"

#include "server/worker.h"

namespace blockread::server {

const char* RpcMethodName(RpcMethod method) {
  switch (method) {
    case RpcMethod::kReadBlock:
      return "ReadBlock";
    case RpcMethod::kReadBlocks:
      return "ReadBlocks";
    case RpcMethod::kStatFile:
      return "StatFile";
    case RpcMethod::kListFiles:
      return "ListFiles";
    case RpcMethod::kGetStats:
      return "GetStats";
    case RpcMethod::kExplain:
      return "Explain";
    case RpcMethod::kHealthCheck:
      return "grpc.health.v1.Health/Check";
    case RpcMethod::kHealthWatch:
      return "grpc.health.v1.Health/Watch";
  }
  return "unknown";
}

Call::Call(Worker& worker, RpcMethod method) : worker_(worker), method_(method) {}

void Call::HandleEvent(uint8_t event, bool ok) {
  switch (event) {
    case kRequest:
      // Not ok: the server shut down before a request matched; no done notice will come.
      if (ok) {
        Hold();  // the done notice, armed now that the request matched
        if (worker_.accepting_operations()) PostNext();
        if (grpc::Status accepted = worker_.Accept(*this, context_); accepted.ok()) {
          OnRequest();
        } else {
          Refuse(accepted);
        }
      }
      break;
    case kDone:
      cancelled_ = context_.IsCancelled();
      if (cancelled_ && !finish_sent_) {
        worker_.mutable_counters().CountRpc(method_, grpc::StatusCode::CANCELLED);
      }
      OnDone();
      break;
    default:
      OnEvent(event, ok);
      break;
  }
  Release();  // the operation whose event this was
}

void Call::CountFinish(grpc::StatusCode code) {
  finish_sent_ = true;
  worker_.mutable_counters().CountRpc(method_, code);
}

bool Call::may_start_operations() const { return worker_.accepting_operations(); }

}  // namespace blockread::server
