#include "server/worker.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "server/config.h"
#include "server/status_mapping.h"
#include "storage/clock.h"
#include "storage/log.h"

namespace blockread::server {
namespace {

// While reads are in flight the loop spins on the engine's completions (user memory, cheap) and
// looks at gRPC's queue only this often: each look polls the sockets, which costs microseconds.
constexpr uint64_t kGrpcPollIntervalWhileBusyNs = 5'000;
// Events taken from gRPC's queue per look, so a burst of RPCs cannot starve the device.
constexpr int kGrpcEventsPerTurn = 64;

}  // namespace

Worker::Worker(int index, int cpu, SharedState& shared,
               std::unique_ptr<grpc::ServerCompletionQueue> queue)
    : index_(index),
      cpu_(cpu),
      shared_(shared),
      queue_(std::move(queue)),
      admission_(shared.config.max_queued_reads()) {}

Worker::~Worker() {
  Join();
  // Every worker has stopped (the server joins them all first), so nobody reads our stats shard
  // any more. No read is in flight.
  stats_.store(nullptr, std::memory_order_release);
  // Slots still lent to gRPC never come back to the engine; their memory lives until gRPC
  // releases them (see SlotLender).
  lender_.reset();
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

void Worker::ShutDownQueue() {
  // Under the lock: no other thread is setting an alarm on the queue as it shuts down.
  std::lock_guard lock(alarms_mu_);
  queue_shut_down_ = true;
  queue_->Shutdown();
}

void Worker::Join() {
  if (thread_.joinable()) thread_.join();
}

absl::Status Worker::Setup() {
  absl::Status status;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu_, &set);
  cpu_set_t actual;
  CPU_ZERO(&actual);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0 ||
      pthread_getaffinity_np(pthread_self(), sizeof(actual), &actual) != 0 ||
      !CPU_EQUAL(&set, &actual)) {
    status = absl::FailedPreconditionError(absl::StrFormat(
        "worker %d: cannot pin its thread to CPU %d (outside the CPUs this process may use, e.g. "
        "a container's cpuset); choose --cpus from the allowed CPUs",
        index_, cpu_));
  } else {
    // The rings must be created on the thread that submits to them (SINGLE_ISSUER).
    auto engine = storage::EngineContext::Create(shared_.catalog, EngineConfigFrom(shared_.config));
    if (!engine.ok()) {
      status = absl::Status(
          engine.status().code(),
          absl::StrFormat("worker %d (CPU %d): %s", index_, cpu_, engine.status().message()));
    } else {
      engine_ = *std::move(engine);
      lender_ = std::make_unique<SlotLender>(*engine_, EngineConfigFrom(shared_.config),
                                             counters_.slots_held);
      stats_.store(&engine_->stats(), std::memory_order_release);
      for (const PostCalls post : shared_.handlers) post(*this);
    }
  }
  ready_.set_value(status);
  return status;
}

void Worker::Run() {
  if (Setup().ok()) {
    Loop();
    return;
  }
  // Nothing was posted on the queue. The server stops at once when a worker fails to start:
  // wait for that, then shut the queue down and drain it (wake-up alarms may be on it).
  for (;;) {
    if (stop_requested_.load(std::memory_order_acquire) && !queue_shut_down_) ShutDownQueue();
    void* tag;
    bool ok;
    if (!queue_->Next(&tag, &ok)) return;
  }
}

grpc::Status Worker::Accept(Call& call, const grpc::ServerContext& context) {
  if (call.method() == RpcMethod::kHealthCheck || call.method() == RpcMethod::kHealthWatch) {
    return grpc::Status::OK;  // health stays open, as Identity::Nobody()
  }
  CurrentAccessGeneration();
  absl::StatusOr<const Identity*> identity = access_->Authenticate(context);
  if (!identity.ok()) return ToGrpcStatus(identity.status());
  call.SetIdentity(*identity, access_, access_generation_);
  if (call.method() == RpcMethod::kExplain && !(*identity)->admin) {
    return ToGrpcStatus(absl::PermissionDeniedError(
        "Explain shows devices and physical layout: it needs an identity with admin"));
  }
  return grpc::Status::OK;
}

