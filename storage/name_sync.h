// A worker's check that no name change in a served directory is still waiting for the catalog's
// watcher when it resolves a name (issue 11: rename-over and unlink are seen by the next read).
#ifndef BLOCKREAD_STORAGE_NAME_SYNC_H_
#define BLOCKREAD_STORAGE_NAME_SYNC_H_

#include <cstdint>
#include <memory>

#include "storage/catalog.h"
#include "storage/ring.h"

namespace blockread::storage {

// rename() and unlink() queue their inotify event inside the system call, but the catalog's
// watcher applies it later, so without this check a read that starts just after rename()
// returned could still resolve the name to the old file. Each worker therefore watches the
// catalog's name-event descriptor (Catalog::NameEventsFd()):
//  - io_uring engines, through a small ring of the worker's own with a multishot POLL_ADD on it.
//    The poll's wake-up runs inside rename() and, on a COOP_TASKRUN | TASKRUN_FLAG ring, sets
//    IORING_SQ_TASKRUN in shared memory before rename() returns; the completion itself is posted
//    when the worker next enters the kernel.
//  - psync engines (no io_uring at all), by poll(2) with timeout 0 at each check.
// The poll alone is not enough: when the worker enters the kernel after the watcher has read the
// event (and before it has applied it), the poll finds the descriptor drained and posts nothing.
// The watcher therefore keeps a sequence that is odd from before it reads events until it has
// applied them (Catalog::ApplyingNameEvents()). So ReadyToResolve() costs three loads from
// shared memory while no name changes: the flag, the CQ ring and that sequence.
// When a name event is seen, the worker asks the watcher to catch up (one eventfd write). Until
// the watcher has read the events it cannot tell which names they concern, and resolves none;
// once it has (the watcher publishes the names and directories each batch changes), only reads
// of those names wait until they are applied: StartRead answers kNameChanging meanwhile, and the
// worker keeps reaping (it must not block: the watcher, replacing a file's version, waits for
// this worker's reads of the old one to finish).
//
// Threading: create, use and destroy on the engine's thread (the ring is SINGLE_ISSUER).
class NameSync {
 public:
  // Null when the catalog watches no file (no name can change). `use_io_uring`: false for the
  // psync engine.
  static absl::StatusOr<std::unique_ptr<NameSync>> Create(Catalog& catalog, bool use_io_uring);

  // True when `name` may be resolved now. False: the watcher is applying a name change that may
  // precede this read and concern `name`; try again on a later loop turn. Names the change does
  // not concern (Catalog::NameMayBeChanging) are not held back.
  bool ReadyToResolve(absl::string_view name) {
    if (ticket_ == 0 && ring_ != nullptr && !ring_->CompletionsPending() &&
        !catalog_.ApplyingNameEvents()) [[likely]] {
      return true;
    }
    return CatchUp(name);
  }
  // A name change is being applied: reads wait for it (the worker keeps its loop turning).
  bool catching_up() const { return ticket_ != 0; }
  // Whether the last read ReadyToResolve() held back waits because the change concerns its name
  // (or a directory above it), not because the watcher has yet to read what the change is
  // (a pause of microseconds, not counted as a wait).
  bool waiting_for_its_name() const { return waiting_for_its_name_; }

 private:
  NameSync(Catalog& catalog, int fd) : catalog_(catalog), fd_(fd) {}
  bool CatchUp(absl::string_view name);
  // Whether a read in state `change` may go on; remembers whether it waits for its own name.
  bool Wait(NameChange change);
  // Whether fd_ was woken since the last look (consumes the news).
  bool Woken();

  Catalog& catalog_;
  const int fd_;
  std::unique_ptr<Ring> ring_;  // null: poll(2) at each check
  uint64_t ticket_ = 0;         // the watcher's ticket being waited for; 0 when none
  bool waiting_for_its_name_ = false;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_NAME_SYNC_H_
