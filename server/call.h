// What lives on a worker's completion queue: calls, and the tags of their events.
#ifndef BLOCKREAD_SERVER_CALL_H_
#define BLOCKREAD_SERVER_CALL_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <memory>

#include "server/access.h"

namespace blockread::server {

class Call;
class Worker;

// The RPC methods the server counts (a bounded label set).
enum class RpcMethod : uint8_t {
  kReadBlock = 0,
  kReadBlocks,
  kStatFile,
  kListFiles,
  kGetStats,
  kExplain,
  kHealthCheck,
  kHealthWatch,
};
inline constexpr int kRpcMethodCount = 8;
const char* RpcMethodName(RpcMethod method);

// The `void*` handed to gRPC for one kind of event of one call.
struct CallTag {
  Call* call;
  uint8_t event;
};

// One RPC's state machine, on the worker thread that owns the completion queue the RPC arrived
// on; every method runs there.
//
// Lifetime: a call lives exactly as long as its count of pending operations. Each gRPC operation
// started (through Op()), each engine read in flight, each read waiting for admission and each
// scheduled flush holds one; the call deletes itself when the last is released. Nothing else
// decides when a call goes, so a cancellation, a deadline or a shutdown can never free a call
// (or the engine slot its read writes into) while anything still refers to it.
//
// Events: kRequest (the request arrived, or the server shut down before one did) and kDone (the
// RPC is over, cancelled or not) are handled here for every method; the accept point runs on
// kRequest before any per-method code. Subclasses number their own events from kFirstMethodEvent.
class Call {
 public:
  Call(Worker& worker, RpcMethod method);
  virtual ~Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // The worker's dispatcher: runs the event, then releases the hold its operation had (which may
  // delete the call).
  void HandleEvent(uint8_t event, bool ok);

  RpcMethod method() const { return method_; }
  // Who made the call: set by the accept point; Identity::Nobody() until then and for health.
  const Identity& identity() const { return *identity_; }
  // The accept point's verdict: `identity` belongs to `policy` (of `policy_generation`, see
  // AccessRules::generation), which the call keeps alive.
  void SetIdentity(const Identity* identity, std::shared_ptr<const AccessPolicy> policy,
                   uint64_t policy_generation) {
    identity_ = identity;
    policy_ = std::move(policy);
    policy_generation_ = policy_generation;
  }
  uint64_t policy_generation() const { return policy_generation_; }

 protected:
  static constexpr uint8_t kRequest = 0;
  static constexpr uint8_t kDone = 1;
  static constexpr uint8_t kFirstMethodEvent = 2;

  // Returns `tag` for a gRPC operation about to start, holding the call until its event comes
  // back. Start the operation right after; one that cannot start must not take a hold.
  void* Op(CallTag& tag) {
    Hold();
    return &tag;
  }
  void Hold() { ++pending_; }
  // Drops a hold; at zero the call deletes itself, so nothing may touch it after this.
  void Release() {
    if (--pending_ == 0) delete this;
  }

  // The tag for the Request* call that starts waiting for the request (from the subclass
  // constructor, once). Registers the done notice first, as gRPC requires.
  void* RequestTag() {
    context_.AsyncNotifyWhenDone(&done_tag_);
    Hold();  // the request operation
    return &request_tag_;
  }
  template <typename RequestFn>
  void RequestCall(RequestFn&& request) {
    request(RequestTag());
  }

  // A new call of the same method on the worker's queue, so the next request can be matched.
  virtual void PostNext() = 0;
  // The request was accepted: the method's own work starts.
  virtual void OnRequest() = 0;
  // The accept point refused the request: answer `status` without running method code.
  virtual void Refuse(const grpc::Status& status) = 0;
  // The RPC is over (kDone). `cancelled()` says whether the client went away or the deadline
  // passed before a status went out. Drop waiting work here.
  virtual void OnDone() {}
  virtual void OnEvent(uint8_t event, bool ok) = 0;

  // Records the status the call is about to send (counted by method and code).
  void CountFinish(grpc::StatusCode code);
  // Ends a unary call with `status` (and `response` when OK), unless the queue is shutting down.
  template <typename Responder, typename Response>
  void FinishUnary(Responder& responder, const Response& response, const grpc::Status& status,
                   CallTag& finish_tag) {
    if (!may_start_operations()) return;
    CountFinish(status.error_code());
    if (status.ok()) {
      responder.Finish(response, status, Op(finish_tag));
    } else {
      responder.FinishWithError(status, Op(finish_tag));
    }
  }
  bool finish_sent() const { return finish_sent_; }
  bool cancelled() const { return cancelled_; }
  // False once the queue is shutting down (or the RPC is over): start no new operation.
  bool may_start_operations() const;

  Worker& worker_;
  grpc::ServerContext context_;

 private:
  const RpcMethod method_;
  const Identity* identity_ = &Identity::Nobody();
  std::shared_ptr<const AccessPolicy> policy_;
  uint64_t policy_generation_ = 0;
  uint32_t pending_ = 0;
  bool finish_sent_ = false;
  bool cancelled_ = false;
  CallTag request_tag_{this, kRequest};
  CallTag done_tag_{this, kDone};
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_CALL_H_
