// The one place where engine statuses become gRPC statuses: an RPC's status, and a stream read's
// result inside a ReadBlocks response. The codes and what they mean are documented in
// proto/blockread/v1/blockread.proto.
#ifndef BLOCKREAD_SERVER_STATUS_MAPPING_H_
#define BLOCKREAD_SERVER_STATUS_MAPPING_H_

#include <grpcpp/support/status.h>

#include <array>
#include <string>

#include "absl/status/status.h"
#include "blockread/v1/blockread.pb.h"

namespace blockread::server {

// absl and gRPC share the canonical code numbering (status_mapping.cc checks it code by code), so
// the code carries over as is; the engine already chooses the documented code for each failure
// (NOT_FOUND, OUT_OF_RANGE, DATA_LOSS ...).
grpc::Status ToGrpcStatus(const absl::Status& status);

// A failed read as its client should see it: which file and offset, then what went wrong
// (the engine's message for a device error carries no device detail; see storage/log.h).
absl::Status ReadFailed(const std::string& file, uint64_t offset, const absl::Status& status);

// A stream read's outcome in its result: ReadResult.code (a google.rpc.Code) and, when not OK,
// ReadResult.error_message.
void FillStatus(const absl::Status& status, v1::ReadResult* out);

// A code's name in GetStats (ErrorCount.code, RpcCount.code) and in the `code` label of /metrics:
// "DATA_LOSS".
std::string StatusCodeName(absl::StatusCode code);

// The codes a read can fail with, as blockread.proto's header lists them. /metrics starts the
// read error and rejection counters of each at 0 (tests/server/metrics_test.cc checks both lists).
inline constexpr std::array<absl::StatusCode, 7> kReadErrorCodes = {
    absl::StatusCode::kNotFound,        absl::StatusCode::kOutOfRange,
    absl::StatusCode::kInvalidArgument, absl::StatusCode::kFailedPrecondition,
    absl::StatusCode::kDataLoss,        absl::StatusCode::kResourceExhausted,
    absl::StatusCode::kUnavailable,
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_STATUS_MAPPING_H_
