// `blockread load`: the bundled load generator, in fio's spirit.
#ifndef BLOCKREAD_CLIENT_LOAD_H_
#define BLOCKREAD_CLIENT_LOAD_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/blockread_client.h"
#include "proto/wire/latency_histogram.h"

namespace blockread::client {

struct LoadOptions {
  std::vector<std::string> targets = {"127.0.0.1:7420"};
  // Credentials and timeouts of every channel (the CLI's --ca, --cert, --key).
  ClientOptions connection;
  std::vector<std::string> files;  // empty: every file the (first) server lists
  bool sequential = false;         // --rw=read (else randread)
  uint64_t block_size = 4096;
  int queue_depth = 32;  // reads in flight per thread
  int threads = 1;
  int channels = 1;     // spread over the threads round-robin, and over the targets
  bool stream = false;  // --mode=stream (else unary)
  int batch = 1;        // reads per stream request message
  double runtime_s = 10;
  uint64_t number = 0;  // if > 0: this many reads (after the ramp), instead of runtime
  double ramp_s = 0;    // warm-up, not counted
  double rate = 0;      // total IOPS cap (0: none)
  uint64_t seed = 1;
  bool verify = false;
  std::string verify_file;  // with --verify: local copy to compare with; else CRC32C
  bool json = false;
  bool progress = true;  // one status line a second (only on a terminal)
};

// Checks option values and their combinations; the error names the option.
absl::Status ValidateLoadOptions(const LoadOptions& options);

struct LoadResult {
  double seconds = 0;  // measured interval
  uint64_t reads = 0;  // successful reads in the interval
  uint64_t bytes = 0;
  uint64_t issued = 0;                     // reads sent in total (ramp included)
  uint64_t returned = 0;                   // reads answered in total, successfully or not
  std::map<std::string, uint64_t> errors;  // by status code name, whole run
  wire::HistogramSnapshot latency_ns;      // client-observed, successful reads in the interval
  // Means over the interval's successful reads, from the server timing in each response.
  double server_queue_us = 0, server_device_us = 0, server_total_us = 0;
  // Server per-path stats over the run (GetStats after - before, summed over targets).
  std::map<std::string, uint64_t> server_paths;
  std::map<std::string, uint64_t> server_fallbacks;
  std::string verify_failure;  // non-empty: the first mismatch (the run stopped there)
  double iops() const { return seconds > 0 ? reads / seconds : 0; }
  double bandwidth() const { return seconds > 0 ? bytes / seconds : 0; }
};

// Runs the load. Errors are for setup failures (no server, no such file); per-read errors are
// counted in the result.
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options);

std::string LoadResultText(const LoadOptions& options, const LoadResult& result);
std::string LoadResultJson(const LoadOptions& options, const LoadResult& result);

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_LOAD_H_
