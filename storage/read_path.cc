#include "storage/read_path.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/clock.h"
#include "storage/generic_read.h"
#include "storage/log.h"
#include "storage/posix_status.h"
#include "storage/simple_read.h"

namespace blockread::storage {
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

// One device I/O of a read. user_data of its SQE is the IoPiece's address.
struct EngineContext::IoPiece {
  Slot* slot = nullptr;
  char* buffer = nullptr;
  uint64_t physical_offset = 0;
  uint32_t length = 0;
  uint32_t needed = 0;  // bytes that must come back (see PlannedIo)
  DeviceId device = kNoDevice;
  uint16_t buffer_index = 0;
  uint8_t short_read_retries = 0;
};

// A read in flight. Cacheline-aligned so two workers' slots never share a line and a slot's hot
// fields are one fetch. The simple path uses only inline_piece.
struct alignas(64) EngineContext::Slot {
  ReadDoneFn done = nullptr;
  void* context = nullptr;
  const char* data = nullptr;
  uint64_t data_length = 0;
  uint64_t arrival_ns = 0;  // when the caller received the read (queue stage start)
  uint64_t start_ns = 0;    // when StartRead took this slot
  uint32_t pending_ios = 0;
  bool had_io = false;  // delivered in the PollOnce that reaped its last I/O
  ReadPathKind path = ReadPathKind::kSimple;
  FallbackReason fallback = FallbackReason::kDisabled;
  bool retained = false;
  // First error wins: errno of the first failed I/O (or EIO for a short read), and where.
  int error = 0;
  bool short_read = false;
  DeviceId error_device = kNoDevice;
  uint64_t error_physical_offset = 0;
  char* buffer = nullptr;
  uint16_t buffer_index = 0;
  IoPiece inline_piece;
  // Generic slots: room for the most pieces a max_read_bytes read can need.
  std::unique_ptr<IoPiece[]> pieces;
  uint32_t piece_capacity = 0;
};

absl::Status EngineConfig::Validate() const {
  if (simple_max_bytes != 0 && (simple_max_bytes % 512 != 0 || simple_max_bytes > (1 << 20))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "simple_max_bytes %u must be 0 (off) or a multiple of 512 up to 1 MiB", simple_max_bytes));
  }
  if (max_read_bytes < 4096 || max_read_bytes > (64 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_read_bytes %u must be between 4 KiB and 64 MiB", max_read_bytes));
  }
  if (max_io_bytes < 4096 || max_io_bytes % 4096 != 0 || max_io_bytes > (16 << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_io_bytes %u must be a multiple of 4 KiB between 4 KiB and 16 MiB", max_io_bytes));
  }
  if (generic_slots == 0 || (simple_max_bytes != 0 && simple_slots == 0)) {
    return absl::InvalidArgumentError("simple_slots and generic_slots must be at least 1");
  }
  if (!IsPowerOfTwo(ring_entries) || ring_entries < 8 || ring_entries > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ring_entries %u must be a power of two from 8 to 4096", ring_entries));
  }
  return absl::OkStatus();
}

EngineContext::EngineContext(Catalog& catalog, const EngineConfig& config)
    : catalog_(catalog), config_(config), stats_(catalog.device_count()) {}

absl::StatusOr<std::unique_ptr<EngineContext>> EngineContext::Create(Catalog& catalog,
                                                                     const EngineConfig& config) {
  if (absl::Status valid = config.Validate(); !valid.ok()) return valid;
  std::unique_ptr<EngineContext> context(new EngineContext(catalog, config));
  if (absl::Status init = context->Init(); !init.ok()) return init;
  return context;
}

absl::Status EngineContext::Init() {
  RaiseMemlockLimit();
  uint32_t max_block = 512;
  std::vector<int> fds;
  for (DeviceId id = 0; id < catalog_.device_count(); ++id) {
    max_block = std::max(max_block, catalog_.device(id).logical_block_size());
    fds.push_back(catalog_.device(id).fd());
  }

  const uint32_t simple_count = config_.simple_max_bytes == 0 ? 0 : config_.simple_slots;
  auto simple = BufferPool::Create(simple_count, config_.simple_max_bytes);
  if (!simple.ok()) return simple.status();
  simple_buffers_ = *std::move(simple);
  // A generic read's buffer mirrors its block-aligned covering range: up to two blocks more.
  auto generic = BufferPool::Create(config_.generic_slots, config_.max_read_bytes + 2 * max_block);
  if (!generic.ok()) return generic.status();
  generic_buffers_ = *std::move(generic);
  std::vector<iovec> buffers = simple_buffers_->iovecs();
  generic_buffer_index_base_ = static_cast<uint32_t>(buffers.size());
  for (const iovec& v : generic_buffers_->iovecs()) buffers.push_back(v);

  // Every in-flight I/O needs CQ room: simple reads one each, generic ones many.
  Ring::Options ring_options;
  ring_options.sq_entries = config_.ring_entries;
  uint32_t cq = 4096;
  while (cq < 2 * (simple_count + config_.generic_slots * 64)) cq *= 2;
  ring_options.cq_entries = cq;
  auto ring = Ring::Create(ring_options);
  if (!ring.ok()) return ring.status();
  interrupt_ring_ = *std::move(ring);
  if (absl::Status s = interrupt_ring_->RegisterFiles(fds); !s.ok()) return s;
  if (absl::Status s = interrupt_ring_->RegisterBuffers(buffers); !s.ok()) return s;

  ring_of_device_.assign(catalog_.device_count(), interrupt_ring_.get());
  for (DeviceId id = 0; id < catalog_.device_count(); ++id) {
    stats_.device(id).poll_mode.Set(static_cast<uint64_t>(PollMode::kInterrupt));
    const Device& device = catalog_.device(id);
    if (!device.io_poll_supported() && !config_.probe_iopoll_on_all_devices) continue;
    if (!iopoll_ring_) {
      Ring::Options poll_options = ring_options;
      poll_options.mode = PollMode::kIoPoll;
      auto poll_ring = Ring::Create(poll_options);
      if (!poll_ring.ok()) return poll_ring.status();
      iopoll_ring_ = *std::move(poll_ring);
      if (absl::Status s = iopoll_ring_->RegisterFiles(fds); !s.ok()) return s;
      if (absl::Status s = iopoll_ring_->RegisterBuffers(buffers); !s.ok()) return s;
    }
    absl::Status probe = ProbeIoPoll(id);
    if (probe.ok()) {
      ring_of_device_[id] = iopoll_ring_.get();
      stats_.device(id).poll_mode.Set(static_cast<uint64_t>(PollMode::kIoPoll));
    } else {
      LogWarning(absl::StrFormat(
          "device %s (%s): polled I/O does not work (%s); demoted to interrupt mode, completions "
          "reaped by spinning on the CQ ring",
          device.name(), device.path(), probe.message()));
    }
  }

  simple_slots_.reset(new Slot[simple_count]);
  for (uint32_t i = 0; i < simple_count; ++i) {
    Slot& slot = simple_slots_[i];
    slot.buffer = simple_buffers_->buffer(i);
    slot.buffer_index = static_cast<uint16_t>(i);
    slot.path = ReadPathKind::kSimple;
    free_simple_.push_back(&slot);
  }
  // Each generic piece covers at least one block of the covering range, and at most one extra
  // piece starts inside each block boundary of the range.
  const uint32_t piece_capacity =
      static_cast<uint32_t>((config_.max_read_bytes + 2 * max_block) / 512 + 2);
  generic_slots_.reset(new Slot[config_.generic_slots]);
  for (uint32_t i = 0; i < config_.generic_slots; ++i) {
    Slot& slot = generic_slots_[i];
    slot.buffer = generic_buffers_->buffer(i);
    slot.buffer_index = static_cast<uint16_t>(generic_buffer_index_base_ + i);
    slot.path = ReadPathKind::kGeneric;
    slot.pieces.reset(new IoPiece[piece_capacity]);
    slot.piece_capacity = piece_capacity;
    free_generic_.push_back(&slot);
  }
  ready_.reserve(simple_count + config_.generic_slots);
  return absl::OkStatus();
}

absl::Status EngineContext::ProbeIoPoll(DeviceId id) {
  const Device& device = catalog_.device(id);
  if (device.size() < device.logical_block_size()) {
    return absl::FailedPreconditionError("device too small to probe");
  }
  int result = -EIO;
  Ring& ring = *iopoll_ring_;
  if (!ring.QueueRead(static_cast<int>(id), generic_buffers_->buffer(0),
                      device.logical_block_size(), 0, static_cast<int>(generic_buffer_index_base_),
                      0) ||
      ring.Submit() < 0) {
    return absl::InternalError("probe submission failed");
  }
  while (ring.inflight() > 0) {
    ring.WaitForCompletion();
    ring.Reap([&](uint64_t, int res) { result = res; });
  }
  if (result < 0) return PosixError(-result, "probe read");
  return absl::OkStatus();
}

EngineContext::~EngineContext() {
  // The kernel may still be writing into our buffers: never unmap them under it.
  while (reads_in_flight_ > 0) {
    if (PollOnce() > 0) continue;
    const bool only_interrupt = !iopoll_ring_ || iopoll_ring_->inflight() == 0;
    if (only_interrupt && interrupt_ring_ && interrupt_ring_->inflight() > 0) {
      interrupt_ring_->WaitForCompletion();
    }
  }
}

PollMode EngineContext::poll_mode(DeviceId device) const { return ring_of_device_[device]->mode(); }

absl::Status ValidateReadRange(const EngineConfig& config, uint64_t offset, uint64_t length) {
  if (length == 0) return absl::InvalidArgumentError("length must be greater than 0");
  if (length > config.max_read_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("length %u exceeds the largest read allowed, max_read_bytes = %u", length,
                        config.max_read_bytes));
  }
  if (offset > UINT64_MAX - length) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset %u + length %u overflows 64 bits", offset, length));
  }
  return absl::OkStatus();
}

