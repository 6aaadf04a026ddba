// The read dispatcher and the per-worker engine context (the iomap_dio_rw analog).
//
// A read is validated, then offered to the simple path (one piece from a preallocated slot into
// that slot's registered buffer: no allocation, no lock; storage/simple_read.h); a read the simple
// path declines is counted by FallbackReason and served by the generic path (ExtentIterator over
// the map: holes and unwritten extents zero-filled, mapped runs split at max_io_bytes, the
// block-aligned covering range read so unaligned edges need no bounce copy, first error wins;
// storage/generic_read.h). Pieces go to the device's I/O backend (storage/io_backend.h), and
// completions come back through storage/read_completion.cc. Real errors are returned as they are,
// never retried down the other path.
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
#include "storage/device_latency.h"
#include "storage/engine_config.h"
#include "storage/io_backend.h"
#include "storage/name_sync.h"
#include "storage/stats.h"

namespace blockread::storage {

// Which path a read of [offset, offset + length) of `map` takes, and why: the dispatcher's
// decision, also what Explain reports. `size` is the file's size for this read (map.SizeNow()).
// OUT_OF_RANGE when offset > size; a read at exactly EOF is a generic read of nothing
// (kBeyondEof). `extent` is set for the simple path.
struct PathDecision {
  ReadPathKind path = ReadPathKind::kGeneric;
  FallbackReason fallback = FallbackReason::kBeyondEof;
  Extent extent;
};
absl::StatusOr<PathDecision> DecideReadPath(const FileMap& map, uint64_t size, uint64_t offset,
                                            uint64_t length, uint64_t simple_max_bytes);

// Turns EngineConfig::io_engine into the engine to use, trying io_uring once (a ring set up
// and torn down at once) unless `requested` is kPsync. kAuto: kIoUring if that worked, else
// kPsync, having logged one warning line with io_uring's error (the cause) and the fix.
// kIoUring: the same error, saying that --io-engine=psync or auto would serve without it.
// Any thread; call once per process (the server does, before its workers start) so the line is
// logged once.
absl::StatusOr<IoEngine> ResolveIoEngine(IoEngine requested);

struct ReadSlot;

// Opaque token for the slot of a read whose callback kept it (returned true), for
// EngineContext::Release(). Meaningful only to the context that delivered it, while it lives.
struct ReadHandle {
  ReadSlot* slot = nullptr;
};

struct ReadResult {
  // OK, or DATA_LOSS for a device I/O error: the errno text and an incident number; the device,
  // its path and the physical offset are in the log under that incident (storage/log.h).
  absl::Status status;
  // The bytes read: [offset, min(offset + length, size)), inside the slot's registered buffer.
  // Valid until the callback returns, or, when it keeps the slot, until Release(handle).
  const char* data = nullptr;
  uint64_t length = 0;
  ReadPathKind path = ReadPathKind::kSimple;
  // Why the read fell back, when path == kGeneric.
  FallbackReason fallback = FallbackReason::kDisabled;
  // The read's arrival (see ReadRequest) -> StartRead took a slot.
  uint64_t queue_ns = 0;
  // StartRead -> the PollOnce that reaped the last I/O (0 when no I/O was needed). Includes
  // validation and lookup, which cost well under a microsecond; it excludes callback delays.
  uint64_t device_ns = 0;
  uint64_t total_ns = 0;  // arrival -> this callback
  ReadHandle handle;
};

// Called exactly once per queued read, from PollOnce() on the context's thread. Return false to
// let the slot be reused at once. Return true to keep the slot, and result.data valid, after
// returning: then the slot serves no other read until Release(result.handle) is called, on the
// context's thread, exactly once. Callers that lend result.data to another thread (the server's
// zero-copy responses) hand the slot back to the context's thread before releasing it, and keep
// the memory itself mapped with RetainBufferMemory() in case they outlive the context.
using ReadDoneFn = bool (*)(void* context, const ReadResult& result);

struct ReadRequest {
  absl::string_view file;
  uint64_t offset = 0;
  uint64_t length = 0;
  // When the read arrived at the caller (MonotonicNowNs clock), so time spent waiting for a slot
  // (retries after kBusy) shows as the queue stage; 0 means now.
  uint64_t arrival_ns = 0;
  // When the caller stops waiting for the answer (MonotonicNowNs clock); 0: never. A read whose
  // time left is already less than its device's reads currently take (their recent p99,
  // storage/device_latency.h) is refused with DEADLINE_EXCEEDED before any I/O, and counted as
  // shed.
  uint64_t deadline_ns = 0;
};

// What StartRead did with a read, as fio's queue() answers (FIO_Q_QUEUED/COMPLETED/BUSY).
enum class StartOutcome : uint8_t {
  // Accepted: done() runs exactly once from a later PollOnce().
  kQueued,
  // Answered at once, without I/O: the read was refused and `*refusal` says why, in the client's
  // terms (NOT_FOUND unknown file, OUT_OF_RANGE offset beyond EOF, INVALID_ARGUMENT bad length or
  // overflow, or the catalog's error for a file it cannot serve right now, which may be any code,
  // RESOURCE_EXHAUSTED included). done() will not run.
  kCompleted,
  // Every slot of the path the read needs is taken. Nothing happened and nothing was built: no
  // Status, no allocation. Try again after PollOnce() has delivered something.
  kBusy,
  // The read's device already holds its share of the path's slots (kDeviceShareOfSlotsPercent), so
  // a
  // slow device cannot take them all: reads of other devices may still start. Nothing happened;
  // try again after PollOnce() has delivered something.
  kDeviceBusy,
  // The file is not open (the catalog opens a file on its first read and closes the least
  // recently read ones to stay under its cap): the catalog's watcher is opening it. Nothing
  // happened; reads of other files may start. Try again on a later turn while
  // waiting_for_opens().
  kOpening,
  // A name change in a served directory that may concern this read's name (a rename, a removal,
  // a directory moved) is being applied by the catalog's watcher (typically well under a
  // millisecond): nothing happened; reads of other names may start. Try again on a later turn
  // while waiting_for_names().
  kNameChanging,
};
// Nothing happened; try again after a poll.
constexpr bool IsBusy(StartOutcome outcome) {
  return outcome != StartOutcome::kQueued && outcome != StartOutcome::kCompleted;
}

// One worker's engine: I/O backends, request slots, registered buffers and a stats shard, none of
// it shared. Threading: Create, every method and the destructor run on one thread (the worker);
// only stats() may be read from other threads (see StatsShard).
class EngineContext {
 public:
  // For tests: wraps each backend the context creates (e.g. to inject faults). Runs on the
  // creating thread.
  using BackendWrapper = std::unique_ptr<IoBackend> (*)(std::unique_ptr<IoBackend> backend);

