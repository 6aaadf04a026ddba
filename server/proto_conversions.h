// Engine enums to their API (proto) counterparts.
#ifndef BLOCKREAD_SERVER_PROTO_CONVERSIONS_H_
#define BLOCKREAD_SERVER_PROTO_CONVERSIONS_H_

#include "blockread/v1/blockread.pb.h"
#include "storage/catalog.h"
#include "storage/stats.h"

namespace blockread::server {

inline v1::ReadPath ToProto(storage::ReadPathKind path) {
  return path == storage::ReadPathKind::kSimple ? v1::SIMPLE : v1::GENERIC;
}

// FALLBACK_NONE for a read that took the simple path.
inline v1::FallbackReason ToProto(storage::ReadPathKind path, storage::FallbackReason reason) {
  if (path == storage::ReadPathKind::kSimple) return v1::FALLBACK_NONE;
  return static_cast<v1::FallbackReason>(static_cast<int>(reason) + 1);
}

inline v1::FileSource ToProto(storage::FileSource source) {
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

inline v1::ExtentType ToProto(storage::ExtentType type) {
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

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_PROTO_CONVERSIONS_H_
