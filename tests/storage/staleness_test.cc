// A FIEMAP-imported file is never served stale (storage/catalog.h): the catalog holds a read lease
// on it, so an open for writing or a truncate is held by the kernel until new reads go through
// the file itself; the file is leased and mapped again once the writer is done. Names follow
// renames and removals: the catalog's watcher applies them asynchronously, but the engine waits
// for it before it resolves a name after one (storage/name_sync.h), so an engine read right after
// rename() or unlink() returned sees the change; Resolve() does not, and tests that use it wait
// for the watcher. Reads go through the real engine; bytes are checked against the filesystem's
// own.
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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

// The file's whole content as the engine serves it now, checked against the filesystem's.
void ExpectServesCurrentBytes(EngineContext& engine, const std::string& name,
                              const std::string& path) {
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // One byte more than the file, so a read that is too long or too short shows.
  testing::CompletedRead read = testing::ReadOnce(engine, name, 0, size + 1);
  ASSERT_TRUE(read.status.ok()) << read.status;
  auto expected = ReadFileRange(path, 0, size + 1);
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(read.data.size(), expected->size());
  EXPECT_TRUE(read.data == *expected) << "served bytes are stale";
}

// Each case on a filesystem, with the default open-file cache or with one of a single file: then
// another file is read before each check, so the file checked was closed (evicted) since its last
// read and is opened again for this one.
struct StalenessCase {
  FsType fs;
  bool tiny_cache;
  operator FsType() const { return fs; }  // NOLINT: the cases are filesystems first
};

class StalenessTest : public ::testing::TestWithParam<StalenessCase> {
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
    if (GetParam().tiny_cache) catalog_.set_max_open_files(1);
    ASSERT_TRUE(catalog_.ImportFile("file", path_).ok());
    if (GetParam().tiny_cache) {
      const std::string evictor = fs_->root() + "/evictor";
      ASSERT_TRUE(WriteAt(evictor, 0, RandomBytes(8192, 99), true).ok());
      ASSERT_TRUE(catalog_.ImportFile("evictor", evictor).ok());
    }
  }

  void TearDown() override {
    if (GetParam().tiny_cache && checks_ > 0) {
      EXPECT_GT(catalog_.route_counts().evictions, 0u) << "the cache never closed a file";
    }
    engine_.reset();
  }

  // With the tiny cache, another file is read first: `name` is evicted and opened again.
  void ExpectEngineServesCurrentBytes(EngineContext& engine, const std::string& name,
                                      const std::string& path) {
    ++checks_;
    if (GetParam().tiny_cache && &engine == engine_.get()) {  // (not a case's own catalog)
      testing::CompletedRead other = testing::ReadOnce(engine, "evictor", 0, 4096);
      ASSERT_TRUE(other.status.ok()) << other.status;
    }
    ExpectServesCurrentBytes(engine, name, path);
  }

  EngineContext& engine() {
    if (!engine_) {
      auto engine = EngineContext::Create(catalog_, EngineConfig());
      EXPECT_TRUE(engine.ok()) << engine.status();
      engine_ = *std::move(engine);
    }
    return *engine_;
  }

  FileSource SourceOf(const std::string& name) { return (*catalog_.Resolve(name))->source(); }

  // After its writer is done, a file is leased and read from the raw device again: when the
  // watcher handles the close, or at its next lease retry (every second) if the close came while
  // the lease could not be had yet.
  void ExpectLeasedAgain(const std::string& name) {
    catalog_.WaitUntilCurrent();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (SourceOf(name) != FileSource::kFiemap && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(SourceOf(name), FileSource::kFiemap) << catalog_.RouteNote(name);
  }

  TempDir dir_;
  std::unique_ptr<testing::LoopFilesystem> fs_;
  std::string path_;
  Catalog catalog_;
  std::unique_ptr<EngineContext> engine_;
  int checks_ = 0;
};

TEST_P(StalenessTest, RewrittenInPlaceWithoutSyncIsCurrentAtOnce) {
  EXPECT_EQ(SourceOf("file"), FileSource::kFiemap);
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  // Not synced: the new bytes are only in the page cache. No waiting: the lease break made the
  // file's reads go through the file before the writer's open returned.
  ASSERT_TRUE(WriteAt(path_, 4096, RandomBytes(8192, 2), false).ok());
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  ASSERT_TRUE(WriteAt(path_, 0, RandomBytes(4096, 3), false).ok());
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  // The writer closed: the file is leased and read from the raw device again.
  ExpectLeasedAgain("file");
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
}

