// Ring: one io_uring with registered files and buffers, on a regular file and on a real loop
// device (both opened O_DIRECT by Device). Every read's bytes are checked against what the file or
// device returns through a plain read.
#include "storage/ring.h"

#include <cerrno>
#include <chrono>
#include <map>
#include <ostream>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "storage/buffer_pool.h"
#include "storage/device.h"
#include "tests/support/loop_device.h"

namespace blockread::storage {
namespace {

using testing::LoopDevice;
using testing::RandomBytes;
using testing::ReadFileRange;
using testing::TempDir;
using testing::WriteAt;

constexpr uint64_t kDeviceBytes = 8 << 20;
constexpr size_t kBuffers = 16;
constexpr size_t kBufferBytes = 16384;

enum class Backing { kRegularFile, kLoopDevice };

const char* BackingName(Backing backing) {
  return backing == Backing::kRegularFile ? "regular_file" : "loop_device";
}
void PrintTo(Backing backing, std::ostream* out) { *out << BackingName(backing); }

struct Completion {
  uint64_t user_data;
  int res;
};

class RingTest : public ::testing::TestWithParam<Backing> {
 protected:
  void SetUp() override {
    const std::string image = dir_.path() + "/disk.img";
    ASSERT_TRUE(WriteAt(image, 0, RandomBytes(kDeviceBytes, 42), true).ok());
    path_ = image;
    if (GetParam() == Backing::kLoopDevice) {
      if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
        GTEST_SKIP() << why;
      }
      auto loop = LoopDevice::Create(image, kDeviceBytes);
      ASSERT_TRUE(loop.ok()) << loop.status();
      loop_ = *std::move(loop);
      path_ = loop_->path();
    }
    auto device = Device::Open("d", path_);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    auto pool = BufferPool::Create(kBuffers, kBufferBytes);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    ring_ = MakeRing(Ring::Options());
  }

  // A ring with the device registered at index 0 (index 1 left empty) and the pool's buffers.
  std::unique_ptr<Ring> MakeRing(const Ring::Options& options) {
    auto ring = Ring::Create(options);
    EXPECT_TRUE(ring.ok()) << ring.status();
    if (!ring.ok()) return nullptr;
    EXPECT_TRUE((*ring)->RegisterFiles({device_->fd(), -1}).ok());
    EXPECT_TRUE((*ring)->RegisterBuffers(pool_->iovecs()).ok());
    return *std::move(ring);
  }

  // Reaps the way a worker does, by spinning on Reap(), until `count` completions came back.
  // The bound only keeps a lost completion from hanging the test; it measures nothing.
  static std::vector<Completion> ReapBySpinning(Ring& ring, size_t count) {
    std::vector<Completion> got;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (got.size() < count && std::chrono::steady_clock::now() < give_up) {
      const unsigned n = ring.Reap([&](uint64_t user_data, int res) {
        got.push_back({user_data, res});
      });
      if (n == 0) std::this_thread::yield();
    }
    EXPECT_EQ(got.size(), count) << "completions lost";
    return got;
  }

  // What the file or device holds at [offset, offset + length), read without O_DIRECT.
  std::string Expected(uint64_t offset, uint64_t length) {
    auto bytes = ReadFileRange(path_, offset, length);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : "";
  }

  std::string Buffer(size_t index, size_t length) {
    return std::string(pool_->buffer(index), length);
  }

