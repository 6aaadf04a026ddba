// A FIEMAP-imported file that changes after import is never served stale: Resolve() re-imports it
// (or fails saying why), and the new map reads the new bytes straight from the device.
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "storage/read_path.h"
#include "tests/support/engine_driver.h"
#include "tests/support/loop_device.h"
#include "tests/support/map_reader.h"

namespace blockread::storage {
namespace {

using testing::FsType;
using testing::RandomBytes;
using testing::ReadFileRange;
using testing::ReadThroughMap;
using testing::TempDir;
using testing::WriteAt;

class StalenessTest : public ::testing::TestWithParam<FsType> {
 protected:
  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    auto fs = testing::MakeLoopFilesystem(GetParam(), dir_.path(), 512 << 20);
    ASSERT_TRUE(fs.ok()) << fs.status();
    fs_ = *std::move(fs);
    path_ = fs_->root() + "/file";
    ASSERT_TRUE(WriteAt(path_, 0, RandomBytes(256 * 1024, 1), true).ok());
    ASSERT_TRUE(catalog_.ImportFile("file", path_).ok());
  }

  // The whole file through a fresh Resolve(), which must equal the filesystem's view.
  void ExpectServedBytesAreCurrent() {
    auto map = catalog_.Resolve("file");
    ASSERT_TRUE(map.ok()) << map.status();
    // One byte more than the map's size, so a map that is too short or too long shows.
    auto expected = ReadFileRange(path_, 0, (*map)->size() + 1);
    ASSERT_TRUE(expected.ok());
    auto actual = ReadThroughMap(catalog_, **map, 0, (*map)->size() + 1);
    ASSERT_TRUE(actual.ok()) << actual.status();
    ASSERT_EQ(actual->size(), expected->size());
    EXPECT_TRUE(*actual == *expected) << "served bytes are stale";
  }

