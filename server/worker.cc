#include "server/worker.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "server/config.h"
#include "server/health_calls.h"
#include "server/info_calls.h"
#include "server/read_calls.h"
#include "storage/clock.h"
#include "storage/log.h"

namespace blockread::server {
namespace {

// While reads are in flight the loop spins on the io_uring CQ (user memory, cheap) and looks at
// gRPC's queue only this often: each look polls the sockets, which costs microseconds.
constexpr uint64_t kGrpcPollIntervalWhileBusyNs = 5'000;
// Events taken from gRPC's queue per look, so a burst of RPCs cannot starve the device.
constexpr int kGrpcEventsPerTurn = 64;

}  // namespace

const char* RpcMethodName(RpcMethod method) {
  switch (method) {
    case RpcMethod::kReadBlock:
      return "ReadBlock";
    case RpcMethod::kReadBlocks:
      return "ReadBlocks";
    case RpcMethod::kStatFile:
      return "StatFile";
    case RpcMethod::kListFiles:
      return "ListFiles";
    case RpcMethod::kGetStats:
      return "GetStats";
    case RpcMethod::kExplain:
      return "Explain";
    case RpcMethod::kHealthCheck:
      return "grpc.health.v1.Health/Check";
    case RpcMethod::kHealthWatch:
      return "grpc.health.v1.Health/Watch";
  }
  return "unknown";
}

Worker::Worker(int index, int cpu, SharedState& shared,
               std::unique_ptr<grpc::ServerCompletionQueue> queue)
    : index_(index), cpu_(cpu), shared_(shared), queue_(std::move(queue)) {}

Worker::~Worker() {
  Join();
  // Every worker has stopped (the server joins them all first), so nobody reads our stats shard
  // any more. The ring is torn down from this thread: only submissions are tied to the thread
  // that created it, and no read is in flight.
  stats_.store(nullptr, std::memory_order_release);
  engine_.reset();
}

void Worker::Start() {
  thread_ = std::thread([this] { Run(); });
}

absl::Status Worker::WaitUntilReady() { return ready_future_.get(); }

void Worker::RequestStop() {
  std::lock_guard lock(alarms_mu_);
  stop_requested_.store(true, std::memory_order_release);
  if (!queue_shut_down_) SetWakeAlarm();
}

void Worker::Wake() {
  std::lock_guard lock(alarms_mu_);
  if (!queue_shut_down_) SetWakeAlarm();
}

void Worker::SetWakeAlarm() {
  alarms_.push_back(std::make_unique<grpc::Alarm>());
  // An alarm in the past fires at once: the portable way to wake a thread blocked in Next().
  alarms_.back()->Set(queue_.get(), gpr_inf_past(GPR_CLOCK_MONOTONIC), &wake_tag_);
}

void Worker::Join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::Run() {
  absl::Status start_error;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu_, &set);
  cpu_set_t actual;
  CPU_ZERO(&actual);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0 ||
      pthread_getaffinity_np(pthread_self(), sizeof(actual), &actual) != 0 ||
      !CPU_EQUAL(&set, &actual)) {
    start_error = absl::FailedPreconditionError(
        absl::StrFormat("worker %d: cannot pin its thread to CPU %d", index_, cpu_));
  } else {
    // The ring must be created on the thread that submits to it (IORING_SETUP_SINGLE_ISSUER).
    auto engine = storage::EngineContext::Create(shared_.catalog, EngineConfigFrom(shared_.config));
    if (!engine.ok()) {
      start_error = absl::Status(
          engine.status().code(),
          absl::StrFormat("worker %d (CPU %d): %s", index_, cpu_, engine.status().message()));
    } else {
      engine_ = *std::move(engine);
      stats_.store(&engine_->stats(), std::memory_order_release);
    }
  }
  if (!start_error.ok()) {
    queue_->Shutdown();
    void* tag;
    bool ok;
    while (queue_->Next(&tag, &ok)) {
    }
    ready_.set_value(start_error);
    return;
  }
  ReadBlockCall::Post(this);
  ReadBlocksCall::Post(this);
  PostInfoCalls(this);
  PostHealthCalls(this);
  ready_.set_value(absl::OkStatus());
  Loop();
  // The queue is drained and shut down and no read is in flight. The engine stays until the
  // Worker is destroyed: other workers may still be reading its stats shard for a GetStats.
}

bool Worker::Defer(DeferredRead* read) {
  if (deferred_.size() >= shared_.config.max_queued_reads()) return false;
  deferred_.push_back(read);
  return true;
}