absl::StatusOr<PathDecision> DecideReadPath(const FileMap& map, uint64_t offset, uint64_t length,
                                            uint64_t simple_max_bytes) {
  if (offset > map.size()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "offset %u is beyond the end of file %s (%u bytes)", offset, map.name(), map.size()));
  }
  PathDecision decision;
  if (offset < map.size() && SimpleReadEligible(map, offset, length, simple_max_bytes,
                                                &decision.extent, &decision.fallback)) {
    decision.path = ReadPathKind::kSimple;
  }
  return decision;
}

absl::Status EngineContext::StartRead(absl::string_view file, uint64_t offset, uint64_t length,
                                      ReadDoneFn done, void* context, uint64_t arrival_ns) {
  absl::Status status = Start(file, offset, length, done, context, arrival_ns);
  if (!status.ok() && !absl::IsResourceExhausted(status)) [[unlikely]] {
    stats_.rejected()[static_cast<int>(status.code())].Add(1);
  }
  return status;
}

absl::Status EngineContext::Start(absl::string_view file, uint64_t offset, uint64_t length,
                                  ReadDoneFn done, void* context, uint64_t arrival_ns) {
  const uint64_t start_ns = MonotonicNowNs();
  if (arrival_ns == 0 || arrival_ns > start_ns) arrival_ns = start_ns;
  if (absl::Status valid = ValidateReadRange(config_, offset, length); !valid.ok()) return valid;
  absl::StatusOr<FileMapRef> map = catalog_.Resolve(file);
  if (!map.ok()) return map.status();
  absl::StatusOr<PathDecision> decision =
      DecideReadPath(**map, offset, length, config_.simple_max_bytes);
  if (!decision.ok()) return decision.status();
  if (decision->path == ReadPathKind::kSimple) {
    return StartSimple(decision->extent, offset, length, done, context, arrival_ns, start_ns);
  }
  return StartGeneric(**map, decision->fallback, offset, length, done, context, arrival_ns,
                      start_ns);
}

