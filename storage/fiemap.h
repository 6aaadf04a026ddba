// FIEMAP import: the extent map of a file on a mounted ext4 or XFS filesystem, in offsets of the
// block device under it, or the reason it must be served through the file itself instead.
#ifndef BLOCKREAD_STORAGE_FIEMAP_H_
#define BLOCKREAD_STORAGE_FIEMAP_H_

#include <linux/fiemap.h>
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

// One FIEMAP extent, physical offset relative to the whole disk (partition start added).
struct DeviceExtent {
  uint64_t logical_offset = 0;
  uint64_t physical_offset = 0;
  uint64_t length = 0;
  bool unwritten = false;
};

// Folds the extents of FS_IOC_FIEMAP answers, in the order they come, into
// FiemapResult::extents: physical offsets made whole-disk, extents clipped to the file's
// block-rounded size (those beyond it, preallocation that is never read, dropped), adjacent ones
// merged. No I/O, so tests feed it synthetic extent arrays. What the raw device cannot serve
// exactly ends the fold with a file-route reason: an extent flagged as not at a plain device
// offset, and answers no filesystem should give (zero length, out of order or overlapping, past
// 64 bits), since serving a guess could return wrong bytes. Not thread-safe.
class FiemapExtentFolder {
 public:
  FiemapExtentFolder(uint64_t rounded_size, uint64_t partition_start_bytes)
      : rounded_size_(rounded_size),
        partition_start_bytes_(partition_start_bytes),
        done_(rounded_size == 0) {}

  // Adds the `count` extents of one answer. Returns false, and adds nothing more, once the file
  // must be served through itself (file_route_reason() says why).
  bool Add(const struct fiemap_extent* extents, uint32_t count);

  // True once nothing up to the rounded size is left to map: an extent was flagged LAST, or one
  // reached the rounded size.
  bool done() const { return done_; }
  // Where the next FIEMAP call starts: the end of the last extent added.
  uint64_t next_start() const { return next_start_; }
  const std::string& file_route_reason() const { return file_route_reason_; }
  // Sorted, non-overlapping, non-empty, inside the rounded size, adjacent ones merged.
  const std::vector<DeviceExtent>& extents() const { return extents_; }

 private:
  const uint64_t rounded_size_;
  const uint64_t partition_start_bytes_;
  bool done_;
  uint64_t next_start_ = 0;
  std::string file_route_reason_;
  std::vector<DeviceExtent> extents_;
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

// Maps the regular file open as `fd` with FS_IOC_FIEMAP (FIEMAP_FLAG_SYNC, so dirty data reaches
// the device first), looping until the extent flagged LAST, and again if the file changed
// meanwhile. Exact for good only while nobody can write the file: the catalog holds a read lease
// on `fd` when it calls this. `path` is for messages. A file that cannot be served from the raw
// device is not an error: see file_route_reason.
absl::StatusOr<FiemapResult> MapOpenFile(int fd, const std::string& path);
// Opens `path` with OpenBeneath (no symlink followed, a FIFO does not block) and maps it: for
// tools and tests, which hold no lease. Errors name the path.
absl::StatusOr<FiemapResult> MapFileExtents(const BeneathPath& path);
// The same for `path` beneath its parent directory.
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