TEST_P(StalenessTest, WhileAWriterHoldsItOpenItIsReadThroughTheFile) {
  const int fd = open(path_.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(SourceOf("file"), FileSource::kFileRoute);
  // Said as the break said it, or as the lease retry (each second) says it after.
  const std::string note = catalog_.RouteNote("file");
  EXPECT_TRUE(note.find("being written") != std::string::npos ||
              note.find("open for writing") != std::string::npos)
      << note;
  const std::vector<char> bytes = RandomBytes(64 * 1024, 5);
  ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), 8192), static_cast<ssize_t>(bytes.size()));
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  // Grown by the open writer: the new end is served at once.
  ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), 300 * 1024), static_cast<ssize_t>(bytes.size()));
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  // Shrunk: past the new end is out of range, not an I/O error.
  ASSERT_EQ(ftruncate(fd, 10000), 0);
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  EXPECT_EQ(testing::ReadOnce(engine(), "file", 20480, 4096).status.code(),
            absl::StatusCode::kOutOfRange);
  close(fd);
  ExpectLeasedAgain("file");
  EXPECT_EQ(catalog_.RouteNote("file"), "");
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
}

TEST_P(StalenessTest, GrownAndTruncatedIsCurrentAtOnce) {
  ASSERT_TRUE(WriteAt(path_, 256 * 1024, RandomBytes(100000, 5), false).ok());
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  ASSERT_EQ(truncate(path_.c_str(), 5000), 0);  // breaks the lease too (no open involved)
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  ExpectLeasedAgain("file");
  EXPECT_EQ((*catalog_.Resolve("file"))->size(), 5000u);
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
}