absl::Status EngineContext::StartSimple(const Extent& extent, uint64_t offset, uint64_t length,
                                        ReadDoneFn done, void* context, uint64_t arrival_ns,
                                        uint64_t start_ns) {
  if (free_simple_.empty()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "all %u simple-path read slots of this worker are busy", config_.simple_slots));
  }
  Slot& slot = *free_simple_.back();
  free_simple_.pop_back();
  ++reads_in_flight_;
  slot.done = done;
  slot.context = context;
  slot.arrival_ns = arrival_ns;
  slot.start_ns = start_ns;
  slot.data = slot.buffer;
  slot.data_length = length;
  slot.pending_ios = 1;
  slot.had_io = true;
  slot.error = 0;
  slot.short_read = false;
  IoPiece& piece = slot.inline_piece;
  piece.slot = &slot;
  piece.buffer = slot.buffer;
  piece.buffer_index = slot.buffer_index;
  piece.device = extent.device;
  piece.physical_offset = extent.physical_offset + (offset - extent.logical_offset);
  piece.length = static_cast<uint32_t>(length);
  piece.needed = static_cast<uint32_t>(length);
  piece.short_read_retries = 0;
  QueuePiece(piece);
  return absl::OkStatus();
}

absl::Status EngineContext::StartGeneric(const FileMap& map, FallbackReason reason, uint64_t offset,
                                         uint64_t length, ReadDoneFn done, void* context,
                                         uint64_t arrival_ns, uint64_t start_ns) {
  if (free_generic_.empty()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "all %u generic-path read slots of this worker are busy", config_.generic_slots));
  }
  Slot& slot = *free_generic_.back();
  free_generic_.pop_back();
  ++reads_in_flight_;
  stats_.fallback(reason).Add(1);
  slot.done = done;
  slot.context = context;
  slot.arrival_ns = arrival_ns;
  slot.start_ns = start_ns;
  slot.fallback = reason;
  slot.error = 0;
  slot.short_read = false;
  uint32_t count = 0;
  const GenericPlan plan = PlanGenericRead(map, offset, length, config_.max_io_bytes, slot.buffer,
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
  // All pieces are counted before any is queued, so no completion can see a partial count.
  slot.pending_ios = count;
  slot.had_io = count > 0;
  if (count == 0) ready_.push_back(&slot);
  for (uint32_t i = 0; i < count; ++i) QueuePiece(slot.pieces[i]);
  return absl::OkStatus();
}

