// The engine's settings: one EngineConfig per server, shared by every worker's EngineContext.
#ifndef BLOCKREAD_STORAGE_ENGINE_CONFIG_H_
#define BLOCKREAD_STORAGE_ENGINE_CONFIG_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockread::storage {

// Which I/O backends a worker reads through (storage/io_backend.h).
enum class IoEngine : uint8_t {
  // io_uring when this process may set a ring up; psync otherwise, said in one log line that
  // names the cause and the fix (see ResolveIoEngine in storage/read_path.h).
  kAuto = 0,
  // io_uring only (interrupt mode, IOPOLL where the device has poll queues); setup fails with
  // the cause and the fix when io_uring is unavailable.
  kIoUring = 1,
  // Pool threads doing pread on the same O_DIRECT descriptors (storage/psync_backend.h).
  kPsync = 2,
};
// "auto", "io_uring", "psync": the config's and the flag's spelling.
const char* IoEngineName(IoEngine engine);
std::optional<IoEngine> ParseIoEngine(absl::string_view name);

// With more than one device (files read through themselves do not count: they are on one of the
// others), no device may hold more than this share of a worker's slots of
// either path (at least one slot, and at least one left for the others): a device that stalls
// keeps its reads in flight for as long as it stalls, and must not take every slot from the reads
// of healthy devices on the same worker. Its reads beyond the share wait (StartOutcome::
// kDeviceBusy); a fast device rarely needs more than three quarters of the queue depth.
constexpr uint32_t kDeviceShareOfSlotsPercent = 75;

// The member initializers are the defaults, for the engine and the server alike (the server's
// config and --help take them from here).
struct EngineConfig {
  // Largest read the simple path takes; 0 disables it (the seeds' simple=0 A/B switch).
  uint64_t simple_max_bytes = 4096;
  // Largest read accepted at all (INVALID_ARGUMENT above it).
  uint64_t max_read_bytes = 1 << 20;
  // The generic path splits mapped runs into I/Os of at most this many bytes (multiple of 4096).
  uint64_t max_io_bytes = 256 << 10;
  // Reads in flight per worker on each path; each slot owns a registered buffer (simple:
  // simple_max_bytes, generic: max_read_bytes plus alignment), so these size the pinned memory.
  // A slot stays taken while its bytes are sent without a copy (until gRPC has written them to
  // the socket), and one stream may hold a quarter of each path's slots that way
  // (server/slot_lender.h): 32 generic slots let a 128 KiB QD8 stream keep 8 reads in flight
  // and 8 being sent, without copies or waits.
  uint32_t simple_slots = 256;
  uint32_t generic_slots = 32;
  // Submission queue entries of each io_uring.
  uint32_t ring_entries = 256;
  // Probe IORING_SETUP_IOPOLL even on devices whose sysfs io_poll is 0. For tests and diagnosis:
  // it shows the EOPNOTSUPP demotion on devices without poll queues.
  bool probe_iopoll_on_all_devices = false;
  IoEngine io_engine = IoEngine::kAuto;
  // psync engine: pool threads per worker, so preads in flight per worker (each a blocked thread).
  uint32_t psync_threads = 8;

  // Checks the limits and their relations; the error names the setting.
  absl::Status Validate() const;
};

// Checks what can be checked without the file: length in 1..max_read_bytes, no 64-bit overflow.
// INVALID_ARGUMENT naming the limit otherwise.
absl::Status ValidateReadRange(const EngineConfig& config, uint64_t offset, uint64_t length);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_ENGINE_CONFIG_H_
