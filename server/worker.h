// A pinned worker: one thread, one gRPC completion queue, one engine context. The worker that
// receives an RPC reads with its own engine and finishes the RPC itself; nothing of it is shared.
#ifndef BLOCKREAD_SERVER_WORKER_H_
#define BLOCKREAD_SERVER_WORKER_H_

#include <grpcpp/alarm.h>
#include <grpcpp/server_context.h>

#include <array>
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "server/admission_queue.h"
#include "server/call.h"
#include "server/paced_reads.h"
#include "server/shared_state.h"
#include "server/slot_lender.h"
#include "storage/read_path.h"
#include "storage/stats.h"

namespace blockread::server {

// Loop and RPC counters, written by the worker only (see storage::Counter), read by GetStats.
struct WorkerCounters {
  storage::Counter reads;          // reads answered (RPC level: a stream counts each read)
  storage::Counter busy_ns;        // loop time that found work
  storage::Counter loop_start_ns;  // when the loop started (MonotonicNowNs), 0 before
  storage::Counter empty_polls;    // loop turns that found no work
  // Engine slots held for zero-copy responses now (a gauge; see SlotLender::held()).
  storage::Counter slots_held;
  // Reads that had to wait for a slot while some were held for zero-copy responses.
  storage::Counter slot_waits;

  // Loop time that found no work, spinning or blocked, as of `now_ns`: everything since the
  // loop started that was not busy. Derived rather than counted so a worker blocked on its queue
  // shows its idle time while it is blocked, not only once it wakes.
  uint64_t IdleNs(uint64_t now_ns) const {
    const uint64_t start = loop_start_ns.Load();
    const uint64_t busy = busy_ns.Load();
    return start == 0 || now_ns < start + busy ? 0 : now_ns - start - busy;
  }
  // RPCs finished, by method and status code (CANCELLED: the client went away first).
  std::array<storage::ErrorCounts, kRpcMethodCount> rpcs;

  void CountRpc(RpcMethod method, grpc::StatusCode code) {
    rpcs[static_cast<int>(method)][static_cast<int>(code)].Add(1);
  }
};

// A call with results to write, flushed once per loop turn so results that complete together
// leave in one message.
class Flushable {
 public:
  virtual ~Flushable() = default;
  virtual void Flush() = 0;
};

// An open grpc.health.v1 Watch call, told when the serving status or the stopping flag changes
// (it reads both from SharedState).
class HealthWatcher {
 public:
  virtual ~HealthWatcher() = default;
  virtual void OnHealthChanged() = 0;
};

class Worker {
 public:
  Worker(int index, int cpu, SharedState& shared,
         std::unique_ptr<grpc::ServerCompletionQueue> queue);
  // REQUIRES: every worker of the server has been joined (GetStats on any worker reads all
  // workers' stats shards).
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // ---- Any thread ----
  // Starts the thread, which runs Setup() and then Loop().
  void Start();
  // Blocks until the worker serves or has failed to start; returns why it failed.
  absl::Status WaitUntilReady();
  // After the gRPC server has shut down: finish what is in flight, shut the queue down, exit.
  void RequestStop();
  // Wakes the worker if it is blocked on its queue (for a health change, or stop).
  void Wake();
  void Join();
  int index() const { return index_; }
  int cpu() const { return cpu_; }
  const WorkerCounters& counters() const { return counters_; }
  // The engine's stats shard; null until the worker is ready.
  const storage::StatsShard* stats() const { return stats_.load(std::memory_order_acquire); }

  // ---- The thread that serves (the worker's own, or a test's that steps PollOnce) ----
  // Pins the calling thread to the worker's CPU (and verifies it), creates the engine on it and
  // posts the first request of every RPC. On failure the queue is shut down and drained, and the
  // error names the cause and the fix. Either way WaitUntilReady() returns the result.
  absl::Status Setup();

