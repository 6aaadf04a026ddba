// One io_uring owned by one worker thread, in one of two poll modes (see PollMode).
#ifndef BLOCKREAD_STORAGE_RING_H_
#define BLOCKREAD_STORAGE_RING_H_

#include <liburing.h>
#include <sys/uio.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/stats.h"

namespace blockread::storage {

// Threading: create, use and destroy on one thread (IORING_SETUP_SINGLE_ISSUER ties the ring to
// the thread that creates it).
class Ring {
 public:
  struct Options {
    unsigned sq_entries = 256;
    // The owner keeps at most this many I/Os in flight, so the CQ never overflows.
    unsigned cq_entries = 4096;
    PollMode mode = PollMode::kInterrupt;
  };

  // Sets the ring up. kInterrupt rings use SINGLE_ISSUER | COOP_TASKRUN | TASKRUN_FLAG: the kernel
  // does not interrupt the spinning worker to post completions, it raises a flag in shared memory
  // instead, and Reap() enters the kernel only when that flag is up. kIoPoll rings use
  // IORING_SETUP_IOPOLL. When io_uring is unusable (kernel.io_uring_disabled, a seccomp profile,
  // an old kernel) the error says exactly that.
  static absl::StatusOr<std::unique_ptr<Ring>> Create(const Options& options);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Registers device descriptors (index = DeviceId; -1 leaves a slot empty) and I/O buffers.
  // A buffer registration refused for RLIMIT_MEMLOCK says so, with the limit and the bytes asked.
  absl::Status RegisterFiles(const std::vector<int>& fds);
  // Files read through a plain descriptor instead of a registered slot: descriptors[i] >= 0 is
  // used for file index i. For descriptors that may be re-pointed at another open file (dup3)
  // while the ring lives: a registered slot would keep reading the old one.
  void ReadThroughDescriptors(std::vector<int> descriptors) {
    descriptors_ = std::move(descriptors);
  }
  absl::Status RegisterBuffers(const std::vector<iovec>& buffers);
  // Points registered file `file_index` at `fd` (a reopened device); a file read through a plain
  // descriptor needs nothing. Reads in flight finish on the file they started on.
  absl::Status UpdateRegisteredFile(int file_index, int fd);

  // Queues a READ_FIXED of `length` bytes at `offset` of registered file `file_index` into
  // `buffer` (inside registered buffer `buffer_index`); `user_data` comes back in the CQE. Not
  // submitted until Submit(). Returns false, queuing nothing, when the SQ ring is full: Submit()
  // and try again.
  bool TryQueueRead(int file_index, void* buffer, unsigned length, uint64_t offset,
                    int buffer_index, uint64_t user_data) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return false;
    const int descriptor =
        static_cast<size_t>(file_index) < descriptors_.size() ? descriptors_[file_index] : -1;
    if (descriptor < 0) [[likely]] {
      io_uring_prep_read_fixed(sqe, file_index, buffer, length, offset, buffer_index);
      sqe->flags |= IOSQE_FIXED_FILE;
    } else {
      io_uring_prep_read_fixed(sqe, descriptor, buffer, length, offset, buffer_index);
    }
    io_uring_sqe_set_data64(sqe, user_data);
    ++inflight_;
    return true;
  }

  // Submits everything queued with one io_uring_enter (nothing if nothing is queued).
  // Returns the number submitted or a negative errno; on -EAGAIN/-EBUSY (the kernel pushing back)
  // the SQEs stay in the SQ ring and the next Submit() sends them.
  int Submit() { return io_uring_sq_ready(&ring_) == 0 ? 0 : io_uring_submit(&ring_); }

  // Calls on_cqe(user_data, res) for every completion available now, without blocking.
  // Interrupt mode: reads the CQ ring from user memory; enters the kernel only when the kernel has
  // flagged pending completion work (TASKRUN/overflow). IOPOLL mode: polls the device once
  // through io_uring_enter(GETEVENTS) when the CQ ring is empty and reads are in flight.
  template <typename OnCqe>
  unsigned Reap(OnCqe&& on_cqe) {
    if (inflight_ == 0) return 0;
    if (mode_ == PollMode::kIoPoll && io_uring_cq_ready(&ring_) == 0) io_uring_get_events(&ring_);
    io_uring_cqe* cqes[64];
    unsigned total = 0;
    for (;;) {
      const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, 64);
      for (unsigned i = 0; i < n; ++i) on_cqe(cqes[i]->user_data, cqes[i]->res);
      io_uring_cq_advance(&ring_, n);
      inflight_ -= n;
      total += n;
      if (n < 64) return total;
    }
  }

  // Arms a multishot POLL_ADD of `fd` for POLLIN and submits it: a completion carrying
  // `user_data` each time `fd` is woken (IORING_CQE_F_MORE while it stays armed). Not counted in
  // inflight(); reap its completions with ReapUncounted(). False when the kernel refused it.
  bool ArmPoll(int fd, uint64_t user_data);
  // Whether completions wait in the CQ ring, or the kernel has flagged completion work for this
  // ring to run (IORING_SQ_TASKRUN, set when a wake-up queues it): loads from shared memory, no
  // system call. Interrupt mode.
  bool CompletionsPending() const {
    return (__atomic_load_n(ring_.sq.kflags, __ATOMIC_ACQUIRE) & IORING_SQ_TASKRUN) != 0 ||
           io_uring_cq_ready(&ring_) > 0;
  }
  // Calls on_cqe(user_data, res, flags) for every completion posted, for rings whose requests
  // inflight() does not count (ArmPoll). Flagged completion work is run first: liburing's peek
  // enters the kernel for it when the CQ ring is empty and IORING_SQ_TASKRUN is up.
  template <typename OnCqe>
  void ReapUncounted(OnCqe&& on_cqe) {
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      on_cqe(cqe->user_data, cqe->res, cqe->flags);
      io_uring_cqe_seen(&ring_, cqe);
    }
  }

  // Blocks until at least one completion is available (used to drain at shutdown).
  void WaitForCompletion() {
    io_uring_cqe* cqe = nullptr;
    if (inflight_ > 0) io_uring_wait_cqe(&ring_, &cqe);
  }

  PollMode mode() const { return mode_; }
  // Reads queued or submitted whose completion has not been reaped.
  unsigned inflight() const { return inflight_; }

 private:
  Ring() = default;
  io_uring ring_{};
  std::vector<int> descriptors_;  // see ReadThroughDescriptors
  bool initialized_ = false;
  PollMode mode_ = PollMode::kInterrupt;
  unsigned inflight_ = 0;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_RING_H_
