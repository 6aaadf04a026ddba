// A device the server reads from: a block device, or a regular file standing in for one.
#ifndef BLOCKREAD_STORAGE_DEVICE_H_
#define BLOCKREAD_STORAGE_DEVICE_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace blockread::storage {

enum class DeviceKind : uint8_t {
  kBlockDevice,  // a real block device (NVMe namespace, loop device, partition ...)
  kRegularFile,  // a regular file used as a device (the embedded default, tests)
  kFileRoute,    // a filesystem file served through itself; see storage/fiemap.h
};

// An open, read-only, O_DIRECT device. Immutable after Open(); every method may be called from
// any thread. Reads are issued by the engine with the fd; this class does no I/O itself.
class Device {
 public:
  struct Options {
    // Open a filesystem file as its own device (kind kFileRoute). Such a device may end in a
    // partial block (the file's tail; reads there are short) and its size follows the file.
    // Every other device must be a whole number of logical blocks.
    bool file_route = false;
    // A descriptor already opened O_RDONLY | O_DIRECT (e.g. beneath a served root, without
    // following symlinks) to use instead of opening `path`, which then only names it in messages.
    // The device owns it from the call on, also when Open fails.
    int adopt_fd = -1;
  };

  // Opens `path` O_RDONLY | O_DIRECT and learns its geometry. `name` is how extents and stats
  // refer to it. Errors name the path and the cause: NOT_FOUND (missing), PERMISSION_DENIED,
  // INVALID_ARGUMENT (not a block device or regular file, O_DIRECT unsupported, size not a
  // multiple of the logical block size).
  static absl::StatusOr<std::unique_ptr<Device>> Open(std::string name, std::string path,
                                                      Options options);
  static absl::StatusOr<std::unique_ptr<Device>> Open(std::string name, std::string path) {
    return Open(std::move(name), std::move(path), Options());
  }
  // A file-route device that serves no file yet: `fd` (owned from the call on) stands in until
  // the catalog re-points it (dup3) at a file it opens (the open-file cache). Reads are aligned to
  // `block_size`, which must be a multiple of the direct-I/O alignment of any file it serves.
  static std::unique_ptr<Device> FileRouteSlot(std::string name, int fd, uint32_t block_size);

  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  DeviceKind kind() const { return kind_; }
  int fd() const { return fd_; }
  // Size in bytes at open time.
  uint64_t size() const { return size_; }
  // Direct-I/O alignment for offsets, lengths and buffer addresses (a power of two >= 512).
  uint32_t logical_block_size() const { return logical_block_size_; }
  // True when the block device (or, for a partition, its disk) reports io_poll=1 in sysfs, so
  // an IORING_SETUP_IOPOLL ring may work; false for regular files.
  bool io_poll_supported() const { return io_poll_supported_; }
  // st_rdev of a block device (0 for files): how FIEMAP imports find the device of a filesystem.
  dev_t device_number() const { return device_number_; }

 private:
  Device() = default;
  // Size, block size and kind of the open descriptor fd_, whose fstat is `st`.
  absl::Status LearnGeometry(const struct stat& st, const Options& options);

  std::string name_;
  std::string path_;
  DeviceKind kind_ = DeviceKind::kRegularFile;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint32_t logical_block_size_ = 512;
  bool io_poll_supported_ = false;
  dev_t device_number_ = 0;
};

// Reads /sys/dev/block/MAJ:MIN/queue/io_poll, resolving a partition to its disk.
// Returns false when the file is absent or unreadable.
bool BlockDeviceSupportsPolling(dev_t device_number);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_DEVICE_H_
