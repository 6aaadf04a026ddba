// Knowing when no read can still use an old version of a file, without the read path taking a
// lock or making a syscall: the catalog publishes a file's new version (a new map, or a new
// route), then waits here until every read that might have seen the old one has finished, and
// only then lets a writer in (releases its lease), closes the old inode or frees the old map.
//
// The scheme is sleepable RCU's: an epoch whose low bit picks one of two in-flight counters per
// reader. A read enters (counts itself under the current parity, then a full fence) before it
// loads a file's version, and exits when it has finished for good. The waiter flips the epoch
// and waits for the old parity's counters to drain, twice, so that a read that sampled the
// parity before one flip but counted itself after it is still waited for. Either the waiter sees
// a read's count, or that read sees the new version (the two full fences order it), so no read
// of an old version is missed.
//
// Two kinds of wait. WaitForEarlierReads() waits for every read: the watcher's, before it frees a
// version or a name table, or lets a descriptor go. A lease break must not wait that long (a
// stalled device would hold a writer's open() until the kernel's lease-break-time, and then let
// it in while the raw map is still read): reads of raw-device maps also count themselves in their
// device's domain (EnterDomain), after they have found their map, and then check that the map is
// still the file's (the same fences: a break either sees the count or the read sees the break).
// WaitForDomainReads(d) waits for those alone.
#ifndef BLOCKREAD_STORAGE_READ_EPOCHS_H_
#define BLOCKREAD_STORAGE_READ_EPOCHS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace blockread::storage {

class ReadEpochs {
 public:
  // Domains of raw-device reads: block devices share them round-robin (a break waits for the
  // reads of the devices in its file's domain). Domain 0 is "none".
  static constexpr uint32_t kDomains = 64;

  // What a read entered with; Exit() takes it back.
  struct Hold {
    uint8_t parity = 0;
    uint8_t domain = 0;  // 0: not counted in a domain
    uint8_t domain_parity = 0;
  };

  // One per engine. Threading: Enter, EnterDomain and Exit are called only by the thread that
  // owns the reader (its worker); they are a relaxed load, a store to the reader's own cache
  // lines and, to enter, a fence. Unregisters itself when destroyed (no read of it may be in
  // flight).
  class Reader {
   public:
    ~Reader();
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;

    // Before a read loads any file version.
    Hold Enter() {
      Hold hold;
      hold.parity = epochs_.epoch_.load(std::memory_order_relaxed) & 1;
      Count(active_[hold.parity], +1);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      return hold;
    }
    // After the read has found a raw-device map on a device of `domain` (1..kDomains-1): then the
    // caller checks that the map is still its file's, and exits and looks again if it is not.
    void EnterDomain(Hold& hold, uint32_t domain) {
      hold.domain = static_cast<uint8_t>(domain);
      hold.domain_parity = epochs_.domain_epochs_[domain].load(std::memory_order_relaxed) & 1;
      Count(domains_[domain][hold.domain_parity], +1);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    // When that read has finished (delivered, or refused before any I/O).
    void Exit(Hold hold) {
      if (hold.domain != 0) {
        domains_[hold.domain][hold.domain_parity].store(
            domains_[hold.domain][hold.domain_parity].load(std::memory_order_relaxed) - 1,
            std::memory_order_release);
      }
      active_[hold.parity].store(active_[hold.parity].load(std::memory_order_relaxed) - 1,
                                 std::memory_order_release);
    }

   private:
    friend class ReadEpochs;
    explicit Reader(ReadEpochs& epochs) : epochs_(epochs) {}
    static void Count(std::atomic<uint64_t>& counter, int delta) {
      counter.store(counter.load(std::memory_order_relaxed) + static_cast<uint64_t>(delta),
                    std::memory_order_relaxed);
    }
    ReadEpochs& epochs_;
    alignas(64) std::atomic<uint64_t> active_[2] = {0, 0};
    // Written by this reader only; a waiter reads one domain's pair.
    alignas(64) std::array<std::array<std::atomic<uint64_t>, 2>, kDomains> domains_{};
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
  // Returns once every read that entered `domain` before this call has exited (reads of other
  // domains, and reads not in a domain yet, are not waited for). Same rules; serialized with
  // other domain waits only.
  void WaitForDomainReads(uint32_t domain);

 private:
  void Unregister(Reader* reader);

  std::atomic<uint64_t> epoch_{0};
  std::array<std::atomic<uint64_t>, kDomains> domain_epochs_{};
  // Lock order: mu_, then domain_mu_. Registration takes both; a waiter for every read takes
  // mu_, a domain waiter only domain_mu_, so neither waits behind the other's readers.
  std::mutex mu_;
  std::mutex domain_mu_;
  std::vector<Reader*> readers_ ABSL_GUARDED_BY(mu_);
  std::vector<Reader*> domain_readers_ ABSL_GUARDED_BY(domain_mu_);  // the same readers
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_READ_EPOCHS_H_
