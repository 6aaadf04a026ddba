// A response handed to gRPC as the slices it is made of.
//
// A grpc::ByteBuffer given to Write or Finish is copied by gRPC (SerializationTraits<ByteBuffer>
// assigns it: every slice referenced again), then ours is destroyed (every slice unreferenced).
// A streamed message of 16 lent 4K results is 32 slices, and that round cost about 6k instructions
// per message. A SliceMessage names the slices; its SerializationTraits build the one buffer gRPC
// sends. The read RPCs' responders are typed on it (BlockReadService below).
#ifndef BLOCKREAD_SERVER_SLICE_MESSAGE_H_
#define BLOCKREAD_SERVER_SLICE_MESSAGE_H_

#include <grpcpp/impl/codegen/serialization_traits.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <grpcpp/support/status.h>

#include <cstddef>

namespace blockread::server {

// The slices must live until the Write or Finish call that takes the message returns (the buffer
// built from them holds its own references).
struct SliceMessage {
  const grpc::Slice* slices = nullptr;
  size_t count = 0;
};

}  // namespace blockread::server

template <>
class grpc::SerializationTraits<blockread::server::SliceMessage, void> {
 public:
  static grpc::Status Serialize(const blockread::server::SliceMessage& message,
                                grpc::ByteBuffer* buffer, bool* own_buffer) {
    grpc::ByteBuffer built(message.slices, message.count);
    buffer->Swap(&built);
    *own_buffer = true;
    return grpc::Status::OK;
  }
  // Responses are never received by the server.
  static grpc::Status Deserialize(grpc::ByteBuffer*, blockread::server::SliceMessage*) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "a SliceMessage is never received");
  }
};

#endif  // BLOCKREAD_SERVER_SLICE_MESSAGE_H_
