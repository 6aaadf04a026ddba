#include "storage/posix_status.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace blockread::storage {

absl::Status PosixError(int error_number, absl::string_view context) {
  char buffer[128];
  // GNU strerror_r returns the message pointer, which may or may not be `buffer`.
  const char* message = strerror_r(error_number, buffer, sizeof(buffer));
  return absl::Status(absl::ErrnoToStatusCode(error_number), absl::StrCat(context, ": ", message));
}

}  // namespace blockread::storage
