// BufferPool: page-aligned, page-rounded, non-overlapping buffers from one mapping, and the
// RLIMIT_MEMLOCK helper that registration depends on.
#include "storage/buffer_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace blockread::storage {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

TEST(BufferPoolTest, BuffersArePageAlignedRoundedAndDisjoint) {
  auto pool = BufferPool::Create(5, 1000);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->count(), 5u);
  EXPECT_EQ((*pool)->buffer_bytes(), kPage) << "rounded up to the page size";
  EXPECT_EQ((*pool)->total_bytes(), 5 * kPage);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*pool)->buffer(i)) % kPage, 0u) << i;
    if (i > 0) {
      EXPECT_EQ((*pool)->buffer(i), (*pool)->buffer(i - 1) + kPage) << i;
    }
  }
  // Every byte is writable, and each buffer keeps its own bytes.
  for (size_t i = 0; i < 5; ++i) std::fill_n((*pool)->buffer(i), kPage, static_cast<char>('a' + i));
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(std::string((*pool)->buffer(i), kPage), std::string(kPage, 'a' + i)) << i;
  }
}

TEST(BufferPoolTest, IovecsDescribeTheBuffersInIndexOrder) {
  auto pool = BufferPool::Create(3, 3 * kPage);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const std::vector<iovec> iovecs = (*pool)->iovecs();
  ASSERT_EQ(iovecs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(iovecs[i].iov_base, (*pool)->buffer(i)) << i;
    EXPECT_EQ(iovecs[i].iov_len, 3 * kPage) << i;
  }
}

TEST(BufferPoolTest, EmptyPoolsAndZeroSizes) {
  auto empty = BufferPool::Create(0, 4096);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)->count(), 0u);
  EXPECT_EQ((*empty)->total_bytes(), 0u);
  EXPECT_TRUE((*empty)->iovecs().empty());

  auto zero = BufferPool::Create(2, 0);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ((*zero)->buffer_bytes(), kPage) << "at least one page";
}

TEST(BufferPoolTest, MappingFailureNamesTheSize) {
  // 2^20 buffers of 1 GiB: 1 PiB, more than any address space here.
  auto pool = BufferPool::Create(size_t{1} << 20, size_t{1} << 30);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("1048576 I/O buffers of 1073741824 bytes"),
            std::string::npos)
      << pool.status();
}

TEST(RaiseMemlockLimitTest, RaisesTheSoftLimitToTheHardLimit) {
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_max, 64 * 1024);
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &low), 0);  // lowering the soft limit is always allowed

  const uint64_t now = RaiseMemlockLimit();
  rlimit after;
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &after), 0);
  EXPECT_EQ(now, after.rlim_cur) << "returns the limit in force";
  EXPECT_EQ(after.rlim_cur, saved.rlim_max);
  EXPECT_EQ(after.rlim_max, saved.rlim_max) << "the hard limit is left alone";
  EXPECT_EQ(RaiseMemlockLimit(), now) << "already at the hard limit";
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &saved), 0);
}

}  // namespace
}  // namespace blockread::storage