void Worker::Undefer(DeferredRead* read) {
  deferred_.erase(std::remove(deferred_.begin(), deferred_.end(), read), deferred_.end());
}

void Worker::RemoveWatcher(HealthWatcher* watcher) {
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), watcher), watchers_.end());
}

int Worker::RetryDeferred() {
  int started = 0;
  while (!deferred_.empty() && deferred_.front()->RetryStart()) {
    deferred_.pop_front();
    ++started;
  }
  return started;
}

void Worker::NotifyWatchersIfHealthChanged() {
  // Health and the stopping flag, as one number: a change of either is news to watchers.
  const int health = shared_.health.load(std::memory_order_acquire) * 2 +
                     (shared_.stopping.load(std::memory_order_acquire) ? 1 : 0);
  if (health == last_health_seen_) return;
  last_health_seen_ = health;
  // A watcher may finish and unregister itself while being told: iterate over a copy.
  std::vector<HealthWatcher*> watchers = watchers_;
  for (HealthWatcher* watcher : watchers) watcher->OnHealthChanged();
}

void Worker::Dispatch(void* tag, bool ok) {
  auto* call_tag = static_cast<CallTag*>(tag);
  call_tag->call->OnEvent(call_tag->event, ok);
}

void Worker::Loop() {
  const gpr_timespec past = gpr_inf_past(GPR_CLOCK_MONOTONIC);
  const uint64_t idle_spin_ns = uint64_t{shared_.config.idle_spin_us()} * 1000;
  uint64_t idle_since = 0;
  uint64_t last_grpc_look = 0;
  bool queue_drained = false;
  uint64_t turn_start = storage::MonotonicNowNs();
  counters_.loop_start_ns.Set(turn_start);
  for (;;) {
    int work = engine_->PollOnce();
    work += RetryDeferred();
    if (!flush_.empty()) {
      std::vector<Flushable*> to_flush;
      to_flush.swap(flush_);
      for (Flushable* call : to_flush) call->Flush();
    }
    NotifyWatchersIfHealthChanged();

    const bool in_flight = engine_->reads_in_flight() > 0;
    if (!in_flight || turn_start - last_grpc_look >= kGrpcPollIntervalWhileBusyNs) {
      last_grpc_look = turn_start;
      for (int i = 0; i < kGrpcEventsPerTurn; ++i) {
        void* tag;
        bool ok;
        const auto status = queue_->AsyncNext(&tag, &ok, past);
        if (status == grpc::CompletionQueue::GOT_EVENT) {
          Dispatch(tag, ok);
          ++work;
          continue;
        }
        if (status == grpc::CompletionQueue::SHUTDOWN) queue_drained = true;
        break;
      }
    }

    // Stopping: once the server has shut down, nothing new arrives; when our last reads are done
    // no call will start another operation, so the queue can be shut down and drained.
    if (stop_requested_.load(std::memory_order_acquire) && !queue_shut_down_ && !in_flight &&
        deferred_.empty()) {
      // Under the lock: no other thread is setting an alarm on the queue as it shuts down.
      std::lock_guard lock(alarms_mu_);
      queue_shut_down_ = true;
      queue_->Shutdown();
    }
    if (queue_drained) return;

    const uint64_t now = storage::MonotonicNowNs();
    if (work > 0) {
      counters_.busy_ns.Add(now - turn_start);
    } else {
      counters_.empty_polls.Add(1);
    }
    turn_start = now;
    if (work > 0 || in_flight) {
      idle_since = 0;
      continue;
    }
    if (idle_since == 0) idle_since = now;
    if (now - idle_since < idle_spin_ns) continue;

    // Nothing in flight and nothing for idle_spin_us: only a new RPC (or a wake-up) can make
    // work, so sleep on gRPC's queue. An idle server uses no CPU.
    void* tag;
    bool ok;
    const auto status = queue_->AsyncNext(&tag, &ok, gpr_inf_future(GPR_CLOCK_MONOTONIC));
    if (status == grpc::CompletionQueue::SHUTDOWN) return;
    turn_start = storage::MonotonicNowNs();  // the blocked time counts as idle (see IdleNs)
    if (status == grpc::CompletionQueue::GOT_EVENT) {
      Dispatch(tag, ok);
      const uint64_t dispatched = storage::MonotonicNowNs();
      counters_.busy_ns.Add(dispatched - turn_start);
      turn_start = dispatched;
    }
    idle_since = 0;
  }
}

}  // namespace blockread::server
