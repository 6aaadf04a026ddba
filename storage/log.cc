#include "storage/log.h"

#include <unistd.h>

#include <atomic>

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

uint64_t LogIncident(LogLevel level, absl::string_view details) {
  static std::atomic<uint64_t> last_incident{0};
  const uint64_t incident = last_incident.fetch_add(1, std::memory_order_relaxed) + 1;
  Log(level, absl::StrCat("incident ", incident, ": ", details));
  return incident;
}

std::string IncidentNote(uint64_t incident) {
  return absl::StrCat("incident ", incident, " in the server log");
}

}  // namespace blockread::storage
