// ReadBlock and ReadBlocks: the RPCs that read.
#ifndef BLOCKREAD_SERVER_READ_CALLS_H_
#define BLOCKREAD_SERVER_READ_CALLS_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>

#include <memory>
#include <vector>

#include "blockread/v1/blockread.grpc.pb.h"
#include "server/admission_queue.h"
#include "server/call.h"
#include "server/worker.h"

namespace blockread::server {

// One unary ReadBlock. Its engine read (and its wait for admission, when the slots are busy)
// holds the call like any gRPC operation, so a cancelled or expired call lives until its read
// completes and the engine slot is never freed under the kernel.
class ReadBlockCall final : public Call, public WaitingRead {
 public:
  // Starts waiting for the next ReadBlock on `worker`'s queue.
  static void Post(Worker& worker);

 private:
  static constexpr uint8_t kFinish = kFirstMethodEvent;

  explicit ReadBlockCall(Worker& worker);
  void PostNext() override { Post(worker_); }
  void OnRequest() override;
  void Refuse(const grpc::Status& status) override { FinishWith(status); }
  void OnDone() override;
  void OnEvent(uint8_t, bool) override {}  // kFinish: the answer is out
  bool TryAdmit() override { return TryStart(); }
  void LeftQueue() override { Release(); }

  // Offers the read to the engine. False: its slots are busy (nothing happened).
  bool TryStart();
  static bool OnReadDone(void* context, const storage::ReadResult& result);
  void FinishWith(const grpc::Status& status);

  v1::ReadBlockRequest request_;
  v1::ReadBlockResponse response_;
  grpc::ServerAsyncResponseWriter<v1::ReadBlockResponse> responder_;
  CallTag finish_tag_{this, kFinish};
  WaitList wait_list_;
  uint64_t arrival_ns_ = 0;
};

// One ReadBlocks stream: reads are started as their request messages arrive, results are written
// in completion order, batched: every result that completes in one worker loop turn leaves in one
// response message. While any of its reads waits for admission the stream stops reading requests,
// so HTTP/2 flow control slows the client. Lifetime as for ReadBlockCall.
class ReadBlocksCall final : public Call, public Flushable {
 public:
  static void Post(Worker& worker);

  void Flush() override;

 private:
  static constexpr uint8_t kRead = kFirstMethodEvent;
  static constexpr uint8_t kWrite = kFirstMethodEvent + 1;
  static constexpr uint8_t kFinish = kFirstMethodEvent + 2;

  // One read of the stream, pooled per stream.
  struct StreamRead final : WaitingRead {
    enum class State : uint8_t { kWaiting, kInFlight, kAnswered };
    ReadBlocksCall* call = nullptr;
    v1::ReadItem item;
    uint64_t arrival_ns = 0;
    State state = State::kWaiting;
    bool TryAdmit() override { return call->TryStart(*this); }
    void LeftQueue() override { call->OnLeftQueue(*this); }
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
  void StartItem(const v1::ReadItem& item, uint64_t arrival_ns);
  // Offers the read to the engine. False: its slots are busy (nothing happened); otherwise it is
  // in flight or already answered (state says which).
  bool TryStart(StreamRead& read);
  void OnLeftQueue(StreamRead& read);
  static bool OnReadDone(void* context, const storage::ReadResult& result);
  void AddError(uint64_t tag, const absl::Status& status);
  void ScheduleFlush();
  void MaybeWrite();
  void MaybeFinish();
  // The client will not see anything more: it went away, or a write failed.
  bool over() const { return cancelled() || write_failed_; }
  StreamRead* NewRead();
  void FreeRead(StreamRead* read);

  grpc::ServerAsyncReaderWriter<v1::ReadBlocksResponse, v1::ReadBlocksRequest> stream_;
  v1::ReadBlocksRequest incoming_;
  v1::ReadBlocksResponse outgoing_;  // results gathered since the last write
  v1::ReadBlocksResponse in_write_;  // the message being written
  uint64_t outgoing_bytes_ = 0;
  CallTag read_tag_{this, kRead};
  CallTag write_tag_{this, kWrite};
  CallTag finish_tag_{this, kFinish};
  std::vector<std::unique_ptr<StreamRead>> reads_;
  std::vector<StreamRead*> free_reads_;
  WaitList wait_list_;
  // The caller may read this file (ReadBlocksCall::MayRead's cache).
  std::string last_allowed_file_;
  uint32_t waiting_ = 0;    // reads in the admission queue
  uint32_t in_flight_ = 0;  // reads in the engine
  bool reading_ = false;    // a Read operation is outstanding
  bool writing_ = false;    // a Write operation is outstanding
  bool half_closed_ = false;
  bool write_failed_ = false;
  bool flush_scheduled_ = false;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_READ_CALLS_H_
