// FIEMAP import: the extent map of a file on a mounted ext4 or XFS filesystem, in offsets of the
// block device under it, or the reason it must be served through the file itself instead.
#ifndef BLOCKREAD_STORAGE_FIEMAP_H_
#define BLOCKREAD_STORAGE_FIEMAP_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/open_beneath.h"

namespace blockread::storage {

// What identifies one version of a file's contents. Any change (rewrite in place, truncate,
// rename over it) changes at least one field. mtime/ctime are nanoseconds; kernels since 6.13
// give ext4/XFS fine-grained timestamps once they have been queried, so back-to-back writes
// around an import are still told apart.
struct FileIdentity {
  dev_t filesystem_device = 0;
  ino_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// The identity of what `path` names now, without following a symlink at its last component (a
// symlink renamed over a served name has an identity of its own, so it reads as a change).
// Errors name the path.
absl::StatusOr<FileIdentity> StatFileIdentity(const BeneathPath& path);

// One FIEMAP extent, physical offset relative to the whole disk (partition start added).
struct DeviceExtent {
  uint64_t logical_offset = 0;
  uint64_t physical_offset = 0;
  uint64_t length = 0;
  bool unwritten = false;
};

struct FiemapResult {
  // Empty when the extents below are device offsets; otherwise why the file must be served
  // through itself (btrfs, inline data, delayed allocation, encryption, no FIEMAP ...).
  std::string file_route_reason;
  // The whole disk the filesystem lives on (for a partition, its parent disk) and its /dev path.
  dev_t disk_device = 0;
  std::string disk_path;
  // Sorted, adjacent extents merged, clipped to the file's block-rounded size.
  std::vector<DeviceExtent> extents;
  uint32_t filesystem_block_size = 0;
  // The identity the extents belong to: unchanged from before to after the FIEMAP calls.
  FileIdentity identity;
};

// Maps `path` with FS_IOC_FIEMAP (FIEMAP_FLAG_SYNC, so dirty data reaches the device first),
// looping until the extent flagged LAST. Retries if the file changes while it is mapped. The file
// is opened with OpenBeneath: no symlink is followed and a FIFO does not block. Errors (the file
// is missing, not a regular file, behind a symlink, unreadable, keeps changing) name the path. A
// file that cannot be served from the raw device is not an error: see file_route_reason.
absl::StatusOr<FiemapResult> MapFileExtents(const BeneathPath& path);
// The same for `path` beneath its parent directory (for tools and tests).
absl::StatusOr<FiemapResult> MapFileExtents(const std::string& path);

// `path` as a BeneathPath of its parent directory.
absl::StatusOr<BeneathPath> BeneathParent(const std::string& path);

// The whole-disk device number and /dev path for filesystem device `device`, and the byte
// offset of `device` on that disk (the partition start; 0 for a whole disk).
struct DiskLocation {
  dev_t disk_device = 0;
  std::string disk_path;
  uint64_t partition_start_bytes = 0;
};
absl::StatusOr<DiskLocation> LocateOnDisk(dev_t device);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_FIEMAP_H_
