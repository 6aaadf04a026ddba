// A served tree is live (storage/catalog.h): files created in it are served once closed after
// writing, files and directories moved in, out or over are followed at every depth, and removed
// names answer NOT_FOUND. Renames and removals are seen by the engine's next read (it waits for
// the watcher to apply them, storage/name_sync.h); a file closed after writing appears shortly
// after, so those reads poll. Real ext4 and XFS on loop devices, reads through the real engine,
// bytes checked against the filesystem's own.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "storage/read_path.h"
#include "tests/support/engine_driver.h"
#include "tests/support/loop_device.h"

namespace blockread::storage {
namespace {

using testing::FsType;
using testing::RandomBytes;
using testing::ReadFileRange;
using testing::TempDir;
using testing::WriteAt;
using Clock = std::chrono::steady_clock;

class LiveTreeTest : public ::testing::TestWithParam<FsType> {
 protected:
  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    auto fs = testing::MakeLoopFilesystem(GetParam(), dir_.path(), 512 << 20);
    ASSERT_TRUE(fs.ok()) << fs.status();
    fs_ = *std::move(fs);
    root_ = fs_->root() + "/tree";
    std::filesystem::create_directories(root_);
    Write("present.bin", 64 * 1024 + 17, 1);
  }

  void TearDown() override { engine_.reset(); }