TEST_P(StalenessTest, AFileOpenForWritingAtImportIsReadThroughTheFileUntilClosed) {
  const std::string busy = fs_->root() + "/busy";
  ASSERT_TRUE(WriteAt(busy, 0, RandomBytes(16384, 6), true).ok());
  const int fd = open(busy.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(catalog_.ImportFile("busy", busy).ok());
  EXPECT_EQ(SourceOf("busy"), FileSource::kFileRoute);
  EXPECT_NE(catalog_.RouteNote("busy").find("open for writing"), std::string::npos)
      << catalog_.RouteNote("busy");
  EXPECT_EQ(catalog_.route_counts().file_route, 1u);
  ExpectEngineServesCurrentBytes(engine(), "busy", busy);
  close(fd);
  ExpectLeasedAgain("busy");
  // "file" is leased too, unless the one-file cache closed it to open "busy".
  EXPECT_EQ(catalog_.route_counts().leased, GetParam().tiny_cache ? 1u : 2u);
  ExpectEngineServesCurrentBytes(engine(), "busy", busy);
}

// Each read right after rename() returned gets the new file: the engine waits for the watcher to
// apply the rename before it resolves the name. Replaced again and again, sizes alternating, read
// by an io_uring engine (which polls the name events through a ring) and a psync one (poll(2)).
TEST_P(StalenessTest, ReplacedByRenameServesTheNewFileAtOnce) {
  EngineConfig psync_config;
  psync_config.io_engine = IoEngine::kPsync;
  auto psync = EngineContext::Create(catalog_, psync_config);
  ASSERT_TRUE(psync.ok()) << psync.status();
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  const std::string replacement = fs_->root() + "/replacement";
  for (int i = 0; i < 40; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(
        WriteAt(replacement, 0, RandomBytes(i % 2 ? 300 * 1024 : 40 * 1024, 60 + i), false).ok());
    ASSERT_EQ(rename(replacement.c_str(), path_.c_str()), 0);
    ExpectEngineServesCurrentBytes(i % 4 < 2 ? engine() : **psync, "file", path_);
  }
  ExpectLeasedAgain("file");
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
}

TEST_P(StalenessTest, RemovedIsNotFoundAtOnceAndServedAgainWhenItReturns) {
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  ASSERT_EQ(unlink(path_.c_str()), 0);
  const testing::CompletedRead read = testing::ReadOnce(engine(), "file", 0, 4096);
  EXPECT_EQ(read.status.code(), absl::StatusCode::kNotFound) << read.status;
  EXPECT_NE(read.status.message().find("was removed since it was imported"), std::string::npos)
      << read.status;
  ASSERT_TRUE(WriteAt(path_, 0, RandomBytes(12288, 7), false).ok());
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  catalog_.WaitUntilCurrent();
  EXPECT_TRUE(catalog_.Resolve("file").ok());
}

TEST_P(StalenessTest, UnknownFileIsNotFound) {
  auto map = catalog_.Resolve("nope");
  EXPECT_EQ(map.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(map.status().message().find("unknown file 'nope'"), std::string::npos);
}

// Out of descriptors at import (RLIMIT_NOFILE), the import says which limit to raise.
TEST_P(StalenessTest, ImportPastTheDescriptorLimitNamesTheLimit) {
  const std::string other = fs_->root() + "/other";
  ASSERT_TRUE(WriteAt(other, 0, RandomBytes(4096, 9), true).ok());
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int lowest_free = dup(0);
  ASSERT_GE(lowest_free, 0);
  close(lowest_free);
  rlimit low = saved;
  // Room for the served directory's descriptor; the file's own open fails with EMFILE.
  low.rlim_cur = static_cast<rlim_t>(lowest_free) + 1;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const absl::Status imported = catalog_.ImportFile("other", other);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(imported.code(), absl::StatusCode::kResourceExhausted) << imported;
  EXPECT_NE(imported.message().find("RLIMIT_NOFILE"), std::string::npos) << imported;
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
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  ASSERT_EQ(rename(link.c_str(), path_.c_str()), 0);
  // At once: neither the old file nor the link's target.
  testing::CompletedRead read = testing::ReadOnce(engine(), "file", 0, 4096);
  EXPECT_EQ(read.status.code(), absl::StatusCode::kFailedPrecondition) << read.status;
  EXPECT_EQ(std::count(read.data.begin(), read.data.end(), 'S'), 0);
  catalog_.WaitUntilCurrent();
  auto map = catalog_.Resolve("file");
  ASSERT_FALSE(map.ok()) << "a symlink was followed";
  EXPECT_EQ(map.status().code(), absl::StatusCode::kFailedPrecondition) << map.status();
}

// A FIFO renamed over a served name must not hang the watcher (opening a FIFO for reading blocks
// until a writer comes, unless O_NONBLOCK), and other files keep being served.
TEST_P(StalenessTest, AFifoRenamedOverAServedNameDoesNotHang) {
  const std::string other = fs_->root() + "/other";
  ASSERT_TRUE(WriteAt(other, 0, RandomBytes(8192, 4), true).ok());
  ASSERT_TRUE(catalog_.ImportFile("other", other).ok());
  const std::string fifo = fs_->root() + "/.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(rename(fifo.c_str(), path_.c_str()), 0);
  auto handled = std::async(std::launch::async, [&] { catalog_.WaitUntilCurrent(); });
  ASSERT_EQ(handled.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "the watcher hung on a FIFO";
  EXPECT_FALSE(catalog_.Resolve("file").ok());
  ExpectEngineServesCurrentBytes(engine(), "other", other);
}

// When the kernel's inotify queue overflows, events are lost: the watcher re-checks every served
// name (and lease), and reads wait for that like for any name event, so a rename lost in the
// overflow is still seen by the next read. This catalog's queues hold one event (the limit,
// fs.inotify.max_queued_events, is read when an inotify instance is created), so a rename, which
// queues two (IN_MOVED_FROM, IN_MOVED_TO), always overflows and the one that matters is lost.
TEST_P(StalenessTest, ARenameLostInAnInotifyOverflowIsStillSeenAtOnce) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to lower fs.inotify.max_queued_events";
  const std::string limit_path = "/proc/sys/fs/inotify/max_queued_events";
  auto saved = testing::RunCommand("cat " + limit_path);
  ASSERT_TRUE(saved.ok()) << saved.status();
  const std::string restore =
      absl::StrCat("echo ", absl::StripAsciiWhitespace(*saved), " > ", limit_path);
  Catalog catalog;
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(testing::RunCommand("echo 1 > " + limit_path).ok());
  // Restored whatever happens: a machine left at 1 overflows every watcher after this.
  absl::Cleanup restore_limit = [&] { (void)testing::RunCommand(restore); };
  const absl::Status imported = catalog.ImportFile("file", path_);  // starts its watcher
  std::move(restore_limit).Invoke();
  ASSERT_TRUE(imported.ok()) << imported;
  {
    auto engine = EngineContext::Create(catalog, EngineConfig());
    ASSERT_TRUE(engine.ok()) << engine.status();
    ExpectEngineServesCurrentBytes(**engine, "file", path_);
    const std::string replacement = fs_->root() + "/replacement";
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE(round);
      ASSERT_TRUE(
          WriteAt(replacement, 0, RandomBytes(20000 + 4096 * round, 80 + round), false).ok());
      ASSERT_EQ(rename(replacement.c_str(), path_.c_str()), 0);
      ExpectEngineServesCurrentBytes(**engine, "file", path_);
    }
  }
  catalog.WaitUntilCurrent();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("events lost"), std::string::npos) << "no overflow was seen:\n" << log;
}

