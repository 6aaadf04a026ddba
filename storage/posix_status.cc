#include "storage/posix_status.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace blockread::storage {

absl::Status PosixError(int error_number, absl::string_view context) {
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      PosixErrorMessage(error_number, context));
}

absl::Status PosixError(const std::error_code& error, absl::string_view context) {
  return PosixError(error.value(), context);
}

std::string PosixErrorMessage(int error_number, absl::string_view context) {
  char buffer[128];
  // GNU strerror_r returns the message pointer, which may or may not be `buffer`.
  const char* message = strerror_r(error_number, buffer, sizeof(buffer));
  return absl::StrCat(context, ": ", message);
}

}  // namespace blockread::storage
