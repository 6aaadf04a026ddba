#include "server/read_pipeline.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_format.h"
#include "proto/wire/crc32c.h"
#include "server/proto_conversions.h"
#include "server/rate_limit.h"
#include "server/status_mapping.h"
#include "server/worker.h"
#include "storage/clock.h"

namespace blockread::server {
namespace {

// What a successful read's response says besides its data.
ReadFields FieldsOf(const storage::ReadResult& result, uint64_t tag, bool want_crc32c,
                    uint64_t arrival_ns) {
  ReadFields fields;
  fields.tag = tag;
  fields.path = ToProto(result.path);
  fields.fallback = ToProto(result.path, result.fallback);
  fields.has_crc32c = want_crc32c;
  if (want_crc32c) fields.crc32c = wire::Crc32c(result.data, result.length);
  fields.queue_ns = result.queue_ns;
  fields.device_ns = result.device_ns;
  fields.total_ns = storage::MonotonicNowNs() - arrival_ns;
  return fields;
}

absl::Status QueueFull(Worker& worker) {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "server overloaded: worker %d already holds max_queued_reads = %u waiting reads",
      worker.index(), worker.shared().config.max_queued_reads()));
}

// A read found the engine's slots busy: count it when gRPC holds some of them (zero-copy responses
// not yet released, e.g. to slow clients), so the pool can be sized for them.
void CountSlotWait(Worker& worker) {
  if (worker.lender().held() > 0) worker.mutable_counters().slot_waits.Add(1);
}

// When the caller's rate limit (server/rate_limit.h) lets a read of `length` bytes at `offset`
// arriving at `now_ns` start: now, later (the read is parked until then), or never: `refusal` is
// what to answer, INVALID_ARGUMENT for a range the engine would refuse anyway (checked first, so an
// invalid read is never charged: length 2^64-1 must not move the identity's schedule) or
// RESOURCE_EXHAUSTED when it could not start before the call's deadline. Identities without a
// limit pay nothing here; the engine validates their reads.
struct Pacing {
  uint64_t start_ns = 0;
  absl::Status refusal;
};

Pacing Pace(Worker& worker, const Identity& identity, uint64_t offset, uint64_t length,
            uint64_t deadline_ns, uint64_t now_ns) {
  Pacing pacing{now_ns, absl::OkStatus()};
  if (identity.limiter == nullptr) return pacing;
  storage::EngineConfig limits;
  limits.max_read_bytes = worker.shared().config.max_read_bytes();
  if (absl::Status valid = storage::ValidateReadRange(limits, offset, length); !valid.ok()) {
    pacing.refusal = std::move(valid);
    return pacing;
  }
  const uint64_t latest_start_ns =
      deadline_ns == 0 ? std::numeric_limits<uint64_t>::max() : deadline_ns;
  pacing.start_ns = identity.limiter->Reserve(length, now_ns, latest_start_ns);
  if (pacing.start_ns == RateLimiter::kRefused) {
    IdentityUsage::Add(identity.usage->refused, 1);
    pacing.refusal = absl::ResourceExhaustedError(absl::StrFormat(
        "identity '%s' is over its rate limit (max_iops = %u, max_bytes_per_second = %u): this "
        "read could not start before the call's deadline",
        identity.name, identity.limiter->max_iops(), identity.limiter->max_bytes_per_second()));
  } else if (pacing.start_ns > now_ns) {
    IdentityUsage::Add(identity.usage->paced, 1);
    IdentityUsage::Add(identity.usage->pace_wait_ns, pacing.start_ns - now_ns);
  }
  return pacing;
}

void CountServed(const Identity& identity, uint64_t bytes) {
  if (identity.usage == nullptr) return;  // no --auth
  IdentityUsage::Add(identity.usage->reads, 1);
  IdentityUsage::Add(identity.usage->bytes, bytes);
}

storage::ReadRequest EngineRequest(const v1::ReadItem& item, uint64_t arrival_ns,
                                   uint64_t deadline_ns) {
  storage::ReadRequest request;
  request.file = item.file();
  request.offset = item.offset();
  request.length = item.length();
  request.arrival_ns = arrival_ns;
  request.deadline_ns = deadline_ns;
  return request;
}

}  // namespace

ReadPipeline::ReadPipeline(Worker& worker, RpcMethod method) : Call(worker, method) {
  first_read_.call = this;
}

uint64_t ReadPipeline::deadline_ns(uint64_t now_ns) {
  if (deadline_known_) return deadline_ns_;
  deadline_known_ = true;  // a call's deadline is fixed: converted once
  const auto deadline = context_.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return deadline_ns_ = 0;
  const int64_t left = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           deadline - std::chrono::system_clock::now())
                           .count();
  // 1: already past, not "none".
  deadline_ns_ = now_ns + static_cast<uint64_t>(std::max<int64_t>(left, 1));
  return deadline_ns_;
}

