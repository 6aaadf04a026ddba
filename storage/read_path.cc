// Dispatch: backend setup per worker, validation, the path decision, and the poll loop step.
#include "storage/read_path.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/clock.h"
#include "storage/log.h"
#include "storage/name_sync.h"
#include "storage/psync_backend.h"
#include "storage/read_slot.h"
#include "storage/ring.h"
#include "storage/simple_read.h"
#include "storage/uring_backend.h"

namespace blockread::storage {
namespace {

// io_uring's largest completion queue (IORING_MAX_CQ_ENTRIES).
constexpr uint64_t kMaxCqEntries = 65536;

}  // namespace

absl::StatusOr<IoEngine> ResolveIoEngine(IoEngine requested) {
  if (requested == IoEngine::kPsync) return requested;
  Ring::Options probe;
  probe.sq_entries = 8;
  probe.cq_entries = 8;
  const absl::Status ring = Ring::Create(probe).status();
  if (ring.ok()) return IoEngine::kIoUring;
  if (requested == IoEngine::kIoUring) {
    return absl::Status(ring.code(), absl::StrCat(ring.message(),
                                                  ". Or serve without io_uring: --io-engine=psync "
                                                  "(or auto, which falls back to it)"));
  }
  LogWarning(absl::StrCat("io_engine auto: ", ring.message(),
                          ". Serving with the psync engine (threads doing pread) instead, which "
                          "costs more CPU per read; --io-engine=io_uring makes this an error"));
  return IoEngine::kPsync;
}

EngineContext::EngineContext(Catalog& catalog, const EngineConfig& config)
    : catalog_(catalog),
      epoch_reader_(catalog.epochs().Register()),
      config_(config),
      stats_(catalog.device_count()),
      device_latency_(catalog.device_count()) {}

absl::StatusOr<std::unique_ptr<EngineContext>> EngineContext::Create(Catalog& catalog,
                                                                     const EngineConfig& config,
                                                                     BackendWrapper wrap_backend) {
  if (absl::Status valid = config.Validate(); !valid.ok()) return valid;
  catalog.SealDevices();  // the devices this context registers are all there will be
  std::unique_ptr<EngineContext> context(new EngineContext(catalog, config));
  if (absl::Status init = context->Init(wrap_backend); !init.ok()) return init;
  return context;
}

absl::Status EngineContext::Init(BackendWrapper wrap_backend) {
  absl::StatusOr<IoEngine> engine =
      config_.io_engine == IoEngine::kAuto ? ResolveIoEngine(config_.io_engine) : config_.io_engine;
  if (!engine.ok()) return engine.status();
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
  const uint32_t generic_buffer_index_base = static_cast<uint32_t>(buffers.size());
  for (const iovec& v : generic_buffers_->iovecs()) buffers.push_back(v);

  // Each generic piece covers at least one 512-byte block of the covering range, plus at most
  // one partial piece at each end.
  const uint32_t piece_capacity =
      static_cast<uint32_t>((config_.max_read_bytes + 2 * max_block) / 512 + 2);
  // The real maximum of pieces in flight: one per simple slot, piece_capacity per generic slot.
  // The CQ ring is sized for it (up to io_uring's limit; past that, pieces wait in the backend),
  // so it never overflows.
  const uint64_t max_pieces =
      uint64_t{simple_count} + uint64_t{config_.generic_slots} * piece_capacity;
  UringBackend::Options options;
  options.sq_entries = config_.ring_entries;
  options.max_in_flight =
      static_cast<unsigned>(std::clamp<uint64_t>(max_pieces, config_.ring_entries, kMaxCqEntries));
  // A file read through itself keeps its device when its name is replaced: the catalog re-points
  // the descriptor at the new file (storage/catalog.h).
  for (DeviceId id = 0; id < catalog_.device_count(); ++id) {
    options.read_by_descriptor.push_back(catalog_.device(id).kind() == DeviceKind::kFileRoute);
  }

  const auto add_backend = [&](std::unique_ptr<IoBackend> backend) {
    if (wrap_backend != nullptr) backend = wrap_backend(std::move(backend));
    backends_.push_back(std::move(backend));
    return backends_.back().get();
  };
  const bool psync = *engine == IoEngine::kPsync;
  if (psync) {
    auto pool = PsyncBackend::Create({.threads = config_.psync_threads}, fds);
    if (!pool.ok()) return pool.status();
    backend_of_device_.assign(catalog_.device_count(), add_backend(*std::move(pool)));
  } else {
    auto interrupt = UringBackend::Create(options, fds, buffers);
    if (!interrupt.ok()) return interrupt.status();
    backend_of_device_.assign(catalog_.device_count(), add_backend(*std::move(interrupt)));
  }

  IoBackend* iopoll_backend = nullptr;
  for (DeviceId id = 0; id < catalog_.device_count(); ++id) {
    const Device& device = catalog_.device(id);
    // Only block devices are polled: a file read through itself is the fallback route, and a
    // probe read of it can land in a hole and succeed without any I/O.
    if (!psync && device.kind() == DeviceKind::kBlockDevice &&
        (device.io_poll_supported() || config_.probe_iopoll_on_all_devices)) {
      absl::Status probe;
      if (device.size() < device.logical_block_size()) {
        probe = absl::FailedPreconditionError("device too small to probe");
      } else {
        // Probe on a fresh ring each time (a failed probe leaves nothing behind), then keep one
        // IOPOLL backend for every device that passed.
        UringBackend::Options poll_options = options;
        poll_options.mode = PollMode::kIoPoll;
        auto probe_ring = UringBackend::Create(poll_options, fds, buffers);
        if (!probe_ring.ok()) return probe_ring.status();
        probe = (*probe_ring)
                    ->ProbeRead(static_cast<int>(id), generic_buffers_->buffer(0),
                                device.logical_block_size(),
                                static_cast<int>(generic_buffer_index_base));
        if (probe.ok() && iopoll_backend == nullptr) {
          iopoll_backend = add_backend(*std::move(probe_ring));
        }
      }
      if (probe.ok()) {
        backend_of_device_[id] = iopoll_backend;
      } else {
        LogWarning(absl::StrFormat(
            "device %s (%s): polled I/O does not work (%s); demoted to interrupt mode, "
            "completions reaped by spinning on the CQ ring",
            device.name(), device.path(), probe.message()));
      }
    }
    stats_.device(id).backend.Set(static_cast<uint64_t>(backend_of_device_[id]->kind()));
  }

  simple_slots_.reset(new ReadSlot[simple_count]);
  for (uint32_t i = 0; i < simple_count; ++i) {
    ReadSlot& slot = simple_slots_[i];
    slot.buffer = simple_buffers_->buffer(i);
    slot.buffer_index = static_cast<uint16_t>(i);
    slot.path = ReadPathKind::kSimple;
    free_simple_.push_back(&slot);
  }
  generic_slots_.reset(new ReadSlot[config_.generic_slots]);
  for (uint32_t i = 0; i < config_.generic_slots; ++i) {
    ReadSlot& slot = generic_slots_[i];
    slot.buffer = generic_buffers_->buffer(i);
    slot.buffer_index = static_cast<uint16_t>(generic_buffer_index_base + i);
    slot.path = ReadPathKind::kGeneric;
    slot.pieces.reset(new IoPiece[piece_capacity]);
    slot.piece_capacity = piece_capacity;
    free_generic_.push_back(&slot);
  }
  ready_.reserve(simple_count + config_.generic_slots);
  // Files read through themselves are on some served filesystem's device: they are not devices
  // that stall on their own.
  size_t own_devices = 0;
  for (DeviceId id = 0; id < catalog_.device_count(); ++id) {
    own_devices += catalog_.device(id).kind() != DeviceKind::kFileRoute;
  }
  const uint32_t slot_counts[2] = {simple_count, config_.generic_slots};
  for (int p = 0; p < 2; ++p) {
    slots_held_[p].assign(catalog_.device_count(), 0);
    const uint32_t slots = slot_counts[p];
    device_share_limit_[p] = own_devices <= 1 ? slots
                                              : std::clamp(slots * kDeviceShareOfSlotsPercent / 100,
                                                           1u, std::max(slots, 2u) - 1);
  }

  auto name_sync = NameSync::Create(catalog_, /*use_io_uring=*/!psync);
  if (!name_sync.ok()) return name_sync.status();
  name_sync_ = *std::move(name_sync);
  return absl::OkStatus();
}

EngineContext::~EngineContext() {
  // The kernel may still be writing into our buffers: never unmap them under it.
  while (reads_in_flight_ > 0) {
    if (PollOnce() > 0) continue;
    for (const auto& backend : backends_) {
      if (backend->inflight() > 0) {
        backend->WaitForCompletion();
        break;
      }
    }
  }
}

absl::StatusOr<PathDecision> DecideReadPath(const FileMap& map, uint64_t size, uint64_t offset,
                                            uint64_t length, uint64_t simple_max_bytes) {
  if (offset > size) {
    return absl::OutOfRangeError(absl::StrFormat(
        "offset %u is beyond the end of file %s (%u bytes)", offset, map.name(), size));
  }
  PathDecision decision;
  if (offset < size && SimpleReadEligible(map, size, offset, length, simple_max_bytes,
                                          &decision.extent, &decision.fallback)) {
    decision.path = ReadPathKind::kSimple;
  }
  return decision;
}

StartOutcome EngineContext::StartRead(const ReadRequest& request, ReadDoneFn done, void* context,
                                      absl::Status* refusal) {
  const uint64_t start_ns = MonotonicNowNs();
  ReadRequest read = request;
  if (read.arrival_ns == 0 || read.arrival_ns > start_ns) read.arrival_ns = start_ns;
  StartOutcome outcome = StartOutcome::kQueued;
  absl::Status status = Dispatch(read, done, context, start_ns, &outcome);
  if (status.ok()) [[likely]] {
    return outcome;
  }
  stats_.rejected()[static_cast<int>(status.code())].Add(1);
  *refusal = std::move(status);
  return StartOutcome::kCompleted;
}

absl::Status EngineContext::Dispatch(const ReadRequest& request, ReadDoneFn done, void* context,
                                     uint64_t start_ns, StartOutcome* outcome) {
  if (absl::Status valid = ValidateReadRange(config_, request.offset, request.length);
      !valid.ok()) {
    return valid;
  }
  // A rename or unlink in a served directory that the catalog has not applied yet: wait for it
  // (storage/name_sync.h). Three loads from shared memory when there is none.
  if (name_sync_ != nullptr && !name_sync_->ReadyToResolve(request.file)) [[unlikely]] {
    if (name_sync_->waiting_for_its_name()) stats_.name_waits().Add(1);
    *outcome = StartOutcome::kNameChanging;
    return absl::OkStatus();
  }
  if (catalog_.device_events() != device_events_seen_) [[unlikely]] {
    OnDeviceEvents();
  }
  ReadEpochs::Hold hold = epoch_reader_->Enter();
  absl::Status unavailable;
  const FileVersion* found = catalog_.LookupForRead(request.file, &unavailable);
  if (found == nullptr) [[unlikely]] {
    epoch_reader_->Exit(hold);
    if (unavailable.ok()) {
      // Not open: the lookup asked the watcher to open it; wake it once per wait.
      if (open_ticket_ == 0) open_ticket_ = catalog_.RequestCatchUp();
      *outcome = StartOutcome::kOpening;
    }
    return unavailable;
  }
  const FileMap* map = found->map.get();
  const uint64_t size = map->SizeNow();
  absl::StatusOr<PathDecision> decision =
      DecideReadPath(*map, size, request.offset, request.length, config_.simple_max_bytes);
  if (!decision.ok()) [[unlikely]] {
    epoch_reader_->Exit(hold);
    return decision.status();
  }
  // The device of the read's first byte stands for the read (a generic read may span devices).
  const DeviceId device = decision->path == ReadPathKind::kSimple ? decision->extent.device
                          : request.offset < size ? map->Lookup(request.offset).device
                                                  : kNoDevice;
  if (found->epoch_domain != 0) {
    // A lease break may take this map from the file now: counted where the break looks, then
    // checked that it has not (storage/read_epochs.h). If it has, the read looks again.
    epoch_reader_->EnterDomain(hold, found->epoch_domain);
    if (!Catalog::StillServes(found)) [[unlikely]] {
      epoch_reader_->Exit(hold);
      return Dispatch(request, done, context, start_ns, outcome);
    }
  }
  if (request.deadline_ns != 0 || any_device_down_) [[unlikely]] {
    if (absl::Status refused = RefuseBeforeIo(device, request, start_ns); !refused.ok()) {
      epoch_reader_->Exit(hold);
      return refused;
    }
  }
  bool started = false;
  if (DeviceHoldsItsShare(decision->path, device)) [[unlikely]] {
    *outcome = StartOutcome::kDeviceBusy;
  } else if (decision->path == ReadPathKind::kSimple) {
    started = StartSimple(decision->extent, request, done, context, start_ns, hold);
  } else {
    started = StartGeneric(*map, size, decision->fallback, device, request, done, context, start_ns,
                           hold);
  }
  if (!started) {
    if (*outcome == StartOutcome::kQueued) *outcome = StartOutcome::kBusy;
    epoch_reader_->Exit(hold);
  }
  return absl::OkStatus();
}

void EngineContext::OnDeviceEvents() {
  const uint64_t events = catalog_.device_events();
  any_device_down_ = false;
  for (DeviceId id = 0; id < catalog_.device_count(); ++id) {
    any_device_down_ |= !catalog_.device_up(id);
    if (catalog_.device_reopened_at(id) > device_events_seen_) {
      const int fd = catalog_.device(id).fd();
      for (const auto& backend : backends_) backend->DeviceReopened(id, fd);
    }
  }
  device_events_seen_ = events;
}

bool EngineContext::DeviceHoldsItsShare(ReadPathKind path, DeviceId device) const {
  const int p = static_cast<int>(path);
  const bool slot_free = !(path == ReadPathKind::kSimple ? free_simple_ : free_generic_).empty();
  return slot_free && device != kNoDevice && slots_held_[p][device] >= device_share_limit_[p];
}

void EngineContext::ChargeSlot(ReadSlot& slot, DeviceId device) {
  std::vector<uint32_t>& held = slots_held_[static_cast<int>(slot.path)];
  if (slot.device != kNoDevice) --held[slot.device];
  slot.device = device;
  if (device != kNoDevice) ++held[device];
}

absl::Status EngineContext::RefuseBeforeIo(DeviceId device, const ReadRequest& request,
                                           uint64_t now_ns) {
  if (device != kNoDevice && !catalog_.device_up(device)) {
    return absl::UnavailableError(absl::StrFormat(
        "file '%s' is on a device that is unavailable (it went away); the server reopens it when "
        "it is back",
        EchoedName(request.file)));
  }
  if (request.deadline_ns == 0) return absl::OkStatus();
  const uint64_t takes_ns = device == kNoDevice ? 0 : device_latency_[device].P99Ns(now_ns);
  const uint64_t left_ns = request.deadline_ns > now_ns ? request.deadline_ns - now_ns : 0;
  if (left_ns > takes_ns) [[likely]] {
    return absl::OkStatus();
  }
  stats_.shed().Add(1);
  return absl::DeadlineExceededError(absl::StrFormat(
      "shed before reading: %u us left of the deadline, and reads of file '%s' take %u us now "
      "(p99)",
      left_ns / 1000, EchoedName(request.file), takes_ns / 1000));
}

int EngineContext::PollOnce() {
  if (open_ticket_ != 0 && catalog_.HasOpened(open_ticket_)) [[unlikely]] {
    open_ticket_ = 0;  // the reads that found their files cold are tried again now
  }
  for (const auto& backend : backends_) {
    if (backend->inflight() > 0) backend->Submit();
  }
  for (const auto& backend : backends_) {
    if (backend->inflight() > 0) backend->Reap(&OnPieceDone, this);
  }
  if (ready_.empty()) {
    // Also when no read comes: a device that went down is let go by this ring too.
    if (catalog_.device_events() != device_events_seen_) [[unlikely]] {
      OnDeviceEvents();
    }
    return 0;
  }
  const uint64_t now = MonotonicNowNs();
  // Callbacks may start reads that land in ready_ (reads with no I/O): deliver those next turn.
  const size_t count = ready_.size();
  for (size_t i = 0; i < count; ++i) Deliver(*ready_[i], now);
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<ptrdiff_t>(count));
  return static_cast<int>(count);
}

}  // namespace blockread::storage
