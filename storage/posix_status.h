// The one place where errno becomes an absl::Status.
#ifndef BLOCKREAD_STORAGE_POSIX_STATUS_H_
#define BLOCKREAD_STORAGE_POSIX_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockread::storage {

// Returns a status whose code follows errno `error_number` (ENOENT -> NOT_FOUND, EACCES ->
// PERMISSION_DENIED, EIO -> ...) and whose message is "<context>: <strerror>".
// REQUIRES: error_number != 0.
absl::Status PosixError(int error_number, absl::string_view context);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_POSIX_STATUS_H_
