// The clock every latency and timing in blockread is taken with.
#ifndef BLOCKREAD_STORAGE_CLOCK_H_
#define BLOCKREAD_STORAGE_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace blockread::storage {

// CLOCK_MONOTONIC in nanoseconds: a vDSO call (no syscall), about 20 ns.
inline uint64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_CLOCK_H_
