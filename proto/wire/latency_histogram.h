// Single-writer counters and log-linear latency histograms: what the engine's stats shards and the
// load client's per-thread recorders are made of. The bucket layout is part of the wire contract:
// GetStats sends the server's buckets by their upper bounds (blockread.v1.Histogram), clients map
// them back with LatencyBuckets::IndexOf, and /metrics uses bucket edges as its `le` values.
// Header-only and dependency-free.
#ifndef BLOCKREAD_PROTO_WIRE_LATENCY_HISTOGRAM_H_
#define BLOCKREAD_PROTO_WIRE_LATENCY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

namespace blockread::wire {

// A counter with a single writer. Add() is a relaxed load plus a relaxed store, not a fetch_add:
// exact because only one thread writes, and readers on other threads see whole values.
class Counter {
 public:
  void Add(uint64_t n) {
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void Set(uint64_t n) { value_.store(n, std::memory_order_relaxed); }
  uint64_t Load() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// Log-linear buckets: 8 linear sub-buckets per power of two, so a value's bucket is within 12.5%
// of it, from 1 to 2^64, in 496 buckets. Units are the caller's (ns in the engine).
class LatencyBuckets {
 public:
  static constexpr int kSubBucketBits = 3;
  static constexpr int kSubBuckets = 1 << kSubBucketBits;
  static constexpr int kCount = (64 - kSubBucketBits + 1) * kSubBuckets;

  static int IndexOf(uint64_t value) {
    if (value < kSubBuckets) return static_cast<int>(value);
    const int msb = 63 - __builtin_clzll(value);
    const int shift = msb - kSubBucketBits;
    return (shift + 1) * kSubBuckets + static_cast<int>((value >> shift) & (kSubBuckets - 1));
  }
  // Smallest value that falls in bucket `index`.
  static uint64_t LowerBound(int index) {
    if (index < kSubBuckets) return static_cast<uint64_t>(index);
    const int shift = index / kSubBuckets - 1;
    return (static_cast<uint64_t>(kSubBuckets + index % kSubBuckets)) << shift;
  }
  // Largest value that falls in bucket `index`.
  static uint64_t UpperBound(int index) {
    return index + 1 < kCount ? LowerBound(index + 1) - 1 : UINT64_MAX;
  }
};

// A merged, plain copy of histogram buckets.
struct HistogramSnapshot {
  std::array<uint64_t, LatencyBuckets::kCount> buckets{};
  uint64_t count = 0;
  uint64_t sum = 0;

  void Merge(const HistogramSnapshot& other) {
    for (int i = 0; i < LatencyBuckets::kCount; ++i) buckets[i] += other.buckets[i];
    count += other.count;
    sum += other.sum;
  }
  // The value at quantile q in [0, 1]: the upper bound of the bucket holding the rank-ceil(q*n)
  // value, so never below the exact value and at most 12.5% above it; 0 when empty.
  uint64_t Percentile(double q) const {
    uint64_t total = 0;
    for (uint64_t b : buckets) total += b;
    if (total == 0) return 0;
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
  double Mean() const { return count == 0 ? 0.0 : static_cast<double>(sum) / count; }
  // Lower bound of the first and upper bound of the last non-empty bucket (0 when empty).
  uint64_t Min() const {
    for (int i = 0; i < LatencyBuckets::kCount; ++i) {
      if (buckets[i] != 0) return LatencyBuckets::LowerBound(i);
    }
    return 0;
  }
  uint64_t Max() const {
    for (int i = LatencyBuckets::kCount - 1; i >= 0; --i) {
      if (buckets[i] != 0) return LatencyBuckets::UpperBound(i);
    }
    return 0;
  }
};

// Single-writer histogram, readable (snapshot) from any thread.
class LatencyHistogram {
 public:
  void Record(uint64_t value) {
    buckets_[LatencyBuckets::IndexOf(value)].Add(1);
    count_.Add(1);
    sum_.Add(value);
  }
  void AddTo(HistogramSnapshot& snapshot) const {
    for (int i = 0; i < LatencyBuckets::kCount; ++i) snapshot.buckets[i] += buckets_[i].Load();
    snapshot.count += count_.Load();
    snapshot.sum += sum_.Load();
  }

 private:
  std::array<Counter, LatencyBuckets::kCount> buckets_;
  Counter count_;
  Counter sum_;
};

}  // namespace blockread::wire

#endif  // BLOCKREAD_PROTO_WIRE_LATENCY_HISTOGRAM_H_
