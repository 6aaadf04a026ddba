#include "tests/support/engine_driver.h"

namespace blockread::testing {
namespace {

bool RecordResult(void* context, const storage::ReadResult& result) {
  auto& read = *static_cast<CompletedRead*>(context);
  read.status = result.status;
  if (result.status.ok()) read.data.assign(result.data, result.data + result.length);
  read.path = result.path;
  read.fallback = result.fallback;
  read.total_ns = result.total_ns;
  read.done = true;
  return false;
}

}  // namespace

std::vector<CompletedRead> RunReads(storage::EngineContext& engine,
                                    const std::vector<ReadRequest>& requests, int queue_depth) {
  std::vector<CompletedRead> results(requests.size());
  size_t next = 0;
  size_t finished = 0;
  int in_flight = 0;
  while (finished < requests.size()) {
    while (next < requests.size() && in_flight < queue_depth) {
      const ReadRequest& r = requests[next];
      absl::Status refusal;
      const storage::StartOutcome outcome =
          engine.StartRead(storage::ReadRequest{r.file, r.offset, r.length, 0}, &RecordResult,
                           &results[next], &refusal);
      if (storage::IsBusy(outcome)) break;  // poll, then retry this one
      if (outcome == storage::StartOutcome::kQueued) {
        results[next].started = true;
        ++in_flight;
      } else {
        results[next].status = refusal;
        results[next].done = true;
        ++finished;
      }
      ++next;
    }
    const int reaped = engine.PollOnce();
    in_flight -= reaped;
    finished += static_cast<size_t>(reaped);
  }
  return results;
}

storage::StartOutcome StartRead(storage::EngineContext& engine, const std::string& file,
                                uint64_t offset, uint64_t length, storage::ReadDoneFn done,
                                void* context, uint64_t arrival_ns, absl::Status* refusal) {
  absl::Status ignored;
  storage::StartOutcome outcome;
  // A file that is not open yet is opened by the catalog's watcher: wait for that.
  while ((outcome = engine.StartRead(storage::ReadRequest{file, offset, length, arrival_ns}, done,
                                     context, refusal != nullptr ? refusal : &ignored)) ==
         storage::StartOutcome::kOpening) {
    engine.PollOnce();
  }
  return outcome;
}

CompletedRead ReadOnce(storage::EngineContext& engine, const std::string& file, uint64_t offset,
                       uint64_t length) {
  return RunReads(engine, {ReadRequest{file, offset, length}}, 1)[0];
}

storage::ReadResult ReadAndKeep(storage::EngineContext& engine, const std::string& file,
                                uint64_t offset, uint64_t length) {
  struct Kept {
    storage::ReadResult result;
    bool done = false;
  } kept;
  auto keep = [](void* context, const storage::ReadResult& result) {
    auto* k = static_cast<Kept*>(context);
    k->result = result;
    k->done = true;
    return true;
  };
  absl::Status refusal;
  switch (StartRead(engine, file, offset, length, keep, &kept, 0, &refusal)) {
    case storage::StartOutcome::kQueued:
      break;
    case storage::StartOutcome::kCompleted:
      kept.result.status = refusal;
      return kept.result;
    case storage::StartOutcome::kBusy:
    case storage::StartOutcome::kDeviceBusy:
    case storage::StartOutcome::kOpening:
    case storage::StartOutcome::kNameChanging:
      // Not waited for: the slots may all be kept by the test, and then none ever frees up.
      kept.result.status = absl::ResourceExhaustedError("every slot of the path is taken");
      return kept.result;
  }
  while (!kept.done) engine.PollOnce();
  return kept.result;
}

}  // namespace blockread::testing
