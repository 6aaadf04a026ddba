#include <grpcpp/completion_queue.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "client/async_read_stream.h"
#include "client/blockread_client.h"
#include "client/load_schedule.h"
#include "client/load_threads.h"

namespace blockread::client::load {

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

}  // namespace blockread::client::load
