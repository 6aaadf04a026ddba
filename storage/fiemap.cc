#include "storage/fiemap.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "storage/extent_map.h"
#include "storage/posix_status.h"

namespace blockread::storage {
namespace {

// Extents flagged with any of these do not sit at a plain, block-aligned device offset, so
// reading the device there would return wrong bytes.
constexpr uint32_t kUnservableFlags = FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC |
                                      FIEMAP_EXTENT_ENCODED | FIEMAP_EXTENT_DATA_ENCRYPTED |
                                      FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_DATA_INLINE |
                                      FIEMAP_EXTENT_DATA_TAIL;

std::string DescribeFlags(uint32_t flags) {
  std::string out;
  auto add = [&](uint32_t bit, const char* name) {
    if (flags & bit) absl::StrAppend(&out, out.empty() ? "" : "|", name);
  };
  add(FIEMAP_EXTENT_UNKNOWN, "UNKNOWN");
  add(FIEMAP_EXTENT_DELALLOC, "DELALLOC");
  add(FIEMAP_EXTENT_ENCODED, "ENCODED");
  add(FIEMAP_EXTENT_DATA_ENCRYPTED, "DATA_ENCRYPTED");
  add(FIEMAP_EXTENT_NOT_ALIGNED, "NOT_ALIGNED");
  add(FIEMAP_EXTENT_DATA_INLINE, "DATA_INLINE");
  add(FIEMAP_EXTENT_DATA_TAIL, "DATA_TAIL");
  return out;
}

FileIdentity IdentityOf(const struct stat& st) {
  return FileIdentity{st.st_dev, st.st_ino, static_cast<uint64_t>(st.st_size),
                      st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec,
                      st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec};
}

absl::StatusOr<std::string> ReadSysfsLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  return line;
}

// Parses "MAJ:MIN" from a sysfs `dev` file.
absl::StatusOr<dev_t> ParseDevNumber(const std::string& text) {
  std::pair<std::string, std::string> parts = absl::StrSplit(text, ':');
  unsigned maj = 0, min = 0;
  if (!absl::SimpleAtoi(parts.first, &maj) || !absl::SimpleAtoi(parts.second, &min)) {
    return absl::InternalError(absl::StrCat("unparseable device number '", text, "'"));
  }
  return makedev(maj, min);
}

// Why a file on this filesystem cannot be mapped with FIEMAP, or "" if it can.
std::string FilesystemRouteReason(int fd, const struct stat& st) {
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0) return PosixErrorMessage(errno, "fstatfs failed");
  switch (static_cast<uint64_t>(fs.f_type)) {
    case EXT4_SUPER_MAGIC:  // also ext2/ext3, which share the magic and report device blocks
      break;
    case XFS_SUPER_MAGIC: {
      struct fsxattr attr = {};
      if (ioctl(fd, FS_IOC_FSGETXATTR, &attr) == 0 && (attr.fsx_xflags & FS_XFLAG_REALTIME)) {
        return "XFS realtime file: its FIEMAP offsets are on the realtime device";
      }
      break;
    }
    case BTRFS_SUPER_MAGIC:
      return "btrfs: its FIEMAP addresses are btrfs logical addresses, not device offsets";
    default:
      return absl::StrFormat(
          "filesystem type 0x%x is not one whose FIEMAP addresses are known to be device offsets "
          "(only ext4 and XFS are)",
          static_cast<uint64_t>(fs.f_type));
  }
  if (major(st.st_dev) == 0) return "the filesystem has no block device behind it";
  // ext4's FIEMAP does not flag an fscrypt file's extents as encrypted: its blocks on the device
  // are ciphertext. And an fs-verity file's blocks are only checked on reads through the file.
  struct statx attributes = {};
  if (statx(fd, "", AT_EMPTY_PATH, 0, &attributes) == 0) {
    const uint64_t known = attributes.stx_attributes_mask & attributes.stx_attributes;
    if (known & STATX_ATTR_ENCRYPTED) {
      return "encrypted (fscrypt): its blocks on the device are ciphertext";
    }
    if (known & STATX_ATTR_VERITY) {
      return "fs-verity: its blocks are verified only when read through the file";
    }
  }
  return "";
}

}  // namespace

