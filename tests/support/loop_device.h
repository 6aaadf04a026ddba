// Real loop block devices and real filesystems for tests, cleaned up on every exit path.
//
// Cleanup layers: the RAII classes unmount and detach in their destructors (a failed assertion
// still runs them); test_main.cc puts the test process in a private mount namespace, so a crash
// drops its mounts with it; and each loop device is flagged autoclear, so the kernel detaches it
// when its last user (our descriptor, a mount) goes away, even after a crash.
#ifndef BLOCKREAD_TESTS_SUPPORT_LOOP_DEVICE_H_
#define BLOCKREAD_TESTS_SUPPORT_LOOP_DEVICE_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace blockread::testing {

// Why tests that need root and loop devices cannot run here, or "" if they can. Like the reason
// of every skip for want of root or of what root brings (loop devices, mounts, the tools
// tests/run.sh installs), it starts with "needs root": tests/run.sh fails when it runs as root and
// a case skipped for such a reason (see test_main.cc).
std::string LoopDevicesUnavailableReason();

// Runs `command` with /bin/sh; returns its stdout, or an error with its output and exit code.
absl::StatusOr<std::string> RunCommand(const std::string& command);

// A temporary directory removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A loop device over a sparse image file, attached with --direct-io=on.
class LoopDevice {
 public:
  // Attaches `image_path`, first creating it (sparse) or extending it to `size_bytes`; existing
  // contents are kept. `sector_size` sets the logical block size (0 keeps the default, 512).
  static absl::StatusOr<std::unique_ptr<LoopDevice>> Create(const std::string& image_path,
                                                            uint64_t size_bytes,
                                                            uint32_t sector_size = 0);
  ~LoopDevice();
  const std::string& path() const { return path_; }
  const std::string& image_path() const { return image_path_; }

 private:
  LoopDevice() = default;
  std::string path_;
  std::string image_path_;
  int fd_ = -1;  // held open so autoclear has a user until we are done
};

enum class FsType { kExt4, kXfs, kBtrfs };
const char* FsTypeName(FsType type);
// gtest names a failing case's FsType parameter with it (found by argument-dependent lookup).
void PrintTo(FsType type, std::ostream* os);

// A filesystem made on a device and mounted at a fresh directory.
class MountedFilesystem {
 public:
  // mkfs (with `mkfs_options` appended) and mount `device` at `mount_point` (created).
  static absl::StatusOr<std::unique_ptr<MountedFilesystem>> Create(
      FsType type, const std::string& device, const std::string& mount_point,
      const std::string& mkfs_options = "");
  ~MountedFilesystem();
  const std::string& mount_point() const { return mount_point_; }
  FsType type() const { return type_; }

 private:
  MountedFilesystem() = default;
  FsType type_ = FsType::kExt4;
  std::string mount_point_;
};

// A loop device with a filesystem on it: the usual unit of a storage test.
struct LoopFilesystem {
  // Declaration order matters: members die in reverse, so the filesystem is unmounted before
  // its device is detached.
  std::unique_ptr<LoopDevice> device;
  std::unique_ptr<MountedFilesystem> filesystem;
  const std::string& root() const { return filesystem->mount_point(); }
};
absl::StatusOr<std::unique_ptr<LoopFilesystem>> MakeLoopFilesystem(
    FsType type, const std::string& work_dir, uint64_t image_bytes,
    const std::string& mkfs_options = "");

// Deterministic pseudo-random bytes (xorshift), so failures reproduce from the seed.
std::vector<char> RandomBytes(size_t size, uint64_t seed);

// Writes `data` at `offset` of `path` (created if missing), optionally fsyncing.
absl::Status WriteAt(const std::string& path, uint64_t offset, const std::vector<char>& data,
                     bool sync);

// The file's bytes [offset, offset + length) read through the filesystem (short at EOF).
absl::StatusOr<std::vector<char>> ReadFileRange(const std::string& path, uint64_t offset,
                                                uint64_t length);

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_LOOP_DEVICE_H_
