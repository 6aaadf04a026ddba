#include "server/read_calls.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_format.h"
#include "proto/wire/crc32c.h"
#include "server/proto_conversions.h"
#include "server/response_encoding.h"
#include "server/status_mapping.h"
#include "storage/clock.h"

namespace blockread::server {
namespace {

// What a successful read's response says besides its data.
ReadFields FieldsOf(const storage::ReadResult& result, uint64_t tag, bool want_crc32c,
                    uint64_t arrival_ns) {
  ReadFields fields;
  fields.tag = tag;
  fields.path = ToProto(result.path);
  fields.fallback = ToProto(result.path, result.fallback);
  fields.has_crc32c = want_crc32c;
  if (want_crc32c) fields.crc32c = wire::Crc32c(result.data, result.length);
  fields.queue_ns = result.queue_ns;
  fields.device_ns = result.device_ns;
  fields.total_ns = storage::MonotonicNowNs() - arrival_ns;
  return fields;
}

absl::Status QueueFull(Worker& worker) {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "server overloaded: worker %d already holds max_queued_reads = %u waiting reads",
      worker.index(), worker.shared().config.max_queued_reads()));
}

// A read found the engine's slots busy: count it when gRPC holds some of them (zero-copy responses
// not yet released, e.g. to slow clients), so the pool can be sized for them.
void CountSlotWait(Worker& worker) {
  if (worker.lender().held() > 0) worker.mutable_counters().slot_waits.Add(1);
}

// The call's deadline on the MonotonicNowNs clock (what the engine and the rate limit compare
// against), from gRPC's wall-clock deadline; 0 when the call has none.
uint64_t MonotonicDeadlineNs(const grpc::ServerContext& context, uint64_t now_ns) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return 0;
  const int64_t left = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           deadline - std::chrono::system_clock::now())
                           .count();
  return now_ns + static_cast<uint64_t>(std::max<int64_t>(left, 1));  // 1: already past, not "none"
}

// When the caller's rate limit (server/rate_limit.h) lets a read of `length` bytes at `offset`
// arriving at `now_ns` start: now, later (the read is parked until then), or never: `refusal` is
// what to answer, INVALID_ARGUMENT for a range the engine would refuse anyway (checked first, so an
// invalid read is never charged: length 2^64-1 must not move the identity's schedule) or
// RESOURCE_EXHAUSTED when it could not start before the call's deadline. Identities without a
// limit pay nothing here; the engine validates their reads.
struct Pacing {
  uint64_t start_ns = 0;
  absl::Status refusal;
};

Pacing Pace(Worker& worker, const Identity& identity, uint64_t offset, uint64_t length,
            uint64_t deadline_ns, uint64_t now_ns) {
  Pacing pacing{now_ns, absl::OkStatus()};
  if (identity.limiter == nullptr) return pacing;
  storage::EngineConfig limits;
  limits.max_read_bytes = worker.shared().config.max_read_bytes();
  if (absl::Status valid = storage::ValidateReadRange(limits, offset, length); !valid.ok()) {
    pacing.refusal = std::move(valid);
    return pacing;
  }
  const uint64_t latest_start_ns =
      deadline_ns == 0 ? std::numeric_limits<uint64_t>::max() : deadline_ns;
  pacing.start_ns = identity.limiter->Reserve(length, now_ns, latest_start_ns);
  if (pacing.start_ns == RateLimiter::kRefused) {
    IdentityUsage::Add(identity.usage->refused, 1);
    pacing.refusal = absl::ResourceExhaustedError(absl::StrFormat(
        "identity '%s' is over its rate limit (max_iops = %u, max_bytes_per_second = %u): this "
        "read could not start before the call's deadline",
        identity.name, identity.limiter->max_iops(), identity.limiter->max_bytes_per_second()));
  } else if (pacing.start_ns > now_ns) {
    IdentityUsage::Add(identity.usage->paced, 1);
    IdentityUsage::Add(identity.usage->pace_wait_ns, pacing.start_ns - now_ns);
  }
  return pacing;
}

