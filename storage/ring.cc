#include "storage/ring.h"

#include <poll.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/buffer_pool.h"
#include "storage/posix_status.h"

namespace blockread::storage {
namespace {

std::string IoUringDisabledSetting() {
  std::ifstream in("/proc/sys/kernel/io_uring_disabled");
  std::string value;
  if (in >> value) return value;
  return "absent";
}

absl::Status IoUringUnavailable(int error) {
  return absl::FailedPreconditionError(absl::StrCat(
      "io_uring is not available: ", PosixErrorMessage(error, "io_uring_setup failed"),
      ". Causes: the sysctl kernel.io_uring_disabled (now ", IoUringDisabledSetting(),
      "; 0 allows io_uring); a container seccomp profile that blocks io_uring (Docker 25+, "
      "containerd 2 and podman defaults do: run with blockread's deploy/seccomp-io_uring.json, "
      "the default profile plus io_uring_setup, io_uring_enter and io_uring_register); or a "
      "kernel older than 5.19"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ring>> Ring::Create(const Options& options) {
  std::unique_ptr<Ring> ring(new Ring());
  ring->mode_ = options.mode;
  io_uring_params params = {};
  params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER;
  params.cq_entries = options.cq_entries;
  if (options.mode == PollMode::kIoPoll) {
    params.flags |= IORING_SETUP_IOPOLL;
  } else {
    params.flags |= IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  }
  int result = io_uring_queue_init_params(options.sq_entries, &ring->ring_, &params);
  if (result == -EINVAL) {
    // A kernel older than 6.0 lacks SINGLE_ISSUER; the ring works without it.
    params = {};
    params.flags =
        IORING_SETUP_CQSIZE | (options.mode == PollMode::kIoPoll ? IORING_SETUP_IOPOLL : 0);
    params.cq_entries = options.cq_entries;
    result = io_uring_queue_init_params(options.sq_entries, &ring->ring_, &params);
  }
  if (result == -ENOSYS || result == -EPERM || result == -EACCES)
    return IoUringUnavailable(-result);
  if (result < 0) return PosixError(-result, "io_uring_setup");
  ring->initialized_ = true;
  return ring;
}

Ring::~Ring() {
  if (initialized_) io_uring_queue_exit(&ring_);
}

absl::Status Ring::RegisterFiles(const std::vector<int>& fds) {
  if (fds.empty()) return absl::OkStatus();
  const int result = io_uring_register_files(&ring_, fds.data(), static_cast<unsigned>(fds.size()));
  if (result < 0) return PosixError(-result, "io_uring_register_files");
  return absl::OkStatus();
}

absl::Status Ring::UpdateRegisteredFile(int file_index, int fd) {
  if (static_cast<size_t>(file_index) < descriptors_.size() && descriptors_[file_index] >= 0) {
    return absl::OkStatus();
  }
  const int result =
      io_uring_register_files_update(&ring_, static_cast<unsigned>(file_index), &fd, 1);
  if (result < 0) return PosixError(-result, "io_uring_register_files_update");
  return absl::OkStatus();
}

bool Ring::ArmPoll(int fd, uint64_t user_data) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) return false;
  io_uring_prep_poll_multishot(sqe, fd, POLLIN);
  io_uring_sqe_set_data64(sqe, user_data);
  return io_uring_submit(&ring_) == 1;
}

absl::Status Ring::RegisterBuffers(const std::vector<iovec>& buffers) {
  if (buffers.empty()) return absl::OkStatus();
  const int result =
      io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size()));
  if (result == -ENOMEM) {
    uint64_t bytes = 0;
    for (const iovec& b : buffers) bytes += b.iov_len;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot register %u bytes of I/O buffers with io_uring: RLIMIT_MEMLOCK (now %u bytes) is "
        "too low; raise it (ulimit -l, LimitMEMLOCK= in systemd, --ulimit memlock= in a "
        "container) or configure fewer or smaller buffers",
        bytes, RaiseMemlockLimit()));
  }
  if (result < 0) return PosixError(-result, "io_uring_register_buffers");
  return absl::OkStatus();
}

}  // namespace blockread::storage
