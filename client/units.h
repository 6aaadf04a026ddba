// Byte counts with units, as fio takes them: 4096, 4k, 128K, 1m, 2g, 1MiB (powers of two).
#ifndef BLOCKREAD_CLIENT_UNITS_H_
#define BLOCKREAD_CLIENT_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blockread::client {

// INVALID_ARGUMENT naming the text when it is not a count, has an unknown unit or overflows.
absl::StatusOr<uint64_t> ParseByteCount(absl::string_view text);

// 4096 -> "4KiB", 1536 -> "1.5KiB": for people.
std::string FormatBytes(double bytes);

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_UNITS_H_
