#include "client/async_read_stream.h"

namespace blockread::client {

AsyncReadStream::AsyncReadStream(v1::BlockRead::Stub& stub, grpc::CompletionQueue& queue,
                                 const std::string& token) {
  if (!token.empty()) context_.AddMetadata("authorization", "Bearer " + token);
  call_ = stub.PrepareAsyncReadBlocks(&context_, &queue);
  call_->StartCall(TagOf(Op::kStart));
}

AsyncReadStream* AsyncReadStream::Of(void* tag) { return static_cast<Tag*>(tag)->stream; }

AsyncReadStream::Event AsyncReadStream::OnCompletion(void* tag, bool ok,
                                                     v1::ReadBlocksResponse* response) {
  switch (static_cast<Tag*>(tag)->op) {
    case Op::kStart:
      if (!ok) {
        read_done_ = true;  // the call failed at once: Finish says why
        MaybeFinish();
        return Event::kNone;
      }
      started_ = true;
      call_->Read(&response_, TagOf(Op::kRead));
      if (close_requested_) CloseSend();
      return Event::kWritable;
    case Op::kWrite:
      writing_ = false;
      if (!ok) broken_ = true;
      if (close_requested_) CloseSend();
      MaybeFinish();
      return ok ? Event::kWritable : Event::kWriteFailed;
    case Op::kRead:
      if (!ok) {
        read_done_ = true;
        MaybeFinish();
        return Event::kNone;
      }
      response->Swap(&response_);
      response_.Clear();
      call_->Read(&response_, TagOf(Op::kRead));
      return Event::kResponse;
    case Op::kWritesDone:
      closing_ = false;
      MaybeFinish();
      return Event::kNone;
    case Op::kFinish:
      ended_ = true;
      return Event::kEnded;
  }
  return Event::kNone;
}

void AsyncReadStream::Write(v1::ReadBlocksRequest&& request) {
  request_ = std::move(request);
  writing_ = true;
  call_->Write(request_, TagOf(Op::kWrite));
}

void AsyncReadStream::CloseSend() {
  close_requested_ = true;
  // WritesDone only on a started call, between writes, once; a broken stream is ending anyway.
  if (!started_ || writing_ || writes_done_sent_ || broken_ || read_done_) return;
  writes_done_sent_ = closing_ = true;
  call_->WritesDone(TagOf(Op::kWritesDone));
}

void AsyncReadStream::MaybeFinish() {
  if (read_done_ && !writing_ && !closing_ && !finishing_) {
    finishing_ = true;
    call_->Finish(&status_, TagOf(Op::kFinish));
  }
}

}  // namespace blockread::client