  enum class Turn : uint8_t {
    kBusy,     // found work: reads completed or admitted, results flushed, RPC events handled
    kIdle,     // found nothing to do
    kStopped,  // the queue is shut down and drained: the worker is done
  };
  // One loop turn: reap the engine, resume paced reads that are due, admit waiting reads, flush
  // stream results, tell health
  // watchers, and take up to a batch of events from gRPC's queue without blocking (when
  // `poll_grpc`). Never blocks.
  Turn PollOnce(bool poll_grpc = true);
  // The spin/block policy around PollOnce(): spins while reads are in flight (looking at gRPC's
  // queue only every few microseconds, since each look polls sockets), spins idle_spin_us more
  // when idle, then blocks on gRPC's queue, since only a new RPC or a wake-up can make work.
  void Loop();

  SharedState& shared() { return shared_; }
  storage::EngineContext& engine() { return *engine_; }
  // The engine's slots lent to gRPC for zero-copy responses.
  SlotLender& lender() { return *lender_; }
  grpc::ServerCompletionQueue* queue() { return queue_.get(); }
  WorkerCounters& mutable_counters() { return counters_; }
  // False once the queue is shutting down: calls must start no new operation on it.
  bool accepting_operations() const { return !queue_shut_down_; }
  // Where reads wait for engine slots (bounded by max_queued_reads, round-robin across calls).
  AdmissionQueue& admission() { return admission_; }
  // Where reads wait for their identity's rate limit, before admission.
  PacedReads& paced() { return paced_; }
  // Unary ReadBlock calls open on this worker (bounded by max_unary_in_flight).
  uint32_t& unary_in_flight() { return unary_in_flight_; }
  // The accept point: every RPC's request passes here before any per-method code runs. It
  // authenticates the caller (health excepted) and sets the call's identity, and refuses what the
  // identity may never do (Explain without admin). OK to go on; otherwise the status to answer
  // with.
  grpc::Status Accept(Call& call, const grpc::ServerContext& context);
  // The generation of the access rules in force (one atomic load; re-takes the rules when they
  // moved). A call whose policy_generation() differs runs Accept again before its next item, so a
  // reload (SIGHUP) applies to open streams too.
  uint64_t CurrentAccessGeneration();
  void ScheduleFlush(Flushable* call) { flush_.push_back(call); }
  // Registers/unregisters an open grpc.health.v1 Watch call for health change notices.
  void AddWatcher(HealthWatcher* watcher) { watchers_.push_back(watcher); }
  void RemoveWatcher(HealthWatcher* watcher);

 private:
  void Run();
  void SetWakeAlarm();  // REQUIRES: alarms_mu_ held
  void ShutDownQueue();
  void Dispatch(void* tag, bool ok);
  void NotifyWatchersIfHealthChanged();

  const int index_;
  const int cpu_;
  SharedState& shared_;
  std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  std::unique_ptr<storage::EngineContext> engine_;
  std::unique_ptr<SlotLender> lender_;  // uses engine_: goes first
  std::atomic<const storage::StatsShard*> stats_{nullptr};
  WorkerCounters counters_;
  // The access rules as of access_generation_; re-taken from shared_.access when it moves.
  std::shared_ptr<const AccessPolicy> access_;
  uint64_t access_generation_ = ~uint64_t{0};
  std::thread thread_;
  // Set once the worker serves or has failed to start (std types, not absl::Notification: see
  // storage/catalog.h on ThreadSanitizer and Debian's Abseil).
  std::promise<absl::Status> ready_;
  std::shared_future<absl::Status> ready_future_ = ready_.get_future().share();
  std::atomic<bool> stop_requested_{false};
  // Written by the serving thread under alarms_mu_; read by it freely, by others under the lock.
  bool queue_shut_down_ = false;
  bool queue_drained_ = false;
  AdmissionQueue admission_;
  PacedReads paced_;
  uint32_t unary_in_flight_ = 0;
  std::vector<Flushable*> flush_;
  std::vector<Flushable*> flushing_;  // reused each turn
  std::vector<HealthWatcher*> watchers_;
  int last_health_seen_ = -1;  // health * 2 + stopping
  uint64_t last_grpc_look_ns_ = 0;

  // The wake-up alarm's tag: not a call; Dispatch recognizes it.
  CallTag wake_tag_{nullptr, 0};
  std::mutex alarms_mu_;
  std::vector<std::unique_ptr<grpc::Alarm>> alarms_;  // guarded by alarms_mu_
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_WORKER_H_
