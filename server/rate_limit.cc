#include "server/rate_limit.h"

#include <algorithm>

namespace blockread::server {

RateLimiter::RateLimiter(uint64_t max_iops, uint64_t max_bytes_per_second)
    : max_iops_(max_iops), max_bytes_per_second_(max_bytes_per_second) {}

uint64_t RateLimiter::CostNs(uint64_t bytes) const {
  uint64_t cost = max_iops_ == 0 ? 0 : 1'000'000'000 / max_iops_;
  if (max_bytes_per_second_ != 0) {
    // In 128 bits: bytes * 1e9 does not fit 64 (and a double that large does not convert back).
    const unsigned __int128 by_bytes =
        static_cast<unsigned __int128>(bytes) * 1'000'000'000 / max_bytes_per_second_;
    cost = std::max(cost, static_cast<uint64_t>(std::min<unsigned __int128>(by_bytes, kMaxCostNs)));
  }
  return cost;
}

uint64_t RateLimiter::Reserve(uint64_t bytes, uint64_t now_ns, uint64_t latest_start_ns) {
  const uint64_t cost = CostNs(bytes);
  uint64_t arrival = theoretical_arrival_ns_.load(std::memory_order_relaxed);
  for (;;) {
    // The read conforms once the schedule is no more than the burst ahead of the clock.
    const uint64_t start = std::max(now_ns, arrival > kBurstNs ? arrival - kBurstNs : 0);
    if (start > latest_start_ns) return kRefused;
    const uint64_t base = std::max(arrival, now_ns);
    const uint64_t next = cost > kMaxScheduleNs - base ? kMaxScheduleNs : base + cost;  // no wrap
    if (theoretical_arrival_ns_.compare_exchange_weak(arrival, next, std::memory_order_relaxed)) {
      return start;
    }
  }
}

}  // namespace blockread::server
