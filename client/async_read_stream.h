// One ReadBlocks call driven asynchronously on a completion queue that its owner polls, so one
// thread can keep several streams busy (the load client's stream threads, Read() coalescing).
#ifndef BLOCKREAD_CLIENT_ASYNC_READ_STREAM_H_
#define BLOCKREAD_CLIENT_ASYNC_READ_STREAM_H_

#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/support/async_stream.h>

#include <memory>

#include "blockread/v1/blockread.grpc.pb.h"

namespace blockread::client {

// Keeps gRPC's rules for an async bidirectional stream: one write and one read outstanding at a
// time, WritesDone only between writes, Finish only after the last read, and the stream alive
// until Finish completes. The owner hands every event of the queue to Of(tag)->OnCompletion().
// Not thread-safe: the thread that polls the queue owns the stream and calls everything.
class AsyncReadStream {
 public:
  enum class Event {
    kNone,         // bookkeeping only (the call started, a half-close completed)
    kWritable,     // CanWrite() may have become true (started, or a write completed)
    kWriteFailed,  // the stream broke while sending; it ends soon, with a status
    kResponse,     // a response message arrived (see OnCompletion)
    kEnded,        // the call is over: status() says how; the stream may be destroyed now
  };

  // Starts the call on `queue`; `stub` and `queue` must outlive the stream.
  // `token`, when not empty, goes with the call as "authorization: Bearer <token>".
  AsyncReadStream(v1::BlockRead::Stub& stub, grpc::CompletionQueue& queue,
                  const std::string& token);
  // REQUIRES: ended() (gRPC still holds the tags until Finish completes).
  ~AsyncReadStream() = default;

  // The stream an event's tag belongs to (every tag this class posts points into its stream).
  static AsyncReadStream* Of(void* tag);
  // Handles one completion of this stream. On kResponse, the message is swapped into
  // `*response` and the next read is posted.
  Event OnCompletion(void* tag, bool ok, v1::ReadBlocksResponse* response);

  // Not once the stream is ending (its reads are done, Finish is or will be pending): a write
  // then could complete after kEnded, when the owner has already let go of the stream.
  bool CanWrite() const {
    return started_ && !writing_ && !close_requested_ && !broken_ && !read_done_;
  }
  // Sends `request`, which is moved in (it must live until the write completes).
  // REQUIRES: CanWrite().
  void Write(v1::ReadBlocksRequest&& request);
  // Half-closes (after the write in flight, if any): the server answers what it has, then ends
  // the call.
  void CloseSend();
  // Ends the call now (from the owning thread); kEnded follows, with CANCELLED.
  void Cancel() { context_.TryCancel(); }
  bool ended() const { return ended_; }
  // The call started (StartCall completed successfully).
  bool started() const { return started_; }
  const grpc::Status& status() const { return status_; }

 private:
  enum class Op { kStart, kWrite, kRead, kWritesDone, kFinish };
  struct Tag {
    AsyncReadStream* stream;
    Op op;
  };
  void* TagOf(Op op) { return &tags_[static_cast<int>(op)]; }
  void MaybeFinish();

  Tag tags_[5] = {{this, Op::kStart},
                  {this, Op::kWrite},
                  {this, Op::kRead},
                  {this, Op::kWritesDone},
                  {this, Op::kFinish}};
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::ReadBlocksRequest, v1::ReadBlocksResponse>>
      call_;
  v1::ReadBlocksRequest request_;    // the message being written
  v1::ReadBlocksResponse response_;  // the message being read
  grpc::Status status_;
  bool started_ = false;           // StartCall completed
  bool writing_ = false;           // a Write is outstanding
  bool broken_ = false;            // a Write failed: send nothing more
  bool close_requested_ = false;   // CloseSend() called
  bool writes_done_sent_ = false;  // WritesDone posted (once)
  bool closing_ = false;           // WritesDone outstanding
  bool read_done_ = false;         // the last read came back (false): the server ended the call
  bool finishing_ = false;         // Finish outstanding
  bool ended_ = false;             // Finish completed
};

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_ASYNC_READ_STREAM_H_
