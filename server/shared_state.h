// What every worker of one server shares: the catalog, the async services, health, the workers.
#ifndef BLOCKREAD_SERVER_SHARED_STATE_H_
#define BLOCKREAD_SERVER_SHARED_STATE_H_

#include <atomic>
#include <memory>
#include <vector>

#include "blockread/v1/blockread.grpc.pb.h"
#include "blockread/v1/server_config.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/access.h"
#include "server/slice_message.h"
#include "storage/catalog.h"

namespace blockread::server {

class Worker;

using GeneratedBlockReadService = v1::BlockRead::WithRawMethod_ReadBlock<
    v1::BlockRead::WithRawMethod_ReadBlocks<v1::BlockRead::WithAsyncMethod_StatFile<
        v1::BlockRead::WithAsyncMethod_ListFiles<v1::BlockRead::WithAsyncMethod_GetStats<
            v1::BlockRead::WithAsyncMethod_Explain<v1::BlockRead::Service>>>>>>;

// The BlockRead service as the workers serve it: ReadBlock and ReadBlocks as raw methods (requests
// arrive as grpc::ByteBuffers and responses leave as SliceMessages, so response data can be sent
// from engine buffers without a copy: server/read_calls.h), every other method with its
// generated async API.
class BlockReadService final : public GeneratedBlockReadService {
 public:
  // The generated raw methods' requests, with responders typed on SliceMessage.
  void RequestReadBlock(grpc::ServerContext* context, grpc::ByteBuffer* request,
                        grpc::ServerAsyncResponseWriter<SliceMessage>* responder,
                        grpc::CompletionQueue* call_queue,
                        grpc::ServerCompletionQueue* notification_queue, void* tag);
  void RequestReadBlocks(grpc::ServerContext* context,
                         grpc::ServerAsyncReaderWriter<SliceMessage, grpc::ByteBuffer>* stream,
                         grpc::CompletionQueue* call_queue,
                         grpc::ServerCompletionQueue* notification_queue, void* tag);
};

// Posts one call of an RPC (or of a group of RPCs) on `worker`'s queue, waiting for a request; each
// call posts its successor as its request arrives.
using PostCalls = void (*)(Worker& worker);

// Built by the server before the workers start; read-only afterwards except `health`.
struct SharedState {
  SharedState(const v1::ServerConfig& config, storage::Catalog& catalog,
              std::shared_ptr<const AccessPolicy> access_policy)
      : config(config), catalog(catalog), access(std::move(access_policy)) {}

  const v1::ServerConfig& config;
  storage::Catalog& catalog;
  BlockReadService service;
  grpc::health::v1::Health::AsyncService health_service;
  // Who may read what (--auth); replaced on SIGHUP.
  AccessRules access;
  // A grpc::health::v1::HealthCheckResponse::ServingStatus. NOT_SERVING until every worker's
  // engine is up, and again from the start of shutdown.
  std::atomic<int> health{grpc::health::v1::HealthCheckResponse::NOT_SERVING};
  // Set when shutdown starts: health Watch streams send NOT_SERVING and end, so they do not hold
  // the graceful shutdown until its deadline.
  std::atomic<bool> stopping{false};
  // Owned by the server; complete before the first worker starts.
  std::vector<Worker*> workers;
  // The RPC handlers, as the server hands them to every worker: each worker posts them all once
  // it is ready. (The worker knows no handler; the handlers know the worker.)
  std::vector<PostCalls> handlers;
  uint64_t start_ns = 0;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_SHARED_STATE_H_
