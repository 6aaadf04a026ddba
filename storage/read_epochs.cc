#include "storage/read_epochs.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace blockread::storage {
namespace {

// Flips `epoch` twice, each time waiting until `count(reader, old parity)` is zero for every
// reader. Pairs with the fence that follows a reader's count: either this thread sees the count,
// or that reader sees the version published before the call.
template <typename CounterOf>
void WaitForTwoFlips(std::atomic<uint64_t>& epoch, const std::vector<ReadEpochs::Reader*>& readers,
                     CounterOf counter) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int flip = 0; flip < 2; ++flip) {
    const uint8_t old_parity = epoch.fetch_add(1, std::memory_order_seq_cst) & 1;
    for (ReadEpochs::Reader* reader : readers) {
      // Reads finish within a device round trip; a stalled device holds the waiter until its I/O
      // times out.
      while (counter(*reader, old_parity).load(std::memory_order_acquire) != 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
}

}  // namespace

ReadEpochs::Reader::~Reader() { epochs_.Unregister(this); }

std::unique_ptr<ReadEpochs::Reader> ReadEpochs::Register() {
  std::unique_ptr<Reader> reader(new Reader(*this));
  std::lock_guard lock(mu_);
  std::lock_guard domain_lock(domain_mu_);
  readers_.push_back(reader.get());
  domain_readers_.push_back(reader.get());
  return reader;
}

void ReadEpochs::Unregister(Reader* reader) {
  std::lock_guard lock(mu_);
  std::lock_guard domain_lock(domain_mu_);
  readers_.erase(std::remove(readers_.begin(), readers_.end(), reader), readers_.end());
  domain_readers_.erase(std::remove(domain_readers_.begin(), domain_readers_.end(), reader),
                        domain_readers_.end());
}

void ReadEpochs::WaitForEarlierReads() {
  std::lock_guard lock(mu_);
  WaitForTwoFlips(epoch_, readers_, [](Reader& reader, uint8_t parity) -> std::atomic<uint64_t>& {
    return reader.active_[parity];
  });
}

void ReadEpochs::WaitForDomainReads(uint32_t domain) {
  std::lock_guard lock(domain_mu_);
  WaitForTwoFlips(domain_epochs_[domain], domain_readers_,
                  [domain](Reader& reader, uint8_t parity) -> std::atomic<uint64_t>& {
                    return reader.domains_[domain][parity];
                  });
}

}  // namespace blockread::storage
