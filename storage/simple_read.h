// The simple path: iomap_dio_simple_supported() of the seeds (the eligibility check, inline, no
// lock, no virtual call, so the compiler folds it into the dispatcher) and, in simple_read.cc,
// filling a preallocated slot with its one piece (EngineContext::StartSimple).
#ifndef BLOCKREAD_STORAGE_SIMPLE_READ_H_
#define BLOCKREAD_STORAGE_SIMPLE_READ_H_

#include <cstdint>

#include "storage/extent_map.h"
#include "storage/stats.h"

namespace blockread::storage {

// Decides whether [offset, offset + length) of `map` can be read with one I/O straight into one
// small registered buffer: at most simple_max_bytes, aligned to the file's block size, inside the
// file, within one MAPPED extent. A file-route file is one MAPPED extent at identity offsets on its
// own descriptor, so its small aligned reads are one I/O and qualify too. Returns true and the
// covering extent, or false and why not (the fallback is not an error: the generic path serves the
// read). `size` is the file's size for this read (map.SizeNow()). REQUIRES: length > 0 and
// offset < size (the dispatcher validated the request).
inline bool SimpleReadEligible(const FileMap& map, uint64_t size, uint64_t offset, uint64_t length,
                               uint64_t simple_max_bytes, Extent* extent, FallbackReason* reason) {
  if (simple_max_bytes == 0) {
    *reason = FallbackReason::kDisabled;
    return false;
  }
  if (length > simple_max_bytes) {
    *reason = FallbackReason::kTooLarge;
    return false;
  }
  const uint64_t block_mask = map.block_size() - 1;
  if (((offset | length) & block_mask) != 0) {
    *reason = FallbackReason::kUnaligned;
    return false;
  }
  if (length > size - offset) {
    *reason = FallbackReason::kBeyondEof;
    return false;
  }
  *extent = map.Lookup(offset);
  if (extent->type != ExtentType::kMapped) {
    *reason = FallbackReason::kNotMapped;
    return false;
  }
  if (offset + length > extent->logical_end()) {
    *reason = FallbackReason::kSpansExtents;
    return false;
  }
  return true;
}

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_SIMPLE_READ_H_
