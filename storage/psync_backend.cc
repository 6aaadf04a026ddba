#include "storage/psync_backend.h"

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "storage/posix_status.h"

namespace blockread::storage {

absl::StatusOr<std::unique_ptr<PsyncBackend>> PsyncBackend::Create(const Options& options,
                                                                   const std::vector<int>& fds) {
  const int wake_fd = eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) return PosixError(errno, "eventfd for the psync backend");
  std::unique_ptr<PsyncBackend> backend(new PsyncBackend(fds, wake_fd));
  for (unsigned i = 0; i < options.threads; ++i) {
    backend->threads_.emplace_back([b = backend.get()] { b->RunThread(); });
  }
  return backend;
}

PsyncBackend::~PsyncBackend() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& thread : threads_) thread.join();
  close(wake_fd_);
}

void PsyncBackend::Queue(IoPiece& piece) {
  piece.next_waiting = nullptr;
  if (queued_tail_ != nullptr) {
    queued_tail_->next_waiting = &piece;
  } else {
    queued_head_ = &piece;
  }
  queued_tail_ = &piece;
  ++queued_count_;
  ++inflight_;
}

void PsyncBackend::Submit() {
  if (queued_head_ == nullptr) return;
  {
    // The lock also publishes the pieces' fields, written by the worker, to the pool thread that
    // takes them.
    std::lock_guard lock(mu_);
    if (todo_tail_ != nullptr) {
      todo_tail_->next_waiting = queued_head_;
    } else {
      todo_head_ = queued_head_;
    }
    todo_tail_ = queued_tail_;
  }
  // One wake-up per piece, up to the pool's size: a thread woken with nothing left just waits.
  if (queued_count_ >= threads_.size()) {
    work_.notify_all();
  } else {
    for (unsigned i = 0; i < queued_count_; ++i) work_.notify_one();
  }
  queued_head_ = queued_tail_ = nullptr;
  queued_count_ = 0;
}

void PsyncBackend::RunThread() {
  // Created by the worker, the thread inherits its one-CPU affinity; a pread waiting for that CPU
  // would wait for the worker, which spins there while reads are in flight. Take the process's
  // mask (the main thread's) instead. If that fails the thread just stays on the worker's CPU.
  cpu_set_t process_cpus;
  if (sched_getaffinity(getpid(), sizeof(process_cpus), &process_cpus) == 0) {
    pthread_setaffinity_np(pthread_self(), sizeof(process_cpus), &process_cpus);
  }
  for (;;) {
    IoPiece* piece;
    {
      std::unique_lock lock(mu_);
      work_.wait(lock, [this] { return stopping_ || todo_head_ != nullptr; });
      if (todo_head_ == nullptr) return;  // stopping, and nothing left
      piece = todo_head_;
      todo_head_ = piece->next_waiting;
      if (todo_head_ == nullptr) todo_tail_ = nullptr;
    }
    ssize_t n;
    do {
      n = pread(fds_[piece->device], piece->buffer, piece->length,
                static_cast<off_t>(piece->physical_offset));
    } while (n < 0 && errno == EINTR);
    // A short read is returned as it is, as io_uring returns it; the engine asks for the rest.
    piece->result = n < 0 ? -errno : static_cast<int>(n);
    PushDone(*piece);
  }
}

void PsyncBackend::PushDone(IoPiece& piece) {
  IoPiece* head = done_head_.load(std::memory_order_relaxed);
  do {
    piece.next_waiting = head;
    // seq_cst (not only release, which publishes the bytes and result to the worker's acquire):
    // with the worker's seq_cst store of worker_sleeping_ and load of done_head_ in
    // WaitForCompletion, either the worker sees this piece or we see it sleeping. Never both miss.
  } while (!done_head_.compare_exchange_weak(head, &piece, std::memory_order_seq_cst,
                                             std::memory_order_relaxed));
  if (worker_sleeping_.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    // Only fails if the counter would overflow, which a waiting reader rules out.
    [[maybe_unused]] ssize_t written = write(wake_fd_, &one, sizeof(one));
  }
}

unsigned PsyncBackend::Reap(PieceDoneFn done, void* context) {
  // The common empty case reads one word of user memory.
  if (done_head_.load(std::memory_order_relaxed) == nullptr) return 0;
  // acquire: pairs with the pool's push, so the piece's result and buffer bytes are visible.
  IoPiece* newest_first = done_head_.exchange(nullptr, std::memory_order_acquire);
  // Oldest first, as they finished (the stack gives them newest first).
  IoPiece* oldest_first = nullptr;
  while (newest_first != nullptr) {
    IoPiece* next = newest_first->next_waiting;
    newest_first->next_waiting = oldest_first;
    oldest_first = newest_first;
    newest_first = next;
  }
  unsigned reaped = 0;
  while (oldest_first != nullptr) {
    IoPiece& piece = *oldest_first;
    // Read the link first: done() may queue the piece again (the rest of a short read).
    oldest_first = piece.next_waiting;
    --inflight_;
    ++reaped;
    done(context, piece, piece.result);
  }
  return reaped;
}

void PsyncBackend::WaitForCompletion() {
  Submit();
  while (inflight_ > 0 && done_head_.load(std::memory_order_acquire) == nullptr) {
    worker_sleeping_.store(true, std::memory_order_seq_cst);
    if (done_head_.load(std::memory_order_seq_cst) == nullptr) {
      uint64_t count;
      // EINTR, or a wake-up meant for an earlier wait: the loop looks again.
      [[maybe_unused]] ssize_t got = read(wake_fd_, &count, sizeof(count));
    }
    worker_sleeping_.store(false, std::memory_order_relaxed);
  }
}

}  // namespace blockread::storage
