// FIEMAP extent folding (merging and clipping) over synthetic answers: batches of fiemap_extent
// as FS_IOC_FIEMAP returns them, mostly well-formed (sorted, some contiguous, some flagged), some
// not (overlapping, empty, at the top of the offset space). Checks that when the fold succeeds
// its extents are sorted, non-empty, inside the rounded size and fully merged, and that every byte
// below the rounded size that an input extent maps lands on the same device byte, with the same
// unwritten flag, and that nothing else is mapped.
#include <fuzzer/FuzzedDataProvider.h>
#include <linux/fiemap.h>

#include <vector>

#include "storage/fiemap.h"
#include "tests/fuzz/fuzz_check.h"

namespace blockread::storage {
namespace {

constexpr uint32_t kFlags[] = {
    0,
    FIEMAP_EXTENT_LAST,
    FIEMAP_EXTENT_UNWRITTEN,
    FIEMAP_EXTENT_MERGED,
    FIEMAP_EXTENT_SHARED,
    FIEMAP_EXTENT_UNKNOWN,
    FIEMAP_EXTENT_DELALLOC,
    FIEMAP_EXTENT_ENCODED,
    FIEMAP_EXTENT_DATA_ENCRYPTED,
    FIEMAP_EXTENT_NOT_ALIGNED,
    FIEMAP_EXTENT_DATA_INLINE,
    FIEMAP_EXTENT_DATA_TAIL,
};

fiemap_extent ConsumeExtent(FuzzedDataProvider& input, uint64_t unit, const fiemap_extent* prev) {
  fiemap_extent fe = {};
  if (input.ConsumeIntegralInRange(0, 15) == 0) {  // anything at all
    fe.fe_logical = input.ConsumeIntegral<uint64_t>();
    fe.fe_physical = input.ConsumeIntegral<uint64_t>();
    fe.fe_length = input.ConsumeIntegral<uint64_t>();
  } else {  // what a filesystem returns: after the previous one, often right after it on disk
    const uint64_t prev_end = prev ? prev->fe_logical + prev->fe_length : 0;
    fe.fe_logical = prev_end + unit * input.ConsumeIntegralInRange(0, 2);
    fe.fe_length = unit * input.ConsumeIntegralInRange(1, 16);
    fe.fe_physical = prev && input.ConsumeBool()
                         ? prev->fe_physical + prev->fe_length
                         : unit * input.ConsumeIntegralInRange<uint64_t>(0, 1 << 20);
  }
  for (int flags = input.ConsumeIntegralInRange(0, 2); flags > 0; --flags) {
    fe.fe_flags |= input.PickValueInArray(kFlags);
  }
  return fe;
}

// The device byte and unwritten flag `extents` give file byte `offset`, if any.
struct Mapping {
  bool mapped = false;
  uint64_t physical = 0;
  bool unwritten = false;
};
Mapping MappingOf(const std::vector<DeviceExtent>& extents, uint64_t offset) {
  auto it = std::upper_bound(
      extents.begin(), extents.end(), offset,
      [](uint64_t value, const DeviceExtent& e) { return value < e.logical_offset; });
  if (it == extents.begin()) return {};
  const DeviceExtent& e = *(it - 1);
  if (offset - e.logical_offset >= e.length) return {};
  return {true, e.physical_offset + (offset - e.logical_offset), e.unwritten};
}

void FuzzOne(FuzzedDataProvider& input) {
  const uint64_t unit = 512ull << input.ConsumeIntegralInRange(0, 4);
  const uint64_t rounded_size = input.ConsumeBool()
                                    ? unit * input.ConsumeIntegralInRange<uint64_t>(0, 256)
                                    : input.ConsumeIntegral<uint64_t>() / unit * unit;
  const uint64_t partition_start = 512 * input.ConsumeIntegralInRange<uint64_t>(0, 1 << 24);
  FiemapExtentFolder folder(rounded_size, partition_start);

  std::vector<fiemap_extent> given;  // every extent added, for the model
  bool routed = false;
  for (int batches = input.ConsumeIntegralInRange(1, 6); batches > 0 && !folder.done(); --batches) {
    std::vector<fiemap_extent> batch(input.ConsumeIntegralInRange(1, 24));
    for (fiemap_extent& fe : batch) {
      fe = ConsumeExtent(input, unit, given.empty() ? nullptr : &given.back());
      given.push_back(fe);
    }
    const uint64_t start = folder.next_start();
    if (!folder.Add(batch.data(), static_cast<uint32_t>(batch.size()))) {
      FUZZ_CHECK(!folder.file_route_reason().empty());
      routed = true;
      break;
    }
    FUZZ_CHECK(folder.next_start() >= start);
  }
  if (routed) return;  // served through the file: the extents are not used
  FUZZ_CHECK(folder.file_route_reason().empty());

  const std::vector<DeviceExtent>& out = folder.extents();
  uint64_t mapped_bytes = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const DeviceExtent& e = out[i];
    FUZZ_CHECK(e.length > 0);
    FUZZ_CHECK(e.logical_offset < rounded_size && e.length <= rounded_size - e.logical_offset);
    FUZZ_CHECK(e.physical_offset <= UINT64_MAX - e.length);
    if (i > 0) {
      const DeviceExtent& p = out[i - 1];
      FUZZ_CHECK(p.logical_offset + p.length <= e.logical_offset);  // sorted, no overlap
      FUZZ_CHECK(!(p.logical_offset + p.length == e.logical_offset &&
                   p.physical_offset + p.length == e.physical_offset &&
                   p.unwritten == e.unwritten));  // merged
    }
    mapped_bytes += e.length;
  }

  // The model: each input extent, clipped to the rounded size, maps its bytes to
  // fe_physical + partition start onward. Check its edges and middle, and that the totals agree
  // (so nothing else is mapped: the inputs that got here do not overlap).
  uint64_t model_bytes = 0;
  for (const fiemap_extent& fe : given) {
    if (fe.fe_logical >= rounded_size) continue;
    const uint64_t length = std::min<uint64_t>(fe.fe_length, rounded_size - fe.fe_logical);
    model_bytes += length;
    for (const uint64_t delta : {uint64_t{0}, length / 2, length - 1}) {
      const Mapping m = MappingOf(out, fe.fe_logical + delta);
      FUZZ_CHECK(m.mapped);
      FUZZ_CHECK(m.physical == fe.fe_physical + partition_start + delta);
      FUZZ_CHECK(m.unwritten == ((fe.fe_flags & FIEMAP_EXTENT_UNWRITTEN) != 0));
    }
  }
  FUZZ_CHECK(model_bytes == mapped_bytes);
}

}  // namespace
}  // namespace blockread::storage

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  blockread::storage::FuzzOne(input);
  return 0;
}
