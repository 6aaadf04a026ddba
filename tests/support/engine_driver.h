// Drives an EngineContext from a test: starts reads up to a queue depth, polls until they finish,
// and records each result.
#ifndef BLOCKREAD_TESTS_SUPPORT_ENGINE_DRIVER_H_
#define BLOCKREAD_TESTS_SUPPORT_ENGINE_DRIVER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "storage/read_path.h"

namespace blockread::testing {

struct ReadRequest {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct CompletedRead {
  absl::Status status;  // StartRead's error, or the completion's
  std::vector<char> data;
  storage::ReadPathKind path = storage::ReadPathKind::kSimple;
  storage::FallbackReason fallback = storage::FallbackReason::kDisabled;
  uint64_t total_ns = 0;
  bool started = false;  // StartRead accepted it
  bool done = false;
};

// Runs `requests` with at most `queue_depth` in flight (StartRead refusals are recorded as the
// result; a busy engine is polled and asked again). Returns results in request order.
std::vector<CompletedRead> RunReads(storage::EngineContext& engine,
                                    const std::vector<ReadRequest>& requests, int queue_depth);

// StartRead with the request spelled out, for tests that drive the engine by hand.
storage::StartOutcome StartRead(storage::EngineContext& engine, const std::string& file,
                                uint64_t offset, uint64_t length, storage::ReadDoneFn done,
                                void* context, uint64_t arrival_ns = 0,
                                absl::Status* refusal = nullptr);

// One read, synchronously.
CompletedRead ReadOnce(storage::EngineContext& engine, const std::string& file, uint64_t offset,
                       uint64_t length);

// One read, synchronously, whose callback keeps its slot (returns true), as a zero-copy response
// does: result.data stays valid, and the slot taken, until engine.Release(result.handle). A read
// the engine refuses comes back with the refusal as its status, one that finds every slot taken
// with RESOURCE_EXHAUSTED (it is not waited for); then there is nothing to release.
storage::ReadResult ReadAndKeep(storage::EngineContext& engine, const std::string& file,
                                uint64_t offset, uint64_t length);

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_ENGINE_DRIVER_H_
