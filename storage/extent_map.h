// Extent maps: where each byte of a served file lives (the iomap_begin / struct iomap analog).
#ifndef BLOCKREAD_STORAGE_EXTENT_MAP_H_
#define BLOCKREAD_STORAGE_EXTENT_MAP_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace blockread::storage {

// Index of a device in the Catalog's device table.
using DeviceId = uint32_t;
inline constexpr DeviceId kNoDevice = std::numeric_limits<DeviceId>::max();

enum class ExtentType : uint8_t {
  kMapped,     // bytes live on `device` at `physical_offset`
  kHole,       // no storage: reads as zeros
  kUnwritten,  // allocated, never written: reads as zeros (never read from the device)
};
inline constexpr int kExtentTypeCount = 3;

struct Extent {
  uint64_t logical_offset = 0;
  uint64_t length = 0;
  ExtentType type = ExtentType::kHole;
  DeviceId device = kNoDevice;   // kNoDevice for holes
  uint64_t physical_offset = 0;  // byte offset on the device; 0 for holes

  uint64_t logical_end() const { return logical_offset + length; }
  bool operator==(const Extent&) const = default;
};

// How a file's map was obtained; decides whether it can go stale.
enum class FileSource : uint8_t {
  kWholeDevice,  // a whole device (or regular file used as one) exposed as one file
  kManifest,     // extents given by a manifest; trusted, never re-imported
  kFiemap,       // imported from a mounted ext4/XFS file; re-imported when the file changes
  kFileRoute,    // served through the file itself (O_DIRECT on the file, identity-mapped)
};
inline constexpr int kFileSourceCount = 4;

// An immutable extent map of one file. Safe to read from any thread.
class FileMap {
 public:
  // Checks the structure: every extent non-empty, sorted by logical_offset, non-overlapping,
  // starting below `size` (rounded up to `block_size`) and ending at or below that rounded
  // size; holes carry no device; MAPPED/UNWRITTEN extents carry one. Device bounds and alignment
  // are the caller's to check (see ExtentProblem), since only it knows the devices.
  // Gaps between extents, and after the last one, read as holes.
  static absl::StatusOr<FileMap> Create(std::string name, uint64_t size, uint32_t block_size,
                                        FileSource source, std::vector<Extent> extents);

  // A map of a file read through itself (kFileRoute) while it may be written: one extent on
  // `device` covering any offset a file can reach, and a size that is the file's own at each read
  // (SizeNow(): one fstat of `size_fd`, which must stay open as long as the map).
  static FileMap FollowingFile(std::string name, uint32_t block_size, DeviceId device, int size_fd);

  const std::string& name() const { return name_; }
  // The size as of the map's creation; for a map following its file, use SizeNow().
  uint64_t size() const { return size_; }
  // The size a read of the file must go by: size(), or the file's current size if the map
  // follows its file. Once per read: the file may change between two calls.
  uint64_t SizeNow() const { return size_fd_ < 0 ? size_ : FollowedFileSize(); }
  bool follows_file() const { return size_fd_ >= 0; }
  // Alignment that reads of this file must meet to go straight to the device.
  uint32_t block_size() const { return block_size_; }
  FileSource source() const { return source_; }
  // The stored extents (no synthesized holes), sorted.
  const std::vector<Extent>& extents() const { return extents_; }

  // The extent that covers `offset`. A gap yields a synthesized kHole extent spanning the whole
  // gap (up to the next stored extent, or to the block-rounded size). O(log n), no allocation.
  // REQUIRES: offset < size() rounded up to block_size(): ExtentIterator's ranges reach that far.
  Extent Lookup(uint64_t offset) const {
    // First stored extent starting after `offset`; the one before it may cover `offset`.
    auto next =
        std::upper_bound(extents_.begin(), extents_.end(), offset,
                         [](uint64_t value, const Extent& e) { return value < e.logical_offset; });
    uint64_t gap_start = 0;
    if (next != extents_.begin()) {
      const Extent& candidate = *(next - 1);
      if (offset < candidate.logical_end()) return candidate;
      gap_start = candidate.logical_end();
    }
    const uint64_t gap_end = next != extents_.end() ? next->logical_offset : rounded_size_;
    return Extent{gap_start, gap_end - gap_start, ExtentType::kHole, kNoDevice, 0};
  }

 private:
  FileMap() = default;

  std::string name_;
  uint64_t size_ = 0;
  uint64_t rounded_size_ = 0;  // size_ rounded up to block_size_
  uint32_t block_size_ = 512;
  FileSource source_ = FileSource::kWholeDevice;
  std::vector<Extent> extents_;
  int size_fd_ = -1;  // >= 0: the map follows this open file's size
  uint64_t FollowedFileSize() const;
};

// Describes what is wrong with `extent` for a device of `device_size` bytes and
// `device_block_size` alignment (offset, length or physical offset misaligned; extent outside
// the device), or returns an empty string when it is fine. Holes need no device and always pass.
std::string ExtentProblem(const Extent& extent, uint64_t device_size, uint32_t device_block_size);

inline uint64_t RoundUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_EXTENT_MAP_H_
