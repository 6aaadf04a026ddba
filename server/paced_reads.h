// Reads waiting for their identity's rate limit (server/rate_limit.h), per worker.
#ifndef BLOCKREAD_SERVER_PACED_READS_H_
#define BLOCKREAD_SERVER_PACED_READS_H_

#include <cstdint>
#include <queue>
#include <vector>

namespace blockread::server {

// A read parked until its start time. Its call holds itself while it waits.
class PacedRead {
 public:
  virtual ~PacedRead() = default;
  // The start time has come: go on to admission, or drop the read if its call is over.
  virtual void Resume() = 0;
};

// Parked reads in start-time order. The worker resumes the due ones each loop turn and, when it
// has nothing else to do, sleeps until the earliest. Threading: one worker thread.
class PacedReads {
 public:
  void Park(uint64_t start_ns, PacedRead& read) { heap_.push({start_ns, sequence_++, &read}); }
  // Resumes every read whose start time is at or before `now_ns`; returns how many.
  int ResumeDue(uint64_t now_ns) {
    int resumed = 0;
    while (!heap_.empty() && heap_.top().start_ns <= now_ns) {
      PacedRead* read = heap_.top().read;
      heap_.pop();
      read->Resume();
      ++resumed;
    }
    return resumed;
  }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // REQUIRES: !empty().
  uint64_t earliest_start_ns() const { return heap_.top().start_ns; }

 private:
  struct Entry {
    uint64_t start_ns;
    uint64_t sequence;  // ties resume in arrival order
    PacedRead* read;
    bool operator>(const Entry& other) const {
      return start_ns != other.start_ns ? start_ns > other.start_ns : sequence > other.sequence;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  uint64_t sequence_ = 0;
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_PACED_READS_H_
