#include "storage/buffer_pool.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "storage/extent_map.h"
#include "storage/posix_status.h"

namespace blockread::storage {

absl::StatusOr<std::unique_ptr<BufferPool>> BufferPool::Create(size_t count, size_t buffer_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::unique_ptr<BufferPool> pool(new BufferPool());
  pool->count_ = count;
  pool->buffer_bytes_ = RoundUp(std::max<size_t>(buffer_bytes, 1), page);
  if (count == 0) return pool;
  void* base = mmap(nullptr, pool->total_bytes(), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (base == MAP_FAILED) {
    return PosixError(
        errno, absl::StrFormat("mapping %u I/O buffers of %u bytes", count, pool->buffer_bytes_));
  }
  pool->base_ = static_cast<char*>(base);
  return pool;
}

BufferPool::~BufferPool() {
  if (base_ != nullptr) munmap(base_, total_bytes());
}

std::vector<iovec> BufferPool::iovecs() const {
  std::vector<iovec> out(count_);
  for (size_t i = 0; i < count_; ++i) out[i] = iovec{buffer(i), buffer_bytes_};
  return out;
}

uint64_t RaiseMemlockLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) getrlimit(RLIMIT_MEMLOCK, &limit);
  }
  return limit.rlim_cur;
}

}  // namespace blockread::storage