  // Starts serving root_ (after the test has laid out what is there at startup).
  void Serve(size_t max_open_files = kDefaultMaxOpenFiles) {
    catalog_.set_max_open_files(max_open_files);
    auto added = catalog_.ImportTree(root_);
    ASSERT_TRUE(added.ok()) << added.status();
    auto engine = EngineContext::Create(catalog_, EngineConfig());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  std::string PathOf(const std::string& name) const { return root_ + "/" + name; }

  // Writes `size` bytes to `name` (its directories made) and closes it, not synced.
  void Write(const std::string& name, size_t size, uint64_t seed) {
    std::filesystem::create_directories(std::filesystem::path(PathOf(name)).parent_path());
    ASSERT_TRUE(WriteAt(PathOf(name), 0, RandomBytes(size, seed), false).ok()) << name;
  }

  // The engine's read of all of `name` now (one byte more than its file).
  testing::CompletedRead ReadAll(const std::string& name, const std::string& path) {
    struct stat st = {};
    stat(path.c_str(), &st);
    return testing::ReadOnce(*engine_, name, 0, static_cast<uint64_t>(st.st_size) + 1);
  }

  // `name` serves exactly what `path` holds, now.
  void ExpectServes(const std::string& name, const std::string& path) {
    testing::CompletedRead read = ReadAll(name, path);
    ASSERT_TRUE(read.status.ok()) << name << ": " << read.status;
    struct stat st = {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    auto expected = ReadFileRange(path, 0, static_cast<uint64_t>(st.st_size) + 1);
    ASSERT_TRUE(expected.ok());
    EXPECT_TRUE(read.data == *expected) << name << " serves other bytes than " << path;
  }

  void ExpectNotFound(const std::string& name) {
    testing::CompletedRead read = testing::ReadOnce(*engine_, name, 0, 4096);
    EXPECT_EQ(read.status.code(), absl::StatusCode::kNotFound) << name << ": " << read.status;
  }

  // Waits (up to a generous bound, far above what it takes) until `name` is served, then checks
  // its bytes. Returns how long it took to appear.
  std::chrono::microseconds ExpectServedSoon(const std::string& name, const std::string& path) {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::seconds(10);
    while (ReadAll(name, path).status.code() == absl::StatusCode::kNotFound &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const auto took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    ExpectServes(name, path);
    return took;
  }

  TempDir dir_;
  std::unique_ptr<testing::LoopFilesystem> fs_;
  std::string root_;
  Catalog catalog_;
  std::unique_ptr<EngineContext> engine_;
};

TEST_P(LiveTreeTest, AFileWrittenAfterStartupIsServedOnceClosedAndNotBefore) {
  Serve();
  ExpectServes("present.bin", PathOf("present.bin"));
  // Open for writing: not served yet (a half-written file is nobody's data).
  const std::string path = PathOf("new.bin");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const std::vector<char> bytes = RandomBytes(100 * 1000 + 3, 2);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  catalog_.WaitUntilCurrent();
  ExpectNotFound("new.bin");
  ASSERT_EQ(close(fd), 0);
  const auto took = ExpectServedSoon("new.bin", path);
  printf("a new file was served %.1f ms after its close\n", took.count() / 1000.0);
  EXPECT_EQ(catalog_.FileNames(), (std::vector<std::string>{"new.bin", "present.bin"}));
}

TEST_P(LiveTreeTest, AFileInANewDirectoryTreeIsServed) {
  Serve();
  Write("new/deeper/still/f.bin", 8192, 3);
  ExpectServedSoon("new/deeper/still/f.bin", PathOf("new/deeper/still/f.bin"));
  // Its directories are watched too: a second file there, and a rename inside them.
  Write("new/deeper/still/g.bin", 4096 * 3, 4);
  ExpectServedSoon("new/deeper/still/g.bin", PathOf("new/deeper/still/g.bin"));
  ASSERT_EQ(
      rename(PathOf("new/deeper/still/g.bin").c_str(), PathOf("new/deeper/still/f.bin").c_str()),
      0);
  ExpectServes("new/deeper/still/f.bin", PathOf("new/deeper/still/f.bin"));
  ExpectNotFound("new/deeper/still/g.bin");
}

TEST_P(LiveTreeTest, ADirectorySwapThenAFileRenamedOverInsideTheNewDirectoryServeTheNewBytes) {
  Write("ds/v/f.bin", 40 * 1024, 5);
  Write("ds/v.new/f.bin", 48 * 1024 + 5, 6);
  Serve();
  ExpectServes("ds/v/f.bin", PathOf("ds/v/f.bin"));
  // The usual way to publish a dataset version: the names follow at once.
  ASSERT_EQ(rename(PathOf("ds/v").c_str(), PathOf("ds/v.old").c_str()), 0);
  ASSERT_EQ(rename(PathOf("ds/v.new").c_str(), PathOf("ds/v").c_str()), 0);
  ExpectServes("ds/v/f.bin", PathOf("ds/v/f.bin"));
  ExpectServes("ds/v.old/f.bin", PathOf("ds/v.old/f.bin"));
  ExpectNotFound("ds/v.new/f.bin");
  // A file renamed over one inside the directory swapped in: its watch is the new directory's.
  Write("ds/v/f.bin.tmp", 24 * 1024 + 9, 7);
  ASSERT_EQ(rename(PathOf("ds/v/f.bin.tmp").c_str(), PathOf("ds/v/f.bin").c_str()), 0);
  ExpectServes("ds/v/f.bin", PathOf("ds/v/f.bin"));
  // And the old version's directory, under its new name, still follows changes.
  ASSERT_EQ(unlink(PathOf("ds/v.old/f.bin").c_str()), 0);
  ExpectNotFound("ds/v.old/f.bin");
  // Rewritten in place once leased again: still the current bytes.
  catalog_.WaitUntilCurrent();
  ASSERT_TRUE(WriteAt(PathOf("ds/v/f.bin"), 4096, RandomBytes(8192, 8), false).ok());
  ExpectServes("ds/v/f.bin", PathOf("ds/v/f.bin"));
}

TEST_P(LiveTreeTest, AGrandparentMovedAwayAndBackIsFollowed) {
  Write("a/b/f.bin", 20 * 1024 + 1, 9);
  Serve();
  ExpectServes("a/b/f.bin", PathOf("a/b/f.bin"));
  ASSERT_EQ(rename(PathOf("a").c_str(), PathOf("a.moved").c_str()), 0);
  ExpectNotFound("a/b/f.bin");
  ExpectServes("a.moved/b/f.bin", PathOf("a.moved/b/f.bin"));
  // Moved out of the tree: nothing of it is served.
  const std::string outside = fs_->root() + "/outside";
  ASSERT_EQ(rename(PathOf("a.moved").c_str(), outside.c_str()), 0);
  ExpectNotFound("a.moved/b/f.bin");
  // A file changed out there does not come back under any name.
  Write("../outside/b/h.bin", 4096, 10);
  catalog_.WaitUntilCurrent();
  ExpectNotFound("a/b/h.bin");
  ExpectNotFound("a.moved/b/h.bin");
  // And back in: served under the old names again, new file included.
  ASSERT_EQ(rename(outside.c_str(), PathOf("a").c_str()), 0);
  ExpectServes("a/b/f.bin", PathOf("a/b/f.bin"));
  ExpectServes("a/b/h.bin", PathOf("a/b/h.bin"));
}

TEST_P(LiveTreeTest, MoreFilesThanOpenSlotsAreServedAndRemovedOnesAnswerNotFound) {
  Serve(/*max_open_files=*/2);
  ASSERT_EQ(catalog_.open_file_slots(), 2u);
  Write("one.bin", 4096, 11);
  Write("two.bin", 4096, 12);
  Write("three.bin", 8192 + 5, 13);
  ExpectServedSoon("one.bin", PathOf("one.bin"));
  ExpectServedSoon("two.bin", PathOf("two.bin"));
  // Past the cap: served all the same, the least recently read file closed to make room.
  ExpectServedSoon("three.bin", PathOf("three.bin"));
  ExpectServes("present.bin", PathOf("present.bin"));
  ExpectServes("one.bin", PathOf("one.bin"));
  EXPECT_GE(catalog_.route_counts().evictions, 1u);
  // Evicted, then rewritten in place while closed: its next read opens it again, new bytes.
  ExpectServes("two.bin", PathOf("two.bin"));
  ExpectServes("three.bin", PathOf("three.bin"));
  ASSERT_TRUE(WriteAt(PathOf("one.bin"), 0, RandomBytes(12288 + 9, 16), false).ok());
  ExpectServes("one.bin", PathOf("one.bin"));
  ASSERT_EQ(unlink(PathOf("one.bin").c_str()), 0);
  ExpectNotFound("one.bin");
  // A whole directory removed: every name in it goes.
  Write("dir/x.bin", 4096, 15);
  ExpectServedSoon("dir/x.bin", PathOf("dir/x.bin"));
  std::filesystem::remove_all(PathOf("dir"));
  ExpectNotFound("dir/x.bin");
  ExpectServes("three.bin", PathOf("three.bin"));
  ExpectServes("two.bin", PathOf("two.bin"));
  ExpectServes("present.bin", PathOf("present.bin"));
}

// A thousand files created at once, while another served file is written 100 times a second
// without a pause (each write an open, a write and a close: events, and lease retries, that never
// stop): each new file is served within a second of its close().
TEST_P(LiveTreeTest, ABurstOfAThousandCreationsUnderSteadyWritesIsServedWithinASecondOfEach) {
  Write("steady.bin", 65536, 3);
  Serve();
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    const std::vector<char> block = testing::RandomBytes(4096, 4);
    for (int n = 0; !stop.load(); ++n) {
      ASSERT_TRUE(testing::WriteAt(PathOf("steady.bin"), (n % 16) * 4096, block, false).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writes under way
  constexpr int kFiles = 1000;
  const auto name_of = [](int i) { return absl::StrCat("burst/d", i % 10, "/f", i, ".bin"); };
  std::vector<std::atomic<int64_t>> closed_us(kFiles);
  for (auto& t : closed_us) t = -1;
  std::vector<int64_t> served_us(kFiles, -1);
  const auto start = Clock::now();
  const auto since_start = [&] {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  };
  // Looks for each file in turn, from its close on, until it is named.
  std::thread watcher([&] {
    for (int i = 0; i < kFiles; ++i) {
      while (closed_us[i].load() < 0 || !catalog_.ResolveWithoutOpening(name_of(i)).ok()) {
        if (closed_us[i].load() >= 0 && since_start() - closed_us[i].load() > 10'000'000) break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      served_us[i] = since_start();
    }
  });
  for (int i = 0; i < kFiles; ++i) {
    Write(name_of(i), 4096 + static_cast<size_t>(i), 100 + i);
    closed_us[i] = since_start();
  }
  const int64_t written_us = since_start();
  watcher.join();
  stop = true;
  writer.join();
  int64_t worst_us = 0;
  for (int i = 0; i < kFiles; ++i) {
    worst_us = std::max(worst_us, served_us[i] - closed_us[i].load());
  }
  EXPECT_LT(worst_us, 1'000'000) << "a new file was served more than a second after its close";
  for (int i = 0; i < kFiles; ++i) {
    ExpectServes(name_of(i), PathOf(name_of(i)));
    if (HasFailure()) break;
  }
  EXPECT_EQ(catalog_.file_count(), kFiles + 2u);
  ExpectServes("steady.bin", PathOf("steady.bin"));
  printf(
      "%d files created in %.0f ms under 100 writes a second elsewhere; the slowest served "
      "%.1f ms after its close\n",
      kFiles, written_us / 1000.0, worst_us / 1000.0);
}

// Out of inotify watches (fs.inotify.max_user_watches, per user): the directories that cannot be
// watched are not served (a change in them could not be seen), the log names the limit to raise,
// the rest is served, and once watches can be had (the limit raised) their files are served too,
// without a restart.
TEST_P(LiveTreeTest, DirectoriesPastTheWatchLimitAreServedOnceTheyCanBeWatched) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to lower fs.inotify.max_user_watches";
  for (const char* directory : {"a", "b", "c", "d"}) {
    std::filesystem::create_directories(PathOf(directory));
    Write(absl::StrCat(directory, "/file.bin"), 5000, directory[0]);
  }
  const std::string limit_path = "/proc/sys/fs/inotify/max_user_watches";
  auto saved = testing::RunCommand("cat " + limit_path);
  ASSERT_TRUE(saved.ok()) << saved.status();
  // Watches root holds now; this catalog may add four (the tree's root and one directory, in its
  // two inotify instances).
  auto used = testing::RunCommand(
      "for p in /proc/[0-9]*; do [ \"$(awk '/^Uid:/{print $2}' $p/status 2>/dev/null)\" = 0 ] && "
      "cat $p/fdinfo/* 2>/dev/null; done | grep -c '^inotify wd:' || true");
  ASSERT_TRUE(used.ok()) << used.status();
  const int limit = std::stoi(std::string(absl::StripAsciiWhitespace(*used))) + 4;
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(testing::RunCommand(absl::StrCat("echo ", limit, " > ", limit_path)).ok());
  // Restored whatever happens, and never below the kernel's smallest default (8,192): a run that
  // crashed before restoring would otherwise leave the machine at a handful of watches.
  const int restored = std::max(8192, std::stoi(std::string(absl::StripAsciiWhitespace(*saved))));
  absl::Cleanup restore = [&] {
    (void)testing::RunCommand(absl::StrCat("echo ", restored, " > ", limit_path));
  };
  Serve();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(engine_, nullptr) << log;
  EXPECT_NE(log.find("raise fs.inotify.max_user_watches"), std::string::npos) << log;
  int not_served = 0;
  for (const char* directory : {"a", "b", "c", "d"}) {
    const std::string name = absl::StrCat(directory, "/file.bin");
    if (ReadAll(name, PathOf(name)).status.code() == absl::StatusCode::kNotFound) ++not_served;
  }
  EXPECT_GE(not_served, 3) << "more directories were served than could be watched:\n" << log;
  EXPECT_EQ(catalog_.route_counts().unavailable, 0u);
  ExpectServes("present.bin", PathOf("present.bin"));

  std::move(restore).Invoke();
  for (const char* directory : {"a", "b", "c", "d"}) {
    const std::string name = absl::StrCat(directory, "/file.bin");
    ExpectServedSoon(name, PathOf(name));
  }
}

INSTANTIATE_TEST_SUITE_P(Filesystems, LiveTreeTest, ::testing::Values(FsType::kExt4, FsType::kXfs),
                         [](const auto& info) { return testing::FsTypeName(info.param); });

}  // namespace
}  // namespace blockread::storage
