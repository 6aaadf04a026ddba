// How a client picks among servers that hold the same file, and stays away from one that fails:
// shared by ClusterClient and `blockread load`, so both route and back off the same way.
#ifndef BLOCKREAD_CLIENT_SERVER_CHOICE_H_
#define BLOCKREAD_CLIENT_SERVER_CHOICE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>

namespace blockread::client {

struct BackoffPolicy {
  // A failed server's first back-off; it doubles per failure in a row, up to `max`, each drawn
  // with jitter from half to one and a half times that.
  std::chrono::milliseconds initial{200};
  std::chrono::milliseconds max{10000};
};

// One server as this client sees it. Lock-free: any thread may use it.
class ServerHealth {
 public:
  using Clock = std::chrono::steady_clock;

  // Not backed off at `now`: a read may go to it.
  bool Available(Clock::time_point now) const {
    return retry_at_ns_.load(std::memory_order_relaxed) <= now.time_since_epoch().count();
  }
  Clock::time_point retry_at() const {
    return Clock::time_point(Clock::duration(retry_at_ns_.load(std::memory_order_relaxed)));
  }
  // It could not be reached: back it off (see BackoffPolicy). Failures while it is backed off
  // already (the other reads that were in flight to it) do not count again. `rng` is the
  // caller's.
  template <typename Rng>
  void Failed(const BackoffPolicy& policy, Rng& rng) {
    if (!Available(Clock::now())) return;
    const int failures = failures_.fetch_add(1, std::memory_order_relaxed) + 1;
    const int doublings = std::min(failures - 1, 16);
    const auto backoff =
        std::min<std::chrono::milliseconds>(policy.max, policy.initial * (int64_t{1} << doublings));
    const double jitter = std::uniform_real_distribution<double>(0.5, 1.5)(rng);
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(backoff * jitter);
    retry_at_ns_.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  }
  // It answered: whatever back-off it had is over.
  void Succeeded() {
    if (failures_.load(std::memory_order_relaxed) == 0) return;
    failures_.store(0, std::memory_order_relaxed);
    retry_at_ns_.store(0, std::memory_order_relaxed);
  }
  int failures() const { return failures_.load(std::memory_order_relaxed); }

  // Reads sent to it and not answered yet, by this client.
  std::atomic<int> outstanding{0};

  // ---- Latency: a peak EWMA of its answers, as Finagle and linkerd keep one ----
  // A sample above the estimate replaces it at once (a server that turns slow is avoided from
  // its first slow answer); one below pulls it down by kLatencyWeight. While no read is
  // outstanding to it and none is answered, the estimate decays toward zero with time constant
  // kLatencyDecay, so a server avoided for being slow is tried again now and then, and a
  // recovered one wins its share back. While reads are outstanding it holds: a server that
  // stopped answering must not look faster for it.
  static constexpr double kLatencyWeight = 0.1;
  static constexpr std::chrono::milliseconds kLatencyDecay{500};
  // Never below this in ExpectedWait: a server nothing is known of yet, or one decayed to
  // nothing, still costs more the more reads it holds (so one that stopped answering is not
  // handed every read).
  static constexpr std::chrono::microseconds kLatencyFloor{50};

  // It answered a read sent `took` ago. Concurrent calls may lose one another's sample (a load
  // and a store, not a read-modify-write): the estimate is a hint.
  void Answered(Clock::duration took, Clock::time_point now) {
    const double sample = static_cast<double>(took.count());
    const double current = LatencyNs(now);
    const double next = sample >= current ? sample : current + (sample - current) * kLatencyWeight;
    latency_ns_.store(next, std::memory_order_relaxed);
    sampled_at_ns_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  }
  // A read sent `took` ago was given up (cancelled: another server answered first): it would
  // have taken at least that long, so it may raise the estimate, never lower it.
  void GaveUpAfter(Clock::duration took, Clock::time_point now) {
    if (static_cast<double>(took.count()) > LatencyNs(now)) Answered(took, now);
  }
  // The estimate as its last answer left it, without the decay while idle (0: nothing known):
  // what the server is known to take, for a decision that must not gamble on it being fast
  // again (a hedge).
  double LastLatencyNs() const { return latency_ns_.load(std::memory_order_relaxed); }
  // The estimate at `now`, in nanoseconds (0: nothing known).
  double LatencyNs(Clock::time_point now) const {
    const double latency = latency_ns_.load(std::memory_order_relaxed);
    if (latency == 0 || outstanding.load(std::memory_order_relaxed) > 0) return latency;
    const double idle_ns = static_cast<double>(now.time_since_epoch().count() -
                                               sampled_at_ns_.load(std::memory_order_relaxed));
    if (idle_ns <= 0) return latency;
    return latency * std::exp(-idle_ns / std::chrono::nanoseconds(kLatencyDecay).count());
  }
  // How long a read sent now would take: the latency estimate for each read it holds and this
  // one.
  double ExpectedWaitNs(Clock::time_point now) const {
    const double latency = std::max(
        LatencyNs(now), static_cast<double>(std::chrono::nanoseconds(kLatencyFloor).count()));
    return latency * (outstanding.load(std::memory_order_relaxed) + 1);
  }

 private:
  std::atomic<int> failures_{0};
  std::atomic<int64_t> retry_at_ns_{0};
  std::atomic<double> latency_ns_{0};
  std::atomic<int64_t> sampled_at_ns_{0};
};

// The power of two choices: two distinct candidates at random, the one whose read would be
// answered first by its latency and the reads it holds (ServerHealth::ExpectedWaitNs), fewer
// reads outstanding on a tie. `count` candidates, `health(i)` the i-th one's ServerHealth.
// REQUIRES: count > 0.
template <typename HealthOf, typename Rng>
size_t LeastLoadedOfTwo(size_t count, HealthOf health, Rng& rng) {
  if (count == 1) return 0;
  std::uniform_int_distribution<size_t> pick(0, count - 1);
  const size_t a = pick(rng);
  size_t b = pick(rng);
  if (b == a) b = (a + 1) % count;
  const auto now = ServerHealth::Clock::now();
  const double wait_a = health(a).ExpectedWaitNs(now), wait_b = health(b).ExpectedWaitNs(now);
  if (wait_a != wait_b) return wait_a < wait_b ? a : b;
  return health(a).outstanding.load(std::memory_order_relaxed) <=
                 health(b).outstanding.load(std::memory_order_relaxed)
             ? a
             : b;
}

// The replica a read goes to: among `replicas` (any range), those not `tried(replica)` and not
// backed off now, by LeastLoadedOfTwo on `health_of(replica)` (a ServerHealth&). Returns a pointer
// into `replicas`, null when none is available now. Looks at the first kMaxReplicas available.
inline constexpr size_t kMaxReplicas = 64;
template <typename Replicas, typename HealthOf, typename Tried, typename Rng>
const typename Replicas::value_type* ChooseReplica(const Replicas& replicas, HealthOf health_of,
                                                   Tried tried, Rng& rng) {
  const auto now = ServerHealth::Clock::now();
  const typename Replicas::value_type* candidates[kMaxReplicas];
  size_t count = 0;
  for (const auto& replica : replicas) {
    if (count < kMaxReplicas && !tried(replica) && health_of(replica).Available(now)) {
      candidates[count++] = &replica;
    }
  }
  if (count == 0) return nullptr;
  return candidates[LeastLoadedOfTwo(
      count, [&](size_t i) -> ServerHealth& { return health_of(*candidates[i]); }, rng)];
}

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_SERVER_CHOICE_H_
