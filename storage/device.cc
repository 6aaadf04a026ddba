#include "storage/device.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/posix_status.h"

namespace blockread::storage {
namespace {

// Direct-I/O alignment of a regular file. STATX_DIOALIGN (Linux 6.1+) tells it exactly; older
// kernels and filesystems that do not report it get the filesystem block size, which is always
// a safe (if sometimes larger than needed) alignment.
uint32_t RegularFileDirectIoAlignment(int fd, const struct stat& st) {
  struct statx stx = {};
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN) &&
      stx.stx_dio_offset_align != 0) {
    uint32_t align = std::max(stx.stx_dio_offset_align, stx.stx_dio_mem_align);
    return std::max<uint32_t>(align, 512);
  }
  return std::max<uint32_t>(static_cast<uint32_t>(st.st_blksize), 512);
}

bool ReadSysfsFlag(const std::string& path) {
  std::ifstream in(path);
  int value = 0;
  return (in >> value) && value == 1;
}

}  // namespace

bool BlockDeviceSupportsPolling(dev_t device_number) {
  const std::string base =
      absl::StrFormat("/sys/dev/block/%u:%u", major(device_number), minor(device_number));
  // A partition's sysfs directory has a "partition" file and no queue/; its disk is the parent.
  struct stat st;
  if (stat((base + "/partition").c_str(), &st) == 0) {
    return ReadSysfsFlag(base + "/../queue/io_poll");
  }
  return ReadSysfsFlag(base + "/queue/io_poll");
}

absl::StatusOr<std::unique_ptr<Device>> Device::Open(std::string name, std::string path,
                                                     Options options) {
  std::unique_ptr<Device> device(new Device());
  device->name_ = std::move(name);
  device->path_ = std::move(path);
  const std::string& p = device->path_;

  struct stat st;
  if (options.adopt_fd >= 0) {
    device->fd_ = options.adopt_fd;
    if (fstat(device->fd_, &st) != 0) {
      return PosixError(errno, absl::StrCat("device ", device->name_, ": fstat ", p));
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", device->name_, ": ", p, " is neither a block device nor a regular file"));
    }
    if (absl::Status s = device->LearnGeometry(st, options); !s.ok()) return s;
    return device;
  }
  // Check the type first so a directory or socket gets a clear message, not an O_DIRECT error.
  if (stat(p.c_str(), &st) != 0) {
    return PosixError(errno, absl::StrCat("device ", device->name_, ": cannot open ", p));
  }
  if (!S_ISBLK(st.st_mode) && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device->name_, ": ", p, " is neither a block device nor a regular file"));
  }

  int fd = open(p.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EINVAL) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device->name_, ": ", p,
                       " does not support O_DIRECT (its filesystem refuses it)"));
    }
    return PosixError(errno, absl::StrCat("device ", device->name_, ": cannot open ", p));
  }
  device->fd_ = fd;
  if (fstat(fd, &st) != 0) {
    return PosixError(errno, absl::StrCat("device ", device->name_, ": fstat ", p));
  }
  if (absl::Status s = device->LearnGeometry(st, options); !s.ok()) return s;
  return device;
}

std::unique_ptr<Device> Device::FileRouteSlot(std::string name, int fd, uint32_t block_size) {
  std::unique_ptr<Device> device(new Device());
  device->name_ = std::move(name);
  device->path_ = "(an open-file slot)";
  device->fd_ = fd;
  device->kind_ = DeviceKind::kFileRoute;
  device->logical_block_size_ = block_size;
  return device;
}

absl::Status Device::LearnGeometry(const struct stat& st, const Options& options) {
  const std::string& p = path_;
  const int fd = fd_;
  if (S_ISBLK(st.st_mode)) {
    kind_ = DeviceKind::kBlockDevice;
    device_number_ = st.st_rdev;
    uint64_t size = 0;
    if (ioctl(fd, BLKGETSIZE64, &size) != 0) {
      return PosixError(errno, absl::StrCat("device ", name_, ": BLKGETSIZE64 on ", p));
    }
    int block_size = 0;
    if (ioctl(fd, BLKSSZGET, &block_size) != 0) {
      return PosixError(errno, absl::StrCat("device ", name_, ": BLKSSZGET on ", p));
    }
    size_ = size;
    logical_block_size_ = static_cast<uint32_t>(block_size);
    io_poll_supported_ = BlockDeviceSupportsPolling(st.st_rdev);
  } else {
    kind_ = options.file_route ? DeviceKind::kFileRoute : DeviceKind::kRegularFile;
    size_ = static_cast<uint64_t>(st.st_size);
    logical_block_size_ = RegularFileDirectIoAlignment(fd, st);
  }

  if (kind_ != DeviceKind::kFileRoute && size_ % logical_block_size_ != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %s: size of %s (%u bytes) is not a multiple of its logical block size (%u bytes)",
        name_, p, size_, logical_block_size_));
  }
  return absl::OkStatus();
}

Device::~Device() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace blockread::storage
