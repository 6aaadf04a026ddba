#include "client/load.h"

#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/async_read_stream.h"
#include "client/blockread_client.h"
#include "client/cluster_client.h"
#include "client/server_choice.h"
#include "client/stats_view.h"
#include "client/units.h"
#include "proto/wire/crc32c.h"
#include "proto/wire/labels.h"

namespace blockread::client {
namespace {

// What DeriveLoadSettings() aims for, from tests/bench/load_defaults_sweep.sh on one client CPU
// (README "Load client and C++ client"):
// - Two streams: a stream sends its next message only when a whole batch of its reads has
//   come back, so with one stream the server would wait out every round trip. Beyond that,
//   fewer and fuller messages cost the client and the server less per read: at 4-16 KiB, 2
//   streams were as fast as 4, or faster, at QD 32 and 64 (within noise).
// - More streams once over kBytesInFlightPerStream would be in flight on each, at most
//   kMaxStreams. A stream's HTTP/2 flow-control window caps the bytes in flight on it: at
//   128 KiB x QD 32, 2x16 and 1x32 ran at 0.69-0.78 of 4x8.
// - A stream's share of --qd in one message, up to kMaxBatchReads reads and kBatchBytes. 16 was
//   the largest batch tried, and it was the best, or within noise of it, at QD 32 and 64.
constexpr int kMinStreams = 2;                         // per thread, when --qd allows
constexpr uint64_t kBytesInFlightPerStream = 1 << 20;  // a stream per this many, beyond kMinStreams
constexpr int kMaxStreams = 4;                         // per thread
constexpr int kMaxBatchReads = 16;                     // reads per request message at most
constexpr uint64_t kBatchBytes = 1 << 20;              // bytes of reads per request message at most

// The load's own clock, steady like the server's (both are CLOCK_MONOTONIC on Linux), in ns.
uint64_t MonotonicNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

struct FileTarget {
  std::string name;
  uint64_t size = 0;
  std::vector<int> servers;  // indices into the run's servers that hold it (its replicas)
  bool HeldBy(int server) const {
    return std::find(servers.begin(), servers.end(), server) != servers.end();
  }
};

// Servers a read was sent to and that failed it, as bits of their indices (mod 64: with more
// servers a read may skip a replica it has not tried).
uint64_t ServerBit(int server) { return uint64_t{1} << (server % 64); }

// Where reads go: to a replica of their file, by the power of two choices on each one's latency
// and reads outstanding, never to a server backed off after failing (client/server_choice.h).
// Shared by the run's threads.
class Router {
 public:
  Router(size_t servers, const BackoffPolicy& backoff) : backoff_(backoff) {
    for (size_t i = 0; i < servers; ++i) health_.push_back(std::make_unique<ServerHealth>());
  }
  ServerHealth& health(int server) { return *health_[server]; }
  // A replica of `file` not in `tried` and not backed off; -1 when there is none now.
  int Choose(const FileTarget& file, uint64_t tried, std::mt19937_64& rng) {
    const auto now = ServerHealth::Clock::now();
    int candidates[64];
    size_t count = 0;
    for (int s : file.servers) {
      if ((tried & ServerBit(s)) == 0 && health_[s]->Available(now) && count < 64) {
        candidates[count++] = s;
      }
    }
    if (count == 0) return -1;
    return candidates[LeastLoadedOfTwo(
        count, [&](size_t i) -> ServerHealth& { return *health_[candidates[i]]; }, rng)];
  }
  // Some replica of `file` could take the read now.
  bool Routable(const FileTarget& file, uint64_t tried) const {
    const auto now = ServerHealth::Clock::now();
    return std::any_of(file.servers.begin(), file.servers.end(), [&](int s) {
      return (tried & ServerBit(s)) == 0 && health_[s]->Available(now);
    });
  }
  void Failed(int server, std::mt19937_64& rng) { health_[server]->Failed(backoff_, rng); }

