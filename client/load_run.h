// The state one `blockread load` run shares between its threads, and how a thread records a
// finished read into it.
#ifndef BLOCKREAD_CLIENT_LOAD_RUN_H_
#define BLOCKREAD_CLIENT_LOAD_RUN_H_

#include <grpcpp/support/status.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "blockread/v1/blockread.pb.h"
#include "client/load.h"
#include "client/load_router.h"
#include "proto/wire/latency_histogram.h"

namespace blockread::client::load {

// The load's own clock, steady like the server's (both are CLOCK_MONOTONIC on Linux), in ns.
inline uint64_t MonotonicNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// What one thread records. Counters and the histogram are single-writer atomics, so the progress
// line can read them while the thread runs.
struct ThreadStats {
  wire::Counter issued, returned, reads, bytes;
  wire::Counter hedged, hedges_won;   // second calls sent for slow reads, and those answered first
  wire::LatencyHistogram latency_ns;  // counted (post-ramp, in-interval) successful reads
  wire::Counter queue_ns, device_ns, server_ns;
  std::map<std::string, uint64_t> errors;  // read after the thread ends
};

// State shared by the threads of one run.
struct Run {
  explicit Run(const LoadOptions& options) : options(options) {}
  const LoadOptions& options;
  std::vector<FileTarget> files;
  std::unique_ptr<Router> router;
  int verify_fd = -1;
  uint64_t start_ns = 0, measure_start_ns = 0, measure_end_ns = 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> counted_reads{0};  // for --number
  std::mutex failure_mu;
  std::string failure;
};

// Records a finished read: errors by code; successful reads verified (a mismatch is recorded as
// the run's failure and stops it), then counted if they were issued after the ramp and finished
// inside the measured interval.
void Record(Run& run, ThreadStats& stats, const FileTarget& file, uint64_t offset,
            uint64_t start_ns, const grpc::Status& status, const std::string& data, bool has_crc,
            uint32_t crc, const v1::ServerTiming& timing);

// The run goes on: not stopped, and the measured interval not over.
bool Running(const Run& run);

// The reads that found no replica to go to: failed without being sent, as UNAVAILABLE.
grpc::Status NoReplica(const FileTarget& file);

}  // namespace blockread::client::load

#endif  // BLOCKREAD_CLIENT_LOAD_RUN_H_
