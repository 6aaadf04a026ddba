// A ReadBlocks stream's results waiting for its next response messages, and how they are cut into
// messages. No gRPC in it, so the stream fuzz target (tests/fuzz/stream_requests_fuzzer.cc) runs
// the very code the stream does.
//
// The results are kept as their wire bytes: each is a `results` field of a ReadBlocksResponse
// (server/response_encoding.h), so a message is the concatenation of some of them. A result whose
// data stays in an engine slot (zero copy) has its header here and its data in the slot; the
// message carries the slot's bytes right after that header.
#ifndef BLOCKREAD_SERVER_RESULT_BATCH_H_
#define BLOCKREAD_SERVER_RESULT_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "blockread/v1/blockread.pb.h"
#include "server/held_slot.h"
#include "server/response_encoding.h"

namespace blockread::server {

// Threading: one thread (the stream's worker).
class ResultBatch {
 public:
  struct Result {
    size_t end = 0;     // its wire bytes end here in bytes() (the header only, when held)
    bool held = false;  // its data follows from `slot`
    HeldSlot slot;
  };
  // The next message: results [0, count), whose bytes() end at bytes_end, `size` wire bytes in
  // all (held data included).
  struct Message {
    size_t count = 0;
    size_t bytes_end = 0;
    uint64_t size = 0;
  };

  // Appends a successful read's result, its `length` bytes of data copied.
  void AddCopied(const ReadFields& fields, const void* data, uint64_t length);
  // Appends a successful read's result whose data, slot.length bytes, follows from `slot`.
  void AddHeld(const ReadFields& fields, const HeldSlot& slot);
  // Appends `result` whole (a failed read's).
  void AddMessage(const v1::ReadResult& result);

  bool empty() const { return results_.empty(); }
  // Wire bytes of every result waiting, held data included.
  uint64_t size() const { return size_; }
  const std::string& bytes() const { return bytes_; }
  const Result& result(size_t i) const { return results_[i]; }

  // The oldest results whose wire bytes fit in `limit` together; at least one, so a result
  // larger than `limit` goes alone. REQUIRES: !empty().
  Message Next(uint64_t limit) const;
  // Removes `message`'s results (once the caller has built the message from them).
  void Consume(const Message& message);
  // Removes every result, calling give_back(const HeldSlot&) for each held one.
  template <typename GiveBack>
  void Clear(GiveBack give_back) {
    for (const Result& result : results_) {
      if (result.held) give_back(result.slot);
    }
    results_.clear();
    bytes_.clear();
    size_ = 0;
  }

 private:
  std::vector<Result> results_;
  std::string bytes_;
  uint64_t size_ = 0;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_RESULT_BATCH_H_
