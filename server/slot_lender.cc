#include "server/slot_lender.h"

#include <algorithm>

namespace blockread::server {

// One lendable slot's record. A loan is free (on the worker's free list), lent (a slice refers to
// it), or released (on the ledger's list, waiting for the worker).
struct SlotLender::Loan {
  // Read by the releasing thread. What orders the worker's lending before that thread's release
  // is inside gRPC, which ThreadSanitizer cannot see (the library is not instrumented), so the
  // worker publishes the loan itself: Lend() stores `ledger` with release and the callback loads
  // it with acquire, which orders everything the worker did before (building the ledger, filling
  // the buffer) before the callback. `next` is published by the list's CAS.
  std::atomic<Ledger*> ledger{nullptr};
  std::atomic<Loan*> next{nullptr};
  // Worker thread only.
  HeldSlot slot;
  SlotAccount* account = nullptr;
};

// What the destroy callbacks may touch: outlives the lender while any slice is lent.
struct SlotLender::Ledger {
  // The lender's reference plus one per lent slice; the last one deletes the ledger (and, through
  // `memory`, may unmap the engine's buffers), on whichever thread drops it.
  std::atomic<uint64_t> refs{1};
  // Loans whose slices gRPC released: a stack pushed by any thread, taken whole by the worker.
  std::atomic<Loan*> released{nullptr};
  std::unique_ptr<Loan[]> loans;
  std::shared_ptr<const void> memory;

  void Unref() {
    // acq_rel: every thread's use of the ledger happens before its deletion.
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

SlotLender::SlotLender(storage::EngineContext& engine, const storage::EngineConfig& config,
                       storage::Counter& held_gauge)
    : engine_(engine), held_gauge_(held_gauge), ledger_(new Ledger) {
  const uint32_t slots[storage::kReadPathCount] = {
      config.simple_max_bytes == 0 ? 0 : config.simple_slots, config.generic_slots};
  for (int path = 0; path < storage::kReadPathCount; ++path) {
    // A quarter of the slots (one at least) is never held for sending, so reads always progress;
    // one call may hold a quarter of them.
    const uint32_t reserve = std::max<uint32_t>(1, slots[path] / 4);
    worker_limit_[path] = slots[path] > reserve ? slots[path] - reserve : 0;
    account_limit_[path] = std::min(worker_limit_[path], reserve);
  }
  loan_count_ = slots[0] + slots[1];
  ledger_->loans.reset(new Loan[loan_count_]);
  ledger_->memory = engine.RetainBufferMemory();
  free_loans_.reserve(loan_count_);
  for (uint32_t i = 0; i < loan_count_; ++i) free_loans_.push_back(&ledger_->loans[i]);
}

SlotLender::~SlotLender() { ledger_->Unref(); }

bool SlotLender::TryHold(storage::ReadPathKind path, SlotAccount* account) {
  const int p = static_cast<int>(path);
  if (held_[p] >= worker_limit_[p]) return false;
  if (account != nullptr) {
    if (account->held_[p] >= account_limit_[p]) return false;
    ++account->held_[p];
  }
  ++held_[p];
  held_gauge_.Set(held());
  return true;
}

grpc::Slice SlotLender::Lend(const HeldSlot& slot, SlotAccount* account) {
  // Never empty: every held slot was counted by TryHold, which stays within the slots.
  Loan* loan = free_loans_.back();
  free_loans_.pop_back();
  loan->slot = slot;
  loan->account = account;
  ledger_->refs.fetch_add(1, std::memory_order_relaxed);   // the slice's
  loan->ledger.store(ledger_, std::memory_order_release);  // see Loan::ledger
  // gRPC only reads the bytes; the slice API takes a non-const pointer.
  return grpc::Slice(const_cast<char*>(slot.data), slot.length, &OnSliceReleased, loan);
}

void SlotLender::OnSliceReleased(void* arg) {
  // Any thread, possibly after the worker is gone: touch only the ledger.
  auto* loan = static_cast<Loan*>(arg);
  Ledger* ledger = loan->ledger.load(std::memory_order_acquire);
  Loan* head = ledger->released.load(std::memory_order_relaxed);
  do {
    loan->next.store(head, std::memory_order_relaxed);
    // release: the worker that takes the list (acquire) sees `next` and that gRPC is done with
    // the bytes before it reuses the slot.
  } while (!ledger->released.compare_exchange_weak(head, loan, std::memory_order_release,
                                                   std::memory_order_relaxed));
  ledger->Unref();  // the slice's; the loan itself now belongs to the worker again
}

int SlotLender::ReturnReleased() {
  // One relaxed load per loop turn when nothing came back.
  if (ledger_->released.load(std::memory_order_relaxed) == nullptr) return 0;
  Loan* loan = ledger_->released.exchange(nullptr, std::memory_order_acquire);
  int count = 0;
  while (loan != nullptr) {
    Loan* next = loan->next.load(std::memory_order_relaxed);
    engine_.Release(loan->slot.handle);
    Unhold(loan->slot.path, loan->account);
    loan->account = nullptr;
    free_loans_.push_back(loan);
    loan = next;
    ++count;
  }
  return count;
}

void SlotLender::Drop(const HeldSlot& slot, SlotAccount* account) {
  engine_.Release(slot.handle);
  Unhold(slot.path, account);
}

void SlotLender::Unhold(storage::ReadPathKind path, SlotAccount* account) {
  const int p = static_cast<int>(path);
  if (account != nullptr) --account->held_[p];
  --held_[p];
  held_gauge_.Set(held());
}

void SlotLender::Close(SlotAccount& account) {
  if (account.held_[0] == 0 && account.held_[1] == 0) return;
  // Rare (a call that ends with slices in gRPC's hands) and bounded by the worker's slots.
  for (uint32_t i = 0; i < loan_count_; ++i) {
    Loan& loan = ledger_->loans[i];
    if (loan.account == &account) loan.account = nullptr;
  }
  account.held_ = {};
}

}  // namespace blockread::server
