// The one place where errno becomes an absl::Status, or the text of one.
#ifndef BLOCKREAD_STORAGE_POSIX_STATUS_H_
#define BLOCKREAD_STORAGE_POSIX_STATUS_H_

#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blockread::storage {

// Returns a status whose code follows errno `error_number` (ENOENT -> NOT_FOUND, EACCES ->
// PERMISSION_DENIED, EIO -> ...) and whose message is PosixErrorMessage(error_number, context).
// REQUIRES: error_number != 0.
absl::Status PosixError(int error_number, absl::string_view context);

// The same for an error from std::filesystem (whose value is an errno).
// REQUIRES: error is set.
absl::Status PosixError(const std::error_code& error, absl::string_view context);

// "<context>: <strerror>", for messages where the errno decides the text but not the code (a
// status of another code, a log line, a reason). Thread-safe (strerror_r).
std::string PosixErrorMessage(int error_number, absl::string_view context);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_POSIX_STATUS_H_
