#include "storage/log.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace blockread::storage {

void Log(LogLevel level, absl::string_view message) {
  const char* tag = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  std::string line =
      absl::StrCat(tag, absl::FormatTime("%Y-%m-%dT%H:%M:%E3S ", absl::Now(), absl::UTCTimeZone()),
                   "blockread: ", message, "\n");
  // A failed or short write to stderr has nowhere better to be reported.
  [[maybe_unused]] ssize_t written = write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace blockread::storage