  // Creates the backends on the calling thread, registers every catalog device and the buffers,
  // and picks a backend per device. io_uring engine: IOPOLL where sysfs reports io_poll=1 and a
  // probe read succeeds, interrupt mode otherwise (a failed probe is logged as a demotion).
  // psync engine: one pool for every device. kAuto is resolved first (ResolveIoEngine).
  // The catalog must outlive the context and gain no devices after this. Errors name the cause
  // and the fix (io_uring blocked, RLIMIT_MEMLOCK too low ...).
  static absl::StatusOr<std::unique_ptr<EngineContext>> Create(
      Catalog& catalog, const EngineConfig& config, BackendWrapper wrap_backend = nullptr);
  // Waits for every read in flight to complete (the kernel may still be writing into the
  // buffers), then frees the backends and buffers. Callbacks still run for those reads.
  ~EngineContext();
  EngineContext(const EngineContext&) = delete;
  EngineContext& operator=(const EngineContext&) = delete;

  // Starts reading [offset, offset + length) of `request.file`; see StartOutcome. A read at
  // exactly EOF is queued and returns 0 bytes. Refusals (kCompleted) are counted in
  // stats().rejected(); kBusy is not a refusal and costs nothing.
  StartOutcome StartRead(const ReadRequest& request, ReadDoneFn done, void* context,
                         absl::Status* refusal);

  // One turn: submits all queued I/O (one system call per backend at most), reaps whatever
  // completed (no syscall while an io_uring CQ ring has entries) and runs the callbacks of
  // finished reads. Never blocks. Returns the number of reads finished.
  int PollOnce();

  // Returns a slot kept by a callback that returned true to the free slots. REQUIRES: `handle`
  // came from this context's callback that returned true, and has not been released yet.
  void Release(ReadHandle handle);

  // Keeps every slot's buffer mapped for as long as the returned reference (or a copy) lives,
  // even after the context is destroyed: its holder may then still read the bytes of a kept slot,
  // never write them, and the kernel no longer does (the context waited for its reads). For
  // buffers lent to a library that may let go of them late, on any thread. The reference may be
  // copied and dropped on any thread.
  std::shared_ptr<const void> RetainBufferMemory() const;

