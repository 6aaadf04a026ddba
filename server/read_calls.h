// ReadBlock and ReadBlocks: the RPCs that read, each a ReadPipeline (server/read_pipeline.h)
// with its own way of delivering results.
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
#include "server/read_pipeline.h"
#include "server/result_batch.h"
#include "server/slice_message.h"
#include "server/slot_lender.h"
#include "server/worker.h"

namespace blockread::server {

// One unary ReadBlock: a pipeline of one read, finished with its result. A slot lent for the
// response is not the call's: it comes back when gRPC releases the slice, whether or not the call
// still exists.
class ReadBlockCall final : public ReadPipeline {
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
  bool over() const override { return cancelled(); }
  bool DeliverResult(const ReadFields& fields, const storage::ReadResult& result) override;
  void DeliverError(uint64_t tag, const absl::Status& status) override;

  // Answers `status`, with `response` when OK (the finish takes its own references to the
  // slices). Nothing is sent once the queue is shutting down.
  void FinishWith(const grpc::Status& status);
  void FinishWith(const grpc::Status& status, const SliceMessage& response);

  grpc::ByteBuffer request_buffer_;
  v1::ReadBlockRequest request_;
  grpc::ServerAsyncResponseWriter<SliceMessage> responder_;
  CallTag finish_tag_{this, kFinish};
  bool counted_in_flight_ = false;  // in Worker::unary_in_flight()
};

// One ReadBlocks stream: reads are started as their request messages arrive, results are written
// in completion order, batched: every result that completes in one worker loop turn leaves in one
// response message. While any of its reads waits (for admission or the rate limit), or more than
// a message's worth of results waits to be written (the client is not reading), the stream stops
// reading requests, so HTTP/2 flow control slows the client. The slots it holds for sending
// (gathered results and slices in gRPC's hands) are bounded by its SlotAccount; results past the
// bound are copied. Slices in gRPC's hands do not hold the call (gRPC may keep them until the
// call's own stream is destroyed).
class ReadBlocksCall final : public ReadPipeline, public Flushable {
 public:
  static void Post(Worker& worker);
  ~ReadBlocksCall() override;

  void Flush() override;

 private:
  static constexpr uint8_t kRead = kFirstMethodEvent;
  static constexpr uint8_t kWrite = kFirstMethodEvent + 1;
  static constexpr uint8_t kFinish = kFirstMethodEvent + 2;

  explicit ReadBlocksCall(Worker& worker);
  void PostNext() override { Post(worker_); }
  void OnRequest() override { IssueRead(); }
  void Refuse(const grpc::Status& status) override;
  void OnDone() override;
  void OnEvent(uint8_t event, bool ok) override;
  bool over() const override { return cancelled() || write_failed_; }
  bool DeliverResult(const ReadFields& fields, const storage::ReadResult& result) override;
  void DeliverError(uint64_t tag, const absl::Status& status) override;
  void OnWaitEnded() override;

  // A request message arrived: its reads start.
  void OnRequestMessage();
  void IssueRead();
  // Gives back the slots of results that will never be written.
  void DropGathered();
  uint64_t write_limit() const;
  void ScheduleFlush();
  void MaybeWrite();
  void MaybeFinish();

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
  bool reading_ = false;  // a Read operation is outstanding
  bool writing_ = false;  // a Write operation is outstanding
  bool half_closed_ = false;
  bool write_failed_ = false;
  bool flush_scheduled_ = false;
  // INVALID_ARGUMENT once a request message did not parse: the stream ends with it.
  grpc::Status finish_status_;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_READ_CALLS_H_
