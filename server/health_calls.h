// grpc.health.v1 served from the workers' own queues (gRPC's built-in health service would bring
// its own threads; see DESIGN.md). The overall status ("" service) and "blockread.v1.BlockRead"
// are known: SERVING once every worker's engine is up, NOT_SERVING before that and from the start
// of shutdown.
#ifndef BLOCKREAD_SERVER_HEALTH_CALLS_H_
#define BLOCKREAD_SERVER_HEALTH_CALLS_H_

#include <string>

#include "server/worker.h"

namespace blockread::server {

// The services health answers for: "" (the server as a whole) and "blockread.v1.BlockRead".
bool IsKnownHealthService(const std::string& service);

// Posts the first Check and Watch calls on the worker's queue.
void PostHealthCalls(Worker& worker);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_HEALTH_CALLS_H_
