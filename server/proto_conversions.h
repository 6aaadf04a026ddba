// Engine enums to their API (proto) counterparts. Each mapping is a complete switch (with
// -Wswitch, a storage value without a case fails to build) plus a static_assert that every proto
// value but the zero one has exactly one storage counterpart (a proto value added without a
// storage one, or two storage values sent as one, fails to build).
#ifndef BLOCKREAD_SERVER_PROTO_CONVERSIONS_H_
#define BLOCKREAD_SERVER_PROTO_CONVERSIONS_H_

#include <tuple>

#include "blockread/v1/blockread.pb.h"
#include "proto/wire/labels.h"
#include "storage/catalog.h"
#include "storage/stats.h"

namespace blockread::server {

constexpr v1::ReadPath ToProto(storage::ReadPathKind path) {
  switch (path) {
    case storage::ReadPathKind::kSimple:
      return v1::SIMPLE;
    case storage::ReadPathKind::kGeneric:
      return v1::GENERIC;
  }
  return v1::READ_PATH_UNSPECIFIED;
}

// FALLBACK_NONE for a read that took the simple path.
constexpr v1::FallbackReason ToProto(storage::ReadPathKind path, storage::FallbackReason reason) {
  if (path == storage::ReadPathKind::kSimple) return v1::FALLBACK_NONE;
  switch (reason) {
    case storage::FallbackReason::kDisabled:
      return v1::FALLBACK_DISABLED;
    case storage::FallbackReason::kTooLarge:
      return v1::FALLBACK_TOO_LARGE;
    case storage::FallbackReason::kUnaligned:
      return v1::FALLBACK_UNALIGNED;
    case storage::FallbackReason::kBeyondEof:
      return v1::FALLBACK_BEYOND_EOF;
    case storage::FallbackReason::kNotMapped:
      return v1::FALLBACK_NOT_MAPPED;
    case storage::FallbackReason::kSpansExtents:
      return v1::FALLBACK_SPANS_EXTENTS;
  }
  return v1::FALLBACK_NONE;
}

constexpr v1::FileSource ToProto(storage::FileSource source) {
  switch (source) {
    case storage::FileSource::kWholeDevice:
      return v1::WHOLE_DEVICE;
    case storage::FileSource::kManifest:
      return v1::MANIFEST;
    case storage::FileSource::kFiemap:
      return v1::FIEMAP;
    case storage::FileSource::kFileRoute:
      return v1::FILE_ROUTE;
  }
  return v1::FILE_SOURCE_UNSPECIFIED;
}

constexpr v1::ExtentType ToProto(storage::ExtentType type) {
  switch (type) {
    case storage::ExtentType::kMapped:
      return v1::MAPPED;
    case storage::ExtentType::kHole:
      return v1::HOLE;
    case storage::ExtentType::kUnwritten:
      return v1::UNWRITTEN;
  }
  return v1::EXTENT_TYPE_UNSPECIFIED;
}

// The word for a poll mode in DeviceStats.poll_mode and in the `mode` label of
// blockread_device_poll_mode. The proto has no enum for it: DeviceStats counts the workers in
// each mode in a field per mode (interrupt_workers, iopoll_workers).
constexpr const char* PollModeLabel(storage::PollMode mode) {
  switch (mode) {
    case storage::PollMode::kInterrupt:
      return "interrupt";
    case storage::PollMode::kIoPoll:
      return "iopoll";
  }
  return "unknown";
}

// The word for an I/O backend in DeviceStats.backend and the `backend` label of
// blockread_device_backend_workers.
constexpr const char* BackendLabel(storage::BackendKind kind) {
  switch (kind) {
    case storage::BackendKind::kUringInterrupt:
      return "io_uring";
    case storage::BackendKind::kUringIoPoll:
      return "io_uring_iopoll";
    case storage::BackendKind::kPsync:
      return "psync";
  }
  return "unknown";
}

// How a backend finds completions, for DeviceStats.poll_mode.
constexpr storage::PollMode PollModeOf(storage::BackendKind kind) {
  return kind == storage::BackendKind::kUringIoPoll ? storage::PollMode::kIoPoll
                                                    : storage::PollMode::kInterrupt;
}

namespace internal {

// True when `to_proto` maps the storage values 0 .. proto_max - 1 to distinct proto values in
// 1 .. proto_max: with storage_count == proto_max, every proto value but 0 (UNSPECIFIED, or
// FALLBACK_NONE) has exactly one storage counterpart.
template <typename StorageEnum, typename ToProtoFn>
constexpr bool MapsOntoEveryNonZeroProtoValue(int storage_count, int proto_max,
                                              ToProtoFn to_proto) {
  if (storage_count != proto_max) return false;
  bool seen[64] = {};
  if (proto_max >= 64) return false;
  for (int i = 0; i < storage_count; ++i) {
    const int value = static_cast<int>(to_proto(static_cast<StorageEnum>(i)));
    if (value < 1 || value > proto_max || seen[value]) return false;
    seen[value] = true;
  }
  return true;
}

}  // namespace internal

static_assert(internal::MapsOntoEveryNonZeroProtoValue<storage::ReadPathKind>(
                  storage::kReadPathCount, v1::ReadPath_MAX,
                  [](storage::ReadPathKind path) { return ToProto(path); }),
              "storage::ReadPathKind and blockread.v1.ReadPath differ");
static_assert(internal::MapsOntoEveryNonZeroProtoValue<storage::FallbackReason>(
                  // FALLBACK_FILE_ROUTE, the last value, is retired (see blockread.proto).
                  storage::kFallbackReasonCount, v1::FallbackReason_MAX - 1,
                  [](storage::FallbackReason reason) {
                    return ToProto(storage::ReadPathKind::kGeneric, reason);
                  }),
              "storage::FallbackReason and blockread.v1.FallbackReason differ");
static_assert(internal::MapsOntoEveryNonZeroProtoValue<storage::FileSource>(
                  storage::kFileSourceCount, v1::FileSource_MAX,
                  [](storage::FileSource source) { return ToProto(source); }),
              "storage::FileSource and blockread.v1.FileSource differ");
static_assert(internal::MapsOntoEveryNonZeroProtoValue<storage::ExtentType>(
                  storage::kExtentTypeCount, v1::ExtentType_MAX,
                  [](storage::ExtentType type) { return ToProto(type); }),
              "storage::ExtentType and blockread.v1.ExtentType differ");

// The label names of proto/wire/labels.h cover every proto value.
static_assert(wire::kPathLabels.size() == v1::ReadPath_ARRAYSIZE,
              "proto/wire/labels.h: a blockread.v1.ReadPath value has no label");
static_assert(wire::kFallbackLabels.size() == v1::FallbackReason_ARRAYSIZE,
              "proto/wire/labels.h: a blockread.v1.FallbackReason value has no label");

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_PROTO_CONVERSIONS_H_
