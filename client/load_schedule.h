// What a `blockread load` thread reads next, and when: the read picker (sequential or random
// offsets) and the pacer of --rate.
#ifndef BLOCKREAD_CLIENT_LOAD_SCHEDULE_H_
#define BLOCKREAD_CLIENT_LOAD_SCHEDULE_H_

#include <algorithm>
#include <cstdint>
#include <random>

#include "client/load_run.h"

namespace blockread::client::load {

// Picks the next read of a thread: sequential per thread (each thread its own slice) or random.
class ReadPicker {
 public:
  ReadPicker(const Run& run, int thread) : run_(run), rng_(run.options.seed * 7919 + thread) {
    file_ = thread % run.files.size();
    const uint64_t blocks = std::max<uint64_t>(1, run.files[file_].size / run.options.block_size);
    next_block_ = blocks * thread / std::max(1, run.options.threads);
  }
  void Next(size_t* file, uint64_t* offset) {
    const LoadOptions& o = run_.options;
    if (o.sequential) {
      const uint64_t blocks = std::max<uint64_t>(1, run_.files[file_].size / o.block_size);
      if (next_block_ >= blocks) next_block_ = 0;
      *file = file_;
      *offset = next_block_++ * o.block_size;
      return;
    }
    *file = rng_() % run_.files.size();
    const uint64_t blocks = std::max<uint64_t>(1, run_.files[*file].size / o.block_size);
    *offset = (rng_() % blocks) * o.block_size;
  }

 private:
  const Run& run_;
  std::mt19937_64 rng_;
  size_t file_ = 0;
  uint64_t next_block_ = 0;
};

// Paces issues to the --rate cap (per thread share). Returns the time to wait before issuing.
class Pacer {
 public:
  Pacer(double rate, int threads)
      : interval_ns_(rate > 0 ? static_cast<uint64_t>(1e9 * threads / rate) : 0) {}
  // 0 when the next read may go now (and books it); else nanoseconds to wait.
  uint64_t Wait() {
    if (interval_ns_ == 0) return 0;
    const uint64_t now = MonotonicNowNs();
    if (next_ns_ == 0) next_ns_ = now;
    if (now < next_ns_) return next_ns_ - now;
    next_ns_ += interval_ns_;
    return 0;
  }

 private:
  const uint64_t interval_ns_;
  uint64_t next_ns_ = 0;
};

}  // namespace blockread::client::load

#endif  // BLOCKREAD_CLIENT_LOAD_SCHEDULE_H_
