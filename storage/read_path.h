// The read dispatcher and the per-worker engine context (the iomap_dio_rw analog).
//
// A read is validated, then offered to the simple path (one READ_FIXED SQE from a preallocated
// slot into that slot's registered buffer, no allocation, no lock, no virtual call); a read the
// simple path declines is counted by FallbackReason and served by the generic path (ExtentIterator
// over the map: holes and unwritten extents zero-filled, mapped runs split at max_io_bytes, the
// block-aligned covering range read so unaligned edges need no bounce copy, first error wins).
// Real errors are returned as they are, never retried down the other path.
#ifndef BLOCKREAD_STORAGE_READ_PATH_H_
#define BLOCKREAD_STORAGE_READ_PATH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/buffer_pool.h"
#include "storage/catalog.h"
#include "storage/ring.h"
#include "storage/stats.h"

namespace blockread::storage {

struct EngineConfig {
  // Largest read the simple path takes; 0 disables it (the seeds' simple=0 A/B switch).
  uint64_t simple_max_bytes = 4096;
  // Largest read accepted at all (INVALID_ARGUMENT above it).
  uint64_t max_read_bytes = 1 << 20;
  // The generic path splits mapped runs into I/Os of at most this many bytes (multiple of 4096).
  uint64_t max_io_bytes = 256 << 10;
  // Reads in flight per worker on each path; each slot owns a registered buffer (simple:
  // simple_max_bytes, generic: max_read_bytes plus alignment), so these size the pinned memory.
  uint32_t simple_slots = 256;
  uint32_t generic_slots = 16;
  uint32_t ring_entries = 256;
  // Probe IORING_SETUP_IOPOLL even on devices whose sysfs io_poll is 0. For tests and diagnosis:
  // it shows the EOPNOTSUPP demotion on devices without poll queues.
  bool probe_iopoll_on_all_devices = false;

  // Checks the limits and their relations; the error names the setting.
  absl::Status Validate() const;
};

// Checks what can be checked without the file: length in 1..max_read_bytes, no 64-bit overflow.
// INVALID_ARGUMENT naming the limit otherwise.
absl::Status ValidateReadRange(const EngineConfig& config, uint64_t offset, uint64_t length);

// Which path a read of [offset, offset + length) of `map` takes, and why: the dispatcher's
// decision, also what Explain reports. OUT_OF_RANGE when offset > map.size(); a read at exactly
// EOF is a generic read of nothing (kBeyondEof). `extent` is set for the simple path.
struct PathDecision {
  ReadPathKind path = ReadPathKind::kGeneric;
  FallbackReason fallback = FallbackReason::kBeyondEof;
  Extent extent;
};
absl::StatusOr<PathDecision> DecideReadPath(const FileMap& map, uint64_t offset, uint64_t length,
                                            uint64_t simple_max_bytes);

// Opaque token for a completed read's buffer, for EngineContext::Release().
struct ReadHandle {
  void* slot = nullptr;
};

struct ReadResult {
  // OK, or DATA_LOSS for a device I/O error (naming the device, the physical offset and errno).
  absl::Status status;
  // The bytes read: [offset, min(offset + length, size)). Valid until the slot is released.
  const char* data = nullptr;
  uint64_t length = 0;
  ReadPathKind path = ReadPathKind::kSimple;
  // Why the read fell back, when path == kGeneric.
  FallbackReason fallback = FallbackReason::kDisabled;
  // The read's arrival (see StartRead) -> StartRead took a slot.
  uint64_t queue_ns = 0;
  // StartRead -> the PollOnce that reaped the last I/O (0 when no I/O was needed). Includes
  // validation and lookup, which cost well under a microsecond; it excludes callback delays.
  uint64_t device_ns = 0;
  uint64_t total_ns = 0;  // arrival -> this callback
  ReadHandle handle;
};

// Called exactly once per started read, from PollOnce() on the context's thread. Return true to
// keep result.data valid after returning (then call Release(result.handle) when done with it, on
// the same thread); return false to let the slot be reused at once.
using ReadDoneFn = bool (*)(void* context, const ReadResult& result);

// One worker's engine: rings, request slots, registered buffers and a stats shard, none of it
// shared. Threading: Create, every method and the destructor run on one thread (the worker); only
// stats() may be read from other threads (see StatsShard).
class EngineContext {
 public:
  // Creates the rings on the calling thread, registers every catalog device and the buffers, and
  // picks a PollMode per device: IOPOLL where sysfs reports io_poll=1 and a probe read succeeds,
  // interrupt mode otherwise (a failed probe is logged as a demotion). The catalog must outlive
  // the context and gain no devices after this.
  static absl::StatusOr<std::unique_ptr<EngineContext>> Create(Catalog& catalog,
                                                               const EngineConfig& config);
  // Waits for every read in flight to complete (the kernel may still be writing into the
  // buffers), then frees the rings and buffers. Callbacks still run for those reads.
  ~EngineContext();
  EngineContext(const EngineContext&) = delete;
  EngineContext& operator=(const EngineContext&) = delete;

