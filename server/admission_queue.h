// The one place a worker's reads wait for an engine slot: bounded, and fair across calls.
#ifndef BLOCKREAD_SERVER_ADMISSION_QUEUE_H_
#define BLOCKREAD_SERVER_ADMISSION_QUEUE_H_

#include <cstddef>
#include <cstdint>

namespace blockread::server {

// What offering a waiting read to the engine did.
enum class Admission : uint8_t {
  kStarted,  // it started, or was answered: it leaves the queue
  // Every slot of its path is taken (storage StartOutcome::kBusy): nobody else gets one either
  // this turn. It stays first in its call's list.
  kSlotsBusy,
  // Its device holds its share of the slots (StartOutcome::kDeviceBusy): reads of other devices
  // may start. It stays first in its call's list.
  kDeviceBusy,
};

// A read that found its path's slots busy. Intrusive: waiting allocates nothing.
class WaitingRead {
 public:
  virtual ~WaitingRead() = default;
  // Tries to start the read.
  virtual Admission TryAdmit() = 0;
  // Called once the read has left the queue (admitted, or removed with its call). The read may
  // be freed here; the queue does not touch it afterwards.
  virtual void LeftQueue() = 0;

 private:
  friend class AdmissionQueue;
  WaitingRead* next_ = nullptr;
};

// One call's waiting reads, in arrival order. A call owns one and links it into the worker's
// queue while it has reads waiting.
class WaitList {
 public:
  bool empty() const { return head_ == nullptr; }

 private:
  friend class AdmissionQueue;
  WaitingRead* head_ = nullptr;
  WaitingRead* tail_ = nullptr;
  // The ring of lists with reads waiting (circular, doubly linked); null when not in it.
  WaitList* next_ = nullptr;
  WaitList* prev_ = nullptr;
};

// Round-robin across calls: each admission takes the first read of the next call in turn, so a
// stream that floods its worker with reads gets one slot per turn like every other call, and
// cannot starve them. Within a call, reads start in arrival order. A call whose first read waits
// for its device's share is passed over for the turn, so the reads of a device that stalls hold
// up nobody else's (a call's own later reads wait behind it).
//
// Threading: one worker thread.
class AdmissionQueue {
 public:
  explicit AdmissionQueue(size_t capacity) : capacity_(capacity) {}
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // Appends `read` to `list`. False (nothing queued) when `capacity` reads already wait: the
  // caller answers RESOURCE_EXHAUSTED.
  bool Push(WaitList& list, WaitingRead& read);
  // Removes every read of `list` (its call is over), calling LeftQueue() on each.
  void RemoveAll(WaitList& list);
  // Admits reads round-robin until one finds its path's slots busy, every call waiting has been
  // passed over for its device's share since the last admission, or none waits. Returns how many
  // left the queue.
  int AdmitWaiting();

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void Unlink(WaitList& list);

  const size_t capacity_;
  size_t size_ = 0;
  size_t lists_ = 0;            // calls with reads waiting: the ring's length
  WaitList* cursor_ = nullptr;  // the list whose turn is next
};

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_ADMISSION_QUEUE_H_
