// The read paths on real loop devices with real ext4 and XFS files: thousands of random reads,
// aligned and not, small and large, across extents, holes and EOF, byte for byte against pread
// through the filesystem; which path served each read, and why it fell back. Every case runs on
// both I/O engines (io_uring and psync): the engine must not change a byte or a decision.
#include "storage/read_path.h"

#include <map>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "storage/clock.h"
#include "tests/support/engine_driver.h"
#include "tests/support/file_shapes.h"
#include "tests/support/loop_device.h"

namespace blockread::storage {
namespace {

using testing::CompletedRead;
using testing::FsType;
using testing::ReadOnce;
using testing::ReadRequest;
using testing::RunReads;
using testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;

// The test's own statement of the simple path's rule, worked out from the stored extents.
std::optional<FallbackReason> ExpectedFallback(const FileMap& map, uint64_t offset, uint64_t length,
                                               uint64_t simple_max_bytes) {
  if (offset >= map.SizeNow()) return FallbackReason::kBeyondEof;
  if (simple_max_bytes == 0) return FallbackReason::kDisabled;
  if (length > simple_max_bytes) return FallbackReason::kTooLarge;
  if (offset % map.block_size() != 0 || length % map.block_size() != 0) {
    return FallbackReason::kUnaligned;
  }
  if (offset + length > map.SizeNow()) return FallbackReason::kBeyondEof;
  for (const Extent& e : map.extents()) {
    if (e.logical_offset <= offset && offset < e.logical_end()) {
      if (e.type != ExtentType::kMapped) return FallbackReason::kNotMapped;
      if (offset + length > e.logical_end()) return FallbackReason::kSpansExtents;
      return std::nullopt;
    }
  }
  return FallbackReason::kNotMapped;  // a hole between stored extents
}

// A mix of reads over `map`: simple-sized aligned ones, ones straddling extent boundaries,
// unaligned small ones, large ones, ones across EOF.
std::vector<ReadRequest> RandomReads(const FileMap& map, int count, std::mt19937_64& rng) {
  std::vector<ReadRequest> reads;
  const uint64_t size = map.SizeNow();
  const uint64_t block = map.block_size();
  if (size == 0) {
    reads.push_back({map.name(), 0, 4096});
    return reads;
  }
  for (int i = 0; i < count; ++i) {
    ReadRequest r{map.name(), 0, 0};
    switch (rng() % 6) {
      case 0:
      case 1:  // aligned 4 KiB: the simple path's case
        r.offset = (rng() % size) / block * block;
        r.length = 4096;
        break;
      case 2: {  // straddling the end of a stored extent
        if (map.extents().empty()) continue;
        const Extent& e = map.extents()[rng() % map.extents().size()];
        r.offset = e.logical_end() >= block ? e.logical_end() - block : 0;
        r.length = 4096;
        break;
      }
      case 3:  // unaligned and small
        r.offset = rng() % size;
        r.length = 1 + rng() % 8192;
        break;
      case 4:  // large
        r.offset = rng() % size;
        r.length = 1 + rng() % kMiB;
        break;
      case 5:  // across or at EOF
        r.offset = size - std::min<uint64_t>(size, rng() % 8192);
        r.length = 1 + rng() % 16384;
        break;
    }
    reads.push_back(r);
  }
  return reads;
}

class ReadPathTest : public ::testing::TestWithParam<std::tuple<FsType, IoEngine>> {
 protected:
  static void SetUpTestSuite() {
    if (!testing::LoopDevicesUnavailableReason().empty()) return;
    dir_ = new TempDir();
    for (FsType type : {FsType::kExt4, FsType::kXfs}) {
      auto fs = testing::MakeShapesFilesystem(type, dir_->path(), static_cast<uint64_t>(type) + 11);
      ASSERT_TRUE(fs.ok()) << fs.status();
      filesystems_[type] = *std::move(fs);
    }
  }
  static void TearDownTestSuite() {
    filesystems_.clear();
    delete dir_;
  }
  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    ASSERT_TRUE(filesystems_.count(fs_type())) << "suite setup failed";
    root_ = filesystems_.at(fs_type())->root();
    for (const std::string& name : testing::kShapes) {
      ASSERT_TRUE(catalog_.ImportFile(name, root_ + "/" + name).ok()) << name;
    }
  }
  FsType fs_type() const { return std::get<0>(GetParam()); }
  IoEngine io_engine() const { return std::get<1>(GetParam()); }
  std::unique_ptr<EngineContext> MakeEngine(EngineConfig config = EngineConfig()) {
    config.io_engine = io_engine();
    auto engine = EngineContext::Create(catalog_, config);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  // Runs the random mix over every shape; checks bytes, path and fallback of each read and that
  // the stats count exactly those. Returns the reads' data, in order.
  std::vector<std::vector<char>> RunMixAndCheck(EngineContext& engine, uint64_t simple_max_bytes,
                                                int queue_depth) {
    std::mt19937_64 rng(1234);
    std::vector<ReadRequest> reads;
    for (const std::string& name : testing::kShapes) {
      auto more = RandomReads(**catalog_.Resolve(name), 300, rng);
      reads.insert(reads.end(), more.begin(), more.end());
    }
    std::vector<CompletedRead> results = RunReads(engine, reads, queue_depth);
    std::array<uint64_t, kFallbackReasonCount> expected_fallbacks{};
    uint64_t expected_simple = 0;
    std::vector<std::vector<char>> data;
    for (size_t i = 0; i < reads.size(); ++i) {
      const ReadRequest& r = reads[i];
      const CompletedRead& got = results[i];
      SCOPED_TRACE(absl::StrCat(r.file, " at ", r.offset, " +", r.length));
      const FileMap& map = **catalog_.Resolve(r.file);
      if (r.offset > map.SizeNow()) {
        EXPECT_EQ(got.status.code(), absl::StatusCode::kOutOfRange);
        data.emplace_back();
        continue;
      }
      EXPECT_TRUE(got.status.ok()) << got.status;
      auto expected = testing::ReadFileRange(root_ + "/" + r.file, r.offset, r.length);
      EXPECT_TRUE(expected.ok());
      EXPECT_EQ(got.data.size(), expected->size());
      EXPECT_TRUE(got.data == *expected) << "bytes differ";
      const std::optional<FallbackReason> fallback =
          ExpectedFallback(map, r.offset, r.length, simple_max_bytes);
      if (fallback) {
        EXPECT_EQ(got.path, ReadPathKind::kGeneric);
        EXPECT_EQ(got.fallback, *fallback)
            << FallbackReasonName(got.fallback) << " vs " << FallbackReasonName(*fallback);
        ++expected_fallbacks[static_cast<int>(*fallback)];
      } else {
        EXPECT_EQ(got.path, ReadPathKind::kSimple);
        ++expected_simple;
      }
      data.push_back(got.data);
    }
    StatsSnapshot stats;
    stats.Add(engine.stats());
    EXPECT_EQ(stats.path(ReadPathKind::kSimple).requests, expected_simple);
    uint64_t generic = 0;
    for (int r = 0; r < kFallbackReasonCount; ++r) {
      EXPECT_EQ(stats.fallbacks[r], expected_fallbacks[r])
          << FallbackReasonName(static_cast<FallbackReason>(r));
      generic += expected_fallbacks[r];
    }
    EXPECT_EQ(stats.path(ReadPathKind::kGeneric).requests, generic);
    EXPECT_EQ(stats.path(ReadPathKind::kSimple).error_count() +
                  stats.path(ReadPathKind::kGeneric).error_count(),
              0u);
    for (ReadPathKind path : {ReadPathKind::kSimple, ReadPathKind::kGeneric}) {
      // Every stage has one sample per read.
      EXPECT_EQ(stats.path(path).queue_ns.count, stats.path(path).requests);
      EXPECT_EQ(stats.path(path).device_ns.count, stats.path(path).requests);
      EXPECT_EQ(stats.path(path).total_ns.count, stats.path(path).requests);
    }
    return data;
  }

  static TempDir* dir_;
  static std::map<FsType, std::unique_ptr<testing::LoopFilesystem>> filesystems_;
  std::string root_;
  Catalog catalog_;
};
TempDir* ReadPathTest::dir_ = nullptr;
std::map<FsType, std::unique_ptr<testing::LoopFilesystem>> ReadPathTest::filesystems_;

TEST_P(ReadPathTest, RandomReadsMatchTheFilesystemOnBothPaths) {
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  std::vector<std::vector<char>> with_simple = RunMixAndCheck(*engine, 4096, 32);
  StatsSnapshot stats;
  stats.Add(engine->stats());
  // The mix must really exercise both paths and every fallback the shapes allow.
  EXPECT_GT(stats.path(ReadPathKind::kSimple).requests, 300u);
  for (FallbackReason reason :
       {FallbackReason::kTooLarge, FallbackReason::kUnaligned, FallbackReason::kBeyondEof,
        FallbackReason::kNotMapped, FallbackReason::kSpansExtents}) {
    EXPECT_GT(stats.fallback(reason), 0u) << FallbackReasonName(reason);
  }

  // simple=0: the same reads, all generic (reason "disabled"), the same bytes.
  EngineConfig disabled;
  disabled.simple_max_bytes = 0;
  auto generic_only = MakeEngine(disabled);
  ASSERT_NE(generic_only, nullptr);
  std::vector<std::vector<char>> without_simple = RunMixAndCheck(*generic_only, 0, 32);
  EXPECT_TRUE(with_simple == without_simple);
  StatsSnapshot generic_stats;
  generic_stats.Add(generic_only->stats());
  EXPECT_EQ(generic_stats.path(ReadPathKind::kSimple).requests, 0u);
}

TEST_P(ReadPathTest, QueueDepthOneAndSmallGenericPool) {
  EngineConfig config;
  config.generic_slots = 1;
  config.simple_slots = 1;
  auto engine = MakeEngine(config);
  ASSERT_NE(engine, nullptr);
  RunMixAndCheck(*engine, 4096, 1);
}

TEST_P(ReadPathTest, BadRequestsAreRefusedWithTheRightCode) {
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  auto refused = [&](const std::string& file, uint64_t offset, uint64_t length,
                     absl::StatusCode code, const std::string& message) {
    CompletedRead read = ReadOnce(*engine, file, offset, length);
    EXPECT_FALSE(read.started);
    EXPECT_EQ(read.status.code(), code) << read.status;
    EXPECT_NE(read.status.message().find(message), std::string::npos) << read.status;
  };
  refused("nope", 0, 4096, absl::StatusCode::kNotFound, "unknown file 'nope'");
  refused("tail", 5001, 1, absl::StatusCode::kOutOfRange,
          "beyond the end of file tail (5000 bytes)");
  refused("tail", 0, 0, absl::StatusCode::kInvalidArgument, "length must be greater than 0");
  refused("tail", 0, 2 * kMiB, absl::StatusCode::kInvalidArgument, "max_read_bytes = 1048576");
  refused("tail", UINT64_MAX - 10, 100, absl::StatusCode::kInvalidArgument, "overflows");
  // Refusals are counted by code, on no path.
  StatsSnapshot refusals;
  refusals.Add(engine->stats());
  EXPECT_EQ(refusals.rejected[static_cast<int>(absl::StatusCode::kNotFound)], 1u);
  EXPECT_EQ(refusals.rejected[static_cast<int>(absl::StatusCode::kOutOfRange)], 1u);
  EXPECT_EQ(refusals.rejected[static_cast<int>(absl::StatusCode::kInvalidArgument)], 3u);
  EXPECT_EQ(refusals.path(ReadPathKind::kSimple).requests +
                refusals.path(ReadPathKind::kGeneric).requests,
            0u);

  // At EOF: zero bytes, like pread. Across EOF: short.
  CompletedRead at_eof = ReadOnce(*engine, "tail", 5000, 100);
  EXPECT_TRUE(at_eof.status.ok()) << at_eof.status;
  EXPECT_EQ(at_eof.data.size(), 0u);
  CompletedRead across = ReadOnce(*engine, "tail", 4096, 4096);
  EXPECT_TRUE(across.status.ok()) << across.status;
  EXPECT_EQ(across.data.size(), 5000u - 4096);
  EXPECT_EQ(across.fallback, FallbackReason::kBeyondEof);
}

TEST_P(ReadPathTest, BusySlotsAreResourceExhaustedNotErrors) {
  EngineConfig config;
  config.simple_slots = 2;
  auto engine = MakeEngine(config);
  ASSERT_NE(engine, nullptr);
  int done = 0;
  auto count = [](void* context, const ReadResult& result) {
    EXPECT_TRUE(result.status.ok()) << result.status;
    ++*static_cast<int*>(context);
    return false;
  };
  ASSERT_EQ(testing::StartRead(*engine, "big", 0, 4096, count, &done), StartOutcome::kQueued);
  ASSERT_EQ(testing::StartRead(*engine, "big", 4096, 4096, count, &done), StartOutcome::kQueued);
  // Busy is not an error: no status, nothing counted.
  EXPECT_EQ(testing::StartRead(*engine, "big", 8192, 4096, count, &done), StartOutcome::kBusy);
  while (engine->reads_in_flight() > 0) engine->PollOnce();
  EXPECT_EQ(done, 2);
  // Retried with the time it first arrived: the wait shows as the queue stage.
  const uint64_t arrival_ns = MonotonicNowNs() - 5'000'000;
  struct Timed {
    ReadResult result;
    bool done = false;
  } timed;
  auto record = [](void* context, const ReadResult& result) {
    static_cast<Timed*>(context)->result = result;
    static_cast<Timed*>(context)->done = true;
    return false;
  };
  ASSERT_EQ(testing::StartRead(*engine, "big", 8192, 4096, record, &timed, arrival_ns),
            StartOutcome::kQueued);
  while (!timed.done) engine->PollOnce();
  EXPECT_GE(timed.result.queue_ns, 5'000'000u);
  EXPECT_GE(timed.result.total_ns, timed.result.queue_ns + timed.result.device_ns);
  StatsSnapshot stats;
  stats.Add(engine->stats());
  EXPECT_EQ(stats.rejected[static_cast<int>(absl::StatusCode::kResourceExhausted)], 0u)
      << "busy slots are not refusals";
}

TEST_P(ReadPathTest, RetainedBufferStaysValidUntilReleased) {
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const ReadResult kept = testing::ReadAndKeep(*engine, "big", 65536, 4096);
  ASSERT_TRUE(kept.status.ok()) << kept.status;
  const std::vector<char> copy(kept.data, kept.data + kept.length);
  // More reads meanwhile must not reuse the kept buffer.
  testing::RunReads(*engine, {{"big", 0, 4096}, {"big", 8192, 4096}, {"big", 12288, 4096}}, 3);
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), kept.data));
  EXPECT_TRUE(copy == *testing::ReadFileRange(root_ + "/big", 65536, 4096));
  engine->Release(kept.handle);
}

