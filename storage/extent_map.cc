#include "storage/extent_map.h"

#include <sys/stat.h>

#include "absl/strings/str_format.h"

namespace blockread::storage {

FileMap FileMap::FollowingFile(std::string name, uint32_t block_size, DeviceId device,
                               int size_fd) {
  // Any offset a file can have (Linux caps them at 2^63 - 1), rounded down to the block size.
  const uint64_t span = (uint64_t{1} << 62) / block_size * block_size;
  FileMap map;
  map.name_ = std::move(name);
  map.size_ = span;
  map.rounded_size_ = span;
  map.block_size_ = block_size;
  map.source_ = FileSource::kFileRoute;
  map.extents_.push_back(Extent{0, span, ExtentType::kMapped, device, 0});
  map.size_fd_ = size_fd;
  return map;
}

uint64_t FileMap::FollowedFileSize() const {
  struct stat st;
  // An fstat of a descriptor held open cannot fail short of a kernel bug; read nothing then.
  if (fstat(size_fd_, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

absl::StatusOr<FileMap> FileMap::Create(std::string name, uint64_t size, uint32_t block_size,
                                        FileSource source, std::vector<Extent> extents) {
  if (block_size == 0 || (block_size & (block_size - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("file %s: block size %u is not a power of two", name, block_size));
  }
  if (size > std::numeric_limits<uint64_t>::max() - block_size) {
    return absl::InvalidArgumentError(absl::StrFormat("file %s: size %u is too large", name, size));
  }
  const uint64_t rounded_size = RoundUp(size, block_size);
  uint64_t previous_end = 0;
  for (size_t i = 0; i < extents.size(); ++i) {
    const Extent& e = extents[i];
    auto problem = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrFormat("file %s: extent %d [%u, +%u): %s", name, i,
                                                        e.logical_offset, e.length, what));
    };
    if (e.length == 0) return problem("has zero length");
    if (e.logical_offset > std::numeric_limits<uint64_t>::max() - e.length) {
      return problem("overflows the 64-bit offset space");
    }
    if (i > 0 && e.logical_offset < previous_end) {
      return problem(
          absl::StrFormat("overlaps or precedes the extent before it (ends at %u)", previous_end));
    }
    if (e.logical_offset >= rounded_size) {
      return problem(absl::StrFormat("starts at or beyond the file size %u", size));
    }
    if (e.logical_end() > rounded_size) {
      return problem(absl::StrFormat("ends beyond the file size %u", size));
    }
    if ((e.type == ExtentType::kHole) != (e.device == kNoDevice)) {
      return problem(e.type == ExtentType::kHole ? "is a hole but names a device"
                                                 : "needs a device");
    }
    previous_end = e.logical_end();
  }
  FileMap map;
  map.name_ = std::move(name);
  map.size_ = size;
  map.rounded_size_ = rounded_size;
  map.block_size_ = block_size;
  map.source_ = source;
  map.extents_ = std::move(extents);
  return map;
}

std::string ExtentProblem(const Extent& extent, uint64_t device_size, uint32_t device_block_size) {
  if (extent.logical_offset % device_block_size != 0) {
    return absl::StrFormat("logical offset %u is not a multiple of the device block size %u",
                           extent.logical_offset, device_block_size);
  }
  if (extent.length % device_block_size != 0) {
    return absl::StrFormat("length %u is not a multiple of the device block size %u", extent.length,
                           device_block_size);
  }
  if (extent.type == ExtentType::kHole) return "";
  if (extent.physical_offset % device_block_size != 0) {
    return absl::StrFormat("physical offset %u is not a multiple of the device block size %u",
                           extent.physical_offset, device_block_size);
  }
  const uint64_t device_end = RoundUp(device_size, device_block_size);
  if (extent.physical_offset > device_end || extent.length > device_end - extent.physical_offset) {
    return absl::StrFormat("physical range [%u, %u) lies outside the device (%u bytes)",
                           extent.physical_offset, extent.physical_offset + extent.length,
                           device_size);
  }
  return "";
}

}  // namespace blockread::storage
