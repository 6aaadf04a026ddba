// Engine slot buffers lent to gRPC for zero-copy responses, and their way back to the worker.
//
// A read's bytes sit in its engine slot's registered buffer. Rather than copy them into a protobuf
// message, the server wraps the buffer in a grpc::Slice whose destroy callback runs when gRPC lets
// go of the bytes: once the transport has written them to the socket, or when the call or the
// connection is torn down. That may happen on any gRPC thread, and at shutdown after the worker
// and its engine are gone (connections may outlive grpc::Server::Shutdown and even the server
// object). So:
//  - the callback only pushes the loan onto a lock-free list (many producers, one consumer); the
//    worker drains it in PollOnce and releases the slot to its engine on its own thread (the
//    engine has no locks and is never touched from elsewhere);
//  - the loans and a reference to the engine's buffer memory (EngineContext::RetainBufferMemory)
//    belong to a reference-counted ledger that every lent slice holds, so a callback that comes
//    after the worker is gone still finds them, and the last one frees them.
//
// Slow clients hold buffers: a slice lives until its bytes are in the kernel, so a client that
// stops reading keeps the slots of what was sent to it, past HTTP/2 flow control windows of
// megabytes. Zero copy is therefore bounded per account (one stream) and per worker, for each path;
// past either bound the server copies the bytes as before and the slot is free at once. No client
// can pin a worker's slots, and at least a quarter of each path's slots (one at least) is never
// held for sending.
#ifndef BLOCKREAD_SERVER_SLOT_LENDER_H_
#define BLOCKREAD_SERVER_SLOT_LENDER_H_

#include <grpcpp/support/slice.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "server/held_slot.h"
#include "storage/engine_config.h"
#include "storage/read_path.h"
#include "storage/stats.h"

namespace blockread::server {

// The slots one call holds for sending (gathered results and slices in gRPC's hands), so each
// call is bounded. Owned by the call; worker thread only. The call must Close() it with the lender
// before it goes.
class SlotAccount {
 public:
  uint32_t held(storage::ReadPathKind path) const { return held_[static_cast<int>(path)]; }

 private:
  friend class SlotLender;
  std::array<uint32_t, storage::kReadPathCount> held_{};
};

// One per worker. Threading: every method, the constructor and the destructor run on the worker's
// thread; only the slices' destroy callbacks run elsewhere, and they touch nothing but the ledger.
class SlotLender {
 public:
  // Loans for every slot `config` gives `engine`. `held_gauge` (the worker's, read by GetStats)
  // follows held(). `engine` must outlive the lender; the buffer memory outlives both as long as
  // a slice needs it.
  SlotLender(storage::EngineContext& engine, const storage::EngineConfig& config,
             storage::Counter& held_gauge);
  // Drops the worker's reference to the ledger. Slots still lent are never returned to the engine
  // (it goes next); their memory stays mapped until gRPC releases the last of them.
  ~SlotLender();
  SlotLender(const SlotLender&) = delete;
  SlotLender& operator=(const SlotLender&) = delete;

  // Whether a read just delivered on `path` may be sent without a copy, for `account` (null for
  // a call that holds one slot at most, a unary call). True: the slot is counted as held from now
  // until Drop() or until gRPC releases its slice and ReturnReleased() sees it, and the read's
  // callback must keep the slot (return true). False: copy the bytes; the bound is reached.
  bool TryHold(storage::ReadPathKind path, SlotAccount* account);
  // The held slot's bytes as a slice. When gRPC lets go of the last reference to it, the slot
  // comes back through ReturnReleased(). `account` as given to TryHold.
  grpc::Slice Lend(const HeldSlot& slot, SlotAccount* account);
  // A held slot that will not be sent after all (its call ended first): back to the engine now.
  void Drop(const HeldSlot& slot, SlotAccount* account);
  // Releases to the engine every slot whose slice gRPC has let go of since the last call. Returns
  // how many. Call every loop turn, before the engine admits reads.
  int ReturnReleased();
  // The account's call is going away: its slices still in gRPC's hands count for the worker only
  // from now on. REQUIRES: it holds no gathered (unlent) slot any more.
  void Close(SlotAccount& account);

  // Slots held for sending on this worker, both paths.
  uint32_t held() const { return held_[0] + held_[1]; }
  // The bounds, per path (for tests).
  uint32_t account_limit(storage::ReadPathKind path) const {
    return account_limit_[static_cast<int>(path)];
  }
  uint32_t worker_limit(storage::ReadPathKind path) const {
    return worker_limit_[static_cast<int>(path)];
  }

 private:
  struct Loan;
  struct Ledger;
  static void OnSliceReleased(void* loan);
  void Unhold(storage::ReadPathKind path, SlotAccount* account);

  storage::EngineContext& engine_;
  storage::Counter& held_gauge_;
  Ledger* ledger_;           // one reference is ours; see Ledger
  uint32_t loan_count_ = 0;  // one per engine slot
  std::vector<Loan*> free_loans_;
  std::array<uint32_t, storage::kReadPathCount> held_{};
  std::array<uint32_t, storage::kReadPathCount> account_limit_{};
  std::array<uint32_t, storage::kReadPathCount> worker_limit_{};
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_SLOT_LENDER_H_
