// Page-aligned I/O buffers from one anonymous mapping, for registration with io_uring
// (READ_FIXED). Owned by one worker; buffers are handed out by index, not allocated per read.
#ifndef BLOCKREAD_STORAGE_BUFFER_POOL_H_
#define BLOCKREAD_STORAGE_BUFFER_POOL_H_

#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace blockread::storage {

class BufferPool {
 public:
  // `count` buffers of `buffer_bytes` each (rounded up to the page size), populated up front so
  // no read faults a page in. Errors name the size that could not be mapped.
  static absl::StatusOr<std::unique_ptr<BufferPool>> Create(size_t count, size_t buffer_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  size_t count() const { return count_; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t total_bytes() const { return count_ * buffer_bytes_; }
  char* buffer(size_t index) const { return base_ + index * buffer_bytes_; }
  // One iovec per buffer, in index order: what io_uring_register_buffers takes.
  std::vector<iovec> iovecs() const;

 private:
  BufferPool() = default;
  char* base_ = nullptr;
  size_t count_ = 0;
  size_t buffer_bytes_ = 0;
};

// Raises RLIMIT_MEMLOCK's soft limit to its hard limit (registered buffers are charged to it when
// the process lacks CAP_IPC_LOCK, as in most containers). Returns the soft limit now in force.
uint64_t RaiseMemlockLimit();

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_BUFFER_POOL_H_