// The IOPOLL probe is the io_uring engine's alone.
class UringReadPathTest : public ReadPathTest {};

TEST_P(UringReadPathTest, IoPollProbeDemotesDevicesWithoutPollQueues) {
  // Loop devices have no poll queues: the IOPOLL probe read fails (EOPNOTSUPP) and the device is
  // demoted to interrupt mode; reads still work.
  EngineConfig config;
  config.probe_iopoll_on_all_devices = true;
  auto engine = MakeEngine(config);
  ASSERT_NE(engine, nullptr);
  for (DeviceId id = 0; id < catalog_.device_count(); ++id) {
    EXPECT_EQ(engine->backend(id), BackendKind::kUringInterrupt) << catalog_.device(id).path();
  }
  StatsSnapshot stats;
  stats.Add(engine->stats());
  EXPECT_EQ(stats.devices[0].workers_by_backend[static_cast<int>(BackendKind::kUringInterrupt)],
            1u);
  CompletedRead read = ReadOnce(*engine, "big", 0, 4096);
  EXPECT_TRUE(read.status.ok()) << read.status;
  EXPECT_TRUE(read.data == *testing::ReadFileRange(root_ + "/big", 0, 4096));
}

std::string FsAndEngineName(const ::testing::TestParamInfo<std::tuple<FsType, IoEngine>>& info) {
  return absl::StrCat(testing::FsTypeName(std::get<0>(info.param)), "_",
                      IoEngineName(std::get<1>(info.param)));
}
INSTANTIATE_TEST_SUITE_P(FilesystemsAndEngines, ReadPathTest,
                         ::testing::Combine(::testing::Values(FsType::kExt4, FsType::kXfs),
                                            ::testing::Values(IoEngine::kIoUring,
                                                              IoEngine::kPsync)),
                         FsAndEngineName);
