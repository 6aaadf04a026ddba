#include "client/read_coalescer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace blockread::client {

void ReadCancellation::Cancel() {
  std::lock_guard lock(mu_);
  if (cancelled_) return;
  cancelled_ = true;
  // Under mu_, so a hook being destroyed waits for its run (see ~CancellationHook).
  for (auto& [id, hook] : hooks_) hook();
  hooks_.clear();
}

bool ReadCancellation::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

CancellationHook::CancellationHook(ReadCancellation* cancellation, std::function<void()> on_cancel)
    : cancellation_(cancellation) {
  if (cancellation_ == nullptr) return;
  std::unique_lock lock(cancellation_->mu_);
  if (cancellation_->cancelled_) {
    lock.unlock();
    on_cancel();
    return;
  }
  id_ = ++cancellation_->next_hook_;
  cancellation_->hooks_.emplace(id_, std::move(on_cancel));
}

CancellationHook::~CancellationHook() {
  if (cancellation_ == nullptr || id_ == 0) return;
  std::lock_guard lock(cancellation_->mu_);
  cancellation_->hooks_.erase(id_);
}

struct ReadCoalescer::Item {
  v1::ReadItem read;
  std::chrono::steady_clock::time_point queued_at;
  // Guarded by mu_. The result fields are written by the coalescer thread before it sets `done`
  // under mu_, and read by the caller only after it saw `done` under mu_.
  bool done = false;
  bool abandoned = false;  // the caller left (deadline, cancellation): nobody reads the result
  bool cancelled = false;  // the caller's cancellation fired
  std::condition_variable wake;
  absl::Status status;
  v1::ReadBlockResponse response;
};

// A shared stream and the reads it carries; the coalescer thread's own.
struct ReadCoalescer::Lane {
  std::unique_ptr<AsyncReadStream> stream;  // null until reads need it, and after it ended
  bool carried = false;                     // the stream was sent reads
  std::map<uint64_t, std::shared_ptr<Item>> in_flight;  // by tag
};

ReadCoalescer::ReadCoalescer(v1::BlockRead::Stub& stub, const CoalescingOptions& options,
                             const std::string& token)
    : stub_(stub), token_(token), options_(options) {
  for (int i = 0; i < std::max(1, options_.streams); ++i)
    lanes_.push_back(std::make_unique<Lane>());
  thread_ = std::thread([this] { Loop(); });
}

ReadCoalescer::~ReadCoalescer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    Wake();
  }
  thread_.join();
}

absl::StatusOr<v1::ReadBlockResponse> ReadCoalescer::Read(
    const v1::ReadItem& read, std::optional<std::chrono::system_clock::time_point> deadline,
    ReadCancellation* cancellation) {
  auto item = std::make_shared<Item>();
  item->read = read;
  // Before the lock: the hook may run at once, and it takes mu_.
  CancellationHook hook(cancellation, [this, item] {
    std::lock_guard lock(mu_);
    item->cancelled = true;
    item->wake.notify_one();
  });
  std::unique_lock lock(mu_);
  if (!item->cancelled) {
    item->queued_at = std::chrono::steady_clock::now();
    queue_.push_back(item);
    Wake();
    auto answered = [&] { return item->done || item->cancelled; };
    if (deadline.has_value()) {
      item->wake.wait_until(lock, *deadline, answered);
    } else {
      item->wake.wait(lock, answered);
    }
  }
  if (item->done) {
    // A status of its own: absl::Status shares its message by a reference count, and sharing
    // it with the coalescer's thread would let the two release it without an order TSan sees
    // (Debian's Abseil is not instrumented).
    if (!item->status.ok()) return absl::Status(item->status.code(), item->status.message());
    return std::move(item->response);
  }
  item->abandoned = true;
  if (item->cancelled) return absl::CancelledError("Read cancelled by the caller");
  return absl::DeadlineExceededError("Deadline Exceeded");
}

void ReadCoalescer::Wake() {
  if (wake_pending_) return;
  wake_pending_ = true;
  // An alarm in the past completes at once: the documented way to wake a completion queue.
  alarm_.Set(&cq_, gpr_inf_past(GPR_CLOCK_MONOTONIC), &alarm_);
}

void ReadCoalescer::Loop() {
  v1::ReadBlocksResponse response;
  bool cancelled_streams = false;
  for (;;) {
    const auto linger_end = Dispatch();
    bool stopping;
    {
      std::lock_guard lock(mu_);
      stopping = stopping_;
    }
    if (stopping) {
      if (!cancelled_streams) {
        for (auto& lane : lanes_) {
          if (lane->stream != nullptr) lane->stream->Cancel();
        }
        cancelled_streams = true;
      }
      if (std::none_of(lanes_.begin(), lanes_.end(),
                       [](const auto& lane) { return lane->stream != nullptr; })) {
        break;
      }
    }
    // Block until an event, or until the oldest queued read has lingered long enough.
    auto deadline = std::chrono::system_clock::now() + std::chrono::hours(1);
    if (linger_end.has_value()) {
      deadline = std::chrono::system_clock::now() +
                 std::max(*linger_end - std::chrono::steady_clock::now(),
                          std::chrono::steady_clock::duration::zero());
    }
    void* tag;
    bool ok;
    const auto got = cq_.AsyncNext(&tag, &ok, deadline);
    if (got == grpc::CompletionQueue::SHUTDOWN) break;
    if (got != grpc::CompletionQueue::GOT_EVENT) continue;
    if (tag == &alarm_) {
      std::lock_guard lock(mu_);
      wake_pending_ = false;
      continue;
    }
    AsyncReadStream* stream = AsyncReadStream::Of(tag);
    auto lane = std::find_if(lanes_.begin(), lanes_.end(),
                             [&](const auto& l) { return l->stream.get() == stream; });
    switch (stream->OnCompletion(tag, ok, &response)) {
      case AsyncReadStream::Event::kResponse:
        Deliver(**lane, response);
        break;
      case AsyncReadStream::Event::kEnded:
        EndLane(**lane);
        break;
      case AsyncReadStream::Event::kNone:
      case AsyncReadStream::Event::kWritable:
      case AsyncReadStream::Event::kWriteFailed:  // it ends soon: EndLane then
        break;
    }
  }
  // Nothing is in flight any more; reads still queued (none, if no Read() is running, as the
  // destructor requires) get CANCELLED. A pending wake alarm is the last event.
  {
    std::lock_guard lock(mu_);
    for (auto& item : queue_) {
      item->status = absl::CancelledError("the client is shutting down");
      item->done = true;
      item->wake.notify_one();
    }
    queue_.clear();
    alarm_.Cancel();
  }
  cq_.Shutdown();
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
  }
}

