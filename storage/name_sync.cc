#include "storage/name_sync.h"

#include <poll.h>

#include "storage/log.h"

namespace blockread::storage {

absl::StatusOr<std::unique_ptr<NameSync>> NameSync::Create(Catalog& catalog, bool use_io_uring) {
  const int fd = catalog.NameEventsFd();
  if (fd < 0) return nullptr;
  std::unique_ptr<NameSync> sync(new NameSync(catalog, fd));
  if (use_io_uring) {
    auto ring = Ring::Create({.sq_entries = 2, .cq_entries = 16, .mode = PollMode::kInterrupt});
    if (!ring.ok()) return ring.status();
    if (!(*ring)->ArmPoll(fd, 0)) {
      return absl::InternalError("io_uring refused a multishot poll of the name-event descriptor");
    }
    sync->ring_ = *std::move(ring);
  }
  // A name event still queued from before the poll was armed is seen all the same: a poll armed
  // on a descriptor that is already readable completes at once (and poll(2) is level-triggered).
  return sync;
}

bool NameSync::Woken() {
  if (ring_ == nullptr) {
    pollfd events = {fd_, POLLIN, 0};
    return poll(&events, 1, 0) > 0;
  }
  bool woken = false;
  bool armed = true;
  ring_->ReapUncounted([&](uint64_t, int, uint32_t flags) {
    woken = true;
    if (!(flags & IORING_CQE_F_MORE)) armed = false;  // the kernel ended the multishot poll
  });
  if (!armed && !ring_->ArmPoll(fd_, 0)) {
    LogWarning("name-event poll could not be re-armed on io_uring; polling it with poll(2)");
    ring_.reset();
  }
  return woken;
}

bool NameSync::CatchUp(absl::string_view name) {
  // Anything new since the last look gets a newer ticket, which covers every event queued before
  // it. Woken() also consumes the poll's completions.
  if (Woken()) ticket_ = catalog_.RequestCatchUp();
  if (ticket_ != 0) {
    if (!catalog_.HasAppliedNames(ticket_)) return Wait(catalog_.NameMayBeChanging(name, ticket_));
    ticket_ = 0;
  }
  if (!catalog_.ApplyingNameEvents()) return true;
  // The watcher is applying events it read before this look (the poll found nothing new, so
  // nothing newer is pending): only the names of that batch wait.
  const NameChange change = catalog_.NameMayBeChanging(name, /*turn=*/0);
  if (change != NameChange::kNo) ticket_ = catalog_.RequestCatchUp();
  return Wait(change);
}

bool NameSync::Wait(NameChange change) {
  waiting_for_its_name_ = change == NameChange::kYes;
  return change == NameChange::kNo;
}

}  // namespace blockread::storage