INSTANTIATE_TEST_SUITE_P(Filesystems, UringReadPathTest,
                         ::testing::Combine(::testing::Values(FsType::kExt4, FsType::kXfs),
                                            ::testing::Values(IoEngine::kIoUring)),
                         FsAndEngineName);

// A regular file used as the device (the embedded default), served whole: no root needed.
class WholeDeviceReadTest : public ::testing::TestWithParam<IoEngine> {};

TEST_P(WholeDeviceReadTest, RegularFileAsDevice) {
  TempDir dir;
  const std::string path = dir.path() + "/disk.img";
  const std::vector<char> bytes = testing::RandomBytes(8 * kMiB, 3);
  ASSERT_TRUE(testing::WriteAt(path, 0, bytes, true).ok());
  Catalog catalog;
  ASSERT_TRUE(catalog.AddWholeDevice("disk", path).ok());
  EngineConfig config;
  config.io_engine = GetParam();
  auto engine = EngineContext::Create(catalog, config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->backend(0),
            GetParam() == IoEngine::kPsync ? BackendKind::kPsync : BackendKind::kUringInterrupt);
  std::mt19937_64 rng(5);
  std::vector<ReadRequest> reads;
  for (int i = 0; i < 2000; ++i) {
    const bool small = rng() % 2 == 0;
    const uint64_t offset = small ? (rng() % (8 * kMiB)) / 4096 * 4096 : rng() % (8 * kMiB);
    reads.push_back({"disk", offset, small ? 4096 : 1 + rng() % (256 * 1024)});
  }
  // Another thread merges the worker's stats shard while it reads (what a scrape does).
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop.load()) {
      StatsSnapshot snapshot;
      snapshot.Add((*engine)->stats());
    }
  });
  std::vector<CompletedRead> results = RunReads(**engine, reads, 64);
  stop.store(true);
  scraper.join();
  for (size_t i = 0; i < reads.size(); ++i) {
    ASSERT_TRUE(results[i].status.ok()) << results[i].status;
    const uint64_t expected_length = std::min(reads[i].length, 8 * kMiB - reads[i].offset);
    ASSERT_EQ(results[i].data.size(), expected_length);
    ASSERT_TRUE(std::equal(results[i].data.begin(), results[i].data.end(),
                           bytes.begin() + static_cast<ptrdiff_t>(reads[i].offset)))
        << "at " << reads[i].offset;
  }
  StatsSnapshot stats;
  stats.Add((*engine)->stats());
  EXPECT_GT(stats.path(ReadPathKind::kSimple).requests, 800u);
  EXPECT_GT(stats.path(ReadPathKind::kGeneric).requests, 800u);
  EXPECT_EQ(stats.devices[0].workers_by_backend[static_cast<int>((*engine)->backend(0))], 1u);
}

INSTANTIATE_TEST_SUITE_P(Engines, WholeDeviceReadTest,
                         ::testing::Values(IoEngine::kIoUring, IoEngine::kPsync),
                         [](const auto& info) { return std::string(IoEngineName(info.param)); });

}  // namespace
}  // namespace blockread::storage
