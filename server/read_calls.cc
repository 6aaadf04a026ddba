#include "server/read_calls.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/strings/str_format.h"
#include "server/response_encoding.h"
#include "server/status_mapping.h"
#include "storage/clock.h"

namespace blockread::server {
namespace {

// Parses a request and empties `buffer`. Not straight from the slice (ParseFromArray): a request's
// slice may be part of a read buffer gRPC shares between the streams of one connection, which two
// workers may serve, and frees by a reference count in uninstrumented libgrpc; TSan then saw one
// worker's free race with the other's parse.
template <typename Message>
bool Parse(grpc::ByteBuffer& buffer, Message* message) {
  return grpc::SerializationTraits<Message>::Deserialize(&buffer, message).ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReadBlock

void ReadBlockCall::Post(Worker& worker) { new ReadBlockCall(worker); }

ReadBlockCall::ReadBlockCall(Worker& worker)
    : ReadPipeline(worker, RpcMethod::kReadBlock), responder_(&context_) {
  RequestCall([&](void* tag) {
    worker_.shared().service.RequestReadBlock(&context_, &request_buffer_, &responder_,
                                              worker_.queue(), worker_.queue(), tag);
  });
}

ReadBlockCall::~ReadBlockCall() {
  if (counted_in_flight_) --worker_.unary_in_flight();
}

void ReadBlockCall::OnRequest() {
  const uint64_t arrival_ns = storage::MonotonicNowNs();
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
  // A stream of one read (tag 0, which a ReadBlockResponse does not carry).
  v1::ReadItem item;
  item.mutable_file()->swap(*request_.mutable_file());
  item.set_offset(request_.offset());
  item.set_length(request_.length());
  item.set_want_crc32c(request_.want_crc32c());
  StartItem(item, arrival_ns);
}

void ReadBlockCall::OnDone() {
  // Nobody waits for the answer any more: give up the place in the queue. A read already in the
  // engine completes first (its hold keeps the call).
  if (cancelled()) DropWaiting();
}

bool ReadBlockCall::DeliverResult(const ReadFields& fields, const storage::ReadResult& result) {
  // The other fields and the data field's header, then the data: the slot's bytes as they are,
  // or a copy in the same slice.
  std::string header;
  AppendReadBlockResponseHeader(fields, result.length, &header);
  SlotLender& lender = worker_.lender();
  if (result.length >= kMinZeroCopyBytes && lender.TryHold(result.path, nullptr)) {
    const grpc::Slice slices[2] = {grpc::Slice(header), lender.Lend(HeldSlotOf(result), nullptr)};
    FinishWith(grpc::Status::OK, SliceMessage{slices, 2});
    return true;  // until gRPC releases the slice (even if Finish could not start)
  }
  header.append(static_cast<const char*>(result.data), result.length);
  const grpc::Slice slice(header);
  FinishWith(grpc::Status::OK, SliceMessage{&slice, 1});
  return false;
}

void ReadBlockCall::DeliverError(uint64_t, const absl::Status& status) {
  FinishWith(ToGrpcStatus(status));
}

void ReadBlockCall::FinishWith(const grpc::Status& status) { FinishWith(status, SliceMessage()); }

void ReadBlockCall::FinishWith(const grpc::Status& status, const SliceMessage& response) {
  FinishUnary(responder_, response, status, finish_tag_);  // takes its own references to the slices
}

// ---------------------------------------------------------------------------------------------
// ReadBlocks

void ReadBlocksCall::Post(Worker& worker) { new ReadBlocksCall(worker); }

ReadBlocksCall::ReadBlocksCall(Worker& worker)
    : ReadPipeline(worker, RpcMethod::kReadBlocks), stream_(&context_) {
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
    case kRead:
      reading_ = false;
      if (!ok) {  // the client half-closed (or the stream broke)
        half_closed_ = true;
        MaybeFinish();
        return;
      }
      OnRequestMessage();
      return;
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

void ReadBlocksCall::OnRequestMessage() {
  if (!Parse(incoming_, &request_)) {
    // Nothing more is read; earlier reads are answered, then the stream ends with this.
    finish_status_ = ToGrpcStatus(absl::InvalidArgumentError("malformed ReadBlocksRequest"));
    half_closed_ = true;
    MaybeFinish();
    return;
  }
  // The rules were reloaded since this stream was accepted: its next items are judged by the new
  // ones. A revoked credential ends the stream (earlier reads are answered first).
  if (worker_.CurrentAccessGeneration() != policy_generation()) {
    if (grpc::Status accepted = worker_.Accept(*this, context_); !accepted.ok()) {
      finish_status_ = accepted;
      half_closed_ = true;
      MaybeFinish();
      return;
    }
    ForgetAccessVerdicts();
  }
  const uint64_t arrival_ns = storage::MonotonicNowNs();
  for (v1::ReadItem& item : *request_.mutable_reads()) StartItem(item, arrival_ns);
  IssueRead();
}

void ReadBlocksCall::OnDone() {
  if (!cancelled()) return;
  DropWaiting();
  DropGathered();
}

void ReadBlocksCall::OnWaitEnded() {
  IssueRead();
  MaybeFinish();
}

void ReadBlocksCall::IssueRead() {
  if (reading_ || half_closed_ || over() || !may_start_operations()) return;
  // Backpressure: while reads wait for slots or the rate limit, or results pile up because the
  // client does not read them, stop reading the stream (HTTP/2 flow control then slows the
  // client). The last waiting read to stop waiting, or the next write, resumes reading.
  if (waiting() > 0 || gathered_.size() > write_limit()) return;
  reading_ = true;
  stream_.Read(&incoming_, Op(read_tag_));
}

bool ReadBlocksCall::DeliverResult(const ReadFields& fields, const storage::ReadResult& result) {
  bool keep_slot = false;
  if (result.length >= kMinZeroCopyBytes && worker_.lender().TryHold(result.path, &slots_)) {
    // The result's header now; its data goes from the slot when the message is written.
    gathered_.AddHeld(fields, HeldSlotOf(result));
    keep_slot = true;
  } else {
    gathered_.AddCopied(fields, result.data, result.length);
  }
  ScheduleFlush();
  return keep_slot;
}

void ReadBlocksCall::DeliverError(uint64_t tag, const absl::Status& status) {
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
  if (!half_closed_ || in_flight() > 0 || waiting() > 0 || writing_ || !gathered_.empty() ||
      finish_sent() || over() || !may_start_operations()) {
    return;
  }
  CountFinish(finish_status_.error_code());
  stream_.Finish(finish_status_, Op(finish_tag_));
}

}  // namespace blockread::server