  TempDir dir_;
  std::unique_ptr<testing::LoopFilesystem> fs_;
  std::string path_;
  Catalog catalog_;
};

TEST_P(StalenessTest, RewrittenInPlaceWithoutSync) {
  ExpectServedBytesAreCurrent();
  // Not synced: the new bytes are only in the page cache until the re-import flushes them.
  ASSERT_TRUE(WriteAt(path_, 4096, RandomBytes(8192, 2), false).ok());
  ExpectServedBytesAreCurrent();
  // Twice in a row, quickly: timestamps must still tell the versions apart.
  ASSERT_TRUE(WriteAt(path_, 0, RandomBytes(4096, 3), false).ok());
  ExpectServedBytesAreCurrent();
  ASSERT_TRUE(WriteAt(path_, 0, RandomBytes(4096, 4), false).ok());
  ExpectServedBytesAreCurrent();
}

TEST_P(StalenessTest, GrownAndTruncated) {
  ASSERT_TRUE(WriteAt(path_, 256 * 1024, RandomBytes(100000, 5), false).ok());
  ExpectServedBytesAreCurrent();
  EXPECT_EQ((*catalog_.Resolve("file"))->size(), 256u * 1024 + 100000);
  ASSERT_EQ(truncate(path_.c_str(), 5000), 0);
  ExpectServedBytesAreCurrent();
  EXPECT_EQ((*catalog_.Resolve("file"))->size(), 5000u);
}

TEST_P(StalenessTest, ReplacedByRename) {
  const std::string replacement = fs_->root() + "/replacement";
  ASSERT_TRUE(WriteAt(replacement, 0, RandomBytes(300 * 1024, 6), false).ok());
  ASSERT_EQ(rename(replacement.c_str(), path_.c_str()), 0);
  ExpectServedBytesAreCurrent();
}

TEST_P(StalenessTest, RemovedFileIsNotFound) {
  ASSERT_EQ(unlink(path_.c_str()), 0);
  auto map = catalog_.Resolve("file");
  EXPECT_EQ(map.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(map.status().message().find("was removed since it was imported"), std::string::npos)
      << map.status();
}

TEST_P(StalenessTest, UnknownFileIsNotFound) {
  auto map = catalog_.Resolve("nope");
  EXPECT_EQ(map.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(map.status().message().find("unknown file 'nope'"), std::string::npos);
}

// An errno-derived RESOURCE_EXHAUSTED (here EMFILE from the re-import's open) is a real answer,
// not "slots busy": the engine completes the read with it at once instead of telling the caller
// to retry, which would wait for a slot that nothing in flight will free.
TEST_P(StalenessTest, AReimportOutOfDescriptorsIsAnAnswerNotBusy) {
  auto engine = EngineContext::Create(catalog_, EngineConfig());
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE(WriteAt(path_, 0, RandomBytes(4096, 9), false).ok());  // changed: re-import next
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int lowest_free = dup(0);
  ASSERT_GE(lowest_free, 0);
  close(lowest_free);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free);  // the next open fails with EMFILE
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  absl::Status refusal;
  const StartOutcome outcome = testing::StartRead(
      **engine, "file", 0, 4096, [](void*, const ReadResult&) { return false; }, nullptr, 0,
      &refusal);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(outcome, StartOutcome::kCompleted);
  EXPECT_EQ(refusal.code(), absl::StatusCode::kResourceExhausted) << refusal;
  EXPECT_EQ((*engine)->reads_in_flight(), 0u);
  // With descriptors again, the same read is served, current.
  testing::CompletedRead read = testing::ReadOnce(**engine, "file", 0, 4096);
  ASSERT_TRUE(read.status.ok()) << read.status;
  EXPECT_TRUE(read.data == *ReadFileRange(path_, 0, 4096));
}

// Whoever can write the served directory can rename anything over a served name. A symlink to a
// file outside the served root is never followed: the name stops being served, and not one byte
// of the link's target is returned.
TEST_P(StalenessTest, ASymlinkRenamedOverAServedNameIsNeverFollowed) {
  const std::vector<char> secret(64 * 1024, 'S');
  const std::string secret_path = dir_.path() + "/secret";  // outside the filesystem served
  ASSERT_TRUE(WriteAt(secret_path, 0, secret, true).ok());
  const std::string link = fs_->root() + "/.link";
  ASSERT_EQ(symlink(secret_path.c_str(), link.c_str()), 0);
  ASSERT_EQ(rename(link.c_str(), path_.c_str()), 0);
  auto map = catalog_.Resolve("file");
  ASSERT_FALSE(map.ok()) << "a symlink was followed";
  EXPECT_EQ(map.status().code(), absl::StatusCode::kFailedPrecondition) << map.status();
  auto engine = EngineContext::Create(catalog_, EngineConfig());
  ASSERT_TRUE(engine.ok()) << engine.status();
  testing::CompletedRead read = testing::ReadOnce(**engine, "file", 0, 4096);
  EXPECT_FALSE(read.status.ok());
  EXPECT_EQ(std::count(read.data.begin(), read.data.end(), 'S'), 0);
}

// A FIFO renamed over a served name must not hang the thread that looks at it (opening a FIFO
// for reading blocks until a writer comes, unless O_NONBLOCK), and other files keep being served.
TEST_P(StalenessTest, AFifoRenamedOverAServedNameDoesNotHang) {
  const std::string other = fs_->root() + "/other";
  ASSERT_TRUE(WriteAt(other, 0, RandomBytes(8192, 4), true).ok());
  ASSERT_TRUE(catalog_.ImportFile("other", other).ok());
  const std::string fifo = fs_->root() + "/.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(rename(fifo.c_str(), path_.c_str()), 0);
  auto resolved = std::async(std::launch::async, [&] { return catalog_.Resolve("file"); });
  ASSERT_EQ(resolved.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "Resolve hung on a FIFO";
  EXPECT_FALSE(resolved.get().ok());
  auto map = catalog_.Resolve("other");
  ASSERT_TRUE(map.ok()) << map.status();
  auto bytes = ReadThroughMap(catalog_, **map, 0, 8192);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(*bytes == *ReadFileRange(other, 0, 8192));
}

INSTANTIATE_TEST_SUITE_P(Filesystems, StalenessTest, ::testing::Values(FsType::kExt4, FsType::kXfs),
                         [](const auto& info) { return testing::FsTypeName(info.param); });

// A file served through itself (here: on tmpfs, which has no block device) follows in-place
// changes, and refuses to serve a replacement it cannot reach.
TEST(FileRouteStalenessTest, InPlaceChangesFollowReplacementFails) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  TempDir dir;
  ASSERT_EQ(testing::RunCommand("mount -t tmpfs tmpfs " + dir.path()).ok(), true);
  const std::string path = dir.path() + "/file";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(10000, 1), false).ok());
  Catalog catalog;
  ASSERT_TRUE(catalog.ImportFile("file", path).ok());
  ASSERT_EQ((*catalog.Resolve("file"))->source(), FileSource::kFileRoute);

  ASSERT_TRUE(WriteAt(path, 10000, RandomBytes(5000, 2), false).ok());
  auto map = catalog.Resolve("file");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)->size(), 15000u);
  auto bytes = ReadThroughMap(catalog, **map, 0, 1 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(*bytes == *ReadFileRange(path, 0, 1 << 20));

  const std::string replacement = dir.path() + "/new";
  ASSERT_TRUE(WriteAt(replacement, 0, RandomBytes(10000, 3), false).ok());
  ASSERT_EQ(rename(replacement.c_str(), path.c_str()), 0);
  map = catalog.Resolve("file");
  EXPECT_EQ(map.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(map.status().message().find("was replaced since it was imported"), std::string::npos)
      << map.status();
  testing::RunCommand("umount -l " + dir.path()).IgnoreError();
}

}  // namespace
}  // namespace blockread::storage
