// Read() calls of many threads over a few shared ReadBlocks streams: what lets a unary-looking
// BlockReadClient::Read() reach stream throughput (a stream message carries many reads, so gRPC's
// per-call and per-message costs are shared by them).
#ifndef BLOCKREAD_CLIENT_READ_COALESCER_H_
#define BLOCKREAD_CLIENT_READ_COALESCER_H_

#include <grpcpp/alarm.h>
#include <grpcpp/completion_queue.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "blockread/v1/blockread.grpc.pb.h"
#include "client/async_read_stream.h"

namespace blockread::client {

struct CoalescingOptions {
  // Off: every Read() is its own ReadBlock call.
  bool enabled = true;
  // Shared ReadBlocks streams; a message goes to the stream with the fewest reads in flight.
  int streams = 2;
  // Reads per request message, at most.
  int max_batch = 16;
  // Reads in flight per stream, at most; more wait in the queue.
  int max_in_flight = 256;
  // While reads are in flight, how long a queued read may wait for others to share its message.
  // A read that finds nothing in flight is sent at once (and a lone Read() does not come here at
  // all: see BlockReadClient::Read). 0: never wait.
  std::chrono::microseconds linger{50};
};

// Cancels the Read() calls it is passed to (ReadCallOptions::cancellation). Thread-safe: Cancel()
// from any thread, once or more; calls that start after it return CANCELLED at once.
class ReadCancellation {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class CancellationHook;
  mutable std::mutex mu_;
  bool cancelled_ = false;                           // guarded by mu_
  std::map<uint64_t, std::function<void()>> hooks_;  // guarded by mu_; run by Cancel()
  uint64_t next_hook_ = 0;                           // guarded by mu_
};

// Runs `on_cancel` (at once, or later from the thread that calls Cancel()) if `cancellation` is
// or gets cancelled while the hook exists; the destructor waits for a running `on_cancel`.
class CancellationHook {
 public:
  CancellationHook(ReadCancellation* cancellation, std::function<void()> on_cancel);
  ~CancellationHook();
  CancellationHook(const CancellationHook&) = delete;
  CancellationHook& operator=(const CancellationHook&) = delete;

 private:
  ReadCancellation* const cancellation_;
  uint64_t id_ = 0;
};

// Thread-safe: Read() from any number of threads. One internal thread, started by the
// constructor and joined by the destructor, owns the completion queue and the streams; callers
// queue their read and wait for its result, their deadline or their cancellation.
class ReadCoalescer {
 public:
  // `token`: see AsyncReadStream.
  ReadCoalescer(v1::BlockRead::Stub& stub, const CoalescingOptions& options,
                const std::string& token);
  // REQUIRES: no Read() running. Cancels the streams and waits for them to end.
  ~ReadCoalescer();

  // One read, answered like ReadBlock: the item's own status (errors are per read: one bad read
  // in a message fails only itself), or the stream's if the stream carrying it broke, or
  // DEADLINE_EXCEEDED / CANCELLED when the caller's deadline or cancellation came first (the
  // server may still read it; the bytes are dropped). `item.tag` is ignored.
  absl::StatusOr<v1::ReadBlockResponse> Read(
      const v1::ReadItem& item, std::optional<std::chrono::system_clock::time_point> deadline,
      ReadCancellation* cancellation);

 private:
  struct Item;
  struct Lane;
  void Loop();
  // Sends queued reads to lanes that can take them; returns when the oldest queued read's linger
  // ends, if it is waiting for one.
  std::optional<std::chrono::steady_clock::time_point> Dispatch();
  void Deliver(Lane& lane, v1::ReadBlocksResponse& response);
  void EndLane(Lane& lane);
  void Wake();  // REQUIRES: mu_ held

  v1::BlockRead::Stub& stub_;
  const std::string token_;
  const CoalescingOptions options_;

  std::mutex mu_;
  std::deque<std::shared_ptr<Item>> queue_;  // guarded by mu_; reads not sent yet
  bool wake_pending_ = false;                // guarded by mu_: alarm_ is set
  bool stopping_ = false;                    // guarded by mu_
  grpc::Alarm alarm_;                        // wakes the thread; Set only under mu_

  // The thread's own: the queue, the lanes and what they carry.
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  uint64_t next_tag_ = 0;
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_READ_COALESCER_H_
