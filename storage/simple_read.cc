// The simple path's slot filling: one piece, from a preallocated slot, into its registered buffer.
#include "storage/simple_read.h"

#include "storage/read_path.h"
#include "storage/read_slot.h"

namespace blockread::storage {

bool EngineContext::StartSimple(const Extent& extent, const ReadRequest& request, ReadDoneFn done,
                                void* context, uint64_t start_ns, ReadEpochs::Hold epoch_hold) {
  if (free_simple_.empty()) return false;
  ReadSlot& slot = *free_simple_.back();
  free_simple_.pop_back();
  ChargeSlot(slot, extent.device);
  ++reads_in_flight_;
  slot.done = done;
  slot.context = context;
  slot.arrival_ns = request.arrival_ns;
  slot.start_ns = start_ns;
  slot.epoch_hold = epoch_hold;
  slot.data = slot.buffer;
  slot.data_length = request.length;
  slot.pending_pieces = 1;
  slot.had_io = true;
  slot.error = 0;
  slot.short_read = false;
  IoPiece& piece = slot.inline_piece;
  piece.slot = &slot;
  piece.buffer = slot.buffer;
  piece.buffer_index = slot.buffer_index;
  piece.device = extent.device;
  piece.physical_offset = extent.physical_offset + (request.offset - extent.logical_offset);
  piece.length = static_cast<uint32_t>(request.length);
  piece.needed = static_cast<uint32_t>(request.length);
  piece.short_read_retries = 0;
  QueuePiece(piece);
  return true;
}

}  // namespace blockread::storage
