// Minimal leveled logging to stderr for the engine (Abseil 20220623 has no absl/log, and the
// engine must not depend on gRPC's logger). One line per call, written with one write(2) so lines
// from different threads do not interleave.
#ifndef BLOCKREAD_STORAGE_LOG_H_
#define BLOCKREAD_STORAGE_LOG_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace blockread::storage {

enum class LogLevel { kInfo, kWarning, kError };

// Thread-safe.
void Log(LogLevel level, absl::string_view message);

inline void LogInfo(absl::string_view message) { Log(LogLevel::kInfo, message); }
inline void LogWarning(absl::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(absl::string_view message) { Log(LogLevel::kError, message); }

// Logs `details` under a new incident number and returns it. For errors whose details (device
// paths, physical offsets, server paths) must not reach a client: the status names the incident
// (IncidentNote) and the operator finds the details in the log. Thread-safe.
uint64_t LogIncident(LogLevel level, absl::string_view details);
// "incident N in the server log", for status messages.
std::string IncidentNote(uint64_t incident);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_LOG_H_