// When the kernel cannot queue the lease-break signal (the real-time signal queue is full, here:
// RLIMIT_SIGPENDING 0), it sends a plain SIGIO instead, which says nothing of which lease: the
// server checks every lease (F_GETLEASE), so the writer is still let in at once, not after
// lease-break-time (45 s), and reads still see its writes.
TEST_P(StalenessTest, ALeaseBreakSignalLostToAFullQueueStillLetsTheWriterIn) {
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  ASSERT_EQ(SourceOf("file"), FileSource::kFiemap);
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_SIGPENDING, &saved), 0);
  rlimit none = saved;
  none.rlim_cur = 0;
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(setrlimit(RLIMIT_SIGPENDING, &none), 0);
  const auto start = std::chrono::steady_clock::now();
  const int fd = open(path_.c_str(), O_WRONLY | O_CLOEXEC);  // waits for the lease break
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(setrlimit(RLIMIT_SIGPENDING, &saved), 0);
  ASSERT_GE(fd, 0);
  EXPECT_LT(waited, 5.0) << "the writer waited for lease-break-time, not for the server";
  const std::vector<char> bytes = RandomBytes(8192, 90);
  ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), 4096), static_cast<ssize_t>(bytes.size()));
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  close(fd);
  ExpectLeasedAgain("file");
  ExpectEngineServesCurrentBytes(engine(), "file", path_);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("signals overflowed"), std::string::npos)
      << "the break did not come as a plain SIGIO:\n"
      << log;
}

INSTANTIATE_TEST_SUITE_P(Filesystems, StalenessTest,
                         ::testing::Values(StalenessCase{FsType::kExt4, false},
                                           StalenessCase{FsType::kXfs, false},
                                           StalenessCase{FsType::kExt4, true},
                                           StalenessCase{FsType::kXfs, true}),
                         [](const auto& info) {
                           return std::string(testing::FsTypeName(info.param.fs)) +
                                  (info.param.tiny_cache ? "_one_open_file" : "");
                         });

// A file read through itself (here: on tmpfs, which has no block device) follows in-place
// changes at once, and a replacement once the watcher has seen the rename.
TEST(FileRouteStalenessTest, InPlaceChangesAndReplacementsAreFollowed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  TempDir dir;
  ASSERT_EQ(testing::RunCommand("mount -t tmpfs tmpfs " + dir.path()).ok(), true);
  const std::string path = dir.path() + "/file";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(10000, 1), false).ok());
  {
    Catalog catalog;
    ASSERT_TRUE(catalog.ImportFile("file", path).ok());
    ASSERT_EQ((*catalog.Resolve("file"))->source(), FileSource::kFileRoute);
    EXPECT_NE(catalog.RouteNote("file"), "");

    ASSERT_TRUE(WriteAt(path, 10000, RandomBytes(5000, 2), false).ok());
    auto map = catalog.Resolve("file");
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_EQ((*map)->SizeNow(), 15000u);
    auto bytes = ReadThroughMap(catalog, **map, 0, 1 << 20);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_TRUE(*bytes == *ReadFileRange(path, 0, 1 << 20));

    const std::string replacement = dir.path() + "/new";
    ASSERT_TRUE(WriteAt(replacement, 0, RandomBytes(7000, 3), false).ok());
    ASSERT_EQ(rename(replacement.c_str(), path.c_str()), 0);
    catalog.WaitUntilCurrent();
    map = catalog.Resolve("file");
    ASSERT_TRUE(map.ok()) << map.status();
    bytes = ReadThroughMap(catalog, **map, 0, 1 << 20);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_TRUE(*bytes == *ReadFileRange(path, 0, 1 << 20)) << "the old file is still served";
  }
  testing::RunCommand("umount -l " + dir.path()).IgnoreError();
}

}  // namespace
}  // namespace blockread::storage