 private:
  const BackoffPolicy backoff_;
  std::vector<std::unique_ptr<ServerHealth>> health_;
};

// What one thread records. Counters and the histogram are single-writer atomics, so the progress
// line can read them while the thread runs.
struct ThreadStats {
  wire::Counter issued, returned, reads, bytes;
  wire::Counter hedged, hedges_won;   // second calls sent for slow reads, and those answered first
  wire::LatencyHistogram latency_ns;  // counted (post-ramp, in-interval) successful reads
  wire::Counter queue_ns, device_ns, server_ns;
  std::map<std::string, uint64_t> errors;  // read after the thread ends
};

// State shared by the threads of one run.
struct Run {
  explicit Run(const LoadOptions& options) : options(options) {}
  const LoadOptions& options;
  std::vector<FileTarget> files;
  std::unique_ptr<Router> router;
  int verify_fd = -1;
  uint64_t start_ns = 0, measure_start_ns = 0, measure_end_ns = 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> counted_reads{0};  // for --number
  std::mutex failure_mu;
  std::string failure;
};

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

// Checks one successful read. Returns false (and records the failure, stopping the run) on a
// mismatch.
bool Verify(Run& run, const FileTarget& file, uint64_t offset, const std::string& data,
            bool has_crc, uint32_t crc) {
  std::string failure;
  if (run.verify_fd >= 0) {
    std::string expected(data.size(), '\0');
    const ssize_t n =
        pread(run.verify_fd, expected.data(), expected.size(), static_cast<off_t>(offset));
    expected.resize(n < 0 ? 0 : static_cast<size_t>(n));
    if (expected != data) {
      size_t i = 0;
      while (i < data.size() && i < expected.size() && data[i] == expected[i]) ++i;
      failure = absl::StrFormat(
          "verify: %s at offset %u: first differing byte at offset %u (got 0x%02x, expected "
          "0x%02x; %u bytes returned, %u expected)",
          file.name, offset, offset + i, i < data.size() ? static_cast<unsigned char>(data[i]) : 0,
          i < expected.size() ? static_cast<unsigned char>(expected[i]) : 0, data.size(),
          expected.size());
    }
  } else {
    const uint32_t actual = wire::Crc32c(data.data(), data.size());
    if (!has_crc || actual != crc) {
      failure = absl::StrFormat(
          "verify: %s at offset %u: CRC32C of the %u bytes received is %08x, the server sent "
          "%08x",
          file.name, offset, data.size(), actual, crc);
    }
  }
  if (failure.empty()) return true;
  std::lock_guard lock(run.failure_mu);
  if (run.failure.empty()) run.failure = failure;
  run.stop.store(true);
  return false;
}

// Records a finished read: errors by code; successful reads verified, then counted if they were
// issued after the ramp and finished inside the measured interval.
void Record(Run& run, ThreadStats& stats, const FileTarget& file, uint64_t offset,
            uint64_t start_ns, const grpc::Status& status, const std::string& data, bool has_crc,
            uint32_t crc, const v1::ServerTiming& timing) {
  const uint64_t now = MonotonicNowNs();
  stats.returned.Add(1);
  if (!status.ok()) {
    ++stats.errors[absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()))];
    return;
  }
  if (run.options.verify && !Verify(run, file, offset, data, has_crc, crc)) return;
  if (start_ns < run.measure_start_ns || now > run.measure_end_ns) return;
  stats.reads.Add(1);
  stats.bytes.Add(data.size());
  stats.latency_ns.Record(now - start_ns);
  stats.queue_ns.Add(timing.queue_ns());
  stats.device_ns.Add(timing.device_ns());
  stats.server_ns.Add(timing.total_ns());
  if (run.options.number > 0 && run.counted_reads.fetch_add(1) + 1 >= run.options.number) {
    run.stop.store(true);
  }
}

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

bool Running(const Run& run) {
  return !run.stop.load(std::memory_order_relaxed) && MonotonicNowNs() < run.measure_end_ns;
}

// The reads that found no replica to go to: failed without being sent, as UNAVAILABLE.
grpc::Status NoReplica(const FileTarget& file) {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("no server holding ", file.name, " is reachable now"));
}

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

// stubs[s]: this thread's stubs of server s (its channels to it, taken in turn).
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

