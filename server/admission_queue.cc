#include "server/admission_queue.h"

namespace blockread::server {

bool AdmissionQueue::Push(WaitList& list, WaitingRead& read) {
  if (size_ >= capacity_) return false;
  read.next_ = nullptr;
  if (list.tail_ != nullptr) {
    list.tail_->next_ = &read;
  } else {
    list.head_ = &read;
  }
  list.tail_ = &read;
  ++size_;
  if (list.next_ == nullptr) {  // the list joins the ring, last in turn
    ++lists_;
    if (cursor_ == nullptr) {
      list.next_ = list.prev_ = &list;
      cursor_ = &list;
    } else {
      list.next_ = cursor_;
      list.prev_ = cursor_->prev_;
      cursor_->prev_->next_ = &list;
      cursor_->prev_ = &list;
    }
  }
  return true;
}

void AdmissionQueue::Unlink(WaitList& list) {
  --lists_;
  if (list.next_ == &list) {
    cursor_ = nullptr;
  } else {
    list.prev_->next_ = list.next_;
    list.next_->prev_ = list.prev_;
    if (cursor_ == &list) cursor_ = list.next_;
  }
  list.next_ = list.prev_ = nullptr;
  list.head_ = list.tail_ = nullptr;
}

void AdmissionQueue::RemoveAll(WaitList& list) {
  WaitingRead* read = list.head_;
  if (read == nullptr) return;
  Unlink(list);
  while (read != nullptr) {
    WaitingRead* next = read->next_;
    --size_;
    read->LeftQueue();
    read = next;
  }
}

int AdmissionQueue::AdmitWaiting() {
  int admitted = 0;
  size_t passed_over = 0;  // calls in a row whose first read waits for its device's share
  while (cursor_ != nullptr && passed_over < lists_) {
    WaitList& list = *cursor_;
    WaitingRead& read = *list.head_;
    const Admission admission = read.TryAdmit();
    if (admission == Admission::kSlotsBusy) break;
    if (admission == Admission::kDeviceBusy) {
      ++passed_over;
      cursor_ = list.next_;
      continue;
    }
    passed_over = 0;
    list.head_ = read.next_;
    --size_;
    ++admitted;
    if (list.head_ == nullptr) {
      Unlink(list);
    } else {
      cursor_ = list.next_;  // the next call's turn
    }
    // Last: LeftQueue may release the call, and with it `list`.
    read.LeftQueue();
  }
  return admitted;
}

}  // namespace blockread::server