void ReadPipeline::DropWaiting() { worker_.admission().RemoveAll(wait_list_); }

ReadPipeline::Read* ReadPipeline::NewRead() {
  if (first_read_free_) {
    first_read_free_ = false;
    return &first_read_;
  }
  if (free_reads_.empty()) {
    more_reads_.push_back(std::make_unique<Read>());
    more_reads_.back()->call = this;
    return more_reads_.back().get();
  }
  Read* read = free_reads_.back();
  free_reads_.pop_back();
  return read;
}

void ReadPipeline::FreeRead(Read* read) {
  if (read == &first_read_) {
    first_read_free_ = true;
  } else {
    free_reads_.push_back(read);
  }
}

bool ReadPipeline::MayRead(const std::string& file) {
  if (has_allowed_file_ && file == last_allowed_file_) return true;
  if (!identity().MayRead(file)) return false;
  last_allowed_file_ = file;
  has_allowed_file_ = true;
  return true;
}

void ReadPipeline::StartItem(v1::ReadItem& item, uint64_t arrival_ns) {
  if (!MayRead(item.file())) {
    DeliverError(item.tag(), ReadDenied(identity(), item.file()));
    return;
  }
  const Pacing pacing =
      Pace(worker_, identity(), item.offset(), item.length(), deadline_ns(arrival_ns), arrival_ns);
  if (!pacing.refusal.ok()) {
    DeliverError(item.tag(), pacing.refusal);
    return;
  }
  Read* read = NewRead();
  read->item.Swap(&item);  // no copy of the file name
  read->arrival_ns = arrival_ns;
  read->state = Read::State::kWaiting;
  if (pacing.start_ns > arrival_ns) {
    Hold();      // waiting for the rate limit
    ++waiting_;  // (a stream reads no more requests meanwhile)
    worker_.paced().Park(pacing.start_ns, *read);
    return;
  }
  EnterAdmission(*read);
}

void ReadPipeline::OnPaceDone(Read& read) {
  --waiting_;
  if (over() || !may_start_operations()) {
    FreeRead(&read);
  } else {
    EnterAdmission(read);
  }
  OnWaitEnded();
  Release();  // the wait for the rate limit
}

void ReadPipeline::EnterAdmission(Read& read) {
  AdmissionQueue& admission = worker_.admission();
  // Behind the reads already waiting: a newcomer never overtakes them.
  if (admission.empty() && TryStart(read) == Admission::kStarted) {
    if (read.state == Read::State::kAnswered) FreeRead(&read);
    return;
  }
  CountSlotWait(worker_);
  if (admission.Push(wait_list_, read)) {
    Hold();  // waiting for admission
    ++waiting_;
    return;
  }
  DeliverError(read.item.tag(), QueueFull(worker_));
  FreeRead(&read);
}

Admission ReadPipeline::TryStart(Read& read) {
  absl::Status refusal;
  switch (worker_.engine().StartRead(EngineRequest(read.item, read.arrival_ns, deadline_ns_),
                                     &OnReadDone, &read, &refusal)) {
    case storage::StartOutcome::kQueued:
      Hold();  // the engine read
      ++in_flight_;
      read.state = Read::State::kInFlight;
      return Admission::kStarted;
    case storage::StartOutcome::kCompleted:
      DeliverError(read.item.tag(), refusal);
      read.state = Read::State::kAnswered;
      return Admission::kStarted;
    case storage::StartOutcome::kBusy:
      return Admission::kSlotsBusy;
    case storage::StartOutcome::kDeviceBusy:
    case storage::StartOutcome::kOpening:       // only this call waits while its file is opened
    case storage::StartOutcome::kNameChanging:  // or while its name changes
      return Admission::kDeviceBusy;
  }
  return Admission::kSlotsBusy;
}

void ReadPipeline::OnLeftQueue(Read& read) {
  --waiting_;
  // Answered at admission, or dropped with the call: the read is done with. In flight: the
  // engine's callback frees it.
  if (read.state != Read::State::kInFlight) FreeRead(&read);
  OnWaitEnded();
  Release();  // the wait for admission
}

bool ReadPipeline::OnReadDone(void* context, const storage::ReadResult& result) {
  Read* read = static_cast<Read*>(context);
  ReadPipeline* call = read->call;
  --call->in_flight_;
  call->worker_.mutable_counters().reads.Add(1);
  bool keep_slot = false;
  if (!call->over()) {
    const v1::ReadItem& item = read->item;
    if (!result.status.ok()) {
      call->DeliverError(item.tag(), ReadFailed(item.file(), item.offset(), result.status));
    } else {
      CountServed(call->identity(), result.length);
      keep_slot = call->DeliverResult(
          FieldsOf(result, item.tag(), item.want_crc32c(), read->arrival_ns), result);
    }
  }
  call->FreeRead(read);
  call->Release();  // the engine read
  return keep_slot;
}

}  // namespace blockread::server
