// The iomap_iter analog: walks a file's extent map over a byte range and yields segments, each
// inside one extent, mapped ones split so no I/O exceeds max_io_bytes.
#ifndef BLOCKREAD_STORAGE_EXTENT_ITERATOR_H_
#define BLOCKREAD_STORAGE_EXTENT_ITERATOR_H_

#include <cstdint>

#include "storage/extent_map.h"

namespace blockread::storage {

struct Segment {
  uint64_t file_offset = 0;
  uint64_t length = 0;
  ExtentType type = ExtentType::kHole;
  DeviceId device = kNoDevice;
  uint64_t physical_offset = 0;  // of file_offset, for kMapped and kUnwritten
};

// Usage, like the kernel's `while ((ret = iomap_iter(&iter, ops)) > 0)`:
//   ExtentIterator it(map, offset, length, max_io_bytes);
//   for (Segment s; it.Next(&s);) switch (s.type) { ... }
// The segments cover [offset, offset + length) exactly, in order, without overlap.
// Not thread-safe; the map must outlive the iterator. No allocation.
class ExtentIterator {
 public:
  // REQUIRES: offset + length <= the map's block-rounded size; max_io_bytes > 0 and a multiple
  // of the map's block size (so split points stay aligned).
  ExtentIterator(const FileMap& map, uint64_t offset, uint64_t length, uint64_t max_io_bytes)
      : map_(map), position_(offset), end_(offset + length), max_io_bytes_(max_io_bytes) {}

  // Stores the next segment and returns true, or returns false when the range is covered.
  bool Next(Segment* segment) {
    if (position_ >= end_) return false;
    const Extent extent = map_.Lookup(position_);
    uint64_t length = std::min(extent.logical_end(), end_) - position_;
    if (extent.type == ExtentType::kMapped && length > max_io_bytes_) length = max_io_bytes_;
    segment->file_offset = position_;
    segment->length = length;
    segment->type = extent.type;
    segment->device = extent.device;
    segment->physical_offset = extent.physical_offset + (position_ - extent.logical_offset);
    position_ += length;
    return true;
  }

 private:
  const FileMap& map_;
  uint64_t position_;
  const uint64_t end_;
  const uint64_t max_io_bytes_;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_EXTENT_ITERATOR_H_
