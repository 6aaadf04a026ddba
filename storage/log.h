// Minimal leveled logging to stderr for the engine (Abseil 20220623 has no absl/log, and the
// engine must not depend on gRPC's logger). One line per call, written with one write(2) so lines
// from different threads do not interleave.
#ifndef BLOCKREAD_STORAGE_LOG_H_
#define BLOCKREAD_STORAGE_LOG_H_

#include "absl/strings/string_view.h"

namespace blockread::storage {

enum class LogLevel { kInfo, kWarning, kError };

// Thread-safe.
void Log(LogLevel level, absl::string_view message);

inline void LogInfo(absl::string_view message) { Log(LogLevel::kInfo, message); }
inline void LogWarning(absl::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(absl::string_view message) { Log(LogLevel::kError, message); }

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_LOG_H_
