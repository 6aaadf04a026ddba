#include "server/shared_state.h"

#include <google/protobuf/descriptor.h>

#include <string>

namespace blockread::server {
namespace {

// gRPC numbers a service's methods in the order the .proto declares them.
int MethodIndex(const std::string& method) {
  static const google::protobuf::ServiceDescriptor* const service =
      v1::ReadBlockRequest::descriptor()->file()->FindServiceByName("BlockRead");
  return service->FindMethodByName(method)->index();
}

}  // namespace

void BlockReadService::RequestReadBlock(grpc::ServerContext* context, grpc::ByteBuffer* request,
                                        grpc::ServerAsyncResponseWriter<SliceMessage>* responder,
                                        grpc::CompletionQueue* call_queue,
                                        grpc::ServerCompletionQueue* notification_queue,
                                        void* tag) {
  static const int index = MethodIndex("ReadBlock");
  RequestAsyncUnary(index, context, request, responder, call_queue, notification_queue, tag);
}

void BlockReadService::RequestReadBlocks(
    grpc::ServerContext* context,
    grpc::ServerAsyncReaderWriter<SliceMessage, grpc::ByteBuffer>* stream,
    grpc::CompletionQueue* call_queue, grpc::ServerCompletionQueue* notification_queue, void* tag) {
  static const int index = MethodIndex("ReadBlocks");
  RequestAsyncBidiStreaming(index, context, stream, call_queue, notification_queue, tag);
}

}  // namespace blockread::server