uint64_t Worker::CurrentAccessGeneration() {
  if (const uint64_t generation = shared_.access.generation(); generation != access_generation_) {
    access_ = shared_.access.Current();  // the rules changed (SIGHUP), or the first call
    access_generation_ = generation;
  }
  return access_generation_;
}

void Worker::RemoveWatcher(HealthWatcher* watcher) {
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), watcher), watchers_.end());
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
  if (call_tag->call == nullptr) return;  // a wake-up alarm: the turn itself is the point
  call_tag->call->HandleEvent(call_tag->event, ok);
}

Worker::Turn Worker::PollOnce(bool poll_grpc) {
  if (queue_drained_) return Turn::kStopped;
  // Slots gRPC let go of first, so the reads admitted this turn can have them.
  int work = lender_->ReturnReleased();
  work += engine_->PollOnce();
  if (!paced_.empty()) work += paced_.ResumeDue(storage::MonotonicNowNs());
  if (!admission_.empty()) work += admission_.AdmitWaiting();
  if (!flush_.empty()) {
    flushing_.swap(flush_);
    for (Flushable* call : flushing_) call->Flush();
    work += static_cast<int>(flushing_.size());
    flushing_.clear();
  }
  NotifyWatchersIfHealthChanged();

  if (poll_grpc) {
    const gpr_timespec past = gpr_inf_past(GPR_CLOCK_MONOTONIC);
    for (int i = 0; i < kGrpcEventsPerTurn; ++i) {
      void* tag;
      bool ok;
      const auto status = queue_->AsyncNext(&tag, &ok, past);
      if (status == grpc::CompletionQueue::GOT_EVENT) {
        Dispatch(tag, ok);
        ++work;
        continue;
      }
      if (status == grpc::CompletionQueue::SHUTDOWN) queue_drained_ = true;
      break;
    }
  }

  // Stopping: once the server has shut down, nothing new arrives; when our last reads are done
  // no call will start another operation, so the queue can be shut down and drained.
  if (stop_requested_.load(std::memory_order_acquire) && !queue_shut_down_ &&
      engine_->reads_in_flight() == 0 && admission_.empty() && paced_.empty()) {
    ShutDownQueue();
  }
  if (queue_drained_) return Turn::kStopped;
  return work > 0 ? Turn::kBusy : Turn::kIdle;
}

void Worker::Loop() {
  const uint64_t idle_spin_ns = uint64_t{shared_.config.idle_spin_us()} * 1000;
  uint64_t idle_since = 0;
  uint64_t turn_start = storage::MonotonicNowNs();
  counters_.loop_start_ns.Set(turn_start);
  for (;;) {
    const bool poll_grpc = engine_->reads_in_flight() == 0 || queue_shut_down_ ||
                           turn_start - last_grpc_look_ns_ >= kGrpcPollIntervalWhileBusyNs;
    if (poll_grpc) last_grpc_look_ns_ = turn_start;
    const Turn turn = PollOnce(poll_grpc);
    if (turn == Turn::kStopped) return;

    const uint64_t now = storage::MonotonicNowNs();
    if (turn == Turn::kBusy) {
      counters_.busy_ns.Add(now - turn_start);
    } else {
      counters_.empty_polls.Add(1);
    }
    turn_start = now;
    if (turn == Turn::kBusy || engine_->reads_in_flight() > 0 || engine_->waiting_for_names() ||
        engine_->waiting_for_opens()) {
      idle_since = 0;
      continue;
    }
    if (idle_since == 0) idle_since = now;
    if (now - idle_since < idle_spin_ns) continue;

    // Nothing in flight and nothing for idle_spin_us: only a new RPC (or a wake-up) can make
    // work, or the start time of the first paced read, so sleep on gRPC's queue until then. An
    // idle server uses no CPU.
    gpr_timespec until = gpr_inf_future(GPR_CLOCK_MONOTONIC);
    if (!paced_.empty()) {
      const uint64_t wait_ns =
          paced_.earliest_start_ns() > now ? paced_.earliest_start_ns() - now : 0;
      until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                           gpr_time_from_nanos(static_cast<int64_t>(wait_ns), GPR_TIMESPAN));
    }
    void* tag;
    bool ok;
    const auto status = queue_->AsyncNext(&tag, &ok, until);
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
