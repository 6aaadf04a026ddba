#include "storage/stats.h"

namespace blockread::storage {

const char* ReadPathName(ReadPathKind path) {
  return path == ReadPathKind::kSimple ? "simple" : "generic";
}

const char* FallbackReasonName(FallbackReason reason) {
  switch (reason) {
    case FallbackReason::kDisabled:
      return "disabled";
    case FallbackReason::kTooLarge:
      return "too_large";
    case FallbackReason::kUnaligned:
      return "unaligned";
    case FallbackReason::kBeyondEof:
      return "beyond_eof";
    case FallbackReason::kNotMapped:
      return "not_mapped";
    case FallbackReason::kSpansExtents:
      return "spans_extents";
    case FallbackReason::kFileRoute:
      return "file_route";
  }
  return "unknown";
}

const char* PollModeName(PollMode mode) {
  return mode == PollMode::kIoPoll ? "iopoll" : "interrupt";
}

void HistogramSnapshot::Merge(const HistogramSnapshot& other) {
  for (int i = 0; i < LatencyBuckets::kCount; ++i) buckets[i] += other.buckets[i];
  count += other.count;
  sum += other.sum;
}

uint64_t HistogramSnapshot::Percentile(double q) const {
  uint64_t total = 0;
  for (uint64_t b : buckets) total += b;
  if (total == 0) return 0;
  // Rank of the value at quantile q, 1-based: the smallest value with at least q of all below it.
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total) + 0.5);
  if (rank < 1) rank = 1;
  if (rank > total) rank = total;
  uint64_t seen = 0;
  for (int i = 0; i < LatencyBuckets::kCount; ++i) {
    seen += buckets[i];
    if (seen >= rank) return LatencyBuckets::UpperBound(i);
  }
  return LatencyBuckets::UpperBound(LatencyBuckets::kCount - 1);
}

void LatencyHistogram::AddTo(HistogramSnapshot& snapshot) const {
  for (int i = 0; i < LatencyBuckets::kCount; ++i) snapshot.buckets[i] += buckets_[i].Load();
  snapshot.count += count_.Load();
  snapshot.sum += sum_.Load();
}

void StatsSnapshot::Add(const StatsShard& shard) {
  for (int p = 0; p < kReadPathCount; ++p) {
    const PathStats& in = shard.path(static_cast<ReadPathKind>(p));
    PathSnapshot& out = paths[p];
    out.requests += in.requests.Load();
    out.bytes += in.bytes.Load();
    out.errors += in.errors.Load();
    in.device_ns.AddTo(out.device_ns);
    in.total_ns.AddTo(out.total_ns);
  }
  for (int r = 0; r < kFallbackReasonCount; ++r) {
    fallbacks[r] += shard.fallback(static_cast<FallbackReason>(r)).Load();
  }
  if (devices.size() < shard.device_count()) devices.resize(shard.device_count());
  for (uint32_t d = 0; d < shard.device_count(); ++d) {
    const DeviceStats& in = shard.device(d);
    DeviceSnapshot& out = devices[d];
    out.reads += in.reads.Load();
    out.bytes += in.bytes.Load();
    out.errors += in.errors.Load();
    out.inflight += in.inflight.Load();
    out.workers_by_poll_mode[in.poll_mode.Load() == 1 ? 1 : 0] += 1;
  }
}

}  // namespace blockread::storage
