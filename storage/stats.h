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

#include "proto/wire/latency_histogram.h"

namespace blockread::storage {

// The engine counts with the wire library's single-writer counters and histograms: their bucket
// layout is what GetStats sends.
using wire::Counter;
using wire::HistogramSnapshot;
using wire::LatencyBuckets;
using wire::LatencyHistogram;

// Which path served a read.
enum class ReadPathKind : uint8_t { kSimple = 0, kGeneric = 1 };
inline constexpr int kReadPathCount = 2;

// Why a read did not take the simple path (the -ENOTBLK of the seeds).
enum class FallbackReason : uint8_t {
  kDisabled = 0,  // simple_max_bytes == 0
  kTooLarge,      // length > simple_max_bytes
  kUnaligned,     // offset or length not a multiple of the file's block size
  kBeyondEof,     // the read runs past the end of the file (short read)
  kNotMapped,     // the range is a hole or unwritten extent
  kSpansExtents,  // the range crosses an extent boundary
};
inline constexpr int kFallbackReasonCount = 6;
const char* FallbackReasonName(FallbackReason reason);

// Errors are counted by absl::StatusCode (OK = 0 .. UNAUTHENTICATED = 16), a bounded label set.
inline constexpr int kStatusCodeCount = 17;
using ErrorCounts = std::array<Counter, kStatusCodeCount>;

// How a device's completions are found.
enum class PollMode : uint8_t {
  kInterrupt = 0,  // interrupt-driven ring; completions reaped by spinning on the CQ ring
  kIoPoll = 1,     // IORING_SETUP_IOPOLL ring; the kernel polls the device's poll queues
};
inline constexpr int kPollModeCount = 2;

// Which row of the I/O backend table (storage/io_backend.h) serves a device on a worker.
enum class BackendKind : uint8_t {
  kUringInterrupt = 0,  // io_uring; completions found by spinning on the CQ ring
  kUringIoPoll = 1,     // io_uring with IORING_SETUP_IOPOLL; the kernel polls the device
  kPsync = 2,           // pool threads doing pread; for where seccomp blocks io_uring
};
inline constexpr int kBackendKindCount = 3;

// The stages a read's time is split into. The caller of StartRead says when the read arrived
// (for the server: when the RPC message was received), so queueing in front of the engine counts.
struct PathStats {
  Counter requests;            // reads finished on this path (successful or not)
  Counter bytes;               // bytes returned
  ErrorCounts errors;          // reads that finished with an error, by status code
  LatencyHistogram queue_ns;   // arrival -> StartRead took a slot (waits for busy slots)
  LatencyHistogram device_ns;  // StartRead -> last CQE reaped (0 for reads with no I/O)
  LatencyHistogram total_ns;   // arrival -> completion delivered
};

struct DeviceStats {
  Counter reads;     // I/Os (SQEs) completed
  Counter bytes;     // bytes read from the device
  Counter errors;    // I/Os that failed
  Counter inflight;  // I/Os submitted and not yet reaped (a gauge)
  Counter backend;   // a BackendKind, as chosen by the worker's engine setup
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
  // Reads StartRead refused before choosing a path (bad range, unknown or stale file), by code.
  // RESOURCE_EXHAUSTED (slots busy, retry) is not a refusal and is not counted.
  ErrorCounts& rejected() { return rejected_; }
  const ErrorCounts& rejected() const { return rejected_; }
  // Of the DEADLINE_EXCEEDED refusals, those shed: their device takes longer than their time left.
  Counter& shed() { return shed_; }
  const Counter& shed() const { return shed_; }
  // Times a read was held back (kNameChanging) because a name change in a served directory that
  // concerns its name, or a directory above it, was being applied (storage/name_sync.h). The
  // pause until the watcher has read what a change is (microseconds) is not counted.
  Counter& name_waits() { return name_waits_; }
  const Counter& name_waits() const { return name_waits_; }
  DeviceStats& device(uint32_t id) { return devices_[id]; }
  const DeviceStats& device(uint32_t id) const { return devices_[id]; }
  size_t device_count() const { return devices_.size(); }

 private:
  std::array<PathStats, kReadPathCount> paths_;
  std::array<Counter, kFallbackReasonCount> fallbacks_;
  ErrorCounts rejected_;
  Counter shed_;
  Counter name_waits_;
  std::vector<DeviceStats> devices_;
};

using ErrorCountsSnapshot = std::array<uint64_t, kStatusCodeCount>;

struct PathSnapshot {
  uint64_t requests = 0;
  uint64_t bytes = 0;
  ErrorCountsSnapshot errors{};  // by absl::StatusCode
  HistogramSnapshot queue_ns;
  HistogramSnapshot device_ns;
  HistogramSnapshot total_ns;

  uint64_t error_count() const;
};

struct DeviceSnapshot {
  uint64_t reads = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  uint64_t inflight = 0;
  // Workers that read this device through each BackendKind.
  std::array<uint64_t, kBackendKindCount> workers_by_backend{};
};

// The merged view of any number of shards. Build it on any thread.
struct StatsSnapshot {
  std::array<PathSnapshot, kReadPathCount> paths;
  std::array<uint64_t, kFallbackReasonCount> fallbacks{};
  ErrorCountsSnapshot rejected{};
  uint64_t shed = 0;
  uint64_t name_waits = 0;
  std::vector<DeviceSnapshot> devices;

  void Add(const StatsShard& shard);
  const PathSnapshot& path(ReadPathKind path) const { return paths[static_cast<int>(path)]; }
  uint64_t fallback(FallbackReason reason) const { return fallbacks[static_cast<int>(reason)]; }
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_STATS_H_
