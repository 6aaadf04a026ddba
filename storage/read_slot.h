// A read in flight inside the engine: internal to storage/ (read_path.cc, simple_read.cc,
// generic_read.cc, read_completion.cc). Slots are preallocated per worker; a read never allocates.
#ifndef BLOCKREAD_STORAGE_READ_SLOT_H_
#define BLOCKREAD_STORAGE_READ_SLOT_H_

#include <cstdint>
#include <memory>

#include "storage/io_backend.h"
#include "storage/read_epochs.h"
#include "storage/read_path.h"

namespace blockread::storage {

// Cacheline-aligned so two workers' slots never share a line and a slot's hot fields are one
// fetch. The simple path uses only inline_piece.
struct alignas(64) ReadSlot {
  ReadDoneFn done = nullptr;
  void* context = nullptr;
  const char* data = nullptr;
  uint64_t data_length = 0;
  uint64_t arrival_ns = 0;  // when the caller received the read (queue stage start)
  uint64_t start_ns = 0;    // when StartRead took this slot
  // Pieces issued and not yet finished. Decremented exactly once per piece, in OnPieceDone, and
  // only when the piece is finished for good (a short read re-queued is not finished).
  uint32_t pending_pieces = 0;
  bool had_io = false;  // delivered in the PollOnce that reaped its last I/O
  ReadPathKind path = ReadPathKind::kSimple;
  FallbackReason fallback = FallbackReason::kDisabled;
  bool retained = false;
  // What its catalog epoch reader entered with (ReadEpochs::Reader::Enter): the read exits when
  // it is delivered.
  ReadEpochs::Hold epoch_hold;
  // First error wins: errno of the first failed I/O (or EIO for a short read), and where.
  int error = 0;
  bool short_read = false;
  DeviceId error_device = kNoDevice;
  uint64_t error_physical_offset = 0;
  // The read's device: its first byte's (kNoDevice when that is in a hole, or at EOF). Its recent
  // latency counts this read's device time, and the slot counts against its share of the slots.
  DeviceId device = kNoDevice;
  char* buffer = nullptr;
  uint16_t buffer_index = 0;
  IoPiece inline_piece;
  // Generic slots: room for the most pieces a max_read_bytes read can need.
  std::unique_ptr<IoPiece[]> pieces;
  uint32_t piece_capacity = 0;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_READ_SLOT_H_
