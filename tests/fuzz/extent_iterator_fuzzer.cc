// The extent iterator over fuzzed maps and ranges. Property: the segments tile the requested
// range exactly (in order, no gap, no overlap, none empty), each lies inside the one extent (or
// gap) that covers its start and carries that extent's type, device and physical offset, and only
// mapped ones are split, at max_io_bytes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdlib>

#include "storage/extent_iterator.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzzed_file_map.h"

namespace blockread::storage {
namespace {

// Enough to reach every extent of a fuzzed map many times over; more only costs time.
constexpr uint64_t kMaxSegments = 1 << 14;

void FuzzOne(FuzzedDataProvider& input) {
  std::optional<FileMap> map = fuzz::ConsumeFileMap(input);
  if (!map) return;
  const uint64_t rounded_size = RoundUp(map->size(), map->block_size());
  const uint64_t offset = std::min(fuzz::ConsumeOffset(input, *map), rounded_size);
  const uint64_t length = input.ConsumeIntegralInRange<uint64_t>(0, rounded_size - offset);
  const uint64_t max_io_bytes = uint64_t{map->block_size()} << input.ConsumeIntegralInRange(0, 50);
  // Mapped extents split into pieces of max_io_bytes; skip ranges that would take too long.
  if (length / max_io_bytes > kMaxSegments) return;

  const uint64_t end = offset + length;
  uint64_t position = offset;
  uint64_t segments = 0;
  ExtentIterator it(*map, offset, length, max_io_bytes);
  for (Segment s; it.Next(&s);) {
    FUZZ_CHECK(++segments <= 2 * kMaxSegments + 2 * map->extents().size() + 2);
    FUZZ_CHECK(s.file_offset == position);  // in order, no gap, no overlap
    FUZZ_CHECK(s.length > 0);
    FUZZ_CHECK(s.length <= end - position);
    const Extent e = map->Lookup(s.file_offset);
    FUZZ_CHECK(e.logical_offset <= s.file_offset && s.file_offset < e.logical_end());
    FUZZ_CHECK(s.file_offset + s.length <= e.logical_end());
    FUZZ_CHECK(s.type == e.type);
    FUZZ_CHECK(s.device == e.device);
    if (e.type == ExtentType::kHole) {
      FUZZ_CHECK(s.device == kNoDevice);
    } else {
      FUZZ_CHECK(s.physical_offset == e.physical_offset + (s.file_offset - e.logical_offset));
    }
    if (e.type == ExtentType::kMapped) {
      FUZZ_CHECK(s.length <= max_io_bytes);
      // Split only where it must be: at max_io_bytes, the extent's end or the range's end.
      FUZZ_CHECK(s.length == max_io_bytes || s.file_offset + s.length == e.logical_end() ||
                 s.file_offset + s.length == end);
    } else {
      FUZZ_CHECK(s.file_offset + s.length == std::min(e.logical_end(), end));
    }
    position += s.length;
  }
  FUZZ_CHECK(position == end);  // the whole range, exactly
  Segment after;
  FUZZ_CHECK(!it.Next(&after));
}

}  // namespace
}  // namespace blockread::storage

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  blockread::storage::FuzzOne(input);
  return 0;
}
