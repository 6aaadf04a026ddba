#include "server/read_calls.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "proto/wire/crc32c.h"
#include "server/proto_conversions.h"
#include "server/status_mapping.h"
#include "storage/clock.h"

namespace blockread::server {
namespace {

// Fills the fields ReadBlockResponse and ReadResult share from a successful engine result.
template <typename Message>
void FillFromResult(Message& message, const storage::ReadResult& result, bool want_crc32c,
                    uint64_t arrival_ns) {
  message.set_data(result.data, result.length);
  message.set_path(ToProto(result.path));
  message.set_fallback(ToProto(result.path, result.fallback));
  if (want_crc32c) message.set_crc32c(wire::Crc32c(result.data, result.length));
  v1::ServerTiming* timing = message.mutable_timing();
  timing->set_queue_ns(result.queue_ns);
  timing->set_device_ns(result.device_ns);
  timing->set_total_ns(storage::MonotonicNowNs() - arrival_ns);
}

absl::Status QueueFull(Worker& worker) {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "server overloaded: worker %d already holds max_queued_reads = %u waiting reads",
      worker.index(), worker.shared().config.max_queued_reads()));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReadBlock

void ReadBlockCall::Post(Worker* worker) { new ReadBlockCall(worker); }

ReadBlockCall::ReadBlockCall(Worker* worker) : worker_(worker), responder_(&context_) {
  // Must precede the request: the done notice is how we learn of cancellation.
  context_.AsyncNotifyWhenDone(&done_tag_);
  worker_->shared().service.RequestReadBlock(&context_, &request_, &responder_, worker_->queue(),
                                             worker_->queue(), &request_tag_);
}

void ReadBlockCall::OnEvent(uint8_t event, bool ok) {
  switch (event) {
    case kRequest: {
      if (!ok) {  // the server is shutting down; an unmatched call gets no done notice
        delete this;
        return;
      }
      if (worker_->accepting_operations()) Post(worker_);
      done_pending_ = true;
      arrival_ns_ = storage::MonotonicNowNs();
      absl::Status started = TryStart();
      if (absl::IsResourceExhausted(started)) {
        if (worker_->Defer(this)) {
          deferred_ = true;
          return;
        }
        started = QueueFull(*worker_);
      }
      if (!started.ok()) FinishWith(ToGrpcStatus(started));
      return;
    }
    case kFinish:
      finish_pending_ = false;
      MaybeDelete();
      return;
    case kDone:
      done_pending_ = false;
      cancelled_ = context_.IsCancelled();
      if (cancelled_ && !finish_sent_) {
        worker_->mutable_counters().CountRpc(RpcMethod::kReadBlock, grpc::StatusCode::CANCELLED);
      }
      if (cancelled_ && deferred_) {
        worker_->Undefer(this);
        deferred_ = false;
      }
      MaybeDelete();
      return;
  }
}

absl::Status ReadBlockCall::TryStart() {
  absl::Status status = worker_->engine().StartRead(
      request_.file(), request_.offset(), request_.length(), &OnReadDone, this, arrival_ns_);
  if (status.ok()) read_in_flight_ = true;
  return status;
}

bool ReadBlockCall::RetryStart() {
  absl::Status started = TryStart();
  if (absl::IsResourceExhausted(started)) return false;
  deferred_ = false;
  if (!started.ok()) FinishWith(ToGrpcStatus(started));
  return true;
}

bool ReadBlockCall::OnReadDone(void* context, const storage::ReadResult& result) {
  auto* call = static_cast<ReadBlockCall*>(context);
  call->read_in_flight_ = false;
  call->worker_->mutable_counters().reads.Add(1);
  if (call->cancelled_) {  // nobody to answer; the slot is free again as we return
    call->MaybeDelete();
    return false;
  }
  if (!result.status.ok()) {
    call->FinishWith(ToGrpcStatus(result.status));
  } else {
    FillFromResult(call->response_, result, call->request_.want_crc32c(), call->arrival_ns_);
    call->FinishWith(grpc::Status::OK);
  }
  return false;
}

void ReadBlockCall::FinishWith(const grpc::Status& status) {
  if (!worker_->accepting_operations()) {
    MaybeDelete();
    return;
  }
  finish_pending_ = true;
  finish_sent_ = true;
  worker_->mutable_counters().CountRpc(RpcMethod::kReadBlock, status.error_code());
  if (status.ok()) {
    responder_.Finish(response_, status, &finish_tag_);
  } else {
    responder_.FinishWithError(status, &finish_tag_);
  }
}

void ReadBlockCall::MaybeDelete() {
  if (!read_in_flight_ && !deferred_ && !finish_pending_ && !done_pending_) delete this;
}

// ---------------------------------------------------------------------------------------------
// ReadBlocks

void ReadBlocksCall::Post(Worker* worker) { new ReadBlocksCall(worker); }

ReadBlocksCall::ReadBlocksCall(Worker* worker) : worker_(worker), stream_(&context_) {
  context_.AsyncNotifyWhenDone(&done_tag_);
  worker_->shared().service.RequestReadBlocks(&context_, &stream_, worker_->queue(),
                                              worker_->queue(), &request_tag_);
}

void ReadBlocksCall::OnEvent(uint8_t event, bool ok) {
  switch (event) {
    case kRequest:
      if (!ok) {
        delete this;
        return;
      }
      if (worker_->accepting_operations()) Post(worker_);
      done_pending_ = true;
      IssueRead();
      return;
    case kRead: {
      reading_ = false;
      if (!ok) {  // the client half-closed (or the stream broke)
        half_closed_ = true;
        MaybeFinish();
        MaybeDelete();
        return;
      }
      const uint64_t arrival_ns = storage::MonotonicNowNs();
      for (const v1::ReadItem& item : incoming_.reads()) StartItem(item, arrival_ns);
      // Backpressure: while reads wait for slots, stop reading the stream (HTTP/2 flow control
      // then slows the client); the last deferred read to start resumes reading.
      if (deferred_.empty()) IssueRead();
      return;
    }
    case kWrite:
      writing_ = false;
      if (!ok) {
        cancelled_ = true;
      } else {
        MaybeWrite();
        MaybeFinish();
      }
      MaybeDelete();
      return;
    case kFinish:
      finish_pending_ = false;
      MaybeDelete();
      return;
    case kDone:
      done_pending_ = false;
      if (context_.IsCancelled()) {
        if (!finish_sent_) {
          worker_->mutable_counters().CountRpc(RpcMethod::kReadBlocks, grpc::StatusCode::CANCELLED);
        }
        cancelled_ = true;
        for (StreamRead* read : deferred_) {
          worker_->Undefer(read);
          FreeRead(read);
        }
        deferred_.clear();
        outgoing_.Clear();
      }
      MaybeDelete();
      return;
  }
}

void ReadBlocksCall::IssueRead() {
  if (reading_ || half_closed_ || cancelled_ || !worker_->accepting_operations()) return;
  reading_ = true;
  incoming_.Clear();
  stream_.Read(&incoming_, &read_tag_);
}

ReadBlocksCall::StreamRead* ReadBlocksCall::NewRead() {
  if (free_reads_.empty()) {
    reads_.push_back(std::make_unique<StreamRead>());
    reads_.back()->call = this;
    return reads_.back().get();
  }
  StreamRead* read = free_reads_.back();
  free_reads_.pop_back();
  return read;
}

void ReadBlocksCall::FreeRead(StreamRead* read) { free_reads_.push_back(read); }

void ReadBlocksCall::StartItem(const v1::ReadItem& item, uint64_t arrival_ns) {
  StreamRead* read = NewRead();
  read->item = item;
  read->arrival_ns = arrival_ns;
  absl::Status started = TryStart(*read);
  if (absl::IsResourceExhausted(started)) {
    if (worker_->Defer(read)) {
      deferred_.push_back(read);
      return;
    }
    started = QueueFull(*worker_);
  }
  if (!started.ok()) AddError(*read, started);
}

absl::Status ReadBlocksCall::TryStart(StreamRead& read) {
  absl::Status status =
      worker_->engine().StartRead(read.item.file(), read.item.offset(), read.item.length(),
                                  &OnReadDone, &read, read.arrival_ns);
  if (status.ok()) ++in_flight_;
  return status;
}

bool ReadBlocksCall::StreamRead::RetryStart() {
  absl::Status started = call->TryStart(*this);
  if (absl::IsResourceExhausted(started)) return false;
  auto& deferred = call->deferred_;
  deferred.erase(std::remove(deferred.begin(), deferred.end(), this), deferred.end());
  if (!started.ok()) call->AddError(*this, started);
  if (deferred.empty()) call->IssueRead();
  return true;
}

bool ReadBlocksCall::OnReadDone(void* context, const storage::ReadResult& result) {
  auto* read = static_cast<StreamRead*>(context);
  ReadBlocksCall* call = read->call;
  --call->in_flight_;
  call->worker_->mutable_counters().reads.Add(1);
  if (call->cancelled_) {
    call->FreeRead(read);
    call->MaybeDelete();
    return false;
  }
  if (!result.status.ok()) {
    call->AddError(*read, result.status);
    return false;
  }
  v1::ReadResult* out = call->outgoing_.add_results();
  out->set_tag(read->item.tag());
  FillFromResult(*out, result, read->item.want_crc32c(), read->arrival_ns);
  call->outgoing_bytes_ += result.length;
  call->FreeRead(read);
  call->ScheduleFlush();
  return false;
}

void ReadBlocksCall::AddError(StreamRead& read, const absl::Status& status) {
  v1::ReadResult* out = outgoing_.add_results();
  out->set_tag(read.item.tag());
  out->set_code(static_cast<int32_t>(status.code()));
  out->set_error_message(std::string(status.message()));
  FreeRead(&read);
  ScheduleFlush();
}

void ReadBlocksCall::ScheduleFlush() {
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  worker_->ScheduleFlush(this);
}

void ReadBlocksCall::Flush() {
  flush_scheduled_ = false;
  MaybeWrite();
  MaybeFinish();
  MaybeDelete();
}

void ReadBlocksCall::MaybeWrite() {
  if (writing_ || outgoing_.results_size() == 0 || cancelled_ || !worker_->accepting_operations()) {
    return;
  }
  // Everything gathered goes in one message, unless that would pass the message size limit:
  // then the rest waits for the next write.
  const uint64_t limit = worker_->shared().config.max_read_bytes() + (1 << 20);
  in_write_.Clear();
  if (outgoing_bytes_ <= limit) {
    in_write_.Swap(&outgoing_);
    outgoing_bytes_ = 0;
  } else {
    uint64_t bytes = 0;
    auto* from = outgoing_.mutable_results();
    while (!from->empty() && (bytes == 0 || bytes + from->rbegin()->data().size() <= limit)) {
      bytes += from->rbegin()->data().size();
      in_write_.mutable_results()->AddAllocated(from->ReleaseLast());
    }
    outgoing_bytes_ -= bytes;
    if (!from->empty()) ScheduleFlush();
  }
  writing_ = true;
  stream_.Write(in_write_, &write_tag_);
}

void ReadBlocksCall::MaybeFinish() {
  if (!half_closed_ || in_flight_ > 0 || !deferred_.empty() || writing_ ||
      outgoing_.results_size() > 0 || finish_sent_ || cancelled_ ||
      !worker_->accepting_operations()) {
    return;
  }
  finish_sent_ = true;
  finish_pending_ = true;
  worker_->mutable_counters().CountRpc(RpcMethod::kReadBlocks, grpc::StatusCode::OK);
  stream_.Finish(grpc::Status::OK, &finish_tag_);
}

void ReadBlocksCall::MaybeDelete() {
  // A scheduled flush holds a pointer to us in the worker's list: wait for it.
  if (reading_ || writing_ || in_flight_ > 0 || !deferred_.empty() || finish_pending_ ||
      done_pending_ || flush_scheduled_) {
    return;
  }
  delete this;
}

}  // namespace blockread::server
