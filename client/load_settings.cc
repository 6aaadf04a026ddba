// `blockread load`'s options checked, and the connection settings derived from them.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/load.h"

namespace blockread::client {
namespace {

// What DeriveLoadSettings() aims for, from tests/bench/load_defaults_sweep.sh on one client CPU
// (README "Load client and C++ client"):
// - Two streams: a stream sends its next message only when a whole batch of its reads has
//   come back, so with one stream the server would wait out every round trip. Beyond that,
//   fewer and fuller messages cost the client and the server less per read: at 4-16 KiB, 2
//   streams were as fast as 4, or faster, at QD 32 and 64 (within noise).
// - More streams once over kBytesInFlightPerStream would be in flight on each, at most
//   kMaxStreams. A stream's HTTP/2 flow-control window caps the bytes in flight on it: at
//   128 KiB x QD 32, 2x16 and 1x32 ran at 0.69-0.78 of 4x8.
// - A stream's share of --qd in one message, up to kMaxBatchReads reads and kBatchBytes. 16 was
//   the largest batch tried, and it was the best, or within noise of it, at QD 32 and 64.
constexpr int kMinStreams = 2;                         // per thread, when --qd allows
constexpr uint64_t kBytesInFlightPerStream = 1 << 20;  // a stream per this many, beyond kMinStreams
constexpr int kMaxStreams = 4;                         // per thread
constexpr int kMaxBatchReads = 16;                     // reads per request message at most
constexpr uint64_t kBatchBytes = 1 << 20;              // bytes of reads per request message at most

}  // namespace

absl::Status ValidateLoadOptions(const LoadOptions& o) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (o.targets.empty()) return bad("--target: at least one server");
  if (o.block_size == 0) return bad("--bs must be greater than 0");
  if (o.queue_depth < 1) return bad("--qd must be at least 1");
  if (o.threads < 1) return bad("--threads must be at least 1");
  if (o.channels < 0) return bad("--channels must be at least 1");
  if (o.streams < 0) return bad("--streams must be at least 1");
  if (o.batch < 0) return bad("--batch must be at least 1");
  if (!o.stream && o.batch > 1) return bad("--batch needs --mode=stream");
  if (!o.stream && o.streams != 0) return bad("--streams needs --mode=stream");
  if (o.hedge_after_percentile < 0 || o.hedge_after_percentile >= 100) {
    return bad("--hedge-after: a percentile such as p95 (above p0, below p100)");
  }
  if (o.hedge_after_percentile > 0 && o.stream) {
    return bad("--hedge-after needs --mode=unary (stream mode does not hedge)");
  }
  if (o.hedge_max_share <= 0 || o.hedge_max_share > 1) {
    return bad("--hedge-max-share: a share of the reads, above 0 and at most 1");
  }
  if (o.streams > o.queue_depth) {
    return bad("--streams cannot exceed --qd (each stream carries at least one read)");
  }
  if (o.batch > o.queue_depth / std::max(1, o.streams)) {
    return bad("--batch cannot exceed the reads in flight per stream (--qd / --streams)");
  }
  if (o.runtime_s <= 0 && o.number == 0)
    return bad("--runtime must be positive (or give --number)");
  if (o.ramp_s < 0) return bad("--ramp cannot be negative");
  if (o.rate < 0) return bad("--rate cannot be negative");
  if (!o.verify_file.empty() && !o.verify) return bad("--verify-file needs --verify");
  if (!o.verify_file.empty() && o.files.size() != 1) {
    return bad("--verify-file compares with one file: give exactly one --file");
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadSettings> DeriveLoadSettings(const LoadOptions& o) {
  if (absl::Status valid = ValidateLoadOptions(o); !valid.ok()) return valid;
  LoadSettings s;
  s.threads = o.threads;
  if (!o.stream) {
    s.channels = o.channels > 0 ? o.channels : o.threads;
    s.streams = 0;
    s.batch = 1;
    return s;
  }
  s.streams = o.streams;
  if (s.streams == 0) {
    // --bs may be anything up to 2^64: capped first, so the product cannot wrap.
    const uint64_t bytes_in_flight =
        static_cast<uint64_t>(o.queue_depth) *
        std::min<uint64_t>(o.block_size, kBytesInFlightPerStream * kMaxStreams);
    const uint64_t by_bytes =
        (bytes_in_flight + kBytesInFlightPerStream - 1) / kBytesInFlightPerStream;
    s.streams = static_cast<int>(std::min<uint64_t>(std::max<uint64_t>(kMinStreams, by_bytes),
                                                    std::min(o.queue_depth, kMaxStreams)));
    // An explicit --batch needs that many reads in flight on every stream.
    if (o.batch > 0) s.streams = std::min(s.streams, o.queue_depth / o.batch);
  }
  const int depth = o.queue_depth / s.streams;  // the smallest stream's share
  s.batch = o.batch;
  if (s.batch == 0) {
    const int by_bytes = static_cast<int>(std::max<uint64_t>(1, kBatchBytes / o.block_size));
    s.batch = std::clamp(depth, 1, std::min(kMaxBatchReads, by_bytes));
  }
  // One connection per thread: a thread's streams share it (more connections on one client CPU
  // cost more than they spread).
  s.channels = o.channels > 0 ? o.channels : s.threads;
  return s;
}

std::string LoadSettingsText(const LoadOptions& o, const LoadSettings& s) {
  std::string out = absl::StrFormat("threads=%d channels=%d", s.threads, s.channels);
  std::vector<std::string> derived;
  if (o.channels == 0) derived.push_back("channels");
  if (o.stream) {
    absl::StrAppendFormat(&out, " streams=%d batch=%d", s.streams, s.batch);
    if (o.streams == 0) derived.push_back("streams");
    if (o.batch == 0) derived.push_back("batch");
  }
  if (!derived.empty()) {
    absl::StrAppend(&out, " (derived: ", absl::StrJoin(derived, ", "), ")");
  }
  return out;
}

}  // namespace blockread::client
