// The io_uring rows of the backend table: one ring in interrupt or IOPOLL mode, the worker's
// registered device descriptors and buffers on it.
#ifndef BLOCKREAD_STORAGE_URING_BACKEND_H_
#define BLOCKREAD_STORAGE_URING_BACKEND_H_

#include <sys/uio.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/io_backend.h"
#include "storage/ring.h"

namespace blockread::storage {

// Threading: create, use and destroy on the worker thread (the ring is SINGLE_ISSUER).
class UringBackend final : public IoBackend {
 public:
  struct Options {
    PollMode mode = PollMode::kInterrupt;
    unsigned sq_entries = 256;
    // The most pieces this backend may have on the ring at once; the CQ ring is sized for
    // exactly that many, so it can never overflow. More wait inside the backend.
    unsigned max_in_flight = 4096;
    // By DeviceId: devices whose descriptor the catalog may re-point at another open file
    // (dup3, when a served name is replaced). They are read through the descriptor, never a
    // registered copy of it. Missing entries are false.
    std::vector<bool> read_by_descriptor;
  };

  // Sets the ring up and registers `fds` (index = DeviceId) and `buffers`. Errors say why
  // io_uring or the registration is unavailable, naming the limit or setting involved.
  static absl::StatusOr<std::unique_ptr<UringBackend>> Create(const Options& options,
                                                              const std::vector<int>& fds,
                                                              const std::vector<iovec>& buffers);

  BackendKind kind() const override;
  void Queue(IoPiece& piece) override;
  void Submit() override;
  unsigned Reap(PieceDoneFn done, void* context) override;
  void WaitForCompletion() override;
  unsigned inflight() const override { return ring_->inflight() + waiting_count_; }
  void DeviceReopened(uint32_t id, int fd) override;

  // Reads `length` bytes at offset 0 of registered file `file_index` and waits for the result:
  // whether polled I/O works on that device (an IOPOLL ring on a device without poll queues
  // completes with EOPNOTSUPP). REQUIRES: nothing else in flight.
  absl::Status ProbeRead(int file_index, char* buffer, unsigned length, int buffer_index);

 private:
  explicit UringBackend(std::unique_ptr<Ring> ring, unsigned max_in_flight)
      : ring_(std::move(ring)), max_in_flight_(max_in_flight) {}
  // Puts `piece` on the ring if it has room; false if it must wait.
  bool TryIssue(IoPiece& piece);
  void IssueWaiting();

  std::unique_ptr<Ring> ring_;
  const unsigned max_in_flight_;
  // Pieces that found the ring full, in arrival order.
  IoPiece* waiting_head_ = nullptr;
  IoPiece* waiting_tail_ = nullptr;
  unsigned waiting_count_ = 0;
  bool submit_error_logged_ = false;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_URING_BACKEND_H_