// A stream thread keeps settings.streams ReadBlocks streams to each server on one completion
// queue, so its reads in flight (--qd) are split over streams (and channels) without more threads.
// Each stream carries reads of files its server holds. When a stream ends with an error while the
// run goes on, its server is backed off, the reads it had not answered go to streams of other
// replicas, and the stream is opened again once the back-off is over. stubs[s][l]: the stub of
// this thread's l-th stream to server s.
void StreamThread(Run& run, const std::vector<std::vector<v1::BlockRead::Stub*>>& stubs, int thread,
                  const LoadSettings& settings, ThreadStats& stats) {
  struct Pending {
    size_t file;
    uint64_t offset;
    uint64_t start_ns;
    uint64_t tried = 0;   // servers that failed it (ServerBit)
    bool issued = false;  // sent at least once (counted in `issued`)
  };
  struct Lane {
    int server;
    v1::BlockRead::Stub* stub;
    std::unique_ptr<AsyncReadStream> stream;  // null while its server is backed off
    int depth;                                // its share of --qd
    int batch;                                // reads per message: --batch, at most `depth`
    std::map<uint64_t, Pending> pending;      // by tag
  };
  const LoadOptions& o = run.options;
  Router& router = *run.router;
  grpc::CompletionQueue queue;
  ReadPicker picker(run, thread);
  Pacer pacer(o.rate, o.threads);
  std::mt19937_64 rng(o.seed * 104729 + thread);
  std::vector<Lane> lanes;
  std::map<AsyncReadStream*, Lane*> lane_of;
  const int servers = static_cast<int>(stubs.size());
  // --qd is the thread's reads in flight whatever the number of servers: split over all its
  // streams, the first taking the remainder (every stream at least one, so every server is read).
  const int streams = settings.streams * servers;
  lanes.reserve(static_cast<size_t>(streams));
  for (int s = 0; s < servers; ++s) {
    for (int l = 0; l < settings.streams; ++l) {
      const int i = s * settings.streams + l;
      const int depth = std::max(1, o.queue_depth / streams + (i < o.queue_depth % streams));
      lanes.push_back({s, stubs[s][l], nullptr, depth, std::min(settings.batch, depth), {}});
    }
  }
  const auto open = [&](Lane& lane) {
    lane.stream = std::make_unique<AsyncReadStream>(*lane.stub, queue, o.connection.token);
    lane_of[lane.stream.get()] = &lane;
  };
  for (Lane& lane : lanes) open(lane);
  // Reads waiting for a stream of a server that holds their file: picked for a stream whose server
  // does not, or taken back from a stream that ended. At most --qd, so picking stops meanwhile.
  std::deque<Pending> waiting;
  uint64_t next_tag = 0;
  // Fails the waiting reads no replica can take now (each failed it, or is backed off): they are
  // not sent to a server known to be down, and do not hold up the others.
  const auto fail_unroutable = [&] {
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (router.Routable(run.files[it->file], it->tried)) {
        ++it;
        continue;
      }
      if (!it->issued) stats.issued.Add(1);
      Record(run, stats, run.files[it->file], it->offset, it->start_ns,
             NoReplica(run.files[it->file]), "", false, 0, v1::ServerTiming());
      it = waiting.erase(it);
    }
  };
  // Sends one message of up to --batch reads if the lane has room for them: waiting reads its
  // server may take first, then new ones. Returns the time to wait before the pacer allows the
  // next read (0 if none).
  const auto fill = [&](Lane& lane) -> uint64_t {
    if (lane.stream == nullptr) {
      if (router.health(lane.server).Available(ServerHealth::Clock::now())) open(lane);
      return 0;
    }
    if (!lane.stream->CanWrite()) return 0;
    if (static_cast<int>(lane.pending.size()) + lane.batch > lane.depth) return 0;
    uint64_t wait_ns = 0;
    v1::ReadBlocksRequest request;
    for (auto it = waiting.begin(); it != waiting.end() && request.reads_size() < lane.batch;) {
      if (!run.files[it->file].HeldBy(lane.server) || (it->tried & ServerBit(lane.server)) != 0) {
        ++it;
        continue;
      }
      lane.pending[next_tag] = *it;
      it = waiting.erase(it);
      request.add_reads()->set_tag(next_tag++);
    }
    while (request.reads_size() < lane.batch && static_cast<int>(waiting.size()) < o.queue_depth &&
           (wait_ns = pacer.Wait()) == 0) {
      Pending p{0, 0, MonotonicNowNs()};
      picker.Next(&p.file, &p.offset);
      if (!run.files[p.file].HeldBy(lane.server)) {
        waiting.push_back(p);
        continue;
      }
      lane.pending[next_tag] = p;
      request.add_reads()->set_tag(next_tag++);
    }
    if (request.reads_size() == 0) return wait_ns;
    for (v1::ReadItem& item : *request.mutable_reads()) {
      Pending& p = lane.pending[item.tag()];
      item.set_file(run.files[p.file].name);
      item.set_offset(p.offset);
      item.set_length(o.block_size);
      item.set_want_crc32c(o.verify && run.verify_fd < 0);
      if (!p.issued) stats.issued.Add(1);
      p.issued = true;
    }
    router.health(lane.server)
        .outstanding.fetch_add(request.reads_size(), std::memory_order_relaxed);
    lane.stream->Write(std::move(request));
    return wait_ns;
  };
  v1::ReadBlocksResponse response;
  for (;;) {
    const bool running = Running(run);
    uint64_t wait_ns = 0;
    size_t open_lanes = 0;
    for (Lane& lane : lanes) {
      if (running) {
        const uint64_t w = fill(lane);
        if (w > 0 && (wait_ns == 0 || w < wait_ns)) wait_ns = w;
      } else if (lane.stream != nullptr) {
        lane.stream->CloseSend();  // the server answers what is pending, then ends the call
      }
      open_lanes += lane.stream != nullptr;
    }
    if (!waiting.empty()) fail_unroutable();
    if (open_lanes == 0) {
      if (!running) break;
      // Every server is backed off: wait for the first to come back rather than spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    void* tag;
    bool ok;
    const auto deadline = std::chrono::system_clock::now() +
                          (wait_ns > 0 ? std::chrono::nanoseconds(wait_ns)
                                       : std::chrono::nanoseconds(std::chrono::milliseconds(100)));
    if (queue.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) continue;
    AsyncReadStream* stream = AsyncReadStream::Of(tag);
    Lane& lane = *lane_of.at(stream);
    ServerHealth& health = router.health(lane.server);
    switch (stream->OnCompletion(tag, ok, &response)) {
      case AsyncReadStream::Event::kResponse:
        health.Succeeded();
        health.outstanding.fetch_sub(response.results_size(), std::memory_order_relaxed);
        for (const v1::ReadResult& r : response.results()) {
          auto it = lane.pending.find(r.tag());
          if (it == lane.pending.end()) continue;
          const grpc::Status status(static_cast<grpc::StatusCode>(r.code()), r.error_message());
          Record(run, stats, run.files[it->second.file], it->second.offset, it->second.start_ns,
                 status, r.data(), r.has_crc32c(), r.crc32c(), r.timing());
          lane.pending.erase(it);
        }
        break;
      case AsyncReadStream::Event::kEnded: {
        const absl::Status finished = FromGrpc(stream->status());
        health.outstanding.fetch_sub(static_cast<int>(lane.pending.size()),
                                     std::memory_order_relaxed);
        if (Running(run) && !finished.ok()) {
          // Its server went away: back it off, and its reads go to other replicas.
          router.Failed(lane.server, rng);
          for (auto& [tag, p] : lane.pending) {
            p.tried |= ServerBit(lane.server);
            waiting.push_back(p);
          }
        } else {
          // Reads the stream never answered count as errors: nothing is silently dropped.
          for (size_t i = 0; i < lane.pending.size(); ++i) {
            stats.returned.Add(1);
            ++stats
                  .errors[finished.ok() ? "UNANSWERED" : absl::StatusCodeToString(finished.code())];
          }
        }
        lane.pending.clear();
        lane_of.erase(stream);
        lane.stream.reset();
        break;
      }
      case AsyncReadStream::Event::kWriteFailed:  // it ends soon, with a status
      case AsyncReadStream::Event::kNone:
      case AsyncReadStream::Event::kWritable:
        break;
    }
  }
  // Reads sent once and never answered since: errors, as above.
  for (const Pending& p : waiting) {
    if (!p.issued) continue;
    stats.returned.Add(1);
    ++stats.errors["UNANSWERED"];
  }
}