  // Reads queued and not yet delivered.
  uint32_t reads_in_flight() const { return reads_in_flight_; }
  // Reads of names a rename or unlink in a served directory may concern answer kNameChanging until
  // the catalog has applied it (a wait on another thread, typically well under a millisecond):
  // keep the loop turning.
  bool waiting_for_names() const { return name_sync_ != nullptr && name_sync_->catching_up(); }
  // A read answered kOpening, and its file is not open yet (the watcher opens it, typically in
  // tens of microseconds): keep the loop turning.
  bool waiting_for_opens() const { return open_ticket_ != 0; }
  const StatsShard& stats() const { return stats_; }
  // The backend this context uses for `device`.
  BackendKind backend(DeviceId device) const { return backend_of_device_[device]->kind(); }

 private:
  explicit EngineContext(Catalog& catalog, const EngineConfig& config);
  absl::Status Init(BackendWrapper wrap_backend);
  // OK with *outcome kQueued, kBusy or kDeviceBusy; or the refusal.
  absl::Status Dispatch(const ReadRequest& request, ReadDoneFn done, void* context,
                        uint64_t start_ns, StartOutcome* outcome);
  // Before any I/O, by `device`, the read's (see ReadSlot::device): UNAVAILABLE when it is down;
  // DEADLINE_EXCEEDED (counted as shed) when `request` has less time left than the device's
  // reads take now; OK otherwise, and while neither is known.
  absl::Status RefuseBeforeIo(DeviceId device, const ReadRequest& request, uint64_t now_ns);
  // Whether `path` has a free slot but `device` holds as many of its slots as one device may.
  bool DeviceHoldsItsShare(ReadPathKind path, DeviceId device) const;
  // The catalog's devices changed (one went down, or was reopened): note which are down, and
  // re-register reopened devices' descriptors with the backends.
  void OnDeviceEvents();
  // simple_read.cc / generic_read.cc: fill a slot and queue its pieces. False: no slot free.
  // REQUIRES: request.arrival_ns is set (StartRead fills it in).
  bool StartSimple(const Extent& extent, const ReadRequest& request, ReadDoneFn done, void* context,
                   uint64_t start_ns, ReadEpochs::Hold epoch_hold);
  bool StartGeneric(const FileMap& map, uint64_t size, FallbackReason reason, DeviceId device,
                    const ReadRequest& request, ReadDoneFn done, void* context, uint64_t start_ns,
                    ReadEpochs::Hold epoch_hold);
  // A slot was taken for a read of `device`, or given back: the per-device share counts.
  void ChargeSlot(ReadSlot& slot, DeviceId device);
  // read_completion.cc
  void QueuePiece(IoPiece& piece);
  static void OnPieceDone(void* self, IoPiece& piece, int result);
  bool RequeueShortRead(IoPiece& piece, int result);
  void RecordPieceError(IoPiece& piece, int result);
  void Deliver(ReadSlot& slot, uint64_t now_ns);
  void FreeSlot(ReadSlot& slot);

  Catalog& catalog_;
  // Every read is inside this reader from before it looks its file up until it is delivered, so
  // the catalog knows when a file's old version is no longer in use (storage/read_epochs.h).
  const std::unique_ptr<ReadEpochs::Reader> epoch_reader_;
  const EngineConfig config_;
  StatsShard stats_;
  std::vector<DeviceLatency> device_latency_;  // by DeviceId
  uint64_t device_events_seen_ = 0;            // Catalog::device_events() as last handled
  bool any_device_down_ = false;
  // The backends this worker owns, and which serves each device (by DeviceId).
  std::vector<std::unique_ptr<IoBackend>> backends_;
  std::vector<IoBackend*> backend_of_device_;
  // Shared with RetainBufferMemory()'s holders, which only keep the memory mapped.
  std::shared_ptr<BufferPool> simple_buffers_;
  std::shared_ptr<BufferPool> generic_buffers_;
  // Slots are cacheline-aligned and preallocated; free lists are stacks.
  std::unique_ptr<ReadSlot[]> simple_slots_;
  std::unique_ptr<ReadSlot[]> generic_slots_;
  std::vector<ReadSlot*> free_simple_;
  std::vector<ReadSlot*> free_generic_;
  // Slots each device holds (taken and not yet freed), by path and DeviceId, and the most one
  // device may hold: every slot with one device, kDeviceShareOfSlotsPercent of them with more.
  std::vector<uint32_t> slots_held_[2];
  uint32_t device_share_limit_[2] = {0, 0};
  // Reads that finished without I/O, or whose last I/O completed, awaiting delivery.
  std::vector<ReadSlot*> ready_;
  uint32_t reads_in_flight_ = 0;
  // Null when no name of the catalog can change (nothing FIEMAP-imported).
  std::unique_ptr<NameSync> name_sync_;
  // The catalog ticket that opens the files this context's reads found cold (0: none waited
  // for). One per context at a time: later cold reads wait for the same one.
  uint64_t open_ticket_ = 0;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_READ_PATH_H_
