#include "storage/uring_backend.h"

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::storage {

absl::StatusOr<std::unique_ptr<UringBackend>> UringBackend::Create(
    const Options& options, const std::vector<int>& fds, const std::vector<iovec>& buffers) {
  Ring::Options ring_options;
  ring_options.mode = options.mode;
  ring_options.sq_entries = options.sq_entries;
  // The kernel rounds the CQ up to a power of two; it must hold every piece we allow in flight.
  ring_options.cq_entries = options.max_in_flight;
  auto ring = Ring::Create(ring_options);
  if (!ring.ok()) return ring.status();
  std::vector<int> registered = fds;
  std::vector<int> descriptors(fds.size(), -1);
  for (size_t i = 0; i < fds.size() && i < options.read_by_descriptor.size(); ++i) {
    if (!options.read_by_descriptor[i]) continue;
    descriptors[i] = fds[i];
    registered[i] = -1;
  }
  if (absl::Status s = (*ring)->RegisterFiles(registered); !s.ok()) return s;
  (*ring)->ReadThroughDescriptors(std::move(descriptors));
  if (absl::Status s = (*ring)->RegisterBuffers(buffers); !s.ok()) return s;
  return std::unique_ptr<UringBackend>(new UringBackend(*std::move(ring), options.max_in_flight));
}

void UringBackend::DeviceReopened(uint32_t id, int fd) {
  if (absl::Status s = ring_->UpdateRegisteredFile(static_cast<int>(id), fd); !s.ok()) {
    // The old registration stays: reads of the device keep failing until the next reopen.
    LogError(
        absl::StrCat("device ", id, " reopened, but this worker cannot use it: ", s.message()));
  }
}

BackendKind UringBackend::kind() const {
  return ring_->mode() == PollMode::kIoPoll ? BackendKind::kUringIoPoll
                                            : BackendKind::kUringInterrupt;
}

bool UringBackend::TryIssue(IoPiece& piece) {
  if (ring_->inflight() >= max_in_flight_) return false;
  const auto queue = [&] {
    return ring_->TryQueueRead(static_cast<int>(piece.device), piece.buffer, piece.length,
                               piece.physical_offset, piece.buffer_index,
                               reinterpret_cast<uint64_t>(&piece));
  };
  if (queue()) return true;
  // The SQ ring is full of prepared SQEs: send them, then there is room. If the kernel pushes
  // back, the piece waits; the SQEs stay in the ring for the next Submit().
  if (ring_->Submit() < 0) return false;
  return queue();
}

void UringBackend::Queue(IoPiece& piece) {
  // Behind waiting pieces, or onto the ring if there is room.
  if (waiting_head_ == nullptr && TryIssue(piece)) return;
  piece.next_waiting = nullptr;
  if (waiting_tail_ != nullptr) {
    waiting_tail_->next_waiting = &piece;
  } else {
    waiting_head_ = &piece;
  }
  waiting_tail_ = &piece;
  ++waiting_count_;
}

void UringBackend::IssueWaiting() {
  while (waiting_head_ != nullptr && TryIssue(*waiting_head_)) {
    waiting_head_ = waiting_head_->next_waiting;
    if (waiting_head_ == nullptr) waiting_tail_ = nullptr;
    --waiting_count_;
  }
}

void UringBackend::Submit() {
  if (waiting_head_ != nullptr) IssueWaiting();
  const int result = ring_->Submit();
  // EAGAIN/EBUSY: the kernel is short of resources or has too many completions pending; the
  // SQEs stay queued and go with the next Submit(). Backpressure, not a failed read.
  if (result < 0 && result != -EAGAIN && result != -EBUSY && result != -EINTR &&
      !submit_error_logged_) {
    submit_error_logged_ = true;
    LogWarning(absl::StrCat(PosixError(-result, "io_uring_enter (submit)").message(),
                            "; the reads stay queued and are submitted again"));
  }
}

unsigned UringBackend::Reap(PieceDoneFn done, void* context) {
  const unsigned reaped = ring_->Reap([&](uint64_t user_data, int result) {
    done(context, *reinterpret_cast<IoPiece*>(user_data), result);
  });
  if (reaped > 0 && waiting_head_ != nullptr) IssueWaiting();
  return reaped;
}

void UringBackend::WaitForCompletion() {
  Submit();
  ring_->WaitForCompletion();
}

absl::Status UringBackend::ProbeRead(int file_index, char* buffer, unsigned length,
                                     int buffer_index) {
  int result = -EIO;
  if (!ring_->TryQueueRead(file_index, buffer, length, 0, buffer_index, 0) || ring_->Submit() < 0) {
    return absl::InternalError("probe submission failed");
  }
  while (ring_->inflight() > 0) {
    ring_->WaitForCompletion();
    ring_->Reap([&](uint64_t, int res) { result = res; });
  }
  if (result < 0) return PosixError(-result, "probe read");
  return absl::OkStatus();
}

}  // namespace blockread::storage
