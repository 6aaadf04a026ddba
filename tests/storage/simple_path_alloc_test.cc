// The simple path allocates nothing, and a read of a FIEMAP-imported file makes no stat-family
// call and takes no lock to know its map is current (issue 11: the catalog's lease does that).
// This binary replaces the global allocation functions, the stat family and the pthread lock
// functions with counting ones, and runs 10,000 simple reads with counting on.
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <shared_mutex>

#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "storage/read_path.h"
#include "tests/support/loop_device.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BLOCKREAD_COUNT_ALLOCATIONS 0  // sanitizers own the allocator; the normal build counts
#else
#define BLOCKREAD_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> counting{false};
std::atomic<uint64_t> allocations{0};
[[maybe_unused]] void Count() {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

#if BLOCKREAD_COUNT_ALLOCATIONS
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);
extern "C" void __libc_free(void*);
extern "C" void* malloc(size_t size) {
  Count();
  return __libc_malloc(size);
}
extern "C" void* calloc(size_t n, size_t size) {
  Count();
  return __libc_calloc(n, size);
}
extern "C" void* realloc(void* p, size_t size) {
  Count();
  return __libc_realloc(p, size);
}
extern "C" int posix_memalign(void** out, size_t alignment, size_t size) {
  Count();
  *out = __libc_memalign(alignment, size);
  return *out == nullptr ? ENOMEM : 0;
}
extern "C" void* aligned_alloc(size_t alignment, size_t size) {
  Count();
  return __libc_memalign(alignment, size);
}
extern "C" void free(void* p) { __libc_free(p); }
void* operator new(size_t size) {
  Count();
  if (void* p = __libc_malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, std::align_val_t align) {
  Count();
  if (void* p = __libc_memalign(static_cast<size_t>(align), size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size, std::align_val_t align) { return operator new(size, align); }
void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete[](void* p) noexcept { __libc_free(p); }
void operator delete(void* p, size_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t) noexcept { __libc_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { __libc_free(p); }
#endif

// The stat family and the lock functions, counted when called on a thread that asked for it
// (other threads, such as the catalog's watcher, may lock as they please).
namespace {
thread_local bool count_this_thread = false;
std::atomic<uint64_t> stat_calls{0};
std::atomic<uint64_t> lock_calls{0};
template <typename Fn>
[[maybe_unused]] Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}
[[maybe_unused]] void CountStat() {
  if (count_this_thread) stat_calls.fetch_add(1, std::memory_order_relaxed);
}
[[maybe_unused]] void CountLock() {
  if (count_this_thread) lock_calls.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

#if BLOCKREAD_COUNT_ALLOCATIONS
extern "C" int stat(const char* path, struct stat* st) {
  static auto next = Next<int (*)(const char*, struct stat*)>("stat");
  CountStat();
  return next(path, st);
}
extern "C" int lstat(const char* path, struct stat* st) {
  static auto next = Next<int (*)(const char*, struct stat*)>("lstat");
  CountStat();
  return next(path, st);
}
extern "C" int fstat(int fd, struct stat* st) {
  static auto next = Next<int (*)(int, struct stat*)>("fstat");
  CountStat();
  return next(fd, st);
}
extern "C" int fstatat(int dir, const char* path, struct stat* st, int flags) {
  static auto next = Next<int (*)(int, const char*, struct stat*, int)>("fstatat");
  CountStat();
  return next(dir, path, st, flags);
}
extern "C" int statx(int dir, const char* path, int flags, unsigned mask, struct statx* st) {
  static auto next = Next<int (*)(int, const char*, int, unsigned, struct statx*)>("statx");
  CountStat();
  return next(dir, path, flags, mask, st);
}
extern "C" int pthread_mutex_lock(pthread_mutex_t* mutex) {
  static auto next = Next<int (*)(pthread_mutex_t*)>("pthread_mutex_lock");
  CountLock();
  return next(mutex);
}
extern "C" int pthread_mutex_trylock(pthread_mutex_t* mutex) {
  static auto next = Next<int (*)(pthread_mutex_t*)>("pthread_mutex_trylock");
  CountLock();
  return next(mutex);
}
extern "C" int pthread_rwlock_rdlock(pthread_rwlock_t* lock) {
  static auto next = Next<int (*)(pthread_rwlock_t*)>("pthread_rwlock_rdlock");
  CountLock();
  return next(lock);
}
extern "C" int pthread_rwlock_wrlock(pthread_rwlock_t* lock) {
  static auto next = Next<int (*)(pthread_rwlock_t*)>("pthread_rwlock_wrlock");
  CountLock();
  return next(lock);
}
extern "C" int pthread_spin_lock(pthread_spinlock_t* lock) {
  static auto next = Next<int (*)(pthread_spinlock_t*)>("pthread_spin_lock");
  CountLock();
  return next(lock);
}
#endif

namespace blockread::storage {
namespace {

constexpr int kReads = 10000;
constexpr int kQueueDepth = 32;

struct Tally {
  int done = 0;
  int errors = 0;
};

bool CountDone(void* context, const ReadResult& result) {
  auto* tally = static_cast<Tally*>(context);
  ++tally->done;
  if (!result.status.ok() || result.path != ReadPathKind::kSimple) ++tally->errors;
  return false;
}

// Runs `reads` 4 KiB simple reads of `file` at QD32 and returns the allocations counted.
uint64_t CountAllocationsOfSimpleReads(EngineContext& engine, const std::string& file,
                                       uint64_t file_blocks, int reads, Tally& tally) {
  uint64_t x = 88172645463325252ULL;
  int started = 0;
  allocations.store(0);
  stat_calls.store(0);
  lock_calls.store(0);
  counting.store(true);
  count_this_thread = true;
  while (tally.done < reads) {
    while (started < reads && started - tally.done < kQueueDepth) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      absl::Status refusal;
      const storage::StartOutcome outcome =
          engine.StartRead(storage::ReadRequest{file, (x % file_blocks) * 4096, 4096, 0},
                           &CountDone, &tally, &refusal);
      if (storage::IsBusy(outcome)) break;  // poll, then go on
      if (outcome != storage::StartOutcome::kQueued) ++tally.errors;
      ++started;
    }
    engine.PollOnce();
  }
  count_this_thread = false;
  counting.store(false);
  return allocations.load();
}

void ExpectNoAllocations(Catalog& catalog, const std::string& file, uint64_t file_blocks) {
  auto engine = EngineContext::Create(catalog, EngineConfig());
  ASSERT_TRUE(engine.ok()) << engine.status();
  Tally warmup;
  CountAllocationsOfSimpleReads(**engine, file, file_blocks, 1000, warmup);
  ASSERT_EQ(warmup.errors, 0);
  Tally tally;
  const uint64_t counted =
      CountAllocationsOfSimpleReads(**engine, file, file_blocks, kReads, tally);
  EXPECT_EQ(tally.errors, 0);
  EXPECT_EQ(tally.done, kReads);
  EXPECT_EQ(counted, 0u) << "heap allocations during " << kReads << " simple reads";
  EXPECT_EQ(stat_calls.load(), 0u) << "stat-family calls during " << kReads << " simple reads";
  EXPECT_EQ(lock_calls.load(), 0u) << "locks taken during " << kReads << " simple reads";
  StatsSnapshot stats;
  stats.Add((*engine)->stats());
  EXPECT_EQ(stats.path(ReadPathKind::kSimple).requests, 1000u + kReads);
}

TEST(SimplePathAllocationTest, CountingWorks) {
  if (!BLOCKREAD_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer build: allocator is replaced";
  allocations.store(0);
  counting.store(true);
  void* volatile p = malloc(16);
  auto* volatile q = new int(1);
  counting.store(false);
  free(p);
  delete q;
  EXPECT_EQ(allocations.load(), 2u) << "the counting allocator is not in effect";
}

TEST(SimplePathAllocationTest, StatAndLockCountingWorks) {
  if (!BLOCKREAD_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer build: libc is intercepted";
  stat_calls.store(0);
  lock_calls.store(0);
  count_this_thread = true;
  struct stat st;
  fstat(0, &st);
  fstatat(AT_FDCWD, "/", &st, 0);
  std::mutex mutex;
  mutex.lock();
  mutex.unlock();
  std::shared_mutex shared;
  shared.lock_shared();
  shared.unlock_shared();
  count_this_thread = false;
  EXPECT_EQ(stat_calls.load(), 2u) << "the counting stat functions are not in effect";
  EXPECT_EQ(lock_calls.load(), 2u) << "the counting lock functions are not in effect";
}

TEST(SimplePathAllocationTest, WholeDeviceFile) {
  if (!BLOCKREAD_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer build: allocator is replaced";
  testing::TempDir dir;
  ASSERT_TRUE(
      testing::WriteAt(dir.path() + "/disk.img", 0, testing::RandomBytes(8 << 20, 1), true).ok());
  Catalog catalog;
  ASSERT_TRUE(catalog.AddWholeDevice("disk", dir.path() + "/disk.img").ok());
  ExpectNoAllocations(catalog, "disk", (8 << 20) / 4096);
}

TEST(SimplePathAllocationTest, FiemapImportedFile) {
  if (!BLOCKREAD_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer build: allocator is replaced";
  if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir dir;
  auto fs = testing::MakeLoopFilesystem(testing::FsType::kExt4, dir.path(), 512 << 20);
  ASSERT_TRUE(fs.ok()) << fs.status();
  const std::string path = (*fs)->root() + "/data";
  ASSERT_TRUE(testing::WriteAt(path, 0, testing::RandomBytes(8 << 20, 2), true).ok());
  Catalog catalog;
  ASSERT_TRUE(catalog.ImportFile("data", path).ok());
  ExpectNoAllocations(catalog, "data", (8 << 20) / 4096);
}

}  // namespace
}  // namespace blockread::storage
