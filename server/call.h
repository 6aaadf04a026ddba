// What lives on a worker's completion queue: calls, and the tags of their events.
#ifndef BLOCKREAD_SERVER_CALL_H_
#define BLOCKREAD_SERVER_CALL_H_

#include <cstdint>

namespace blockread::server {

class Call;

// The `void*` handed to gRPC for one kind of event of one call.
struct CallTag {
  Call* call;
  uint8_t event;
};

// One RPC's state machine. Owned by itself: it deletes itself when its last event has come back
// and no engine read of it is in flight. Every method runs on the worker thread that owns the
// completion queue the RPC arrived on.
class Call {
 public:
  virtual ~Call() = default;
  // An event came back from the queue with `ok` as gRPC reported it.
  virtual void OnEvent(uint8_t event, bool ok) = 0;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_CALL_H_
