// The names of read paths and fallback reasons as users see them: the `path` and `reason` labels
// of /metrics, the keys of `blockread stats --json` and the words of `blockread read` and
// `blockread load`, which must agree. The one definition of those names: each is the lowercased
// blockread.v1 enum value name without its "FALLBACK_" prefix (tests/proto/wire/labels_test.cc
// checks that against the generated descriptors, server/proto_conversions.h checks the counts at
// compile time). Indexed by the proto enum's number, so this header needs no protobuf.
#ifndef BLOCKREAD_PROTO_WIRE_LABELS_H_
#define BLOCKREAD_PROTO_WIRE_LABELS_H_

#include <array>

namespace blockread::wire {

// By blockread.v1.ReadPath number.
inline constexpr std::array<const char*, 3> kPathLabels = {"read_path_unspecified", "simple",
                                                           "generic"};

// By blockread.v1.FallbackReason number.
inline constexpr std::array<const char*, 8> kFallbackLabels = {
    "none",       "disabled",   "too_large",     "unaligned",
    "beyond_eof", "not_mapped", "spans_extents", "file_route"};

// What a value this build does not know (from a newer server) is called.
inline constexpr char kUnknownLabel[] = "unknown";

// "simple", "generic". Takes a blockread.v1.ReadPath.
constexpr const char* PathLabel(int read_path) {
  return read_path >= 0 && read_path < static_cast<int>(kPathLabels.size()) ? kPathLabels[read_path]
                                                                            : kUnknownLabel;
}

// "unaligned", "not_mapped", ... (FALLBACK_NONE: "none"). Takes a blockread.v1.FallbackReason.
constexpr const char* FallbackLabel(int reason) {
  return reason >= 0 && reason < static_cast<int>(kFallbackLabels.size()) ? kFallbackLabels[reason]
                                                                          : kUnknownLabel;
}

}  // namespace blockread::wire

#endif  // BLOCKREAD_PROTO_WIRE_LABELS_H_