bool FiemapExtentFolder::Add(const struct fiemap_extent* extents, uint32_t count) {
  if (!file_route_reason_.empty()) return false;
  for (uint32_t i = 0; i < count; ++i) {
    const fiemap_extent& fe = extents[i];
    if (fe.fe_length == 0 || fe.fe_logical < next_start_ ||
        fe.fe_logical > UINT64_MAX - fe.fe_length ||
        fe.fe_length > UINT64_MAX - partition_start_bytes_ ||
        fe.fe_physical > UINT64_MAX - partition_start_bytes_ - fe.fe_length) {
      file_route_reason_ = absl::StrFormat(
          "FIEMAP returned an extent that is empty, out of order or past 64 bits (file offset %u, "
          "length %u, device offset %u, after file offset %u)",
          fe.fe_logical, fe.fe_length, fe.fe_physical, next_start_);
      return false;
    }
    if (fe.fe_flags & FIEMAP_EXTENT_LAST) done_ = true;
    next_start_ = fe.fe_logical + fe.fe_length;
    if (fe.fe_logical >= rounded_size_) continue;  // preallocated beyond EOF: never read
    if (fe.fe_flags & kUnservableFlags) {
      file_route_reason_ = absl::StrFormat("extent at file offset %u is flagged %s", fe.fe_logical,
                                           DescribeFlags(fe.fe_flags & kUnservableFlags));
      return false;
    }
    DeviceExtent extent{fe.fe_logical, fe.fe_physical + partition_start_bytes_,
                        std::min<uint64_t>(fe.fe_length, rounded_size_ - fe.fe_logical),
                        (fe.fe_flags & FIEMAP_EXTENT_UNWRITTEN) != 0};
    if (!extents_.empty()) {
      DeviceExtent& last = extents_.back();
      if (last.logical_offset + last.length == extent.logical_offset &&
          last.physical_offset + last.length == extent.physical_offset &&
          last.unwritten == extent.unwritten) {
        last.length += extent.length;
        continue;
      }
    }
    extents_.push_back(extent);
  }
  if (next_start_ >= rounded_size_) done_ = true;
  return true;
}

absl::StatusOr<BeneathPath> BeneathParent(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  auto root = RootDirectory::Open(parent);
  if (!root.ok()) return root.status();
  return BeneathPath{*std::move(root), path.substr(slash == std::string::npos ? 0 : slash + 1)};
}

absl::StatusOr<DiskLocation> LocateOnDisk(dev_t device) {
  const std::string base = absl::StrFormat("/sys/dev/block/%u:%u", major(device), minor(device));
  char resolved[PATH_MAX];
  if (realpath(base.c_str(), resolved) == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("no block device %u:%u in sysfs (%s)", major(device), minor(device), base));
  }
  DiskLocation location;
  std::string disk_dir = resolved;
  struct stat st;
  if (stat((disk_dir + "/partition").c_str(), &st) == 0) {
    auto start = ReadSysfsLine(disk_dir + "/start");
    uint64_t start_sectors = 0;
    if (!start.ok() || !absl::SimpleAtoi(*start, &start_sectors)) {
      return absl::InternalError(absl::StrCat("cannot read the partition start of ", disk_dir));
    }
    location.partition_start_bytes = start_sectors * 512;  // sysfs counts 512-byte sectors
    disk_dir = disk_dir.substr(0, disk_dir.rfind('/'));
  }
  auto dev_text = ReadSysfsLine(disk_dir + "/dev");
  if (!dev_text.ok()) return dev_text.status();
  auto disk_device = ParseDevNumber(*dev_text);
  if (!disk_device.ok()) return disk_device.status();
  location.disk_device = *disk_device;

  std::ifstream uevent(disk_dir + "/uevent");
  std::string line;
  while (std::getline(uevent, line)) {
    absl::string_view field = line;
    if (absl::ConsumePrefix(&field, "DEVNAME=")) location.disk_path = absl::StrCat("/dev/", field);
  }
  if (location.disk_path.empty() || stat(location.disk_path.c_str(), &st) != 0 ||
      !S_ISBLK(st.st_mode) || st.st_rdev != location.disk_device) {
    return absl::NotFoundError(absl::StrFormat(
        "no device node for block device %u:%u (looked for '%s'); pass the device into the "
        "container or create the node",
        major(location.disk_device), minor(location.disk_device), location.disk_path));
  }
  return location;
}

