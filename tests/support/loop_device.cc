#include "tests/support/loop_device.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace blockread::testing {

std::string LoopDevicesUnavailableReason() {
  if (geteuid() != 0) return "needs root to attach loop devices and mount filesystems";
  if (access("/dev/loop-control", R_OK | W_OK) != 0) {
    return absl::StrCat("needs root and /dev/loop-control: ", strerror(errno));
  }
  for (const char* tool : {"losetup", "mkfs.ext4", "mkfs.xfs"}) {
    if (!RunCommand(absl::StrCat("command -v ", tool)).ok()) {
      return absl::StrCat("needs root and ", tool,
                          ", which is not installed (tests/run.sh installs it)");
    }
  }
  return "";
}

absl::StatusOr<std::string> RunCommand(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("popen failed: ", command));
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) {
    return absl::InternalError(absl::StrCat("`", command, "` exited with status ",
                                            WIFEXITED(status) ? WEXITSTATUS(status) : -1, ": ",
                                            output));
  }
  return output;
}

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/blockread-test-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

absl::StatusOr<std::unique_ptr<LoopDevice>> LoopDevice::Create(const std::string& image_path,
                                                               uint64_t size_bytes,
                                                               uint32_t sector_size) {
  int image = open(image_path.c_str(), O_CREAT | O_WRONLY, 0600);
  struct stat st;
  // Only resized when its size differs: some files (an nbdfuse disk) cannot be truncated.
  if (image < 0 || fstat(image, &st) != 0 ||
      (static_cast<uint64_t>(st.st_size) != size_bytes &&
       ftruncate(image, static_cast<off_t>(size_bytes)) != 0)) {
    if (image >= 0) close(image);
    return absl::InternalError(absl::StrCat("cannot create image ", image_path));
  }
  close(image);

  std::string command = "losetup --find --show --direct-io=on";
  if (sector_size != 0) absl::StrAppend(&command, " --sector-size ", sector_size);
  auto output = RunCommand(absl::StrCat(command, " ", image_path));
  if (!output.ok()) return output.status();
  std::unique_ptr<LoopDevice> loop(new LoopDevice());
  loop->path_ = std::string(absl::StripAsciiWhitespace(*output));
  loop->image_path_ = image_path;

  loop->fd_ = open(loop->path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (loop->fd_ < 0) return absl::InternalError(absl::StrCat("open ", loop->path_));
  loop_info64 info = {};
  if (ioctl(loop->fd_, LOOP_GET_STATUS64, &info) == 0) {
    info.lo_flags |= LO_FLAGS_AUTOCLEAR;
    if (ioctl(loop->fd_, LOOP_SET_STATUS64, &info) != 0) {
      return absl::InternalError(absl::StrCat("cannot set autoclear on ", loop->path_));
    }
  }
  return loop;
}

LoopDevice::~LoopDevice() {
  if (fd_ < 0) return;
  // Detach through our own descriptor: it can only ever name our device. If another user still
  // holds it, the kernel detaches it when that user lets go (autoclear).
  ioctl(fd_, LOOP_CLR_FD, 0);
  close(fd_);
}

const char* FsTypeName(FsType type) {
  switch (type) {
    case FsType::kExt4:
      return "ext4";
    case FsType::kXfs:
      return "xfs";
    case FsType::kBtrfs:
      return "btrfs";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<MountedFilesystem>> MountedFilesystem::Create(
    FsType type, const std::string& device, const std::string& mount_point,
    const std::string& mkfs_options) {
  std::string mkfs;
  switch (type) {
    case FsType::kExt4:
      mkfs = "mkfs.ext4 -q -F";
      break;
    case FsType::kXfs:
      mkfs = "mkfs.xfs -q -f";
      break;
    case FsType::kBtrfs:
      mkfs = "mkfs.btrfs -q -f";
      break;
  }
  auto made = RunCommand(absl::StrCat(mkfs, " ", mkfs_options, " ", device));
  if (!made.ok()) return made.status();
  std::error_code error;
  std::filesystem::create_directories(mount_point, error);
  if (mount(device.c_str(), mount_point.c_str(), FsTypeName(type), 0, nullptr) != 0) {
    return absl::InternalError(
        absl::StrCat("mount ", device, " on ", mount_point, ": ", strerror(errno)));
  }
  std::unique_ptr<MountedFilesystem> fs(new MountedFilesystem());
  fs->type_ = type;
  fs->mount_point_ = mount_point;
  return fs;
}

MountedFilesystem::~MountedFilesystem() {
  if (umount2(mount_point_.c_str(), 0) != 0) umount2(mount_point_.c_str(), MNT_DETACH);
}

absl::StatusOr<std::unique_ptr<LoopFilesystem>> MakeLoopFilesystem(
    FsType type, const std::string& work_dir, uint64_t image_bytes,
    const std::string& mkfs_options) {
  auto result = std::make_unique<LoopFilesystem>();
  const std::string name = FsTypeName(type);
  auto device = LoopDevice::Create(absl::StrCat(work_dir, "/", name, ".img"), image_bytes);
  if (!device.ok()) return device.status();
  result->device = *std::move(device);
  auto fs = MountedFilesystem::Create(type, result->device->path(),
                                      absl::StrCat(work_dir, "/mnt-", name), mkfs_options);
  if (!fs.ok()) return fs.status();
  result->filesystem = *std::move(fs);
  return result;
}

void PrintTo(FsType type, std::ostream* os) { *os << FsTypeName(type); }

std::vector<char> RandomBytes(size_t size, uint64_t seed) {
  std::vector<char> out(size);
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(out.data() + i, &x, std::min<size_t>(8, size - i));
  }
  return out;
}

absl::Status WriteAt(const std::string& path, uint64_t offset, const std::vector<char>& data,
                     bool sync) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = pwrite(fd, data.data() + done, data.size() - done, offset + done);
    if (n <= 0) {
      close(fd);
      return absl::InternalError(absl::StrCat("pwrite ", path, ": ", strerror(errno)));
    }
    done += n;
  }
  if (sync && fsync(fd) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("fsync ", path));
  }
  close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<char>> ReadFileRange(const std::string& path, uint64_t offset,
                                                uint64_t length) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  std::vector<char> out(length);
  size_t done = 0;
  while (done < length) {
    ssize_t n = pread(fd, out.data() + done, length - done, offset + done);
    if (n < 0) {
      close(fd);
      return absl::InternalError(absl::StrCat("pread ", path, ": ", strerror(errno)));
    }
    if (n == 0) break;
    done += n;
  }
  close(fd);
  out.resize(done);
  return out;
}

}  // namespace blockread::testing