  // Destroyed in reverse: the ring before the buffers and the device, the device before the loop.
  TempDir dir_;
  std::string path_;
  std::unique_ptr<LoopDevice> loop_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<BufferPool> pool_;
  std::unique_ptr<Ring> ring_;
};

TEST_P(RingTest, ReadsLandInTheirBuffersWithTheirUserData) {
  ASSERT_NE(ring_, nullptr);
  EXPECT_EQ(ring_->mode(), PollMode::kInterrupt);
  EXPECT_EQ(ring_->Submit(), 0) << "nothing queued";
  EXPECT_EQ(ring_->Reap([](uint64_t, int) { ADD_FAILURE() << "a completion from nowhere"; }), 0u);

  std::mt19937_64 rng(7);
  std::map<uint64_t, std::pair<uint64_t, unsigned>> reads;  // user_data -> offset, length
  for (size_t i = 0; i < kBuffers; ++i) {
    const unsigned length = 4096 * (1 + rng() % (kBufferBytes / 4096));
    const uint64_t offset = 4096 * (rng() % ((kDeviceBytes - length) / 4096));
    const uint64_t user_data = 1000 + i;
    ASSERT_TRUE(
        ring_->TryQueueRead(0, pool_->buffer(i), length, offset, static_cast<int>(i), user_data));
    reads[user_data] = {offset, length};
    EXPECT_EQ(ring_->inflight(), i + 1) << "queued reads count as in flight";
  }
  EXPECT_EQ(ring_->Submit(), static_cast<int>(kBuffers));
  EXPECT_EQ(ring_->inflight(), kBuffers);

  for (const Completion& c : ReapBySpinning(*ring_, kBuffers)) {
    auto it = reads.find(c.user_data);
    ASSERT_NE(it, reads.end()) << "unknown or repeated user_data " << c.user_data;
    const auto [offset, length] = it->second;
    ASSERT_EQ(c.res, static_cast<int>(length)) << "read at " << offset;
    const size_t index = c.user_data - 1000;
    EXPECT_TRUE(Buffer(index, length) == Expected(offset, length))
        << "buffer " << index << ": bytes differ from the device at " << offset;
    reads.erase(it);
  }
  EXPECT_EQ(ring_->inflight(), 0u);
  EXPECT_EQ(ring_->Reap([](uint64_t, int) { ADD_FAILURE() << "a completion from nowhere"; }), 0u);
}

// The kernel's answer comes back in the CQE as it is: short at the end, 0 beyond it, -errno for
// a refused read. Each still counts as one completion.
TEST_P(RingTest, ShortReadsAndErrorsComeBackInTheCompletion) {
  ASSERT_NE(ring_, nullptr);
  ASSERT_TRUE(ring_->TryQueueRead(0, pool_->buffer(0), 8192, kDeviceBytes - 4096, 0, 1));
  ASSERT_TRUE(ring_->TryQueueRead(0, pool_->buffer(1), 4096, kDeviceBytes, 1, 2));
  ASSERT_TRUE(ring_->TryQueueRead(0, pool_->buffer(2), 4096, 100, 2, 3));  // not aligned: O_DIRECT
  ASSERT_TRUE(ring_->TryQueueRead(1, pool_->buffer(3), 4096, 0, 3, 4));    // empty file slot
  EXPECT_EQ(ring_->Submit(), 4);
  std::map<uint64_t, int> res;
  for (const Completion& c : ReapBySpinning(*ring_, 4)) res[c.user_data] = c.res;
  EXPECT_EQ(res[1], 4096);
  EXPECT_TRUE(Buffer(0, 4096) == Expected(kDeviceBytes - 4096, 4096));
  EXPECT_EQ(res[2], 0);
  EXPECT_EQ(res[3], -EINVAL);
  EXPECT_EQ(res[4], -EBADF);
  EXPECT_EQ(ring_->inflight(), 0u);
}

// TryQueueRead with the submission queue full queues nothing and says so; after Submit() there is
// room again.
TEST_P(RingTest, AFullSubmissionQueueRefusesUntilSubmitted) {
  ASSERT_NE(ring_, nullptr);
  Ring::Options options;
  options.sq_entries = 4;
  options.cq_entries = 64;
  std::unique_ptr<Ring> small = MakeRing(options);
  ASSERT_NE(small, nullptr);
  constexpr int kReads = 4 * kBuffers;
  for (int i = 0; i < kReads; ++i) {
    const int index = i % kBuffers;
    // Reads sharing a buffer read the same bytes, so whichever lands last leaves them there.
    if (!small->TryQueueRead(0, pool_->buffer(index), 4096, 4096 * index, index, i)) {
      EXPECT_EQ(i % 4, 0) << "refused with room left, read " << i;
      EXPECT_EQ(small->inflight(), static_cast<unsigned>(i));
      ASSERT_GT(small->Submit(), 0);
      ASSERT_TRUE(small->TryQueueRead(0, pool_->buffer(index), 4096, 4096 * index, index, i)) << i;
    }
  }
  EXPECT_EQ(small->inflight(), static_cast<unsigned>(kReads));
  EXPECT_GE(small->Submit(), 0);
  std::vector<bool> seen(kReads);
  for (const Completion& c : ReapBySpinning(*small, kReads)) {
    ASSERT_LT(c.user_data, seen.size());
    EXPECT_FALSE(seen[c.user_data]) << "repeated user_data " << c.user_data;
    seen[c.user_data] = true;
    EXPECT_EQ(c.res, 4096) << "read " << c.user_data;
  }
  for (size_t index = 0; index < kBuffers; ++index) {
    EXPECT_TRUE(Buffer(index, 4096) == Expected(4096 * index, 4096)) << "buffer " << index;
  }
  EXPECT_EQ(small->inflight(), 0u);
}

// WaitForCompletion blocks until a completion is there (the shutdown drain), and returns at once
// with nothing in flight.
TEST_P(RingTest, WaitForCompletion) {
  ASSERT_NE(ring_, nullptr);
  ring_->WaitForCompletion();  // nothing in flight: must not block
  ASSERT_TRUE(ring_->TryQueueRead(0, pool_->buffer(0), kBufferBytes, 65536, 0, 9));
  ASSERT_EQ(ring_->Submit(), 1);
  ring_->WaitForCompletion();
  std::vector<Completion> got;
  EXPECT_EQ(ring_->Reap([&](uint64_t user_data, int res) { got.push_back({user_data, res}); }), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].user_data, 9u);
  EXPECT_EQ(got[0].res, static_cast<int>(kBufferBytes));
  EXPECT_TRUE(Buffer(0, kBufferBytes) == Expected(65536, kBufferBytes));
  EXPECT_EQ(ring_->inflight(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backings, RingTest,
                         ::testing::Values(Backing::kRegularFile, Backing::kLoopDevice),
                         [](const auto& info) { return BackingName(info.param); });

TEST(RingModeTest, IoPollRingsSayTheirMode) {
  Ring::Options options;
  options.mode = PollMode::kIoPoll;
  auto ring = Ring::Create(options);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ((*ring)->mode(), PollMode::kIoPoll);
  EXPECT_EQ((*ring)->inflight(), 0u);
}

}  // namespace
}  // namespace blockread::storage