std::string FormatUs(double ns) {
  return ns >= 1e6 ? absl::StrFormat("%.2fms", ns / 1e6) : absl::StrFormat("%.1fus", ns / 1e3);
}

// The threads' totals at one moment.
struct Totals {
  uint64_t reads = 0, bytes = 0;
  wire::HistogramSnapshot latency_ns;
};

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
  std::vector<LoadSecond> Stop(uint64_t end_ns) {
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

 private:
  void Loop() {
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

absl::Status AddStats(const v1::GetStatsResponse& stats, int sign,
                      std::map<std::string, uint64_t>& paths,
                      std::map<std::string, uint64_t>& fallbacks) {
  for (const v1::PathStats& p : stats.paths()) paths[wire::PathLabel(p.path())] += sign * p.reads();
  for (const v1::FallbackCount& f : stats.fallbacks()) {
    fallbacks[wire::FallbackLabel(f.reason())] += sign * f.count();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateLoadOptions(const LoadOptions& o) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (o.targets.empty()) return bad("--target: at least one server");
  if (o.block_size == 0) return bad("--bs must be greater than 0");
  if (o.queue_depth < 1) return bad("--qd must be at least 1");
  if (o.threads < 1) return bad("--threads must be at least 1");
  if (o.channels < 0) return bad("--channels must be at least 1");
  if (o.streams < 0) return bad("--streams must be at least 1");
  if (o.batch < 0) return bad("--batch must be at least 1");
  if (!o.stream && o.batch > 1) return bad("--batch needs --mode=stream");
  if (!o.stream && o.streams != 0) return bad("--streams needs --mode=stream");
  if (o.hedge_after_percentile < 0 || o.hedge_after_percentile >= 100) {
    return bad("--hedge-after: a percentile such as p95 (above p0, below p100)");
  }
  if (o.hedge_after_percentile > 0 && o.stream) {
    return bad("--hedge-after needs --mode=unary (stream mode does not hedge)");
  }
  if (o.hedge_max_share <= 0 || o.hedge_max_share > 1) {
    return bad("--hedge-max-share: a share of the reads, above 0 and at most 1");
  }
  if (o.streams > o.queue_depth) {
    return bad("--streams cannot exceed --qd (each stream carries at least one read)");
  }
  if (o.batch > o.queue_depth / std::max(1, o.streams)) {
    return bad("--batch cannot exceed the reads in flight per stream (--qd / --streams)");
  }
  if (o.runtime_s <= 0 && o.number == 0)
    return bad("--runtime must be positive (or give --number)");
  if (o.ramp_s < 0) return bad("--ramp cannot be negative");
  if (o.rate < 0) return bad("--rate cannot be negative");
  if (!o.verify_file.empty() && !o.verify) return bad("--verify-file needs --verify");
  if (!o.verify_file.empty() && o.files.size() != 1) {
    return bad("--verify-file compares with one file: give exactly one --file");
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadSettings> DeriveLoadSettings(const LoadOptions& o) {
  if (absl::Status valid = ValidateLoadOptions(o); !valid.ok()) return valid;
  LoadSettings s;
  s.threads = o.threads;
  if (!o.stream) {
    s.channels = o.channels > 0 ? o.channels : o.threads;
    s.streams = 0;
    s.batch = 1;
    return s;
  }
  s.streams = o.streams;
  if (s.streams == 0) {
    // --bs may be anything up to 2^64: capped first, so the product cannot wrap.
    const uint64_t bytes_in_flight =
        static_cast<uint64_t>(o.queue_depth) *
        std::min<uint64_t>(o.block_size, kBytesInFlightPerStream * kMaxStreams);
    const uint64_t by_bytes =
        (bytes_in_flight + kBytesInFlightPerStream - 1) / kBytesInFlightPerStream;
    s.streams = static_cast<int>(std::min<uint64_t>(std::max<uint64_t>(kMinStreams, by_bytes),
                                                    std::min(o.queue_depth, kMaxStreams)));
    // An explicit --batch needs that many reads in flight on every stream.
    if (o.batch > 0) s.streams = std::min(s.streams, o.queue_depth / o.batch);
  }
  const int depth = o.queue_depth / s.streams;  // the smallest stream's share
  s.batch = o.batch;
  if (s.batch == 0) {
    const int by_bytes = static_cast<int>(std::max<uint64_t>(1, kBatchBytes / o.block_size));
    s.batch = std::clamp(depth, 1, std::min(kMaxBatchReads, by_bytes));
  }
  // One connection per thread: a thread's streams share it (more connections on one client CPU
  // cost more than they spread).
  s.channels = o.channels > 0 ? o.channels : s.threads;
  return s;
}

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& o) {
  auto derived = DeriveLoadSettings(o);
  if (!derived.ok()) return derived.status();
  const LoadSettings& settings = *derived;
  Run run(o);
  // The servers and which files each holds: the cluster client's table (one server: its list).
  ClusterOptions cluster_options;
  cluster_options.connection = o.connection;
  auto cluster = ClusterClient::Connect(absl::StrJoin(o.targets, ","), cluster_options);
  if (!cluster.ok()) return cluster.status();
  const std::vector<std::string> servers = (*cluster)->servers();
  auto listed = (*cluster)->List();
  if (!listed.ok()) return listed.status();
  const auto index_of = [&](const std::string& address) {
    return static_cast<int>(std::find(servers.begin(), servers.end(), address) - servers.begin());
  };
  const auto add_file = [&](const ClusterClient::ListedFile& f) {
    FileTarget file{f.info.name(), f.info.size(), {}};
    for (const std::string& address : f.servers) file.servers.push_back(index_of(address));
    run.files.push_back(std::move(file));
  };
  if (o.files.empty()) {
    for (const ClusterClient::ListedFile& f : *listed) {
      if (f.info.size() >= o.block_size) add_file(f);
    }
    if (run.files.empty()) {
      return absl::NotFoundError(
          absl::StrCat("no file on ", absl::StrJoin(o.targets, ","), " holds a --bs read"));
    }
  } else {
    for (const std::string& name : o.files) {
      const auto found = std::find_if(listed->begin(), listed->end(),
                                      [&](const auto& f) { return f.info.name() == name; });
      if (found == listed->end()) {
        return absl::NotFoundError(absl::StrCat("--file ", name, ": no server of ",
                                                absl::StrJoin(o.targets, ","), " serves it"));
      }
      if (found->info.size() < o.block_size) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " (", found->info.size(), " bytes) is smaller than --bs"));
      }
      add_file(*found);
    }
  }
  run.router = std::make_unique<Router>(servers.size(), cluster_options.backoff);
  // settings.channels channels to each server (thread t's lanes use channels t, t + threads, ...).
  std::vector<std::vector<std::unique_ptr<BlockReadClient>>> clients(servers.size());
  for (size_t s = 0; s < servers.size(); ++s) {
    for (int c = 0; c < settings.channels; ++c) {
      clients[s].push_back(BlockReadClient::Connect(servers[s], o.connection));
    }
  }
  if (!o.verify_file.empty()) {
    run.verify_fd = open(o.verify_file.c_str(), O_RDONLY | O_CLOEXEC);
    if (run.verify_fd < 0) {
      return absl::NotFoundError(
          absl::StrCat("--verify-file: cannot open ", o.verify_file, ": ", strerror(errno)));
    }
  }

  // Server stats over the run: after minus before, of the servers that answered both times.
  std::map<std::string, uint64_t> paths, fallbacks;
  std::vector<std::optional<v1::GetStatsResponse>> stats_before(servers.size());
  for (size_t s = 0; s < servers.size(); ++s) {
    auto before = BlockReadClient::Connect(servers[s], o.connection)->Stats();
    if (before.ok()) stats_before[s] = *std::move(before);
  }

  run.start_ns = MonotonicNowNs();
  run.measure_start_ns = run.start_ns + static_cast<uint64_t>(o.ramp_s * 1e9);
  run.measure_end_ns =
      o.number > 0 ? UINT64_MAX : run.measure_start_ns + static_cast<uint64_t>(o.runtime_s * 1e9);
  // All recorders exist before the first thread starts: threads hold references into them.
  std::vector<std::unique_ptr<ThreadStats>> stats;
  for (int t = 0; t < o.threads; ++t) stats.push_back(std::make_unique<ThreadStats>());
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    // A thread's lanes (its streams, or the channels its unary calls take turns on) use channels
    // t, t + threads, t + 2 * threads, ... (mod channels), so every channel gets used.
    const int lanes = o.stream ? settings.streams
                               : std::max(1, (settings.channels - t + o.threads - 1) / o.threads);
    std::vector<std::vector<v1::BlockRead::Stub*>> stubs(servers.size());
    for (size_t s = 0; s < servers.size(); ++s) {
      for (int l = 0; l < lanes; ++l) {
        stubs[s].push_back(&clients[s][(t + l * o.threads) % clients[s].size()]->stub());
      }
    }
    ThreadStats& thread_stats = *stats[t];
    threads.emplace_back([&run, &o, &settings, &thread_stats, stubs = std::move(stubs), t] {
      if (o.stream) {
        StreamThread(run, stubs, t, settings, thread_stats);
      } else {
        UnaryThread(run, stubs, t, thread_stats);
      }
    });
  }

  Sampler sampler(run, stats, o.progress && isatty(STDERR_FILENO));
  for (auto& t : threads) t.join();
  const uint64_t end_ns = std::min(MonotonicNowNs(), run.measure_end_ns);
  if (run.verify_fd >= 0) close(run.verify_fd);

  LoadResult result;
  result.settings = settings;
  result.per_second = sampler.Stop(end_ns);
  result.seconds = (end_ns - std::min(end_ns, run.measure_start_ns)) / 1e9;
  uint64_t queue = 0, device = 0, server = 0;
  for (auto& s : stats) {
    result.reads += s->reads.Load();
    result.bytes += s->bytes.Load();
    result.issued += s->issued.Load();
    result.returned += s->returned.Load();
    result.hedged += s->hedged.Load();
    result.hedges_won += s->hedges_won.Load();
    s->latency_ns.AddTo(result.latency_ns);
    queue += s->queue_ns.Load();
    device += s->device_ns.Load();
    server += s->server_ns.Load();
    for (const auto& [code, n] : s->errors) result.errors[code] += n;
  }
  if (result.reads > 0) {
    result.server_queue_us = queue / 1e3 / result.reads;
    result.server_device_us = device / 1e3 / result.reads;
    result.server_total_us = server / 1e3 / result.reads;
  }
  std::vector<std::string> versions;
  for (size_t s = 0; s < servers.size(); ++s) {
    auto after = BlockReadClient::Connect(servers[s], o.connection)->Stats();
    // A server that restarted meanwhile counts from 0 again: its difference means nothing.
    if (!after.ok() || !stats_before[s] || after->uptime_ns() < stats_before[s]->uptime_ns()) {
      continue;
    }
    AddStats(*stats_before[s], -1, paths, fallbacks).IgnoreError();
    AddStats(*after, 1, paths, fallbacks).IgnoreError();
    if (std::find(versions.begin(), versions.end(), after->version()) == versions.end()) {
      versions.push_back(after->version());
    }
  }
  result.server_version = absl::StrJoin(versions, ", ");
  result.server_paths = paths;
  result.server_fallbacks = fallbacks;
  result.verify_failure = run.failure;
  return result;
}

