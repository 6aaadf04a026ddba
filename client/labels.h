// The names of read paths and fallback reasons as users see them: the `path` and `reason` labels
// of /metrics and the keys of `blockread stats --json`, which must agree. Header-only over the
// generated API, so the server's metrics and the client's views share it.
#ifndef BLOCKREAD_CLIENT_LABELS_H_
#define BLOCKREAD_CLIENT_LABELS_H_

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "blockread/v1/blockread.pb.h"

namespace blockread::client {

// "simple", "generic".
inline std::string PathLabel(v1::ReadPath path) {
  return absl::AsciiStrToLower(v1::ReadPath_Name(path));
}

// "unaligned", "not_mapped", ... (FALLBACK_NONE: "none").
inline std::string FallbackLabel(v1::FallbackReason reason) {
  return absl::AsciiStrToLower(absl::StripPrefix(v1::FallbackReason_Name(reason), "FALLBACK_"));
}

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_LABELS_H_
