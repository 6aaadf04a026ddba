#include "storage/stats.h"

namespace blockread::storage {

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
  }
  return "unknown";
}

namespace {

void AddCounts(const ErrorCounts& in, ErrorCountsSnapshot& out) {
  for (int c = 0; c < kStatusCodeCount; ++c) out[c] += in[c].Load();
}

}  // namespace

uint64_t PathSnapshot::error_count() const {
  uint64_t total = 0;
  for (uint64_t n : errors) total += n;
  return total;
}

void StatsSnapshot::Add(const StatsShard& shard) {
  for (int p = 0; p < kReadPathCount; ++p) {
    const PathStats& in = shard.path(static_cast<ReadPathKind>(p));
    PathSnapshot& out = paths[p];
    out.requests += in.requests.Load();
    out.bytes += in.bytes.Load();
    AddCounts(in.errors, out.errors);
    in.queue_ns.AddTo(out.queue_ns);
    in.device_ns.AddTo(out.device_ns);
    in.total_ns.AddTo(out.total_ns);
  }
  for (int r = 0; r < kFallbackReasonCount; ++r) {
    fallbacks[r] += shard.fallback(static_cast<FallbackReason>(r)).Load();
  }
  AddCounts(shard.rejected(), rejected);
  shed += shard.shed().Load();
  name_waits += shard.name_waits().Load();
  if (devices.size() < shard.device_count()) devices.resize(shard.device_count());
  for (uint32_t d = 0; d < shard.device_count(); ++d) {
    const DeviceStats& in = shard.device(d);
    DeviceSnapshot& out = devices[d];
    out.reads += in.reads.Load();
    out.bytes += in.bytes.Load();
    out.errors += in.errors.Load();
    out.inflight += in.inflight.Load();
    const uint64_t backend = in.backend.Load();
    if (backend < kBackendKindCount) out.workers_by_backend[backend] += 1;
  }
}

}  // namespace blockread::storage