std::optional<std::chrono::steady_clock::time_point> ReadCoalescer::Dispatch() {
  const int max_batch = std::max(1, options_.max_batch);
  const int max_in_flight = std::max(max_batch, options_.max_in_flight);
  std::lock_guard lock(mu_);
  if (stopping_) return std::nullopt;
  size_t in_flight = 0;
  for (const auto& lane : lanes_) in_flight += lane->in_flight.size();
  while (!queue_.empty()) {
    if (queue_.front()->abandoned) {
      queue_.pop_front();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    const auto linger_end = queue_.front()->queued_at + options_.linger;
    // Waiting for company only pays while other reads are in flight: their answers come anyway.
    if (queue_.size() < static_cast<size_t>(max_batch) && in_flight > 0 && now < linger_end) {
      return linger_end;
    }
    // The stream that can take a message and carries the fewest reads; open one if none can.
    Lane* best = nullptr;
    for (auto& lane : lanes_) {
      if (lane->stream == nullptr || !lane->stream->CanWrite()) continue;
      if (lane->in_flight.size() + max_batch > static_cast<size_t>(max_in_flight)) continue;
      if (best == nullptr || lane->in_flight.size() < best->in_flight.size()) best = lane.get();
    }
    if (best == nullptr) {
      for (auto& lane : lanes_) {
        if (lane->stream == nullptr) {
          lane->stream = std::make_unique<AsyncReadStream>(stub_, cq_, token_);
          break;
        }
      }
      return std::nullopt;  // a write completing (or a stream starting) calls again
    }
    v1::ReadBlocksRequest request;
    while (!queue_.empty() && request.reads_size() < max_batch) {
      std::shared_ptr<Item> item = std::move(queue_.front());
      queue_.pop_front();
      if (item->abandoned) continue;
      v1::ReadItem* read = request.add_reads();
      *read = item->read;
      read->set_tag(next_tag_);
      best->in_flight.emplace(next_tag_++, std::move(item));
    }
    in_flight += request.reads_size();
    if (request.reads_size() > 0) {
      best->carried = true;
      best->stream->Write(std::move(request));
    }
  }
  return std::nullopt;
}

void ReadCoalescer::Deliver(Lane& lane, v1::ReadBlocksResponse& response) {
  std::vector<std::shared_ptr<Item>> answered;
  answered.reserve(response.results_size());
  for (v1::ReadResult& r : *response.mutable_results()) {
    auto it = lane.in_flight.find(r.tag());
    if (it == lane.in_flight.end()) continue;
    Item& item = *it->second;
    if (r.code() != 0) {
      item.status = absl::Status(static_cast<absl::StatusCode>(r.code()), r.error_message());
    } else {
      item.response.mutable_data()->swap(*r.mutable_data());
      item.response.set_path(r.path());
      item.response.set_fallback(r.fallback());
      *item.response.mutable_timing() = r.timing();
      if (r.has_crc32c()) item.response.set_crc32c(r.crc32c());
    }
    answered.push_back(std::move(it->second));
    lane.in_flight.erase(it);
  }
  std::lock_guard lock(mu_);
  for (auto& item : answered) {
    item->done = true;
    item->wake.notify_one();
  }
}

void ReadCoalescer::EndLane(Lane& lane) {
  absl::Status status(static_cast<absl::StatusCode>(lane.stream->status().error_code()),
                      lane.stream->status().error_message());
  if (status.ok()) status = absl::UnavailableError("the read stream ended before answering");
  {
    std::lock_guard lock(mu_);
    // Each item a status of its own (see Read()).
    for (auto& [tag, item] : lane.in_flight) {
      item->status = absl::Status(status.code(), status.message());
      item->done = true;
      item->wake.notify_one();
    }
    // A stream that ended before carrying anything (server unreachable, call refused) would end
    // the same way again: the reads waiting for it get its status, as unary calls would.
    if (!lane.carried) {
      for (auto& item : queue_) {
        item->status = absl::Status(status.code(), status.message());
        item->done = true;
        item->wake.notify_one();
      }
      queue_.clear();
    }
  }
  lane.in_flight.clear();
  lane.carried = false;
  lane.stream.reset();
}

}  // namespace blockread::client
