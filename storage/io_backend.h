// How a worker reads one kind of device: a small ops table in fio's spirit (ioengines.h). The
// engine's dispatch and completion code only ever talk to this interface, so a new kind of device
// (NVMe passthrough with IORING_OP_URING_CMD) is a new row, not a new branch in dispatch or
// reaping.
//
// Rows today (BackendKind): io_uring in interrupt mode (block devices without poll queues,
// regular files standing in for devices, and file-route files: a file-route file is just another
// descriptor on this ring), io_uring with IORING_SETUP_IOPOLL (devices with poll queues), and
// psync: pool threads doing pread, for containers whose seccomp profile blocks io_uring
// (storage/psync_backend.h). Which rows a worker uses is EngineConfig::io_engine.
#ifndef BLOCKREAD_STORAGE_IO_BACKEND_H_
#define BLOCKREAD_STORAGE_IO_BACKEND_H_

#include <cstdint>

#include "storage/extent_map.h"
#include "storage/stats.h"

namespace blockread::storage {

struct ReadSlot;  // the engine's per-read state (storage/read_slot.h); opaque to backends

// One device read: `length` bytes at `physical_offset` of device `device` into `buffer`, which
// lies inside registered buffer `buffer_index`. `needed` of them must arrive (less than `length`
// only where the read's last block runs past the end of a file-route file). Preallocated inside
// the read's slot and passed by address: backends keep no per-I/O state of their own.
struct IoPiece {
  ReadSlot* slot = nullptr;
  char* buffer = nullptr;
  uint64_t physical_offset = 0;
  uint32_t length = 0;
  uint32_t needed = 0;
  DeviceId device = kNoDevice;
  uint16_t buffer_index = 0;
  uint8_t short_read_retries = 0;
  // Where a backend that finishes pieces on its own threads (psync) leaves the result for Reap().
  int32_t result = 0;
  // Owned by the backend between Queue() and Reap(): its intrusive lists (pieces waiting for room
  // on a ring, or for a psync thread, or finished), so waiting allocates nothing.
  IoPiece* next_waiting = nullptr;
};

// Called for every finished piece with the bytes transferred (>= 0) or a negative errno: the
// backend has already interpreted its own completion format.
using PieceDoneFn = void (*)(void* context, IoPiece& piece, int result);

// Threading: created, used and destroyed on one worker thread.
class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual BackendKind kind() const = 0;

  // Prepares `piece` for submission. Never fails and never calls back from inside: a piece that
  // finds the ring full (or the kernel pushing back with EAGAIN/EBUSY) waits inside the backend
  // and goes out once a completion frees room; a piece the backend cannot issue at all comes back
  // from Reap() with its error. So one piece is finished exactly once, always from Reap().
  virtual void Queue(IoPiece& piece) = 0;
  // Hands everything prepared to the device (one system call at most). Backpressure from the
  // kernel is not an error: the pieces stay queued and go out on a later call.
  virtual void Submit() = 0;
  // Calls done(context, piece, result) for every piece that finished, without blocking. Returns
  // how many.
  virtual unsigned Reap(PieceDoneFn done, void* context) = 0;
  // Blocks until at least one piece can be reaped (to drain at shutdown), submitting first.
  virtual void WaitForCompletion() = 0;
  // Pieces queued, waiting or submitted, and not yet reaped.
  virtual unsigned inflight() const = 0;
  // Device `id`'s descriptor `fd` now refers to a reopened file (Catalog::CheckDevices): a backend
  // holding its own reference (a registered file) takes the new one. Pieces in flight finish on
  // the old file. On the engine's thread.
  virtual void DeviceReopened(uint32_t id, int fd) = 0;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_IO_BACKEND_H_
