// Per-path statistics. Each worker owns one StatsShard and is its only writer; any thread may read
// shards and merge them into a StatsSnapshot. The writer never takes a lock and never does an
// atomic read-modify-write: every field is an atomic word updated with a relaxed load and a
// relaxed store (the single writer makes that exact), so readers see whole, if slightly old,
// values.
#ifndef BLOCKREAD_STORAGE_STATS_H_
#define BLOCKREAD_STORAGE_STATS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "storage/latency_histogram.h"

namespace blockread::storage {

// Which path served a read.
enum class ReadPathKind : uint8_t { kSimple = 0, kGeneric = 1 };
inline constexpr int kReadPathCount = 2;
const char* ReadPathName(ReadPathKind path);

// Why a read did not take the simple path (the -ENOTBLK of the seeds).
enum class FallbackReason : uint8_t {
  kDisabled = 0,  // simple_max_bytes == 0
  kTooLarge,      // length > simple_max_bytes
  kUnaligned,     // offset or length not a multiple of the file's block size
  kBeyondEof,     // the read runs past the end of the file (short read)
  kNotMapped,     // the range is a hole or unwritten extent
  kSpansExtents,  // the range crosses an extent boundary
  kFileRoute,     // the file is served through the file itself
};
inline constexpr int kFallbackReasonCount = 7;
const char* FallbackReasonName(FallbackReason reason);

// How a device's completions are found.
enum class PollMode : uint8_t {
  kInterrupt = 0,  // interrupt-driven ring; completions reaped by spinning on the CQ ring
  kIoPoll = 1,     // IORING_SETUP_IOPOLL ring; the kernel polls the device's poll queues
};
const char* PollModeName(PollMode mode);

struct PathStats {
  Counter requests;            // reads finished on this path (successful or not)
  Counter bytes;               // bytes returned
  Counter errors;              // reads that finished with an error
  LatencyHistogram device_ns;  // first SQE submitted -> last CQE reaped
  LatencyHistogram total_ns;   // read accepted by the engine -> completion delivered
};

struct DeviceStats {
  Counter reads;      // I/Os (SQEs) completed
  Counter bytes;      // bytes read from the device
  Counter errors;     // I/Os that failed
  Counter inflight;   // I/Os submitted and not yet reaped (a gauge)
  Counter poll_mode;  // a PollMode, as set by the worker's ring setup
};

// One worker's statistics. Written only by its worker thread; readable from any thread.
class StatsShard {
 public:
  explicit StatsShard(size_t device_count) : devices_(device_count) {}
  StatsShard(const StatsShard&) = delete;
  StatsShard& operator=(const StatsShard&) = delete;

  PathStats& path(ReadPathKind path) { return paths_[static_cast<int>(path)]; }
  const PathStats& path(ReadPathKind path) const { return paths_[static_cast<int>(path)]; }
  Counter& fallback(FallbackReason reason) { return fallbacks_[static_cast<int>(reason)]; }
  const Counter& fallback(FallbackReason reason) const {
    return fallbacks_[static_cast<int>(reason)];
  }
  DeviceStats& device(uint32_t id) { return devices_[id]; }
  const DeviceStats& device(uint32_t id) const { return devices_[id]; }
  size_t device_count() const { return devices_.size(); }

 private:
  std::array<PathStats, kReadPathCount> paths_;
  std::array<Counter, kFallbackReasonCount> fallbacks_;
  std::vector<DeviceStats> devices_;
};

struct PathSnapshot {
  uint64_t requests = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  HistogramSnapshot device_ns;
  HistogramSnapshot total_ns;
};

struct DeviceSnapshot {
  uint64_t reads = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  uint64_t inflight = 0;
  // Workers that reap this device in each PollMode.
  std::array<uint64_t, 2> workers_by_poll_mode{};
};

// The merged view of any number of shards. Build it on any thread.
struct StatsSnapshot {
  std::array<PathSnapshot, kReadPathCount> paths;
  std::array<uint64_t, kFallbackReasonCount> fallbacks{};
  std::vector<DeviceSnapshot> devices;

  void Add(const StatsShard& shard);
  const PathSnapshot& path(ReadPathKind path) const { return paths[static_cast<int>(path)]; }
  uint64_t fallback(FallbackReason reason) const { return fallbacks[static_cast<int>(reason)]; }
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_STATS_H_
