#include "storage/read_epochs.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace blockread::storage {

ReadEpochs::Reader::~Reader() { epochs_.Unregister(this); }

std::unique_ptr<ReadEpochs::Reader> ReadEpochs::Register() {
  std::unique_ptr<Reader> reader(new Reader(*this));
  std::lock_guard lock(mu_);
  readers_.push_back(reader.get());
  return reader;
}

void ReadEpochs::Unregister(Reader* reader) {
  std::lock_guard lock(mu_);
  readers_.erase(std::remove(readers_.begin(), readers_.end(), reader), readers_.end());
}

void ReadEpochs::WaitForEarlierReads() {
  std::lock_guard lock(mu_);
  // Pairs with the fence in Reader::Enter: either this thread sees a reader's count below, or
  // that reader sees the version published before this call.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int flip = 0; flip < 2; ++flip) {
    const uint8_t old_parity = epoch_.fetch_add(1, std::memory_order_seq_cst) & 1;
    for (Reader* reader : readers_) {
      // Reads finish within a device round trip; a stalled device holds the waiter (and so a
      // writer at open) until its I/O times out.
      while (reader->active_[old_parity].load(std::memory_order_acquire) != 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
}

}  // namespace blockread::storage