std::string LoadSettingsText(const LoadOptions& o, const LoadSettings& s) {
  std::string out = absl::StrFormat("threads=%d channels=%d", s.threads, s.channels);
  std::vector<std::string> derived;
  if (o.channels == 0) derived.push_back("channels");
  if (o.stream) {
    absl::StrAppendFormat(&out, " streams=%d batch=%d", s.streams, s.batch);
    if (o.streams == 0) derived.push_back("streams");
    if (o.batch == 0) derived.push_back("batch");
  }
  if (!derived.empty()) {
    absl::StrAppend(&out, " (derived: ", absl::StrJoin(derived, ", "), ")");
  }
  return out;
}

std::string LoadResultText(const LoadOptions& o, const LoadResult& r) {
  const wire::HistogramSnapshot& l = r.latency_ns;
  std::string out = absl::StrFormat(
      "%s %s bs=%s qd=%d: %.0f IOPS, %s/s, %u reads in %.2fs\n", o.sequential ? "read" : "randread",
      o.stream ? "stream" : "unary", FormatBytes(static_cast<double>(o.block_size)), o.queue_depth,
      r.iops(), FormatBytes(r.bandwidth()), r.reads, r.seconds);
  absl::StrAppend(&out, "settings: ", LoadSettingsText(o, r.settings), "\n");
  absl::StrAppendFormat(&out, "latency: min %s mean %s p50 %s p90 %s p99 %s p99.9 %s max %s\n",
                        FormatUs(l.Min()), FormatUs(l.Mean()), FormatUs(l.Percentile(0.5)),
                        FormatUs(l.Percentile(0.9)), FormatUs(l.Percentile(0.99)),
                        FormatUs(l.Percentile(0.999)), FormatUs(l.Max()));
  absl::StrAppendFormat(&out,
                        "split (mean): client+network %.1fus, server queue %.1fus, server device "
                        "%.1fus (server total %.1fus)\n",
                        l.Mean() / 1e3 - r.server_total_us, r.server_queue_us, r.server_device_us,
                        r.server_total_us);
  uint64_t errors = 0;
  for (const auto& [code, n] : r.errors) errors += n;
  absl::StrAppendFormat(&out, "reads issued %u, returned %u, errors %u", r.issued, r.returned,
                        errors);
  for (const auto& [code, n] : r.errors) absl::StrAppendFormat(&out, " %s=%u", code, n);
  if (o.hedge_after_percentile > 0) {
    absl::StrAppendFormat(&out, "\nhedged %u reads (%.2f%% of those issued), %u answered first",
                          r.hedged, r.issued > 0 ? 100.0 * r.hedged / r.issued : 0.0, r.hedges_won);
  }
  absl::StrAppend(&out, "\nserver paths:");
  for (const auto& [path, n] : r.server_paths) absl::StrAppendFormat(&out, " %s=%u", path, n);
  absl::StrAppend(&out, "; fallbacks:");
  for (const auto& [reason, n] : r.server_fallbacks) {
    if (n > 0) absl::StrAppendFormat(&out, " %s=%u", reason, n);
  }
  absl::StrAppend(&out, "\n");
  if (!r.verify_failure.empty()) absl::StrAppend(&out, r.verify_failure, "\n");
  return out;
}

