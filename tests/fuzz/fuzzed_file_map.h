// Extent maps built from fuzz input, shaped like the ones the catalog builds: block-aligned
// extents of every type in order, gaps between them, a size that may end inside the last block,
// and offsets from tiny to near 2^64 (so overflow at the top of the offset space is reached).
#ifndef BLOCKREAD_TESTS_FUZZ_FUZZED_FILE_MAP_H_
#define BLOCKREAD_TESTS_FUZZ_FUZZED_FILE_MAP_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "storage/extent_map.h"

namespace blockread::fuzz {

// nullopt when the input runs out of room in the 64-bit offset space.
inline std::optional<storage::FileMap> ConsumeFileMap(FuzzedDataProvider& input) {
  using storage::Extent;
  using storage::ExtentType;
  const uint32_t block_size = 512u << input.ConsumeIntegralInRange(0, 4);
  // Every extent offset and length is a multiple of `unit`: a block, or up to 2^40 blocks.
  const uint64_t unit = uint64_t{block_size} << input.ConsumeIntegralInRange(0, 40);
  const int count = input.ConsumeIntegralInRange(0, 12);
  std::vector<Extent> extents;
  uint64_t end = 0;
  for (int i = 0; i < count; ++i) {
    const uint64_t gap = unit * input.ConsumeIntegralInRange(0, 3);
    const uint64_t length = unit * input.ConsumeIntegralInRange(1, 64);
    if (end > UINT64_MAX - gap || end + gap > UINT64_MAX - length - block_size) return std::nullopt;
    Extent extent;
    extent.logical_offset = end + gap;
    extent.length = length;
    extent.type = input.PickValueInArray(
        {ExtentType::kMapped, ExtentType::kMapped, ExtentType::kHole, ExtentType::kUnwritten});
    if (extent.type != ExtentType::kHole) {
      extent.device = input.ConsumeIntegralInRange<storage::DeviceId>(0, 3);
      extent.physical_offset =
          input.ConsumeIntegralInRange<uint64_t>(0, UINT64_MAX - length) / block_size * block_size;
    }
    end = extent.logical_end();
    extents.push_back(extent);
  }
  // The size: a trailing gap reads as a hole; the last block may be partial.
  const uint64_t tail = uint64_t{block_size} * input.ConsumeIntegralInRange(0, 3);
  if (end > UINT64_MAX - tail - 2 * uint64_t{block_size}) return std::nullopt;
  uint64_t size = end + tail;
  if (size > 0) size -= input.ConsumeIntegralInRange<uint64_t>(0, block_size - 1);
  auto map = storage::FileMap::Create("fuzzed", size, block_size, storage::FileSource::kManifest,
                                      std::move(extents));
  if (!map.ok()) return std::nullopt;
  return *std::move(map);
}

// An offset near something interesting in `map` (its size, an extent edge, 0, the top of the
// offset space), or anywhere.
inline uint64_t ConsumeOffset(FuzzedDataProvider& input, const storage::FileMap& map) {
  const int64_t nudge = input.ConsumeIntegralInRange<int64_t>(-4096, 4096);
  uint64_t base = 0;
  switch (input.ConsumeIntegralInRange(0, 4)) {
    case 0:
      return input.ConsumeIntegral<uint64_t>();
    case 1:
      base = map.size();
      break;
    case 2:
      if (!map.extents().empty()) {
        const auto& e =
            map.extents()[input.ConsumeIntegralInRange<size_t>(0, map.extents().size() - 1)];
        base = input.ConsumeBool() ? e.logical_offset : e.logical_end();
      }
      break;
    case 3:
      base = UINT64_MAX;
      break;
    default:
      break;
  }
  return base + static_cast<uint64_t>(nudge);  // wraps at the ends, on purpose
}

}  // namespace blockread::fuzz

#endif  // BLOCKREAD_TESTS_FUZZ_FUZZED_FILE_MAP_H_
