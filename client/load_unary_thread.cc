#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <random>
#include <thread>

#include "client/blockread_client.h"
#include "client/load_schedule.h"
#include "client/load_threads.h"

namespace blockread::client::load {
namespace {

// The recent latencies of one server (or of all), for hedging: the percentile of the last 256,
// computed again every 32.
class RecentLatency {
 public:
  void Add(uint64_t ns, double percentile) {
    ring_[next_++ % ring_.size()] = ns;
    if (next_ % 32 != 0 || next_ < 64) return;
    std::vector<uint64_t> sorted(ring_.begin(), ring_.begin() + std::min(next_, ring_.size()));
    const size_t at =
        static_cast<size_t>(percentile / 100 * static_cast<double>(sorted.size() - 1));
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(at), sorted.end());
    threshold_ns_ = sorted[at];
  }
  // 0 until 64 latencies are known.
  uint64_t threshold_ns() const { return threshold_ns_; }

 private:
  std::array<uint64_t, 256> ring_{};
  size_t next_ = 0;
  uint64_t threshold_ns_ = 0;
};

}  // namespace

void UnaryThread(Run& run, const std::vector<std::vector<v1::BlockRead::Stub*>>& stubs, int thread,
                 ThreadStats& stats) {
  struct Call;
  // One read, answered once: its first call, a hedge sent to another replica when it is slow,
  // and resends after UNAVAILABLE. The first answer (other than UNAVAILABLE) wins; the other
  // call is cancelled.
  struct Flight {
    size_t file = 0;
    uint64_t offset = 0;
    uint64_t start_ns = 0;
    int first_server = -1;
    int live = 0;  // its calls in flight
    bool answered = false;
    bool hedged = false;
    Call* calls[2] = {nullptr, nullptr};  // in flight
  };
  struct Call {
    grpc::ClientContext context;
    v1::ReadBlockResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReadBlockResponse>> reader;
    std::shared_ptr<Flight> flight;
    int server = -1;
    uint64_t tried = 0;  // servers that failed it (ServerBit)
    uint64_t sent_ns = 0;
    bool hedge = false;
  };
  const LoadOptions& o = run.options;
  Router& router = *run.router;
  grpc::CompletionQueue queue;
  ReadPicker picker(run, thread);
  Pacer pacer(o.rate, o.threads);
  std::mt19937_64 rng(o.seed * 104729 + thread);
  std::vector<size_t> next_stub(stubs.size(), 0);
  const bool hedging = o.hedge_after_percentile > 0;
  std::vector<RecentLatency> server_latency(stubs.size());
  RecentLatency all_latency;
  // Reads that may need a hedge, by the server of their first call, oldest first.
  std::vector<std::deque<std::shared_ptr<Flight>>> watched(stubs.size());
  uint64_t hedges = 0, reads_started = 0;
  int in_flight = 0;
  // Sends a call of `flight` to `server`, or to a replica chosen now when it is -1; false
  // (nothing sent) when no replica is reachable now.
  const auto send = [&](const std::shared_ptr<Flight>& flight, uint64_t tried, bool hedge,
                        int server = -1) {
    const FileTarget& file = run.files[flight->file];
    if (server < 0) server = router.Choose(file, tried, rng);
    if (server < 0) return false;
    auto* call = new Call();
    call->flight = flight;
    call->server = server;
    call->tried = tried;
    call->hedge = hedge;
    call->sent_ns = MonotonicNowNs();
    flight->calls[flight->calls[0] == nullptr ? 0 : 1] = call;
    ++flight->live;
    router.health(server).outstanding.fetch_add(1, std::memory_order_relaxed);
    v1::ReadBlockRequest request;
    request.set_file(file.name);
    request.set_offset(flight->offset);
    request.set_length(o.block_size);
    request.set_want_crc32c(o.verify && run.verify_fd < 0);
    const auto& server_stubs = stubs[server];
    v1::BlockRead::Stub& stub = *server_stubs[next_stub[server]++ % server_stubs.size()];
    AddToken(o.connection, call->context);
    call->reader = stub.PrepareAsyncReadBlock(&call->context, request, &queue);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
    ++in_flight;
    return true;
  };
  const auto answer = [&](const Flight& flight, const grpc::Status& status,
                          const v1::ReadBlockResponse& response) {
    Record(run, stats, run.files[flight.file], flight.offset, flight.start_ns, status,
           response.data(), response.has_crc32c(), response.crc32c(), response.timing());
  };
  // Sends hedges for the reads that have waited past their threshold (within the budget);
  // returns how long until the next may be due (0: none watched).
  const auto hedge_due = [&]() -> uint64_t {
    uint64_t next_ns = 0;
    const uint64_t now = MonotonicNowNs();
    for (size_t server = 0; server < watched.size(); ++server) {
      auto& queue_of = watched[server];
      const uint64_t own = server_latency[server].threshold_ns();
      const uint64_t overall = all_latency.threshold_ns();
      // A replica slow throughout has a high percentile of its own: the lower one counts.
      const uint64_t threshold = own == 0 ? overall : overall == 0 ? own : std::min(own, overall);
      while (!queue_of.empty()) {
        const std::shared_ptr<Flight>& flight = queue_of.front();
        if (flight->answered || flight->live == 0 || threshold == 0) {
          queue_of.pop_front();
          continue;
        }
        const uint64_t due = flight->start_ns + threshold;
        if (due > now) {
          if (next_ns == 0 || due - now < next_ns) next_ns = due - now;
          break;
        }
        const uint64_t tried = ServerBit(flight->first_server);
        const int other = router.Choose(run.files[flight->file], tried, rng);
        if (other < 0) {  // no other replica reachable
          queue_of.pop_front();
          continue;
        }
        // Only once the read has waited longer than the other replica took when it last
        // answered: a replica slower than the wait so far would not answer sooner, and would only
        // lengthen its own queue. Not the estimate decayed while idle: hedges are cancelled when
        // the first call answers, so a slow replica that only got hedges would never answer
        // one, and would look fast again by decay alone. Until then the read stays watched (and
        // the reads behind it, which have waited less, with it).
        const auto other_latency = static_cast<uint64_t>(router.health(other).LastLatencyNs());
        if (other_latency > now - flight->start_ns) {
          const uint64_t ready_in = other_latency - (now - flight->start_ns);
          if (next_ns == 0 || ready_in < next_ns) next_ns = ready_in;
          break;
        }
        if (static_cast<double>(hedges + 1) <=
                o.hedge_max_share * static_cast<double>(reads_started) &&
            send(flight, tried, /*hedge=*/true, other)) {
          flight->hedged = true;
          ++hedges;
          stats.hedged.Add(1);
        }
        queue_of.pop_front();
      }
    }
    return next_ns;
  };
  for (;;) {
    const bool running = Running(run);
    uint64_t wait_ns = 0;
    bool stalled = false;  // a read found no reachable replica
    while (running && in_flight < o.queue_depth && (wait_ns = pacer.Wait()) == 0) {
      auto flight = std::make_shared<Flight>();
      picker.Next(&flight->file, &flight->offset);
      flight->start_ns = MonotonicNowNs();
      stats.issued.Add(1);
      ++reads_started;
      if (!send(flight, 0, false)) {
        answer(*flight, NoReplica(run.files[flight->file]), v1::ReadBlockResponse());
        stalled = true;
        break;
      }
      flight->first_server = flight->calls[0]->server;
      if (hedging) watched[flight->first_server].push_back(flight);
    }
    if (hedging && running) {
      const uint64_t hedge_wait = hedge_due();
      if (hedge_wait > 0 && (wait_ns == 0 || hedge_wait < wait_ns)) wait_ns = hedge_wait;
    }
    if (in_flight == 0) {
      if (!running) return;
      // Nothing in flight and no replica to send to: wait a little rather than spin on failures.
      std::this_thread::sleep_for(stalled ? std::chrono::nanoseconds(std::chrono::milliseconds(10))
                                          : std::chrono::nanoseconds(wait_ns));
      continue;
    }
    void* tag;
    bool ok;
    const auto deadline = wait_ns > 0
                              ? std::chrono::system_clock::now() + std::chrono::nanoseconds(wait_ns)
                              : std::chrono::system_clock::now() + std::chrono::milliseconds(100);
    if (queue.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) continue;
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    const std::shared_ptr<Flight> flight = call->flight;
    --in_flight;
    --flight->live;
    (flight->calls[0] == call.get() ? flight->calls[0] : flight->calls[1]) = nullptr;
    ServerHealth& health = router.health(call->server);
    health.outstanding.fetch_sub(1, std::memory_order_relaxed);
    const grpc::StatusCode code = call->status.error_code();
    // One clock read: MonotonicNowNs() is the steady clock ServerHealth keeps time on.
    const uint64_t now_ns = MonotonicNowNs();
    const ServerHealth::Clock::time_point answered_at{std::chrono::nanoseconds(now_ns)};
    const auto took = std::chrono::nanoseconds(now_ns - call->sent_ns);
    if (flight->answered) {
      // The other call answered first and this one was cancelled: its server was at least this
      // slow, which is what the choice of server should learn.
      health.GaveUpAfter(took, answered_at);
      continue;
    }
    if (code == grpc::StatusCode::UNAVAILABLE) {
      // The server could not be reached (or its device went away): another replica, if any,
      // within the run; the read keeps its start time, so the failover shows in its latency. A
      // hedge still in flight may answer instead.
      router.Failed(call->server, rng);
      if (flight->live > 0) continue;
      if (running && send(flight, call->tried | ServerBit(call->server), call->hedge)) continue;
    } else {
      health.Succeeded();
      if (code == grpc::StatusCode::OK) {
        health.Answered(took, answered_at);
        if (hedging) {
          server_latency[call->server].Add(took.count(), o.hedge_after_percentile);
          all_latency.Add(took.count(), o.hedge_after_percentile);
        }
      }
    }
    flight->answered = true;
    if (call->hedge) stats.hedges_won.Add(1);
    for (Call* other : flight->calls) {
      if (other != nullptr) other->context.TryCancel();
    }
    answer(*flight, call->status, call->response);
  }
}

}  // namespace blockread::client::load