std::string LoadResultJson(const LoadOptions& o, const LoadResult& r) {
  const wire::HistogramSnapshot& l = r.latency_ns;
  nlohmann::json out;
  out["options"] = {{"rw", o.sequential ? "read" : "randread"},
                    {"mode", o.stream ? "stream" : "unary"},
                    {"bs", o.block_size},
                    {"qd", o.queue_depth},
                    {"targets", o.targets}};
  out["settings"] = {{"threads", r.settings.threads},
                     {"channels", r.settings.channels},
                     {"streams", r.settings.streams},
                     {"batch", r.settings.batch}};
  out["seconds"] = r.seconds;
  out["reads"] = r.reads;
  out["iops"] = r.iops();
  out["bw_bytes"] = r.bandwidth();
  out["lat_us"] = {{"min", l.Min() / 1e3},
                   {"mean", l.Mean() / 1e3},
                   {"p50", l.Percentile(0.5) / 1e3},
                   {"p90", l.Percentile(0.9) / 1e3},
                   {"p99", l.Percentile(0.99) / 1e3},
                   {"p999", l.Percentile(0.999) / 1e3},
                   {"max", l.Max() / 1e3}};
  out["lat_split_us"] = {{"client_network", l.Mean() / 1e3 - r.server_total_us},
                         {"server_queue", r.server_queue_us},
                         {"server_device", r.server_device_us},
                         {"server_total", r.server_total_us}};
  out["issued"] = r.issued;
  out["returned"] = r.returned;
  out["hedged"] = r.hedged;
  out["hedges_won"] = r.hedges_won;
  out["errors"] = nlohmann::json::object();
  for (const auto& [code, n] : r.errors) out["errors"][code] = n;
  out["per_second"] = nlohmann::json::array();
  for (const LoadSecond& second : r.per_second) {
    out["per_second"].push_back({{"t", second.end_s},
                                 {"seconds", second.seconds},
                                 {"reads", second.reads},
                                 {"iops", second.iops()},
                                 {"bw_bytes", second.bandwidth()},
                                 {"p50_us", second.p50_ns / 1e3},
                                 {"p99_us", second.p99_ns / 1e3}});
  }
  out["server_version"] = r.server_version;
  out["server_paths"] = r.server_paths;
  out["server_fallbacks"] = r.server_fallbacks;
  if (!r.verify_failure.empty()) out["verify_failure"] = r.verify_failure;
  return out.dump(2);
}

}  // namespace blockread::client
