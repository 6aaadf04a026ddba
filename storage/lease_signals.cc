#include "storage/lease_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <future>

#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::storage {
namespace {

// The lease-break signal, and SIGIO, which the kernel sends instead when its signal queue is full.
sigset_t LeaseSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, LeaseBreakSignal());
  sigaddset(&signals, SIGIO);
  return signals;
}

}  // namespace

int LeaseBreakSignal() { return SIGRTMIN + 4; }

void BlockLeaseSignals() {
  const sigset_t signals = LeaseSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

absl::StatusOr<std::unique_ptr<LeaseSignalThread>> LeaseSignalThread::Start(OnBreaks on_breaks) {
  std::unique_ptr<LeaseSignalThread> thread(new LeaseSignalThread(std::move(on_breaks)));
  BlockLeaseSignals();  // the signalfd reads only signals blocked in its thread
  const sigset_t signals = LeaseSignals();
  thread->signal_fd_ = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (thread->signal_fd_ < 0) {
    return PosixError(errno, "signalfd (lease breaks of served files)");
  }
  thread->stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (thread->stop_fd_ < 0) return PosixError(errno, "eventfd");
  std::promise<pid_t> started;
  std::future<pid_t> tid = started.get_future();
  LeaseSignalThread* self = thread.get();
  thread->thread_ = std::thread([self, &started] {
    pthread_setname_np(pthread_self(), "blockread-lease");
    started.set_value(gettid());
    self->Run();
  });
  thread->tid_ = tid.get();
  return thread;
}

LeaseSignalThread::~LeaseSignalThread() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (int fd : {signal_fd_, stop_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void LeaseSignalThread::Aim(int fd) const {
  f_owner_ex owner = {F_OWNER_TID, tid_};
  fcntl(fd, F_SETSIG, LeaseBreakSignal());
  fcntl(fd, F_SETOWN_EX, &owner);
}

void LeaseSignalThread::Run() {
  for (;;) {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) {
      LogError(PosixErrorMessage(errno, "lease breaks: poll"));
      return;
    }
    if (fds[1].revents != 0) return;
    signalfd_siginfo info;
    bool overflow = false;
    absl::flat_hash_set<int> broken;
    while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      if (static_cast<int>(info.ssi_signo) == LeaseBreakSignal()) {
        broken.insert(static_cast<int>(info.ssi_fd));
      } else {
        overflow = true;  // SIGIO: the signal queue overflowed; breaks may have been lost
      }
    }
    if (overflow) LogWarning("lease breaks: signals overflowed; checking every lease");
    if (!broken.empty() || overflow) on_breaks_(broken, overflow);
  }
}

}  // namespace blockread::storage