  // Starts reading [offset, offset + length) of `file`. Returns an error at once for a bad request
  // (NOT_FOUND unknown file, OUT_OF_RANGE offset beyond EOF, INVALID_ARGUMENT zero or too large
  // length or offset overflow, or a staleness error from the catalog), RESOURCE_EXHAUSTED when
  // every slot of the path it needs is busy (reap with PollOnce and retry); otherwise OK, and
  // done(context, result) runs later from PollOnce. A read at exactly EOF returns 0 bytes.
  // `arrival_ns` (MonotonicNowNs clock) is when the read arrived at the caller, so time spent
  // waiting for a slot (retries after RESOURCE_EXHAUSTED) shows as the queue stage; 0 means now.
  // Refusals other than RESOURCE_EXHAUSTED are counted in stats().rejected().
  absl::Status StartRead(absl::string_view file, uint64_t offset, uint64_t length, ReadDoneFn done,
                         void* context, uint64_t arrival_ns = 0);

  // One turn of the loop: submits all queued I/O (one io_uring_submit per ring), reaps whatever
  // completed (no syscall while the CQ ring has entries) and runs the callbacks of finished reads.
  // Never blocks. Returns the number of reads finished.
  int PollOnce();

  // Returns a slot kept by a callback that returned true.
  void Release(ReadHandle handle);

  // Reads started and not yet delivered.
  uint32_t reads_in_flight() const { return reads_in_flight_; }
  const StatsShard& stats() const { return stats_; }
  // The poll mode this context uses for `device`.
  PollMode poll_mode(DeviceId device) const;

 private:
  struct Slot;
  struct IoPiece;

  explicit EngineContext(Catalog& catalog, const EngineConfig& config);
  absl::Status Init();
  absl::Status ProbeIoPoll(DeviceId device);
  absl::Status Start(absl::string_view file, uint64_t offset, uint64_t length, ReadDoneFn done,
                     void* context, uint64_t arrival_ns);
  absl::Status StartSimple(const Extent& extent, uint64_t offset, uint64_t length, ReadDoneFn done,
                           void* context, uint64_t arrival_ns, uint64_t start_ns);
  absl::Status StartGeneric(const FileMap& map, FallbackReason reason, uint64_t offset,
                            uint64_t length, ReadDoneFn done, void* context, uint64_t arrival_ns,
                            uint64_t start_ns);
  void QueuePiece(IoPiece& piece);
  void OnCompletion(uint64_t user_data, int result);
  void HandleIoFailureOrShortRead(IoPiece& piece, int result);
  void Deliver(Slot& slot, uint64_t now_ns);
  void FreeSlot(Slot& slot);

  Catalog& catalog_;
  const EngineConfig config_;
  StatsShard stats_;
  std::unique_ptr<Ring> interrupt_ring_;
  std::unique_ptr<Ring> iopoll_ring_;  // only when some device polls
  std::vector<Ring*> ring_of_device_;  // by DeviceId
  std::unique_ptr<BufferPool> simple_buffers_;
  std::unique_ptr<BufferPool> generic_buffers_;
  // Slots are cacheline-aligned and preallocated; free lists are stacks of indices.
  std::unique_ptr<Slot[]> simple_slots_;
  std::unique_ptr<Slot[]> generic_slots_;
  std::vector<Slot*> free_simple_;
  std::vector<Slot*> free_generic_;
  // Reads that finished without I/O, or whose last I/O completed, awaiting delivery.
  std::vector<Slot*> ready_;
  uint32_t reads_in_flight_ = 0;
  uint32_t generic_buffer_index_base_ = 0;  // registered index of generic buffer 0
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_READ_PATH_H_