void EngineContext::QueuePiece(IoPiece& piece) {
  DeviceStats& device = stats_.device(piece.device);
  device.inflight.Add(1);
  if (!ring_of_device_[piece.device]->QueueRead(
          static_cast<int>(piece.device), piece.buffer, piece.length, piece.physical_offset,
          piece.buffer_index, reinterpret_cast<uint64_t>(&piece))) {
    // The kernel refused a flush of a full SQ: fail this I/O like a device error would.
    OnCompletion(reinterpret_cast<uint64_t>(&piece), -EAGAIN);
  }
}

void EngineContext::OnCompletion(uint64_t user_data, int result) {
  IoPiece& piece = *reinterpret_cast<IoPiece*>(user_data);
  DeviceStats& device = stats_.device(piece.device);
  device.inflight.Set(device.inflight.Load() - 1);
  device.reads.Add(1);
  if (result >= static_cast<int>(piece.needed)) [[likely]] {
    device.bytes.Add(static_cast<uint64_t>(result));
  } else {
    HandleIoFailureOrShortRead(piece, result);
    if (piece.slot->error == 0) return;  // re-queued the rest of a short read
  }
  Slot& slot = *piece.slot;
  if (--slot.pending_ios == 0) ready_.push_back(&slot);
}

// The slow path: an I/O error, or fewer bytes than needed.
void EngineContext::HandleIoFailureOrShortRead(IoPiece& piece, int result) {
  DeviceStats& device = stats_.device(piece.device);
  Slot& slot = *piece.slot;
  const uint32_t block = catalog_.device(piece.device).logical_block_size();
  if (result > 0 && result % block == 0 && piece.short_read_retries < 4 && slot.error == 0) {
    // A short but aligned read: ask for the rest.
    device.bytes.Add(static_cast<uint64_t>(result));
    piece.buffer += result;
    piece.physical_offset += static_cast<uint64_t>(result);
    piece.length -= static_cast<uint32_t>(result);
    piece.needed -= static_cast<uint32_t>(result);
    ++piece.short_read_retries;
    QueuePiece(piece);
    return;
  }
  device.errors.Add(1);
  if (slot.error == 0) {  // first error wins
    slot.error = result < 0 ? -result : EIO;
    slot.short_read = result >= 0;
    slot.error_device = piece.device;
    slot.error_physical_offset = piece.physical_offset;
  }
}

int EngineContext::PollOnce() {
  if (interrupt_ring_->inflight() > 0) interrupt_ring_->Submit();
  if (iopoll_ring_ && iopoll_ring_->inflight() > 0) iopoll_ring_->Submit();
  auto on_cqe = [this](uint64_t user_data, int result) { OnCompletion(user_data, result); };
  interrupt_ring_->Reap(on_cqe);
  if (iopoll_ring_) iopoll_ring_->Reap(on_cqe);
  if (ready_.empty()) return 0;
  const uint64_t now = MonotonicNowNs();
  // Callbacks may start reads that land in ready_ (reads with no I/O): deliver those next turn.
  const size_t count = ready_.size();
  for (size_t i = 0; i < count; ++i) Deliver(*ready_[i], now);
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<ptrdiff_t>(count));
  return static_cast<int>(count);
}

void EngineContext::Deliver(Slot& slot, uint64_t now_ns) {
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
    const Device& device = catalog_.device(slot.error_device);
    const std::string where = absl::StrFormat("reading device %s (%s) at offset %u", device.name(),
                                              device.path(), slot.error_physical_offset);
    // Device errors are DATA_LOSS whatever the errno: the bytes could not be had from the device
    // (a media or transport error), and retrying elsewhere will not help; the message keeps the
    // errno text.
    result.status =
        absl::DataLossError(slot.short_read ? absl::StrCat("short read ", where)
                                            : std::string(PosixError(slot.error, where).message()));
    path.errors[static_cast<int>(result.status.code())].Add(1);
  }
  path.queue_ns.Record(result.queue_ns);
  path.device_ns.Record(result.device_ns);
  path.total_ns.Record(result.total_ns);
  --reads_in_flight_;
  slot.retained = slot.done(slot.context, result);
  if (!slot.retained) FreeSlot(slot);
}

void EngineContext::Release(ReadHandle handle) {
  Slot& slot = *static_cast<Slot*>(handle.slot);
  if (!slot.retained) return;
  slot.retained = false;
  FreeSlot(slot);
}

void EngineContext::FreeSlot(Slot& slot) {
  (slot.path == ReadPathKind::kSimple ? free_simple_ : free_generic_).push_back(&slot);
}

}  // namespace blockread::storage
