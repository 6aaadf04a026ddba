// The psync row of the backend table: a small pool of threads per worker doing pread(2) on the
// worker's own O_DIRECT descriptors. For hosts and containers where io_uring is blocked (the
// default seccomp profiles of Docker 25+, containerd 2 and podman): slower, since every read is a
// system call on a pool thread and a hand-off each way, but the same bytes through the same
// engine, dispatch and completion code.
#ifndef BLOCKREAD_STORAGE_PSYNC_BACKEND_H_
#define BLOCKREAD_STORAGE_PSYNC_BACKEND_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/io_backend.h"

namespace blockread::storage {

// Threading: the IoBackend methods, Create and the destructor run on the worker thread, as for
// every backend. The backend owns its pool threads; they touch a piece only between Submit()
// handing it over and Reap() taking it back, and nothing else of the worker's. Completions travel
// back through a lock-free stack the worker empties in Reap() (user memory, no system call while
// there is nothing to reap); an eventfd wakes the worker only while it sleeps in
// WaitForCompletion().
class PsyncBackend final : public IoBackend {
 public:
  struct Options {
    // Pool threads: the most preads in flight at once for this worker. More pieces wait, in
    // order, for a free thread.
    unsigned threads = 8;
  };

  // Starts the pool. `fds` are the worker's device descriptors (index = DeviceId), owned by the
  // catalog, which outlives the backend. The threads may run on any CPU of the process's
  // affinity mask, not only on the worker's (which spins there while reads are in flight).
  static absl::StatusOr<std::unique_ptr<PsyncBackend>> Create(const Options& options,
                                                              const std::vector<int>& fds);
  // Stops and joins the pool. REQUIRES: inflight() == 0 (the engine drains before it frees its
  // backends and buffers).
  ~PsyncBackend() override;
  PsyncBackend(const PsyncBackend&) = delete;
  PsyncBackend& operator=(const PsyncBackend&) = delete;

  BackendKind kind() const override { return BackendKind::kPsync; }
  void Queue(IoPiece& piece) override;
  void Submit() override;
  unsigned Reap(PieceDoneFn done, void* context) override;
  void WaitForCompletion() override;
  unsigned inflight() const override { return inflight_; }
  // Reads go through the device's descriptor number, which now names the reopened file.
  void DeviceReopened(uint32_t, int) override {}

 private:
  PsyncBackend(std::vector<int> fds, int wake_fd) : fds_(std::move(fds)), wake_fd_(wake_fd) {}
  void RunThread();
  void PushDone(IoPiece& piece);

  const std::vector<int> fds_;
  const int wake_fd_;  // eventfd

  // Worker thread only.
  IoPiece* queued_head_ = nullptr;  // queued since the last Submit(), in order
  IoPiece* queued_tail_ = nullptr;
  unsigned queued_count_ = 0;
  unsigned inflight_ = 0;

  // Handed to the pool, in order; guarded by mu_.
  std::mutex mu_;
  std::condition_variable work_;
  IoPiece* todo_head_ = nullptr;
  IoPiece* todo_tail_ = nullptr;
  bool stopping_ = false;

  // Finished pieces (IoPiece::result set), newest first: pushed by the pool, taken all at once by
  // the worker.
  std::atomic<IoPiece*> done_head_{nullptr};
  // The worker is (about to be) blocked on wake_fd_; see WaitForCompletion().
  std::atomic<bool> worker_sleeping_{false};

  std::vector<std::thread> threads_;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_PSYNC_BACKEND_H_
