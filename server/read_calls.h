// ReadBlock and ReadBlocks: the RPCs that read.
#ifndef BLOCKREAD_SERVER_READ_CALLS_H_
#define BLOCKREAD_SERVER_READ_CALLS_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>

#include <memory>
#include <vector>

#include "blockread/v1/blockread.grpc.pb.h"
#include "server/call.h"
#include "server/worker.h"

namespace blockread::server {

// One unary ReadBlock. Lifetime: from Post() (waiting for a request) until its request failed
// (shutdown), or until the read is done (the engine's callback has run), Finish has come back
// and the done notice has come back; a cancelled or expired call with its read in flight lives
// until the read completes, so its engine slot is never freed under the kernel.
class ReadBlockCall final : public Call, public DeferredRead {
 public:
  // Starts waiting for the next ReadBlock on `worker`'s queue.
  static void Post(Worker* worker);

  void OnEvent(uint8_t event, bool ok) override;
  bool RetryStart() override;

 private:
  enum Event : uint8_t { kRequest, kFinish, kDone };
  explicit ReadBlockCall(Worker* worker);
  // StartRead; the status of the attempt (RESOURCE_EXHAUSTED: slots busy).
  absl::Status TryStart();
  static bool OnReadDone(void* context, const storage::ReadResult& result);
  void FinishWith(const grpc::Status& status);
  void MaybeDelete();

  Worker* const worker_;
  grpc::ServerContext context_;
  v1::ReadBlockRequest request_;
  v1::ReadBlockResponse response_;
  grpc::ServerAsyncResponseWriter<v1::ReadBlockResponse> responder_;
  CallTag request_tag_{this, kRequest};
  CallTag finish_tag_{this, kFinish};
  CallTag done_tag_{this, kDone};
  uint64_t arrival_ns_ = 0;
  bool read_in_flight_ = false;
  bool deferred_ = false;
  bool finish_sent_ = false;  // a status went out (else a cancellation counts as CANCELLED)
  bool finish_pending_ = false;
  bool done_pending_ = false;
  bool cancelled_ = false;
};

// One ReadBlocks stream: reads are started as their request messages arrive, results are written
// in completion order, batched: every result that completes in one worker loop turn leaves in one
// response message. Lifetime as for ReadBlockCall: nothing is freed while a read is in flight.
class ReadBlocksCall final : public Call, public Flushable {
 public:
  static void Post(Worker* worker);

  void OnEvent(uint8_t event, bool ok) override;
  void Flush() override;

 private:
  enum Event : uint8_t { kRequest, kRead, kWrite, kFinish, kDone };
  // One read of the stream, pooled per stream.
  struct StreamRead final : DeferredRead {
    ReadBlocksCall* call = nullptr;
    v1::ReadItem item;
    uint64_t arrival_ns = 0;
    bool RetryStart() override;
  };

  explicit ReadBlocksCall(Worker* worker);
  void IssueRead();
  void StartItem(const v1::ReadItem& item, uint64_t arrival_ns);
  absl::Status TryStart(StreamRead& read);
  static bool OnReadDone(void* context, const storage::ReadResult& result);
  void AddError(StreamRead& read, const absl::Status& status);
  void ScheduleFlush();
  void MaybeWrite();
  void MaybeFinish();
  void MaybeDelete();
  StreamRead* NewRead();
  void FreeRead(StreamRead* read);

  Worker* const worker_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<v1::ReadBlocksResponse, v1::ReadBlocksRequest> stream_;
  v1::ReadBlocksRequest incoming_;
  v1::ReadBlocksResponse outgoing_;  // results gathered since the last write
  v1::ReadBlocksResponse in_write_;  // the message being written
  uint64_t outgoing_bytes_ = 0;
  CallTag request_tag_{this, kRequest};
  CallTag read_tag_{this, kRead};
  CallTag write_tag_{this, kWrite};
  CallTag finish_tag_{this, kFinish};
  CallTag done_tag_{this, kDone};
  std::vector<std::unique_ptr<StreamRead>> reads_;
  std::vector<StreamRead*> free_reads_;
  std::vector<StreamRead*> deferred_;
  uint32_t in_flight_ = 0;
  bool reading_ = false;
  bool writing_ = false;
  bool half_closed_ = false;
  bool finish_sent_ = false;
  bool finish_pending_ = false;
  bool done_pending_ = false;
  bool cancelled_ = false;
  bool flush_scheduled_ = false;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_READ_CALLS_H_
