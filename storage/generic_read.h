// The generic path's planning step (the __iomap_dio_rw + iomap_iter walk): turns any read into the
// I/Os that fill a buffer mirroring the read's block-aligned covering range.
#ifndef BLOCKREAD_STORAGE_GENERIC_READ_H_
#define BLOCKREAD_STORAGE_GENERIC_READ_H_

#include <cstdint>
#include <cstring>

#include "storage/extent_iterator.h"
#include "storage/extent_map.h"

namespace blockread::storage {

// One device read of the plan: `length` bytes at `physical_offset` into buffer + buffer_offset.
// `needed` is how many of them must arrive: less than `length` only where the read's last block
// runs past the end of the file (a file-route device returns short there).
struct PlannedIo {
  uint64_t buffer_offset = 0;
  DeviceId device = kNoDevice;
  uint64_t physical_offset = 0;
  uint64_t length = 0;
  uint64_t needed = 0;
};

struct GenericPlan {
  uint64_t data_offset = 0;  // where the requested bytes start in the buffer
  uint64_t data_length = 0;  // how many there are (short at EOF)
};

// Plans reading [offset, offset + length) of `map`, clipped to the file's size. The buffer
// mirrors [align_down(offset), align_up(end)) in the map's block size, so every device I/O is
// aligned and the unaligned edges of the request need no bounce copy: the result is a view at
// data_offset. Holes and unwritten extents are zero-filled in `buffer` right here; emit(PlannedIo)
// is called for each mapped segment (split at max_io_bytes). No allocation.
// `size` is the file's size for this read (map.SizeNow()).
// REQUIRES: offset <= size; `buffer` holds length + 2 * map.block_size() bytes.
template <typename Emit>
GenericPlan PlanGenericRead(const FileMap& map, uint64_t size, uint64_t offset, uint64_t length,
                            uint64_t max_io_bytes, char* buffer, Emit&& emit) {
  const uint64_t block = map.block_size();
  const uint64_t end = offset + std::min(length, size - offset);
  GenericPlan plan;
  const uint64_t aligned_start = offset / block * block;
  plan.data_offset = offset - aligned_start;
  plan.data_length = end - offset;
  if (plan.data_length == 0) return plan;
  const uint64_t aligned_end = RoundUp(end, block);
  // Split points must stay block-aligned.
  const uint64_t max_io = std::max(block, max_io_bytes / block * block);
  ExtentIterator it(map, aligned_start, aligned_end - aligned_start, max_io);
  for (Segment s; it.Next(&s);) {
    const uint64_t buffer_offset = s.file_offset - aligned_start;
    switch (s.type) {
      case ExtentType::kMapped:
        emit(PlannedIo{buffer_offset, s.device, s.physical_offset, s.length,
                       std::min(s.file_offset + s.length, size) - s.file_offset});
        break;
      case ExtentType::kHole:
      case ExtentType::kUnwritten:
        memset(buffer + buffer_offset, 0, s.length);
        break;
    }
  }
  return plan;
}

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_GENERIC_READ_H_
