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
  int queue_depth = 32;  // reads in flight per thread, as fio's iodepth
  int threads = 1;
  bool stream = false;  // --mode=stream (else unary)
  // 0: derived from queue_depth, block_size and the mode by DeriveLoadSettings(); a value given
  // here (an explicit flag) wins.
  int channels = 0;  // gRPC channels (TCP connections), spread over the targets
  int streams = 0;   // stream mode: ReadBlocks streams per thread, queue_depth split over them
  int batch = 0;     // stream mode: reads per request message
  double runtime_s = 10;
  uint64_t number = 0;  // if > 0: this many reads (after the ramp), instead of runtime
  double ramp_s = 0;    // warm-up, not counted
  double rate = 0;      // total IOPS cap (0: none)
  uint64_t seed = 1;
  bool verify = false;
  std::string verify_file;  // with --verify: local copy to compare with; else CRC32C
  // Unary mode: a read that has waited longer than this percentile (e.g. 95) of its server's
  // recent latencies, or of all servers' when that is lower (a replica slow throughout has a high
  // percentile of its own), is also sent to another replica; the first answer wins and the other
  // call is cancelled. 0: no hedging. At most hedge_max_share of the reads are hedged.
  double hedge_after_percentile = 0;
  double hedge_max_share = 0.05;
  bool json = false;
  bool progress = true;  // one status line a second (only on a terminal)
};

// Checks option values and their combinations; the error names the option. Settings left at 0
// are checked after DeriveLoadSettings() fills them in.
absl::Status ValidateLoadOptions(const LoadOptions& options);

// The connection settings a run uses: the explicit ones, the rest derived.
struct LoadSettings {
  int threads = 1;
  int channels = 1;  // in total; thread t's lanes use channels t, t + threads, ... (mod channels)
  int streams = 0;   // per thread (stream mode; 0 in unary mode)
  int batch = 1;     // reads per request message (1 in unary mode)
};

// Fills in the settings left at 0 from --qd and --bs, as measured on one client CPU
// (tests/bench/load_defaults_sweep.sh): 2 streams per thread, or one per MiB of reads in flight
// when that is more (at most 4, at most --qd), each stream's share sent in one message (at most
// 16 reads and 1 MiB), one channel per thread. The reasons are in load.cc.
// Returns an error when the explicit and derived values do not fit together (e.g. a --batch
// larger than the reads in flight per stream); the error names the option.
absl::StatusOr<LoadSettings> DeriveLoadSettings(const LoadOptions& options);

// One interval of the measured run (a second, the last one possibly shorter).
struct LoadSecond {
  double end_s = 0;               // end of the interval, seconds into the measured run
  double seconds = 0;             // its length
  uint64_t reads = 0, bytes = 0;  // counted reads that finished in it
  uint64_t p50_ns = 0, p99_ns = 0;
  double iops() const { return seconds > 0 ? reads / seconds : 0; }
  double bandwidth() const { return seconds > 0 ? bytes / seconds : 0; }
};

struct LoadResult {
  LoadSettings settings;  // what the run used
  double seconds = 0;     // measured interval
  uint64_t reads = 0;     // successful reads in the interval
  uint64_t bytes = 0;
  uint64_t issued = 0;                     // reads sent in total (ramp included)
  uint64_t returned = 0;                   // reads answered in total, successfully or not
  uint64_t hedged = 0;                     // second calls sent for slow reads (--hedge-after)
  uint64_t hedges_won = 0;                 // of those, the ones answered first
  std::map<std::string, uint64_t> errors;  // by status code name, whole run
  wire::HistogramSnapshot latency_ns;      // client-observed, successful reads in the interval
  // Means over the interval's successful reads, from the server timing in each response.
  double server_queue_us = 0, server_device_us = 0, server_total_us = 0;
  // Server per-path stats over the run (GetStats after - before, summed over targets).
  std::map<std::string, uint64_t> server_paths;
  std::map<std::string, uint64_t> server_fallbacks;
  std::string server_version;  // GetStats' version, of each target (comma-separated if several)
  std::vector<LoadSecond> per_second;  // the measured run, second by second
  std::string verify_failure;          // non-empty: the first mismatch (the run stopped there)
  double iops() const { return seconds > 0 ? reads / seconds : 0; }
  double bandwidth() const { return seconds > 0 ? bytes / seconds : 0; }
};

// Runs the load. Errors are for setup failures (no server, no such file); per-read errors are
// counted in the result.
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options);

// "threads=1 channels=1 streams=2 batch=16 (derived: channels, streams, batch)"
std::string LoadSettingsText(const LoadOptions& options, const LoadSettings& settings);
std::string LoadResultText(const LoadOptions& options, const LoadResult& result);
std::string LoadResultJson(const LoadOptions& options, const LoadResult& result);

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_LOAD_H_
