// The one place where engine statuses become gRPC statuses. The codes and what they mean are
// documented in proto/blockread/v1/blockread.proto.
#ifndef BLOCKREAD_SERVER_STATUS_MAPPING_H_
#define BLOCKREAD_SERVER_STATUS_MAPPING_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace blockread::server {

// absl and gRPC share the canonical code numbering, so the code carries over as is; the engine
// already chooses the documented code for each failure (NOT_FOUND, OUT_OF_RANGE, DATA_LOSS ...).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_STATUS_MAPPING_H_
