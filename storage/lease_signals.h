// The thread that lease-break signals go to. The kernel signals a lease holder before a writer's
// open() (or truncate) of the file returns; the signal is aimed at this thread alone
// (F_SETOWN_EX, Aim()), blocked everywhere (BlockLeaseSignals) and read from a signalfd. It only
// reads signals and hands them on: what a break does is its owner's (Catalog::BreakLeases), and
// it must not wait behind anything slow, since the writer waits for it.
#ifndef BLOCKREAD_STORAGE_LEASE_SIGNALS_H_
#define BLOCKREAD_STORAGE_LEASE_SIGNALS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace blockread::storage {

// The signal a broken lease raises (F_SETSIG).
int LeaseBreakSignal();

// Blocks the lease-break signal and SIGIO in the calling thread and the threads it starts later.
// Call it before any thread of the process might take a lease (a signal no thread blocks would
// kill the process).
void BlockLeaseSignals();

class LeaseSignalThread {
 public:
  // Called on the thread with the descriptors whose leases were broken, and `check_all` when
  // signals were lost (the kernel's queue overflowed and it sent SIGIO): then every lease must
  // be looked at (F_GETLEASE).
  using OnBreaks = std::function<void(const absl::flat_hash_set<int>& fds, bool check_all)>;

  static absl::StatusOr<std::unique_ptr<LeaseSignalThread>> Start(OnBreaks on_breaks);
  // Returns once the thread has finished its last callback.
  ~LeaseSignalThread();
  LeaseSignalThread(const LeaseSignalThread&) = delete;
  LeaseSignalThread& operator=(const LeaseSignalThread&) = delete;

  // Aims lease-break signals of `fd` at this thread. Again after each F_SETLEASE: taking a lease
  // makes the whole process the descriptor's signal owner.
  void Aim(int fd) const;

 private:
  explicit LeaseSignalThread(OnBreaks on_breaks) : on_breaks_(std::move(on_breaks)) {}
  void Run();

  const OnBreaks on_breaks_;
  int signal_fd_ = -1;
  int stop_fd_ = -1;
  pid_t tid_ = 0;
  std::thread thread_;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_LEASE_SIGNALS_H_