absl::StatusOr<FiemapResult> MapOpenFile(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return PosixError(errno, absl::StrCat("fstat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }

  FiemapResult result;
  result.filesystem_block_size = static_cast<uint32_t>(std::max<blksize_t>(st.st_blksize, 512));
  result.identity = IdentityOf(st);
  result.file_route_reason = FilesystemRouteReason(fd, st);
  if (!result.file_route_reason.empty()) return result;
  auto disk = LocateOnDisk(st.st_dev);
  if (!disk.ok()) {
    result.file_route_reason = std::string(disk.status().message());
    return result;
  }
  result.disk_device = disk->disk_device;
  result.disk_path = disk->disk_path;

  constexpr uint32_t kExtentsPerCall = 256;
  const size_t request_bytes = sizeof(struct fiemap) + kExtentsPerCall * sizeof(fiemap_extent);
  auto buffer = std::make_unique<uint64_t[]>(request_bytes / sizeof(uint64_t) + 1);
  auto* request = reinterpret_cast<struct fiemap*>(buffer.get());

  // Without a lease a writer racing with the mapping could leave us with extents of an older
  // version: map until the identity is the same before and after.
  constexpr int kAttempts = 8;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    struct stat before;
    if (fstat(fd, &before) != 0) return PosixError(errno, absl::StrCat("fstat ", path));
    result.extents.clear();
    result.file_route_reason.clear();
    const uint64_t rounded_size =
        RoundUp(static_cast<uint64_t>(before.st_size), result.filesystem_block_size);
    FiemapExtentFolder folder(rounded_size, disk->partition_start_bytes);
    while (!folder.done()) {
      memset(request, 0, sizeof(struct fiemap));
      request->fm_start = folder.next_start();
      request->fm_length = FIEMAP_MAX_OFFSET - folder.next_start();
      request->fm_flags = FIEMAP_FLAG_SYNC;  // flush dirty and delalloc data so it is mapped
      request->fm_extent_count = kExtentsPerCall;
      if (ioctl(fd, FS_IOC_FIEMAP, request) != 0) {
        if (errno == EOPNOTSUPP || errno == ENOTTY) {
          result.file_route_reason = "the filesystem does not support FIEMAP";
          return result;
        }
        return PosixError(errno, absl::StrCat("FIEMAP ", path));
      }
      if (request->fm_mapped_extents == 0) break;
      if (!folder.Add(request->fm_extents, request->fm_mapped_extents)) {
        result.file_route_reason = folder.file_route_reason();
        return result;
      }
    }
    result.extents = folder.extents();
    struct stat after;
    if (fstat(fd, &after) != 0) return PosixError(errno, absl::StrCat("fstat ", path));
    if (IdentityOf(before) == IdentityOf(after)) {
      result.identity = IdentityOf(after);
      return result;
    }
  }
  return absl::UnavailableError(
      absl::StrCat(path,
                   " kept changing while its extents were mapped; try again when it is "
                   "not being written"));
}

absl::StatusOr<FiemapResult> MapFileExtents(const BeneathPath& path) {
  auto opened = OpenBeneath(path, O_RDONLY);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  absl::Cleanup close_fd = [fd] { close(fd); };
  return MapOpenFile(fd, path.display());
}

absl::StatusOr<FiemapResult> MapFileExtents(const std::string& path) {
  auto beneath = BeneathParent(path);
  if (!beneath.ok()) return beneath.status();
  return MapFileExtents(*beneath);
}

}  // namespace blockread::storage
