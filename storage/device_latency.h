// How long one device's reads take now, as one engine sees them: the live estimate that
// deadline-aware admission (ReadRequest::deadline_ns) compares a read's time left against.
#ifndef BLOCKREAD_STORAGE_DEVICE_LATENCY_H_
#define BLOCKREAD_STORAGE_DEVICE_LATENCY_H_

#include <algorithm>
#include <array>
#include <cstdint>

namespace blockread::storage {

// The 99th percentile of the device time of the last kSamples reads (the second largest of 64),
// recomputed every kRecomputeEvery reads, so a read pays a store and, amortized, a few
// nanoseconds. An estimate with no sample for kFreshNs is stale and reads as unknown (0): a device
// whose every read was shed would otherwise never be measured again.
//
// Threading: one engine (its worker thread).
class DeviceLatency {
 public:
  static constexpr int kSamples = 64;
  static constexpr int kRecomputeEvery = 16;
  static constexpr uint64_t kFreshNs = 1'000'000'000;

  void Record(uint64_t device_ns, uint64_t now_ns) {
    samples_[next_++ % kSamples] = device_ns;
    last_sample_ns_ = now_ns;
    if (next_ % kRecomputeEvery != 0) return;
    const int count = std::min<uint64_t>(next_, kSamples);
    std::array<uint64_t, kSamples> sorted = samples_;
    const int rank = count - 1 - count / 50;  // 99th percentile: the 2nd largest of 64
    std::nth_element(sorted.begin(), sorted.begin() + rank, sorted.begin() + count);
    p99_ns_ = sorted[rank];
  }

  // 0 when unknown: too few reads yet, or none for kFreshNs.
  uint64_t P99Ns(uint64_t now_ns) const {
    return now_ns - last_sample_ns_ > kFreshNs ? 0 : p99_ns_;
  }

 private:
  std::array<uint64_t, kSamples> samples_{};
  uint64_t next_ = 0;
  uint64_t last_sample_ns_ = 0;
  uint64_t p99_ns_ = 0;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_DEVICE_LATENCY_H_
