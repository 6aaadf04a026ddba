#include "proto/wire/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace blockread::wire {

void TuneProcess() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace blockread::wire
