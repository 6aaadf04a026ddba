#include "server/status_mapping.h"

#include "absl/strings/str_cat.h"
#include "storage/catalog.h"

namespace blockread::server {
namespace {

// The numbering the mapping relies on, code by code.
constexpr bool SameCode(absl::StatusCode absl_code, grpc::StatusCode grpc_code) {
  return static_cast<int>(absl_code) == static_cast<int>(grpc_code);
}
static_assert(SameCode(absl::StatusCode::kOk, grpc::StatusCode::OK));
static_assert(SameCode(absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED));
static_assert(SameCode(absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN));
static_assert(SameCode(absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT));
static_assert(SameCode(absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED));
static_assert(SameCode(absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND));
static_assert(SameCode(absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS));
static_assert(SameCode(absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED));
static_assert(SameCode(absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED));
static_assert(SameCode(absl::StatusCode::kFailedPrecondition,
                       grpc::StatusCode::FAILED_PRECONDITION));
static_assert(SameCode(absl::StatusCode::kAborted, grpc::StatusCode::ABORTED));
static_assert(SameCode(absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE));
static_assert(SameCode(absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED));
static_assert(SameCode(absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL));
static_assert(SameCode(absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE));
static_assert(SameCode(absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS));
static_assert(SameCode(absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED));

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status ReadFailed(const std::string& file, uint64_t offset, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("reading file ", storage::EchoedName(file),
                                                  " at offset ", offset, ": ", status.message()));
}

void FillStatus(const absl::Status& status, v1::ReadResult* out) {
  out->set_code(static_cast<int32_t>(status.code()));
  if (!status.ok()) out->set_error_message(std::string(status.message()));
}

std::string StatusCodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }

}  // namespace blockread::server
