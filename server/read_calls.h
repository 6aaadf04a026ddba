// ReadBlock and ReadBlocks: the RPCs that read.
//
// Both are raw methods (server/shared_state.h): requests are parsed from the ByteBuffer with
// protobuf, and a response's data leaves from the engine slot's buffer without a copy, as a slice
// lent to gRPC (server/slot_lender.h) behind a hand-written field header
// (server/response_encoding.h). Clients parse the generated messages exactly as before. Reads
// shorter than kMinZeroCopyBytes, and reads past the lender's bounds (slow clients), are copied
// and their slot is free at once.
#ifndef BLOCKREAD_SERVER_READ_CALLS_H_
#define BLOCKREAD_SERVER_READ_CALLS_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <string>
#include <vector>

#include "blockread/v1/blockread.grpc.pb.h"
#include "server/admission_queue.h"
#include "server/call.h"
#include "server/paced_reads.h"
#include "server/result_batch.h"
#include "server/slice_message.h"
#include "server/slot_lender.h"
#include "server/worker.h"

namespace blockread::server {

// Below this, copying the bytes costs less than lending the slot (a slice refcount, a handoff back
// to the worker).
inline constexpr uint64_t kMinZeroCopyBytes = 1024;

// One unary ReadBlock. Its engine read (and its wait for admission, when the slots are busy)
// holds the call like any gRPC operation, so a cancelled or expired call lives until its read
// completes and the engine slot is never freed under the kernel. A slot lent for the response is
// not the call's: it comes back when gRPC releases the slice, whether or not the call still
// exists.
class ReadBlockCall final : public Call, public WaitingRead, public PacedRead {
 public:
  // Starts waiting for the next ReadBlock on `worker`'s queue.
  static void Post(Worker& worker);

 private:
  static constexpr uint8_t kFinish = kFirstMethodEvent;

  explicit ReadBlockCall(Worker& worker);
  ~ReadBlockCall() override;
  void PostNext() override { Post(worker_); }
  void OnRequest() override;
  void Refuse(const grpc::Status& status) override { FinishWith(status); }
  void OnDone() override;
  void OnEvent(uint8_t, bool) override {}  // kFinish: the answer is out
  Admission TryAdmit() override { return TryStart(); }
  void LeftQueue() override { Release(); }
  void Resume() override;  // the rate limit lets the read start

  // Starts the read, or queues it for admission when slots are busy (or others wait).
  void EnterAdmission();
  // Offers the read to the engine (busy: nothing happened).
  Admission TryStart();
  static bool OnReadDone(void* context, const storage::ReadResult& result);
  // Answers `status`, with `response` when OK (the finish takes its own references to the
  // slices). Nothing is sent once the queue is shutting down.
  void FinishWith(const grpc::Status& status);
  void FinishWith(const grpc::Status& status, const SliceMessage& response);

  grpc::ByteBuffer request_buffer_;
  v1::ReadBlockRequest request_;
  grpc::ServerAsyncResponseWriter<SliceMessage> responder_;
  CallTag finish_tag_{this, kFinish};
  WaitList wait_list_;
  uint64_t arrival_ns_ = 0;
  uint64_t deadline_ns_ = 0;        // MonotonicNowNs clock; 0: none
  bool counted_in_flight_ = false;  // in Worker::unary_in_flight()
};

// One ReadBlocks stream: reads are started as their request messages arrive, results are written
// in completion order, batched: every result that completes in one worker loop turn leaves in one
// response message. While any of its reads waits for admission, or more than a message's worth of
// results waits to be written (the client is not reading), the stream stops reading requests, so
// HTTP/2 flow control slows the client. The slots it holds for sending (gathered results and
// slices in gRPC's hands) are bounded by its SlotAccount; results past the bound are copied.
// Lifetime as for ReadBlockCall: slices in gRPC's hands do not hold the call (gRPC may keep them
// until the call's own stream is destroyed).
class ReadBlocksCall final : public Call, public Flushable {
 public:
  static void Post(Worker& worker);
  ~ReadBlocksCall() override;

