// The per-read pipeline both reading RPCs run: access check, the caller's rate limit, admission to
// the engine's slots, the engine read, then the result handed to the call to deliver. A unary
// ReadBlock is a pipeline of one read; a ReadBlocks stream runs any number at once. The calls
// differ only in how results leave (server/read_calls.h): a unary call finishes with its one
// result, a stream gathers results into response messages.
#ifndef BLOCKREAD_SERVER_READ_PIPELINE_H_
#define BLOCKREAD_SERVER_READ_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "blockread/v1/blockread.pb.h"
#include "server/admission_queue.h"
#include "server/call.h"
#include "server/paced_reads.h"
#include "server/response_encoding.h"
#include "storage/read_path.h"

namespace blockread::server {

// Below this, copying the bytes costs less than lending the slot (a slice refcount, a handoff back
// to the worker).
inline constexpr uint64_t kMinZeroCopyBytes = 1024;

// Threading: the call's worker thread, like the call.
//
// Lifetime: each read waiting for the rate limit, waiting for admission or in the engine holds the
// call (Call::Hold), so a cancelled or expired call lives until its reads are done with and an
// engine slot is never freed under the kernel.
class ReadPipeline : public Call {
 public:
  ~ReadPipeline() override = default;

 protected:
  ReadPipeline(Worker& worker, RpcMethod method);

  // Starts reading `item`, which arrived at `arrival_ns`, taking its contents: checks that the
  // caller may read its file, paces it under the caller's rate limit, then starts it, or queues it
  // for admission when the slots are busy (or others wait). Its outcome comes to DeliverResult or
  // DeliverError, at once or later.
  void StartItem(v1::ReadItem& item, uint64_t arrival_ns);
  // The call is cancelled: its reads waiting for admission leave the queue (reads in the engine
  // complete first).
  void DropWaiting();
  // The access rules were reloaded: file verdicts cached under the old ones are forgotten.
  void ForgetAccessVerdicts() { has_allowed_file_ = false; }

  // Reads waiting for the rate limit or for admission, and reads in the engine.
  uint32_t waiting() const { return waiting_; }
  uint32_t in_flight() const { return in_flight_; }

  // The call's deadline on the MonotonicNowNs clock (0: none), from gRPC's, converted once.
  uint64_t deadline_ns(uint64_t now_ns);

  // --- Delivery, the calls' own part.
  // Nobody will see results any more (the client went away, or a write failed): reads that finish
  // are not delivered.
  virtual bool over() const = 0;
  // A read succeeded: deliver `fields` and the result's data (result.data, result.length). Returns
  // true when the engine slot is kept (lent to gRPC; server/slot_lender.h), false when it may be
  // reused at once.
  virtual bool DeliverResult(const ReadFields& fields, const storage::ReadResult& result) = 0;
  // The read with `tag` failed, or was refused before it started.
  virtual void DeliverError(uint64_t tag, const absl::Status& status) = 0;
  // A read stopped waiting (for the rate limit or for admission).
  virtual void OnWaitEnded() {}

 private:
  // One read of the call. The first is part of the call (a unary call allocates nothing more);
  // a stream's others are pooled.
  struct Read final : WaitingRead, PacedRead {
    enum class State : uint8_t { kWaiting, kInFlight, kAnswered };
    ReadPipeline* call = nullptr;
    v1::ReadItem item;
    uint64_t arrival_ns = 0;
    State state = State::kWaiting;
    Admission TryAdmit() override { return call->TryStart(*this); }
    void LeftQueue() override { call->OnLeftQueue(*this); }
    void Resume() override { call->OnPaceDone(*this); }
  };

  // May the caller read `file`? A call mostly reads few files: the last one allowed is
  // remembered rather than patterns matched for every read.
  bool MayRead(const std::string& file);
  // Starts `read`, or queues it for admission; answers it when the queue is full.
  void EnterAdmission(Read& read);
  // `read`'s start time under the caller's rate limit has come.
  void OnPaceDone(Read& read);
  // Offers the read to the engine (busy: nothing happened). Started: it is in flight or already
  // answered (state says which).
  Admission TryStart(Read& read);
  void OnLeftQueue(Read& read);
  static bool OnReadDone(void* context, const storage::ReadResult& result);
  Read* NewRead();
  void FreeRead(Read* read);

  Read first_read_;
  bool first_read_free_ = true;
  std::vector<std::unique_ptr<Read>> more_reads_;
  std::vector<Read*> free_reads_;
  WaitList wait_list_;
  std::string last_allowed_file_;
  bool has_allowed_file_ = false;  // last_allowed_file_ holds a verdict of the current rules
  uint32_t waiting_ = 0;
  uint32_t in_flight_ = 0;
  uint64_t deadline_ns_ = 0;
  bool deadline_known_ = false;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_READ_PIPELINE_H_
