// Per-identity limits (max_iops, max_bytes_per_second of the --auth file) and usage counts,
// shared by every worker without a lock.
#ifndef BLOCKREAD_SERVER_RATE_LIMIT_H_
#define BLOCKREAD_SERVER_RATE_LIMIT_H_

#include <atomic>
#include <cstdint>

namespace blockread::server {

// A rate limit as a GCRA ("virtual scheduling"): one atomic theoretical arrival time, advanced by
// each admitted read's cost, so a read costs one compare-exchange and workers never lock. A read
// costs the larger of 1/max_iops seconds and bytes/max_bytes_per_second seconds, so neither limit
// is ever exceeded (mixing sizes is charged conservatively). Up to kBurstNs worth of reads may
// start at once after an idle spell.
//
// Threading: any thread.
class RateLimiter {
 public:
  // Either may be 0 (that limit off); not both.
  RateLimiter(uint64_t max_iops, uint64_t max_bytes_per_second);

  static constexpr uint64_t kBurstNs = 50'000'000;  // 50 ms
  static constexpr uint64_t kRefused = ~uint64_t{0};
  // The most one read is charged (about 146 years), and the schedule saturates below kRefused
  // rather than wrap. Callers validate lengths first (max_read_bytes), so only an absurdly small
  // max_bytes_per_second gets near either.
  static constexpr uint64_t kMaxCostNs = uint64_t{1} << 62;
  static constexpr uint64_t kMaxScheduleNs = kRefused - 1;

  // Reserves a place for a read of `bytes` arriving at `now_ns` (storage::MonotonicNowNs) and
  // returns when it may start: `now_ns` or later. kRefused, reserving nothing, when that would be
  // after `latest_start_ns` (the call's deadline).
  uint64_t Reserve(uint64_t bytes, uint64_t now_ns, uint64_t latest_start_ns);

  uint64_t max_iops() const { return max_iops_; }
  uint64_t max_bytes_per_second() const { return max_bytes_per_second_; }

 private:
  uint64_t CostNs(uint64_t bytes) const;

  const uint64_t max_iops_;
  const uint64_t max_bytes_per_second_;
  std::atomic<uint64_t> theoretical_arrival_ns_{0};
};

// What one identity's calls did. Relaxed atomic adds from the workers; read by GetStats.
struct IdentityUsage {
  std::atomic<uint64_t> reads{0};         // reads answered OK
  std::atomic<uint64_t> bytes{0};         // bytes they returned
  std::atomic<uint64_t> paced{0};         // reads that waited for the identity's limit
  std::atomic<uint64_t> pace_wait_ns{0};  // how long, summed
  std::atomic<uint64_t> refused{0};       // reads refused: the wait would outlast the deadline

  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_RATE_LIMIT_H_