  void Flush() override;

 private:
  static constexpr uint8_t kRead = kFirstMethodEvent;
  static constexpr uint8_t kWrite = kFirstMethodEvent + 1;
  static constexpr uint8_t kFinish = kFirstMethodEvent + 2;

  // One read of the stream, pooled per stream.
  struct StreamRead final : WaitingRead, PacedRead {
    enum class State : uint8_t { kWaiting, kInFlight, kAnswered };
    ReadBlocksCall* call = nullptr;
    v1::ReadItem item;
    uint64_t arrival_ns = 0;
    State state = State::kWaiting;
    Admission TryAdmit() override { return call->TryStart(*this); }
    void LeftQueue() override { call->OnLeftQueue(*this); }
    void Resume() override { call->OnPaceDone(*this); }
  };

  explicit ReadBlocksCall(Worker& worker);
  void PostNext() override { Post(worker_); }
  void OnRequest() override { IssueRead(); }
  void Refuse(const grpc::Status& status) override;
  void OnDone() override;
  void OnEvent(uint8_t event, bool ok) override;

  void IssueRead();
  // May the caller read `file`? (A stream's reads are checked one by one.)
  bool MayRead(const std::string& file);
  // Takes `item`'s contents (the request message is parsed afresh for the next one).
  void StartItem(v1::ReadItem& item, uint64_t arrival_ns);
  // Starts `read`, or queues it for admission; answers it when the queue is full.
  void EnterAdmission(StreamRead& read);
  // `read`'s start time under the caller's rate limit has come.
  void OnPaceDone(StreamRead& read);
  // Offers the read to the engine (busy: nothing happened). Started: it is in flight or already
  // answered (state says which).
  Admission TryStart(StreamRead& read);
  void OnLeftQueue(StreamRead& read);
  static bool OnReadDone(void* context, const storage::ReadResult& result);
  void AddError(uint64_t tag, const absl::Status& status);
  // Gives back the slots of results that will never be written.
  void DropGathered();
  uint64_t write_limit() const;
  void ScheduleFlush();
  void MaybeWrite();
  void MaybeFinish();
  // The client will not see anything more: it went away, or a write failed.
  bool over() const { return cancelled() || write_failed_; }
  StreamRead* NewRead();
  void FreeRead(StreamRead* read);

  grpc::ServerAsyncReaderWriter<SliceMessage, grpc::ByteBuffer> stream_;
  grpc::ByteBuffer incoming_;
  v1::ReadBlocksRequest request_;
  // Results gathered since the last write, in completion order.
  ResultBatch gathered_;
  std::vector<grpc::Slice> slices_;  // reused by each write
  SlotAccount slots_;
  CallTag read_tag_{this, kRead};
  CallTag write_tag_{this, kWrite};
  CallTag finish_tag_{this, kFinish};
  std::vector<std::unique_ptr<StreamRead>> reads_;
  std::vector<StreamRead*> free_reads_;
  WaitList wait_list_;
  // The caller may read this file (ReadBlocksCall::MayRead's cache).
  std::string last_allowed_file_;
  bool has_allowed_file_ = false;  // last_allowed_file_ holds a verdict of the current rules
  uint32_t waiting_ = 0;           // reads in the admission queue or waiting for the rate limit
  uint32_t in_flight_ = 0;         // reads in the engine
  bool reading_ = false;           // a Read operation is outstanding
  bool writing_ = false;           // a Write operation is outstanding
  bool half_closed_ = false;
  bool write_failed_ = false;
  bool flush_scheduled_ = false;
  uint64_t deadline_ns_ = 0;  // the stream's deadline, MonotonicNowNs clock; 0: none
  bool deadline_known_ = false;
  // INVALID_ARGUMENT once a request message did not parse: the stream ends with it.
  grpc::Status finish_status_;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_READ_CALLS_H_
