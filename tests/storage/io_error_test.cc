// EIO from a real block device: a loop device whose backing file lives on an XFS filesystem that
// is then shut down (xfs_io shutdown), so every read of the loop device fails in the kernel with
// EIO. The error is returned, names the device and offset, is counted, and other devices keep
// working. On both I/O engines.
#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "storage/read_path.h"
#include "tests/support/engine_driver.h"
#include "tests/support/loop_device.h"

namespace blockread::storage {
namespace {

using testing::FsType;
using testing::ReadOnce;

class IoErrorTest : public ::testing::TestWithParam<IoEngine> {};

TEST_P(IoErrorTest, EioFromABlockDeviceIsReturnedCountedAndContained) {
  if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  if (!testing::RunCommand("command -v xfs_io").ok()) {
    GTEST_SKIP()
        << "needs root and xfs_io, which is not installed (tests/run.sh installs xfsprogs)";
  }
  testing::TempDir dir;
  // Declared in the order they are built; destroyed in reverse (engine, catalog, inner loop,
  // outer filesystem).
  auto outer = testing::MakeLoopFilesystem(FsType::kXfs, dir.path(), 512 << 20);
  ASSERT_TRUE(outer.ok()) << outer.status();
  const std::string inner_image = (*outer)->root() + "/inner.img";
  const std::vector<char> inner_bytes = testing::RandomBytes(16 << 20, 77);
  ASSERT_TRUE(testing::WriteAt(inner_image, 0, inner_bytes, true).ok());
  auto inner = testing::LoopDevice::Create(inner_image, 16 << 20);
  ASSERT_TRUE(inner.ok()) << inner.status();
  const std::string other_image = dir.path() + "/other.img";
  const std::vector<char> other_bytes = testing::RandomBytes(1 << 20, 78);
  ASSERT_TRUE(testing::WriteAt(other_image, 0, other_bytes, true).ok());

  auto catalog = std::make_unique<Catalog>();
  ASSERT_TRUE(catalog->AddWholeDevice("inner", (*inner)->path()).ok());
  ASSERT_TRUE(catalog->AddWholeDevice("other", other_image).ok());
  EngineConfig config;
  config.io_engine = GetParam();
  auto engine = EngineContext::Create(*catalog, config);
  ASSERT_TRUE(engine.ok()) << engine.status();

  testing::CompletedRead before = ReadOnce(**engine, "inner", 8192, 4096);
  ASSERT_TRUE(before.status.ok()) << before.status;
  EXPECT_TRUE(std::equal(before.data.begin(), before.data.end(), inner_bytes.begin() + 8192));

  ASSERT_TRUE(testing::RunCommand("xfs_io -x -c shutdown " + (*outer)->root()).ok());

  // Both paths see the error; both report it with the errno text and an incident number, and
  // keep the device's path and the physical offset out of the message (they are in the log).
  testing::CompletedRead simple = ReadOnce(**engine, "inner", 1 << 20, 4096);
  EXPECT_FALSE(simple.status.ok());
  EXPECT_EQ(simple.status.code(), absl::StatusCode::kDataLoss) << simple.status;
  EXPECT_NE(simple.status.message().find("device I/O error: Input/output error (incident "),
            std::string::npos)
      << simple.status;
  EXPECT_EQ(simple.status.message().find((*inner)->path()), std::string::npos) << simple.status;
  EXPECT_EQ(simple.status.message().find("1048576"), std::string::npos) << simple.status;
  EXPECT_EQ(simple.path, ReadPathKind::kSimple);
  testing::CompletedRead generic = ReadOnce(**engine, "inner", 3 << 20, 300000);
  EXPECT_FALSE(generic.status.ok());
  EXPECT_EQ(generic.path, ReadPathKind::kGeneric);
  EXPECT_EQ(generic.status.code(), absl::StatusCode::kDataLoss) << generic.status;
  EXPECT_NE(generic.status.message().find("device I/O error"), std::string::npos) << generic.status;
  EXPECT_EQ(generic.status.message().find("inner"), std::string::npos) << generic.status;

  StatsSnapshot stats;
  stats.Add((*engine)->stats());
  constexpr int kDataLoss = static_cast<int>(absl::StatusCode::kDataLoss);
  EXPECT_EQ(stats.path(ReadPathKind::kSimple).errors[kDataLoss], 1u);
  EXPECT_EQ(stats.path(ReadPathKind::kGeneric).errors[kDataLoss], 1u);
  EXPECT_EQ(stats.path(ReadPathKind::kSimple).error_count(), 1u);
  EXPECT_EQ(stats.path(ReadPathKind::kGeneric).error_count(), 1u);
  EXPECT_GE(stats.devices[0].errors, 2u);
  EXPECT_EQ(stats.devices[0].inflight, 0u);

  // The other device is unaffected.
  testing::CompletedRead other = ReadOnce(**engine, "other", 4096, 4096);
  ASSERT_TRUE(other.status.ok()) << other.status;
  EXPECT_TRUE(std::equal(other.data.begin(), other.data.end(), other_bytes.begin() + 4096));

  engine->reset();
  catalog.reset();
}

INSTANTIATE_TEST_SUITE_P(Engines, IoErrorTest,
                         ::testing::Values(IoEngine::kIoUring, IoEngine::kPsync),
                         [](const auto& info) { return std::string(IoEngineName(info.param)); });

}  // namespace
}  // namespace blockread::storage
