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

storage::ReadRequest EngineRequest(const std::string& file, uint64_t offset, uint64_t length,
                                   uint64_t arrival_ns) {
  storage::ReadRequest request;
  request.file = file;
  request.offset = offset;
  request.length = length;
  request.arrival_ns = arrival_ns;
  return request;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReadBlock

void ReadBlockCall::Post(Worker& worker) { new ReadBlockCall(worker); }

ReadBlockCall::ReadBlockCall(Worker& worker)
    : Call(worker, RpcMethod::kReadBlock), responder_(&context_) {
  RequestCall([&](void* tag) {
    worker_.shared().service.RequestReadBlock(&context_, &request_, &responder_, worker_.queue(),
                                              worker_.queue(), tag);
  });
}

void ReadBlockCall::OnRequest() {
  arrival_ns_ = storage::MonotonicNowNs();
  AdmissionQueue& admission = worker_.admission();
  // Behind the reads already waiting: a newcomer never overtakes them.
  if (admission.empty() && TryStart()) return;
  if (admission.Push(wait_list_, *this)) {
    Hold();  // waiting for admission
    return;
  }
  FinishWith(ToGrpcStatus(QueueFull(worker_)));
}

void ReadBlockCall::OnDone() {
  // Nobody waits for the answer any more: give up the place in the queue. A read already in the
  // engine completes first (its hold keeps the call).
  if (cancelled()) worker_.admission().RemoveAll(wait_list_);
}

bool ReadBlockCall::TryStart() {
  absl::Status refusal;
  switch (worker_.engine().StartRead(
      EngineRequest(request_.file(), request_.offset(), request_.length(), arrival_ns_),
      &OnReadDone, this, &refusal)) {
    case storage::StartOutcome::kQueued:
      Hold();  // the engine read
      return true;
    case storage::StartOutcome::kCompleted:
      FinishWith(ToGrpcStatus(refusal));
      return true;
    case storage::StartOutcome::kBusy:
      return false;
  }
  return false;
}

bool ReadBlockCall::OnReadDone(void* context, const storage::ReadResult& result) {
  auto* call = static_cast<ReadBlockCall*>(context);
  call->worker_.mutable_counters().reads.Add(1);
  if (!call->cancelled()) {
    if (!result.status.ok()) {
      call->FinishWith(ToGrpcStatus(result.status));
    } else {
      FillFromResult(call->response_, result, call->request_.want_crc32c(), call->arrival_ns_);
      call->FinishWith(grpc::Status::OK);
    }
  }
  call->Release();  // the engine read; the slot is free again as we return
  return false;
}

void ReadBlockCall::FinishWith(const grpc::Status& status) {
  FinishUnary(responder_, response_, status, finish_tag_);
}

// ---------------------------------------------------------------------------------------------
// ReadBlocks

void ReadBlocksCall::Post(Worker& worker) { new ReadBlocksCall(worker); }

ReadBlocksCall::ReadBlocksCall(Worker& worker)
    : Call(worker, RpcMethod::kReadBlocks), stream_(&context_) {
  RequestCall([&](void* tag) {
    worker_.shared().service.RequestReadBlocks(&context_, &stream_, worker_.queue(),
                                               worker_.queue(), tag);
  });
}

void ReadBlocksCall::Refuse(const grpc::Status& status) {
  if (!may_start_operations()) return;
  CountFinish(status.error_code());
  stream_.Finish(status, Op(finish_tag_));
}

void ReadBlocksCall::OnEvent(uint8_t event, bool ok) {
  switch (event) {
    case kRead: {
      reading_ = false;
      if (!ok) {  // the client half-closed (or the stream broke)
        half_closed_ = true;
        MaybeFinish();
        return;
      }
      const uint64_t arrival_ns = storage::MonotonicNowNs();
      for (const v1::ReadItem& item : incoming_.reads()) StartItem(item, arrival_ns);
      // Backpressure: while reads wait for slots, stop reading the stream (HTTP/2 flow control
      // then slows the client); the last waiting read to leave the queue resumes reading.
      if (waiting_ == 0) IssueRead();
      return;
    }
    case kWrite:
      writing_ = false;
      if (!ok) {
        write_failed_ = true;
        return;
      }
      MaybeWrite();
      MaybeFinish();
      return;
    case kFinish:
      return;
  }
}

void ReadBlocksCall::OnDone() {
  if (!cancelled()) return;
  worker_.admission().RemoveAll(wait_list_);
  outgoing_.Clear();
}

void ReadBlocksCall::IssueRead() {
  if (reading_ || half_closed_ || over() || !may_start_operations()) return;
  reading_ = true;
  incoming_.Clear();
  stream_.Read(&incoming_, Op(read_tag_));
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
  read->state = StreamRead::State::kWaiting;
  AdmissionQueue& admission = worker_.admission();
  if (admission.empty() && TryStart(*read)) {
    if (read->state == StreamRead::State::kAnswered) FreeRead(read);
    return;
  }
  if (admission.Push(wait_list_, *read)) {
    Hold();  // waiting for admission
    ++waiting_;
    return;
  }
  AddError(item.tag(), QueueFull(worker_));
  FreeRead(read);
}

bool ReadBlocksCall::TryStart(StreamRead& read) {
  absl::Status refusal;
  switch (worker_.engine().StartRead(
      EngineRequest(read.item.file(), read.item.offset(), read.item.length(), read.arrival_ns),
      &OnReadDone, &read, &refusal)) {
    case storage::StartOutcome::kQueued:
      Hold();  // the engine read
      ++in_flight_;
      read.state = StreamRead::State::kInFlight;
      return true;
    case storage::StartOutcome::kCompleted:
      AddError(read.item.tag(), refusal);
      read.state = StreamRead::State::kAnswered;
      return true;
    case storage::StartOutcome::kBusy:
      return false;
  }
  return false;
}

void ReadBlocksCall::OnLeftQueue(StreamRead& read) {
  --waiting_;
  // Answered at admission, or dropped with the call: the read is done with. In flight: the
  // engine's callback frees it.
  if (read.state != StreamRead::State::kInFlight) FreeRead(&read);
  if (waiting_ == 0) IssueRead();
  Release();  // the wait for admission
}

bool ReadBlocksCall::OnReadDone(void* context, const storage::ReadResult& result) {
  auto* read = static_cast<StreamRead*>(context);
  ReadBlocksCall* call = read->call;
  --call->in_flight_;
  call->worker_.mutable_counters().reads.Add(1);
  if (!call->over()) {
    if (!result.status.ok()) {
      call->AddError(read->item.tag(), result.status);
    } else {
      v1::ReadResult* out = call->outgoing_.add_results();
      out->set_tag(read->item.tag());
      FillFromResult(*out, result, read->item.want_crc32c(), read->arrival_ns);
      call->outgoing_bytes_ += result.length;
      call->ScheduleFlush();
    }
  }
  call->FreeRead(read);
  call->Release();  // the engine read
  return false;
}

void ReadBlocksCall::AddError(uint64_t tag, const absl::Status& status) {
  if (over()) return;
  v1::ReadResult* out = outgoing_.add_results();
  out->set_tag(tag);
  FillStatus(status, out);
  ScheduleFlush();
}

void ReadBlocksCall::ScheduleFlush() {
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  Hold();  // the worker's flush list points at us until Flush()
  worker_.ScheduleFlush(this);
}

void ReadBlocksCall::Flush() {
  flush_scheduled_ = false;
  MaybeWrite();
  MaybeFinish();
  Release();  // the scheduled flush
}

void ReadBlocksCall::MaybeWrite() {
  if (writing_ || outgoing_.results_size() == 0 || over() || !may_start_operations()) return;
  // Everything gathered goes in one message, unless that would pass the message size limit:
  // then the rest waits for the next write.
  const uint64_t limit = worker_.shared().config.max_read_bytes() + (1 << 20);
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
  stream_.Write(in_write_, Op(write_tag_));
}

void ReadBlocksCall::MaybeFinish() {
  if (!half_closed_ || in_flight_ > 0 || waiting_ > 0 || writing_ || outgoing_.results_size() > 0 ||
      finish_sent() || over() || !may_start_operations()) {
    return;
  }
  CountFinish(grpc::StatusCode::OK);
  stream_.Finish(grpc::Status::OK, Op(finish_tag_));
}

}  // namespace blockread::server
