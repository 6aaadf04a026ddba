// A real block device that stalls or fails on demand: nbdkit (with its pause, error or delay
// filters) serving an image file, exposed as a file by nbdfuse, with a --direct-io=on loop device
// on top. No mocks: the engine reads it through io_uring like any disk.
#ifndef BLOCKREAD_TESTS_SUPPORT_NBD_DEVICE_H_
#define BLOCKREAD_TESTS_SUPPORT_NBD_DEVICE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/support/loop_device.h"

namespace blockread::testing {

// Why NBD-backed devices cannot be made here (not root, no nbdkit/nbdfuse, no /dev/fuse), or "".
std::string NbdDevicesUnavailableReason();

class NbdDevice {
 public:
  struct Options {
    // The bytes served (read-only); must exist.
    std::string image;
    // Stack nbdkit's pause filter: Pause() holds every request until Resume().
    bool pausable = false;
    // Stack nbdkit's error filter with this file as its trigger: while the file exists, reads
    // fail with EIO at error_rate (0..1).
    std::string error_trigger_file;
    double error_rate = 1.0;
    // Stack nbdkit's delay filter: every read takes this long.
    uint32_t read_delay_ms = 0;
  };

  // Starts nbdfuse (which starts nbdkit) under `work_dir`, waits for the file, attaches the loop
  // device. Everything is torn down by the destructor, also when the test fails.
  static absl::StatusOr<std::unique_ptr<NbdDevice>> Create(const std::string& work_dir,
                                                           const Options& options);
  // Resumes a paused device, detaches the loop device, unmounts the FUSE file, reaps nbdfuse.
  ~NbdDevice();

  // The loop device, e.g. /dev/loop3.
  const std::string& path() const { return loop_->path(); }

  // Every request from now on waits (requests already at nbdkit finish first); see nbdkit-pause-
  // filter. Returns once the pause is in force. REQUIRES: options.pausable.
  absl::Status Pause();
  absl::Status Resume();

  // Pulls the device out from under its users at once: nbdfuse (and with it nbdkit) is killed
  // and the FUSE file lazily unmounted, so reads of the loop device fail; the loop device detaches
  // once its last user closes it. path() stays valid as a name only.
  void Vanish();

 private:
  NbdDevice() = default;
  absl::Status Control(char command);

  std::string mount_point_;
  std::string control_socket_;
  pid_t nbdfuse_pid_ = -1;
  bool paused_ = false;
  bool vanished_ = false;
  std::unique_ptr<LoopDevice> loop_;
};

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_NBD_DEVICE_H_