void CountServed(const Identity& identity, uint64_t bytes) {
  if (identity.usage == nullptr) return;  // no --auth
  IdentityUsage::Add(identity.usage->reads, 1);
  IdentityUsage::Add(identity.usage->bytes, bytes);
}

// Parses a request and empties `buffer`. A message in one slice (what a small request is) is
// parsed straight from it: protobuf's stream over gRPC's slices cost about as much again as the
// parse itself.
template <typename Message>
bool Parse(grpc::ByteBuffer& buffer, Message* message) {
  grpc::Slice slice;
  if (buffer.TrySingleSlice(&slice).ok()) {
    buffer.Clear();
    return message->ParseFromArray(slice.begin(), static_cast<int>(slice.size()));
  }
  return grpc::SerializationTraits<Message>::Deserialize(&buffer, message).ok();
}

storage::ReadRequest EngineRequest(const std::string& file, uint64_t offset, uint64_t length,
                                   uint64_t arrival_ns, uint64_t deadline_ns) {
  storage::ReadRequest request;
  request.file = file;
  request.offset = offset;
  request.length = length;
  request.arrival_ns = arrival_ns;
  request.deadline_ns = deadline_ns;
  return request;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReadBlock

void ReadBlockCall::Post(Worker& worker) { new ReadBlockCall(worker); }

ReadBlockCall::ReadBlockCall(Worker& worker)
    : Call(worker, RpcMethod::kReadBlock), responder_(&context_) {
  RequestCall([&](void* tag) {
    worker_.shared().service.RequestReadBlock(&context_, &request_buffer_, &responder_,
                                              worker_.queue(), worker_.queue(), tag);
  });
}

ReadBlockCall::~ReadBlockCall() {
  if (counted_in_flight_) --worker_.unary_in_flight();
}

void ReadBlockCall::OnRequest() {
  arrival_ns_ = storage::MonotonicNowNs();
  // Each open unary call may pin a response in gRPC's buffers until its client reads it: bound
  // how many a worker holds, so unread calls cannot grow memory without limit.
  const uint32_t limit = worker_.shared().config.max_unary_in_flight();
  if (worker_.unary_in_flight() >= limit) {
    FinishWith(ToGrpcStatus(absl::ResourceExhaustedError(absl::StrFormat(
        "server overloaded: worker %d already holds max_unary_in_flight = %u ReadBlock calls",
        worker_.index(), limit))));
    return;
  }
  ++worker_.unary_in_flight();
  counted_in_flight_ = true;
  if (!Parse(request_buffer_, &request_)) {
    FinishWith(ToGrpcStatus(absl::InvalidArgumentError("malformed ReadBlockRequest")));
    return;
  }
  if (!identity().MayRead(request_.file())) {
    FinishWith(ToGrpcStatus(ReadDenied(identity(), request_.file())));
    return;
  }
  deadline_ns_ = MonotonicDeadlineNs(context_, arrival_ns_);
  const Pacing pacing =
      Pace(worker_, identity(), request_.offset(), request_.length(), deadline_ns_, arrival_ns_);
  if (!pacing.refusal.ok()) {
    FinishWith(ToGrpcStatus(pacing.refusal));
    return;
  }
  if (pacing.start_ns > arrival_ns_) {
    Hold();  // waiting for the rate limit
    worker_.paced().Park(pacing.start_ns, *this);
    return;
  }
  EnterAdmission();
}

void ReadBlockCall::Resume() {
  if (!cancelled() && may_start_operations()) EnterAdmission();
  Release();  // the wait for the rate limit
}

void ReadBlockCall::EnterAdmission() {
  AdmissionQueue& admission = worker_.admission();
  // Behind the reads already waiting: a newcomer never overtakes them.
  if (admission.empty() && TryStart() == Admission::kStarted) return;
  CountSlotWait(worker_);
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

Admission ReadBlockCall::TryStart() {
  absl::Status refusal;
  switch (worker_.engine().StartRead(EngineRequest(request_.file(), request_.offset(),
                                                   request_.length(), arrival_ns_, deadline_ns_),
                                     &OnReadDone, this, &refusal)) {
    case storage::StartOutcome::kQueued:
      Hold();  // the engine read
      return Admission::kStarted;
    case storage::StartOutcome::kCompleted:
      FinishWith(ToGrpcStatus(refusal));
      return Admission::kStarted;
    case storage::StartOutcome::kBusy:
      return Admission::kSlotsBusy;
    case storage::StartOutcome::kDeviceBusy:
    case storage::StartOutcome::kOpening:       // only this call waits while its file is opened
    case storage::StartOutcome::kNameChanging:  // or while its name changes
      return Admission::kDeviceBusy;
  }
  return Admission::kSlotsBusy;
}

bool ReadBlockCall::OnReadDone(void* context, const storage::ReadResult& result) {
  auto* call = static_cast<ReadBlockCall*>(context);
  call->worker_.mutable_counters().reads.Add(1);
  bool keep_slot = false;
  if (!call->cancelled()) {
    if (!result.status.ok()) {
      call->FinishWith(
          ToGrpcStatus(ReadFailed(call->request_.file(), call->request_.offset(), result.status)));
    } else {
      CountServed(call->identity(), result.length);
      // The other fields and the data field's header, then the data: the slot's bytes as they
      // are, or a copy in the same slice.
      std::string header;
      AppendReadBlockResponseHeader(
          FieldsOf(result, 0, call->request_.want_crc32c(), call->arrival_ns_), result.length,
          &header);
      SlotLender& lender = call->worker_.lender();
      if (result.length >= kMinZeroCopyBytes && lender.TryHold(result.path, nullptr)) {
        const grpc::Slice slices[2] = {grpc::Slice(header),
                                       lender.Lend(HeldSlotOf(result), nullptr)};
        keep_slot = true;  // until gRPC releases the slice (even if Finish cannot start)
        call->FinishWith(grpc::Status::OK, SliceMessage{slices, 2});
      } else {
        header.append(static_cast<const char*>(result.data), result.length);
        const grpc::Slice slice(header);
        call->FinishWith(grpc::Status::OK, SliceMessage{&slice, 1});
      }
    }
  }
  call->Release();  // the engine read
  return keep_slot;
}

void ReadBlockCall::FinishWith(const grpc::Status& status) { FinishWith(status, SliceMessage()); }

void ReadBlockCall::FinishWith(const grpc::Status& status, const SliceMessage& response) {
  FinishUnary(responder_, response, status, finish_tag_);  // takes its own references to the slices
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

ReadBlocksCall::~ReadBlocksCall() {
  DropGathered();
  worker_.lender().Close(slots_);
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
      if (!Parse(incoming_, &request_)) {
        // Nothing more is read; earlier reads are answered, then the stream ends with this.
        finish_status_ = ToGrpcStatus(absl::InvalidArgumentError("malformed ReadBlocksRequest"));
        half_closed_ = true;
        MaybeFinish();
        return;
      }
      // The rules were reloaded since this stream was accepted: its next items are judged by the
      // new ones. A revoked credential ends the stream (earlier reads are answered first).
      if (worker_.CurrentAccessGeneration() != policy_generation()) {
        if (grpc::Status accepted = worker_.Accept(*this, context_); !accepted.ok()) {
          finish_status_ = accepted;
          half_closed_ = true;
          MaybeFinish();
          return;
        }
        has_allowed_file_ = false;
      }
      const uint64_t arrival_ns = storage::MonotonicNowNs();
      if (!deadline_known_) {  // a stream's deadline is fixed: converted once
        deadline_ns_ = MonotonicDeadlineNs(context_, arrival_ns);
        deadline_known_ = true;
      }
      for (v1::ReadItem& item : *request_.mutable_reads()) StartItem(item, arrival_ns);
      IssueRead();
      return;
    }
    case kWrite:
      writing_ = false;
      if (!ok) {
        write_failed_ = true;
        DropGathered();
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
  DropGathered();
}

void ReadBlocksCall::IssueRead() {
  if (reading_ || half_closed_ || over() || !may_start_operations()) return;
  // Backpressure: while reads wait for slots, or results pile up because the client does not read
  // them, stop reading the stream (HTTP/2 flow control then slows the client). The last waiting
  // read to leave the admission queue, or the next write, resumes reading.
  if (waiting_ > 0 || gathered_.size() > write_limit()) return;
  reading_ = true;
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

bool ReadBlocksCall::MayRead(const std::string& file) {
  // A stream mostly reads few files: remember the last one allowed rather than match patterns
  // for every read.
  if (has_allowed_file_ && file == last_allowed_file_) return true;
  if (!identity().MayRead(file)) return false;
  last_allowed_file_ = file;
  has_allowed_file_ = true;
  return true;
}

void ReadBlocksCall::StartItem(v1::ReadItem& item, uint64_t arrival_ns) {
  if (!MayRead(item.file())) {
    AddError(item.tag(), ReadDenied(identity(), item.file()));
    return;
  }
  const Pacing pacing =
      Pace(worker_, identity(), item.offset(), item.length(), deadline_ns_, arrival_ns);
  if (!pacing.refusal.ok()) {
    AddError(item.tag(), pacing.refusal);
    return;
  }
  StreamRead* read = NewRead();
  read->item.Swap(&item);  // no copy of the file name: the request is parsed afresh next time
  read->arrival_ns = arrival_ns;
  read->state = StreamRead::State::kWaiting;
  if (pacing.start_ns > arrival_ns) {
    Hold();      // waiting for the rate limit
    ++waiting_;  // the stream reads no more requests meanwhile
    worker_.paced().Park(pacing.start_ns, *read);
    return;
  }
  EnterAdmission(*read);
}

void ReadBlocksCall::OnPaceDone(StreamRead& read) {
  --waiting_;
  if (over() || !may_start_operations()) {
    FreeRead(&read);
  } else {
    EnterAdmission(read);
  }
  IssueRead();
  MaybeFinish();
  Release();  // the wait for the rate limit
}

void ReadBlocksCall::EnterAdmission(StreamRead& read) {
  AdmissionQueue& admission = worker_.admission();
  if (admission.empty() && TryStart(read) == Admission::kStarted) {
    if (read.state == StreamRead::State::kAnswered) FreeRead(&read);
    return;
  }
  CountSlotWait(worker_);
  if (admission.Push(wait_list_, read)) {
    Hold();  // waiting for admission
    ++waiting_;
    return;
  }
  AddError(read.item.tag(), QueueFull(worker_));
  FreeRead(&read);
}

Admission ReadBlocksCall::TryStart(StreamRead& read) {
  absl::Status refusal;
  switch (
      worker_.engine().StartRead(EngineRequest(read.item.file(), read.item.offset(),
                                               read.item.length(), read.arrival_ns, deadline_ns_),
                                 &OnReadDone, &read, &refusal)) {
    case storage::StartOutcome::kQueued:
      Hold();  // the engine read
      ++in_flight_;
      read.state = StreamRead::State::kInFlight;
      return Admission::kStarted;
    case storage::StartOutcome::kCompleted:
      AddError(read.item.tag(), refusal);
      read.state = StreamRead::State::kAnswered;
      return Admission::kStarted;
    case storage::StartOutcome::kBusy:
      return Admission::kSlotsBusy;
    case storage::StartOutcome::kDeviceBusy:
    case storage::StartOutcome::kOpening:       // only this call waits while its file is opened
    case storage::StartOutcome::kNameChanging:  // or while its name changes
      return Admission::kDeviceBusy;
  }
  return Admission::kSlotsBusy;
}

void ReadBlocksCall::OnLeftQueue(StreamRead& read) {
  --waiting_;
  // Answered at admission, or dropped with the call: the read is done with. In flight: the
  // engine's callback frees it.
  if (read.state != StreamRead::State::kInFlight) FreeRead(&read);
  IssueRead();
  Release();  // the wait for admission
}

bool ReadBlocksCall::OnReadDone(void* context, const storage::ReadResult& result) {
  auto* read = static_cast<StreamRead*>(context);
  ReadBlocksCall* call = read->call;
  --call->in_flight_;
  call->worker_.mutable_counters().reads.Add(1);
  bool keep_slot = false;
  if (!call->over()) {
    if (!result.status.ok()) {
      call->AddError(read->item.tag(),
                     ReadFailed(read->item.file(), read->item.offset(), result.status));
    } else {
      CountServed(call->identity(), result.length);
      const ReadFields fields =
          FieldsOf(result, read->item.tag(), read->item.want_crc32c(), read->arrival_ns);
      if (result.length >= kMinZeroCopyBytes &&
          call->worker_.lender().TryHold(result.path, &call->slots_)) {
        // The result's header now; its data goes from the slot when the message is written.
        call->gathered_.AddHeld(fields, HeldSlotOf(result));
        keep_slot = true;
      } else {
        call->gathered_.AddCopied(fields, result.data, result.length);
      }
      call->ScheduleFlush();
    }
  }
  call->FreeRead(read);
  call->Release();  // the engine read
  return keep_slot;
}

void ReadBlocksCall::AddError(uint64_t tag, const absl::Status& status) {
  if (over()) return;
  v1::ReadResult out;
  out.set_tag(tag);
  FillStatus(status, &out);
  gathered_.AddMessage(out);
  ScheduleFlush();
}

void ReadBlocksCall::DropGathered() {
  gathered_.Clear([this](const HeldSlot& slot) { worker_.lender().Drop(slot, &slots_); });
}

uint64_t ReadBlocksCall::write_limit() const {
  // A message gathers up to one more MiB than the largest read (the server's send limit has room).
  return worker_.shared().config.max_read_bytes() + (1 << 20);
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
  if (writing_ || gathered_.empty() || over() || !may_start_operations()) return;
  // Everything gathered goes in one message, unless that would pass the message size limit: then
  // the rest waits for the next write. Oldest first.
  const ResultBatch::Message next = gathered_.Next(write_limit());
  const size_t bytes_end = next.bytes_end;

  // One slice holds the headers (and copied results) of the whole message; the held results'
  // data slices go between its pieces. The slab is the only copy, of a few dozen bytes per held
  // result.
  const grpc::Slice slab(gathered_.bytes().data(), bytes_end);
  SlotLender& lender = worker_.lender();
  slices_.clear();
  size_t piece_begin = 0;
  for (size_t i = 0; i < next.count; ++i) {
    const ResultBatch::Result& result = gathered_.result(i);
    if (!result.held) continue;
    slices_.push_back(
        piece_begin == 0 && result.end == bytes_end ? slab : slab.sub(piece_begin, result.end));
    slices_.push_back(lender.Lend(result.slot, &slots_));
    piece_begin = result.end;
  }
  if (piece_begin < bytes_end) {
    slices_.push_back(piece_begin == 0 ? slab : slab.sub(piece_begin, bytes_end));
  }
  // What is left waits for the next write.
  gathered_.Consume(next);
  if (!gathered_.empty()) ScheduleFlush();

  writing_ = true;
  // The message takes its own references to the slices.
  stream_.Write(SliceMessage{slices_.data(), slices_.size()}, Op(write_tag_));
  slices_.clear();
  IssueRead();  // in case results had piled up past the limit
}

void ReadBlocksCall::MaybeFinish() {
  if (!half_closed_ || in_flight_ > 0 || waiting_ > 0 || writing_ || !gathered_.empty() ||
      finish_sent() || over() || !may_start_operations()) {
    return;
  }
  CountFinish(finish_status_.error_code());
  stream_.Finish(finish_status_, Op(finish_tag_));
}

}  // namespace blockread::server
