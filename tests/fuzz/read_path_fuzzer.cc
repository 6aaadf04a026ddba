// Request validation and the path decision, as the dispatcher (EngineContext::Dispatch) and
// Explain make them, over fuzzed maps, engine settings and reads; then the generic path's plan.
// Checks:
// - ValidateReadRange accepts exactly the lengths 1..max_read_bytes whose end fits in 64 bits;
// - DecideReadPath refuses exactly the offsets beyond EOF, and picks the simple path exactly when
//   an independent reading of its rule says so (on, small enough, aligned, inside the file and
//   inside one mapped extent), with the extent that covers the read;
// - the generic plan stays inside its buffer, its I/Os are block-aligned, at most max_io_bytes,
//   each inside one mapped extent at the right physical offset, and together with the zero-filled
//   holes they cover the block-aligned range exactly once.
#include <fuzzer/FuzzedDataProvider.h>

#include <vector>

#include "storage/engine_config.h"
#include "storage/generic_read.h"
#include "storage/read_path.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzzed_file_map.h"

namespace blockread::storage {
namespace {

constexpr uint64_t kMaxReadBytes = 256 << 10;
constexpr uint64_t kMaxBlock = 8192;  // fuzzed maps' largest block size
constexpr char kUnwritten = '\xA5';   // what the plan must overwrite or leave to the device

// The simple path's rule, read independently of SimpleReadEligible: a linear scan, no Lookup.
bool SimpleByTheRule(const FileMap& map, uint64_t offset, uint64_t length,
                     uint64_t simple_max_bytes) {
  if (simple_max_bytes == 0 || length > simple_max_bytes) return false;
  if (offset % map.block_size() != 0 || length % map.block_size() != 0) return false;
  if (offset >= map.size() || length > map.size() - offset) return false;
  for (const Extent& e : map.extents()) {
    if (e.logical_offset <= offset && offset < e.logical_end()) {
      return e.type == ExtentType::kMapped && length <= e.logical_end() - offset;
    }
  }
  return false;  // a gap: a hole
}

void CheckPlan(const FileMap& map, uint64_t offset, uint64_t length, uint64_t max_io_bytes,
               std::vector<char>& buffer) {
  const uint64_t block = map.block_size();
  const uint64_t capacity = length + 2 * block;
  std::fill(buffer.begin(), buffer.begin() + static_cast<ptrdiff_t>(capacity), kUnwritten);
  std::vector<PlannedIo> ios;
  const GenericPlan plan =
      PlanGenericRead(map, map.size(), offset, length, max_io_bytes, buffer.data(),
                      [&](const PlannedIo& io) { ios.push_back(io); });
  const uint64_t wanted = std::min(length, map.size() - offset);
  FUZZ_CHECK(plan.data_length == wanted);
  FUZZ_CHECK(plan.data_offset == offset % block);
  FUZZ_CHECK(plan.data_offset + plan.data_length <= capacity);
  if (wanted == 0) {
    FUZZ_CHECK(ios.empty());
    return;
  }
  const uint64_t aligned_start = offset - offset % block;
  const uint64_t aligned_length = RoundUp(offset + wanted, block) - aligned_start;
  FUZZ_CHECK(aligned_length <= capacity);
  uint64_t covered = 0;  // [0, covered) of the buffer is accounted for
  auto expect_zeros_up_to = [&](uint64_t to) {
    for (uint64_t b = covered; b < to; ++b) FUZZ_CHECK(buffer[b] == 0);
    covered = to;
  };
  for (const PlannedIo& io : ios) {
    FUZZ_CHECK(io.buffer_offset >= covered);  // in order, no overlap
    FUZZ_CHECK(io.length > 0 && io.length <= std::max(block, max_io_bytes / block * block));
    FUZZ_CHECK(io.buffer_offset + io.length <= aligned_length);
    FUZZ_CHECK(io.buffer_offset % block == 0 && io.length % block == 0);
    const uint64_t file_offset = aligned_start + io.buffer_offset;
    const Extent e = map.Lookup(file_offset);
    FUZZ_CHECK(e.type == ExtentType::kMapped);
    FUZZ_CHECK(file_offset + io.length <= e.logical_end());
    FUZZ_CHECK(io.device == e.device);
    FUZZ_CHECK(io.physical_offset == e.physical_offset + (file_offset - e.logical_offset));
    FUZZ_CHECK(io.needed > 0 && io.needed <= io.length);
    FUZZ_CHECK(io.needed == std::min(file_offset + io.length, map.size()) - file_offset);
    // What lies between I/Os reads as zeros, and is neither mapped nor left unwritten.
    expect_zeros_up_to(io.buffer_offset);
    for (uint64_t b = io.buffer_offset; b < io.buffer_offset + io.length; ++b) {
      FUZZ_CHECK(buffer[b] == kUnwritten);  // the device fills it, nothing else
    }
    covered = io.buffer_offset + io.length;
  }
  expect_zeros_up_to(aligned_length);
}

void FuzzOne(FuzzedDataProvider& input, std::vector<char>& buffer) {
  std::optional<FileMap> map = fuzz::ConsumeFileMap(input);
  if (!map) return;
  EngineConfig config;
  config.simple_max_bytes = 512 * input.ConsumeIntegralInRange<uint64_t>(0, 16);
  config.max_read_bytes = 4096 * input.ConsumeIntegralInRange<uint64_t>(1, kMaxReadBytes / 4096);
  config.max_io_bytes = 4096 * input.ConsumeIntegralInRange<uint64_t>(1, 64);
  FUZZ_CHECK(config.Validate().ok());

  for (int reads = input.ConsumeIntegralInRange(1, 8); reads > 0; --reads) {
    const uint64_t offset = fuzz::ConsumeOffset(input, *map);
    const uint64_t length = input.ConsumeBool()
                                ? input.ConsumeIntegral<uint64_t>()
                                : input.ConsumeIntegralInRange<uint64_t>(0, 3 * kMaxBlock);
    const absl::Status valid = ValidateReadRange(config, offset, length);
    const bool acceptable =
        length >= 1 && length <= config.max_read_bytes && offset <= UINT64_MAX - length;
    FUZZ_CHECK(valid.ok() == acceptable);
    if (!valid.ok()) {
      FUZZ_CHECK(valid.code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    const absl::StatusOr<PathDecision> decision =
        DecideReadPath(*map, map->size(), offset, length, config.simple_max_bytes);
    FUZZ_CHECK(decision.ok() == (offset <= map->size()));
    if (!decision.ok()) {
      FUZZ_CHECK(decision.status().code() == absl::StatusCode::kOutOfRange);
      continue;
    }
    const bool simple = decision->path == ReadPathKind::kSimple;
    FUZZ_CHECK(simple == SimpleByTheRule(*map, offset, length, config.simple_max_bytes));
    if (simple) {
      const Extent& e = decision->extent;
      FUZZ_CHECK(e == map->Lookup(offset));
      FUZZ_CHECK(e.logical_offset <= offset && length <= e.logical_end() - offset);
    } else {
      FUZZ_CHECK(decision->fallback != FallbackReason::kDisabled || config.simple_max_bytes == 0);
      CheckPlan(*map, offset, length, config.max_io_bytes, buffer);
    }
  }
}

}  // namespace
}  // namespace blockread::storage

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::vector<char> buffer(blockread::storage::kMaxReadBytes +
                                  2 * blockread::storage::kMaxBlock);
  FuzzedDataProvider input(data, size);
  blockread::storage::FuzzOne(input, buffer);
  return 0;
}
