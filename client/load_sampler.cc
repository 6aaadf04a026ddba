#include "client/load_sampler.h"

#include <chrono>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace blockread::client::load {
namespace {

Totals Sum(const std::vector<std::unique_ptr<ThreadStats>>& stats) {
  Totals totals;
  for (const auto& s : stats) {
    totals.reads += s->reads.Load();
    totals.bytes += s->bytes.Load();
    s->latency_ns.AddTo(totals.latency_ns);
  }
  return totals;
}

// The interval between two totals, ending `end_s` into the measured interval.
LoadSecond Interval(const Totals& before, const Totals& after, double end_s, double seconds) {
  wire::HistogramSnapshot latency = after.latency_ns;
  for (int i = 0; i < wire::LatencyBuckets::kCount; ++i) {
    latency.buckets[i] -= before.latency_ns.buckets[i];
  }
  return {end_s,
          seconds,
          after.reads - before.reads,
          after.bytes - before.bytes,
          latency.Percentile(0.5),
          latency.Percentile(0.99)};
}

}  // namespace

std::string FormatUs(double ns) {
  return ns >= 1e6 ? absl::StrFormat("%.2fms", ns / 1e6) : absl::StrFormat("%.1fus", ns / 1e3);
}

std::vector<LoadSecond> Sampler::Stop(uint64_t end_ns) {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  wake_.notify_one();
  thread_.join();
  if (progress_) fprintf(stderr, "\n");
  const uint64_t from = std::max(last_ns_, run_.measure_start_ns);
  if (end_ns > from) {
    series_.push_back(Interval(last_, Sum(stats_), (end_ns - run_.measure_start_ns) / 1e9,
                               (end_ns - from) / 1e9));
  }
  return std::move(series_);
}

void Sampler::Loop() {
  uint64_t tick = run_.measure_start_ns;
  while (tick >= run_.start_ns + 1'000'000'000) tick -= 1'000'000'000;
  last_ns_ = run_.start_ns;
  std::unique_lock lock(mu_);
  // Ticks stop before the end of the measured interval: Stop() takes the last one exactly.
  for (; tick < run_.measure_end_ns; tick += 1'000'000'000) {
    const std::chrono::steady_clock::time_point at(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::nanoseconds(tick)));
    if (wake_.wait_until(lock, at, [this] { return done_; })) return;
    const Totals now = Sum(stats_);
    const LoadSecond second =
        Interval(last_, now, (static_cast<double>(tick) - run_.measure_start_ns) / 1e9,
                 (tick - last_ns_) / 1e9);
    if (tick > run_.measure_start_ns) series_.push_back(second);
    if (progress_) {
      fprintf(stderr, "\r[%5.1fs] %10.0f IOPS %9.2f MiB/s  p50 %s p99 %s   ",
              (tick - run_.start_ns) / 1e9, second.iops(), second.bandwidth() / 1048576.0,
              FormatUs(second.p50_ns).c_str(), FormatUs(second.p99_ns).c_str());
    }
    // Up to the measured run's start nothing is counted, but this thread may wake late, when
    // reads of the run are: they belong to the first measured second, so keep counting from 0.
    if (tick > run_.measure_start_ns) last_ = now;
    last_ns_ = tick;
  }
}

}  // namespace blockread::client::load
