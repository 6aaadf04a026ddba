// Completion: pieces come back from the backends, short reads are re-queued, the first error
// wins, and finished reads are delivered to their callers with their stats; slots their callers
// kept come back through Release().
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/log.h"
#include "storage/posix_status.h"
#include "storage/read_path.h"
#include "storage/read_slot.h"

namespace blockread::storage {

void EngineContext::QueuePiece(IoPiece& piece) {
  DeviceStats& device = stats_.device(piece.device);
  device.inflight.Set(device.inflight.Load() + 1);
  backend_of_device_[piece.device]->Queue(piece);
}

void EngineContext::OnPieceDone(void* self, IoPiece& piece, int result) {
  auto& engine = *static_cast<EngineContext*>(self);
  DeviceStats& device = engine.stats_.device(piece.device);
  device.inflight.Set(device.inflight.Load() - 1);
  device.reads.Add(1);
  if (result >= static_cast<int>(piece.needed)) [[likely]] {
    device.bytes.Add(static_cast<uint64_t>(result));
  } else if (engine.RequeueShortRead(piece, result)) {
    return;  // the rest is queued again: the piece is not finished
  } else {
    engine.RecordPieceError(piece, result);
  }
  // The piece is finished for good: the only place pending_pieces goes down.
  ReadSlot& slot = *piece.slot;
  if (--slot.pending_pieces == 0) engine.ready_.push_back(&slot);
}

// A short but block-aligned read (the device ended a transfer early): ask for the rest, a few
// times at most. Returns false when the result is an error or an unusable short read.
bool EngineContext::RequeueShortRead(IoPiece& piece, int result) {
  const uint32_t block = catalog_.device(piece.device).logical_block_size();
  if (result <= 0 || result % block != 0 || piece.short_read_retries >= 4 ||
      piece.slot->error != 0) {
    return false;
  }
  stats_.device(piece.device).bytes.Add(static_cast<uint64_t>(result));
  piece.buffer += result;
  piece.physical_offset += static_cast<uint64_t>(result);
  piece.length -= static_cast<uint32_t>(result);
  piece.needed -= static_cast<uint32_t>(result);
  ++piece.short_read_retries;
  QueuePiece(piece);
  return true;
}

void EngineContext::RecordPieceError(IoPiece& piece, int result) {
  stats_.device(piece.device).errors.Add(1);
  ReadSlot& slot = *piece.slot;
  if (slot.error != 0) return;  // first error wins
  slot.error = result < 0 ? -result : EIO;
  slot.short_read = result >= 0;
  slot.error_device = piece.device;
  slot.error_physical_offset = piece.physical_offset;
}

void EngineContext::Deliver(ReadSlot& slot, uint64_t now_ns) {
  ReadResult result;
  result.path = slot.path;
  result.fallback = slot.fallback;
  result.handle.slot = &slot;
  result.queue_ns = slot.start_ns - slot.arrival_ns;
  result.total_ns = now_ns - slot.arrival_ns;
  result.device_ns = slot.had_io ? now_ns - slot.start_ns : 0;
  PathStats& path = stats_.path(slot.path);
  path.requests.Add(1);
  if (slot.error == 0) [[likely]] {
    result.data = slot.data;
    result.length = slot.data_length;
    path.bytes.Add(slot.data_length);
  } else {
    // Device errors are DATA_LOSS whatever the errno: the bytes could not be had from the device
    // (a media or transport error), and retrying elsewhere will not help. The client learns the
    // errno text; the device, its path and the physical offset go to the log only.
    const Device& device = catalog_.device(slot.error_device);
    // PosixErrorMessage(error, "") is ": <strerror text>".
    const std::string cause =
        slot.short_read ? std::string("short read") : PosixErrorMessage(slot.error, "").substr(2);
    const uint64_t incident = LogIncident(
        LogLevel::kError, absl::StrFormat("reading device %s (%s) at offset %u: %s", device.name(),
                                          device.path(), slot.error_physical_offset, cause));
    result.status = absl::DataLossError(
        absl::StrFormat("device I/O error: %s (%s)", cause, IncidentNote(incident)));
    path.errors[static_cast<int>(result.status.code())].Add(1);
  }
  path.queue_ns.Record(result.queue_ns);
  path.device_ns.Record(result.device_ns);
  if (slot.had_io && slot.device != kNoDevice) {
    device_latency_[slot.device].Record(result.device_ns, now_ns);
  }
  path.total_ns.Record(result.total_ns);
  --reads_in_flight_;
  // The bytes are in the buffer: the file's version may be retired now.
  epoch_reader_->Exit(slot.epoch_hold);
  slot.retained = slot.done(slot.context, result);
  if (!slot.retained) FreeSlot(slot);
}

void EngineContext::Release(ReadHandle handle) {
  ReadSlot& slot = *handle.slot;
  if (!slot.retained) return;
  slot.retained = false;
  FreeSlot(slot);
}

std::shared_ptr<const void> EngineContext::RetainBufferMemory() const {
  // One reference that holds both pools.
  struct Pools {
    std::shared_ptr<BufferPool> simple;
    std::shared_ptr<BufferPool> generic;
  };
  return std::make_shared<const Pools>(Pools{simple_buffers_, generic_buffers_});
}

void EngineContext::FreeSlot(ReadSlot& slot) {
  ChargeSlot(slot, kNoDevice);
  (slot.path == ReadPathKind::kSimple ? free_simple_ : free_generic_).push_back(&slot);
}

}  // namespace blockread::storage
