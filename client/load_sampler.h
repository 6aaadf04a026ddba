// The per-second series of a `blockread load` run, and its progress line.
#ifndef BLOCKREAD_CLIENT_LOAD_SAMPLER_H_
#define BLOCKREAD_CLIENT_LOAD_SAMPLER_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/load.h"
#include "client/load_run.h"

namespace blockread::client::load {

// "12.3us", "1.23ms".
std::string FormatUs(double ns);

// The threads' counted reads at one moment.
struct Totals {
  uint64_t reads = 0, bytes = 0;
  wire::HistogramSnapshot latency_ns;
};

// Takes the threads' totals once a second, on whole seconds counted from the start of the
// measured interval (ramp seconds included, before it): the per-second series of the measured
// interval, and the progress line (stderr) when asked. Its thread runs from construction to Stop().
class Sampler {
 public:
  Sampler(const Run& run, const std::vector<std::unique_ptr<ThreadStats>>& stats, bool progress)
      : run_(run), stats_(stats), progress_(progress), thread_([this] { Loop(); }) {}
  ~Sampler() {
    if (thread_.joinable()) Stop(MonotonicNowNs());
  }

  // Call once, after the load threads ended (so the totals are final): stops the thread, adds
  // the last interval, up to `end_ns` (it may be shorter than a second) and returns the series.
  std::vector<LoadSecond> Stop(uint64_t end_ns);

 private:
  void Loop();

  const Run& run_;
  const std::vector<std::unique_ptr<ThreadStats>>& stats_;
  const bool progress_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool done_ = false;  // guarded by mu_
  // Written by the sampler thread, read by Stop() after joining it.
  std::vector<LoadSecond> series_;
  Totals last_;
  uint64_t last_ns_ = 0;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace blockread::client::load

#endif  // BLOCKREAD_CLIENT_LOAD_SAMPLER_H_
