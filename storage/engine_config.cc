#include "storage/engine_config.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace blockread::storage {
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* IoEngineName(IoEngine engine) {
  switch (engine) {
    case IoEngine::kAuto:
      return "auto";
    case IoEngine::kIoUring:
      return "io_uring";
    case IoEngine::kPsync:
      return "psync";
  }
  return "unknown";
}

std::optional<IoEngine> ParseIoEngine(absl::string_view name) {
  for (IoEngine engine : {IoEngine::kAuto, IoEngine::kIoUring, IoEngine::kPsync}) {
    if (name == IoEngineName(engine)) return engine;
  }
  return std::nullopt;
}

absl::Status EngineConfig::Validate() const {
  if (simple_max_bytes != 0 && (simple_max_bytes % 512 != 0 || simple_max_bytes > (1 << 20))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "simple_max_bytes %u must be 0 (off) or a multiple of 512 up to 1 MiB", simple_max_bytes));
  }
  if (max_read_bytes < 4096 || max_read_bytes > (64 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_read_bytes %u must be between 4 KiB and 64 MiB", max_read_bytes));
  }
  if (max_io_bytes < 4096 || max_io_bytes % 4096 != 0 || max_io_bytes > (16 << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_io_bytes %u must be a multiple of 4 KiB between 4 KiB and 16 MiB", max_io_bytes));
  }
  if (generic_slots == 0 || (simple_max_bytes != 0 && simple_slots == 0)) {
    return absl::InvalidArgumentError("simple_slots and generic_slots must be at least 1");
  }
  // io_uring registers at most 16384 buffers (IORING_MAX_REG_BUFFERS); each slot has one.
  if (uint64_t{simple_slots} + generic_slots > 16384) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "simple_slots %u + generic_slots %u must be at most 16384", simple_slots, generic_slots));
  }
  if (!IsPowerOfTwo(ring_entries) || ring_entries < 8 || ring_entries > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ring_entries %u must be a power of two from 8 to 4096", ring_entries));
  }
  if (psync_threads == 0 || psync_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrFormat("psync_threads %u must be from 1 to 256", psync_threads));
  }
  return absl::OkStatus();
}

absl::Status ValidateReadRange(const EngineConfig& config, uint64_t offset, uint64_t length) {
  if (length == 0) return absl::InvalidArgumentError("length must be greater than 0");
  if (length > config.max_read_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("length %u exceeds the largest read allowed, max_read_bytes = %u", length,
                        config.max_read_bytes));
  }
  if (offset > UINT64_MAX - length) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset %u + length %u overflows 64 bits", offset, length));
  }
  return absl::OkStatus();
}

}  // namespace blockread::storage
