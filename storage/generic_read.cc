// The generic path's slot filling: plan the read over the extent map, one piece per mapped
// segment, holes zero-filled in place.
#include "storage/generic_read.h"

#include "storage/read_path.h"
#include "storage/read_slot.h"

namespace blockread::storage {

bool EngineContext::StartGeneric(const FileMap& map, uint64_t size, FallbackReason reason,
                                 DeviceId device, const ReadRequest& request, ReadDoneFn done,
                                 void* context, uint64_t start_ns, ReadEpochs::Hold epoch_hold) {
  if (free_generic_.empty()) return false;
  ReadSlot& slot = *free_generic_.back();
  free_generic_.pop_back();
  ChargeSlot(slot, device);
  ++reads_in_flight_;
  stats_.fallback(reason).Add(1);
  slot.done = done;
  slot.context = context;
  slot.arrival_ns = request.arrival_ns;
  slot.start_ns = start_ns;
  slot.epoch_hold = epoch_hold;
  slot.fallback = reason;
  slot.error = 0;
  slot.short_read = false;
  uint32_t count = 0;
  const GenericPlan plan =
      PlanGenericRead(map, size, request.offset, request.length, config_.max_io_bytes, slot.buffer,
                      [&](const PlannedIo& io) {
                        IoPiece& piece = slot.pieces[count++];
                        piece.slot = &slot;
                        piece.buffer = slot.buffer + io.buffer_offset;
                        piece.buffer_index = slot.buffer_index;
                        piece.device = io.device;
                        piece.physical_offset = io.physical_offset;
                        piece.length = static_cast<uint32_t>(io.length);
                        piece.needed = static_cast<uint32_t>(io.needed);
                        piece.short_read_retries = 0;
                      });
  slot.data = slot.buffer + plan.data_offset;
  slot.data_length = plan.data_length;
  // Every piece is counted before any is queued (backends never call back from Queue, but a
  // count that is complete up front needs no such argument).
  slot.pending_pieces = count;
  slot.had_io = count > 0;
  if (count == 0) ready_.push_back(&slot);
  for (uint32_t i = 0; i < count; ++i) QueuePiece(slot.pieces[i]);
  return true;
}

}  // namespace blockread::storage
