// Knowing when no read can still use an old version of a file, without the read path taking a
// lock or making a syscall: the catalog's watcher thread publishes a file's new version (a new
// map, or a new route), then waits here until every read that might have seen the old one has
// finished, and only then lets a writer in (releases its lease), closes the old inode or frees
// the old map.
//
// The scheme is sleepable RCU's: a global epoch whose low bit picks one of two in-flight counters
// per reader. A read enters (counts itself under the current parity, then a full fence) before
// it loads a file's version, and exits when it has finished for good. The waiter flips the epoch
// and waits for the old parity's counters to drain, twice, so that a read that sampled the
// parity before one flip but counted itself after it is still waited for. Either the waiter sees
// a read's count, or that read sees the new version (the two full fences order it), so no read
// of an old version is missed.
#ifndef BLOCKREAD_STORAGE_READ_EPOCHS_H_
#define BLOCKREAD_STORAGE_READ_EPOCHS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace blockread::storage {

class ReadEpochs {
 public:
  // One per engine. Threading: Enter and Exit are called only by the thread that owns the
  // reader (its worker); they are a relaxed load, a store to the reader's own cache line and,
  // for Enter, a fence. Unregisters itself when destroyed (no read of it may be in flight).
  class Reader {
   public:
    ~Reader();
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;

    // Before a read loads any file version. Returns what Exit needs.
    uint8_t Enter() {
      const uint8_t parity = epochs_.epoch_.load(std::memory_order_relaxed) & 1;
      active_[parity].store(active_[parity].load(std::memory_order_relaxed) + 1,
                            std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      return parity;
    }
    // When that read has finished (delivered, or refused before any I/O).
    void Exit(uint8_t parity) {
      active_[parity].store(active_[parity].load(std::memory_order_relaxed) - 1,
                            std::memory_order_release);
    }

   private:
    friend class ReadEpochs;
    explicit Reader(ReadEpochs& epochs) : epochs_(epochs) {}
    ReadEpochs& epochs_;
    alignas(64) std::atomic<uint64_t> active_[2] = {0, 0};
  };

  ReadEpochs() = default;
  ReadEpochs(const ReadEpochs&) = delete;
  ReadEpochs& operator=(const ReadEpochs&) = delete;

  // Any thread. The reader must not outlive this object.
  std::unique_ptr<Reader> Register();

  // Returns once every read that entered before this call has exited. Call it after publishing
  // the new version (with a release store or stronger). Sleeps while it waits; never call it on
  // a worker. Calls are serialized.
  void WaitForEarlierReads();

 private:
  void Unregister(Reader* reader);

  std::atomic<uint64_t> epoch_{0};
  std::mutex mu_;  // serializes waiters with each other and with (un)registration
  std::vector<Reader*> readers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_READ_EPOCHS_H_
