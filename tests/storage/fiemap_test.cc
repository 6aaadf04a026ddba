// FIEMAP import on real ext4, XFS and btrfs filesystems on real loop devices: the map of every
// kind of file, read straight from the device, must equal what the filesystem returns.
#include "storage/fiemap.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "storage/read_path.h"
#include "tests/support/engine_driver.h"
#include "tests/support/file_shapes.h"
#include "tests/support/loop_device.h"
#include "tests/support/map_reader.h"

namespace blockread::storage {
namespace {

using testing::FsType;
using testing::LoopFilesystem;
using testing::RandomBytes;
using testing::ReadFileRange;
using testing::ReadThroughMap;
using testing::TempDir;
using testing::WriteAt;

constexpr uint64_t kMiB = 1 << 20;
using testing::kShapes;

// Reads `count` random ranges (and the edges) through the map and through the filesystem.
void ExpectMapMatchesFilesystem(const Catalog& catalog, const FileMap& map, const std::string& path,
                                int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, map.SizeNow()}, {0, 1}, {map.SizeNow() > 0 ? map.SizeNow() - 1 : 0, 4096}};
  for (int i = 0; i < count; ++i) {
    const uint64_t offset = map.SizeNow() > 0 ? rng() % map.SizeNow() : 0;
    const uint64_t length = 1 + (rng() % 2 == 0 ? rng() % 8192 : rng() % (512 * 1024));
    ranges.emplace_back(offset, length);
  }
  for (auto [offset, length] : ranges) {
    if (length > 16 * kMiB) length = 16 * kMiB;
    auto expected = ReadFileRange(path, offset, length);
    ASSERT_TRUE(expected.ok()) << expected.status();
    auto actual = ReadThroughMap(catalog, map, offset, length);
    ASSERT_TRUE(actual.ok()) << actual.status();
    ASSERT_EQ(actual->size(), expected->size()) << path << " at " << offset << "+" << length;
    ASSERT_TRUE(*actual == *expected)
        << path << ": bytes differ in [" << offset << ", +" << length << ")";
  }
}

class FiemapImportTest : public ::testing::TestWithParam<FsType> {
 protected:
  static void SetUpTestSuite() {
    if (!testing::LoopDevicesUnavailableReason().empty()) return;
    dir_ = new TempDir();
    for (FsType type : {FsType::kExt4, FsType::kXfs}) {
      auto fs = testing::MakeShapesFilesystem(type, dir_->path(), static_cast<uint64_t>(type) + 1);
      ASSERT_TRUE(fs.ok()) << fs.status();
      filesystems_[type] = std::move(*fs);
    }
  }
  static void TearDownTestSuite() {
    filesystems_.clear();
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    ASSERT_TRUE(filesystems_.count(GetParam())) << "suite setup failed";
  }
  std::string Root() const { return filesystems_.at(GetParam())->root(); }

  static TempDir* dir_;
  static std::map<FsType, std::unique_ptr<LoopFilesystem>> filesystems_;
};
TempDir* FiemapImportTest::dir_ = nullptr;
std::map<FsType, std::unique_ptr<LoopFilesystem>> FiemapImportTest::filesystems_;

TEST_P(FiemapImportTest, EveryShapeReadsBackByteForByte) {
  Catalog catalog;
  for (const std::string& name : kShapes) {
    ASSERT_TRUE(catalog.ImportFile(name, Root() + "/" + name).ok()) << name;
  }
  for (const std::string& name : kShapes) {
    SCOPED_TRACE(name);
    auto map = catalog.Resolve(name);
    ASSERT_TRUE(map.ok()) << map.status();
    const bool inline_tiny = GetParam() == FsType::kExt4 && name == "tiny";
    EXPECT_EQ((*map)->source(), inline_tiny ? FileSource::kFileRoute : FileSource::kFiemap);
    ExpectMapMatchesFilesystem(catalog, **map, Root() + "/" + name, 200, name.size());
  }
}

TEST_P(FiemapImportTest, MapsHaveTheExpectedShape) {
  Catalog catalog;
  for (std::string name : {"sparse", "unwritten", "frag_a", "punched", "big", "unsynced"}) {
    ASSERT_TRUE(catalog.ImportFile(name, Root() + "/" + name).ok()) << name;
  }
  auto count = [&](const std::string& name, ExtentType type) {
    int n = 0;
    for (const Extent& e : (*catalog.Resolve(name))->extents()) n += e.type == type;
    return n;
  };
  // Sparse: three data islands, nothing stored for the holes.
  EXPECT_EQ(count("sparse", ExtentType::kHole), 0);
  EXPECT_GE(count("sparse", ExtentType::kMapped), 3);
  EXPECT_EQ((*catalog.Resolve("sparse"))->Lookup(2 * kMiB).type, ExtentType::kHole);
  // Fallocated ranges are UNWRITTEN around the written piece; nothing beyond EOF is kept.
  EXPECT_GE(count("unwritten", ExtentType::kUnwritten), 2);
  EXPECT_EQ((*catalog.Resolve("unwritten"))->Lookup(kMiB).type, ExtentType::kMapped);
  EXPECT_LE((*catalog.Resolve("unwritten"))->extents().back().logical_end(), 4 * kMiB);
  // Interleaved synced writes fragment the file (ext4's per-inode preallocation keeps it to a
  // few extents; XFS gives many), and punching gives exactly one extent per remaining piece.
  EXPECT_GT(count("frag_a", ExtentType::kMapped), 2);
  EXPECT_EQ(count("punched", ExtentType::kMapped), 128);
  // Delayed allocation was flushed by FIEMAP_FLAG_SYNC: all of it is mapped.
  EXPECT_EQ(count("unsynced", ExtentType::kUnwritten), 0);
  EXPECT_EQ((*catalog.Resolve("big"))->size(), 80 * kMiB + 777);
  // All share one block device: the filesystem's disk (the others are the files' own
  // file-route devices).
  for (DeviceId id = 0; id < catalog.device_count(); ++id) {
    if (catalog.device(id).kind() == DeviceKind::kBlockDevice) {
      EXPECT_EQ(catalog.device(id).path(), filesystems_.at(GetParam())->device->path());
    } else {
      EXPECT_EQ(catalog.device(id).kind(), DeviceKind::kFileRoute);
    }
  }
}

TEST_P(FiemapImportTest, ImportTreeNamesFilesRelativeToTheRoot) {
  ASSERT_EQ(mkdir((Root() + "/dir").c_str(), 0755) == 0 || errno == EEXIST, true);
  ASSERT_EQ(mkdir((Root() + "/dir/sub").c_str(), 0755) == 0 || errno == EEXIST, true);
  ASSERT_TRUE(WriteAt(Root() + "/dir/one", 0, RandomBytes(8192, 1), true).ok());
  ASSERT_TRUE(WriteAt(Root() + "/dir/sub/two", 0, RandomBytes(9000, 2), true).ok());
  Catalog catalog;
  auto added = catalog.ImportTree(Root() + "/dir");
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 2u);
  EXPECT_EQ(catalog.FileNames(), (std::vector<std::string>{"one", "sub/two"}));
  auto single = Catalog().ImportTree(Root() + "/dir/sub/two");
  EXPECT_TRUE(single.ok()) << single.status();
  auto missing = Catalog().ImportTree(Root() + "/nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_P(FiemapImportTest, NotARegularFile) {
  auto result = MapFileExtents(Root());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_NE(result.status().message().find("is not a regular file"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Filesystems, FiemapImportTest,
                         ::testing::Values(FsType::kExt4, FsType::kXfs),
                         [](const auto& info) { return testing::FsTypeName(info.param); });

// btrfs reports logical addresses in FIEMAP; such files must take the file route and still read
// right. Also the route for files on a filesystem without a block device (tmpfs).
TEST(FileRouteTest, BtrfsAndTmpfsFilesAreServedThroughTheFile) {
  if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  if (!testing::RunCommand("command -v mkfs.btrfs").ok()) {
    GTEST_SKIP() << "needs root and mkfs.btrfs, which is not installed (tests/run.sh installs "
                    "btrfs-progs)";
  }
  TempDir dir;
  auto btrfs = testing::MakeLoopFilesystem(FsType::kBtrfs, dir.path(), 512 * kMiB);
  ASSERT_TRUE(btrfs.ok()) << btrfs.status();
  const std::string path = (*btrfs)->root() + "/data";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(3 * kMiB + 17, 9), false).ok());
  ASSERT_TRUE(WriteAt(path, 5 * kMiB, RandomBytes(4096, 10), true).ok());

  auto mapped = MapFileExtents(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_NE(mapped->file_route_reason.find("btrfs"), std::string::npos)
      << mapped->file_route_reason;

  Catalog catalog;
  ASSERT_TRUE(catalog.ImportFile("data", path).ok());
  auto map = catalog.Resolve("data");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)->source(), FileSource::kFileRoute);
  EXPECT_EQ(catalog.device((*map)->extents()[0].device).kind(), DeviceKind::kFileRoute);
  ExpectMapMatchesFilesystem(catalog, **map, path, 100, 3);

  // Through the engine: a file-route file is one mapped extent on its own descriptor, so its
  // small aligned reads are one I/O and take the simple path; the rest (the unaligned tail,
  // large reads) the generic one. Byte for byte what the filesystem returns.
  auto engine = EngineContext::Create(catalog, EngineConfig());
  ASSERT_TRUE(engine.ok()) << engine.status();
  const uint64_t size = (*map)->SizeNow();
  const std::vector<std::pair<uint64_t, uint64_t>> reads = {
      {0, 4096},           {kMiB, 4096}, {3 * kMiB, 4096},      {size - 4096, 4096},  // simple
      {size - 4096, 8192}, {100, 4096},  {2 * kMiB, 300 * 1024}};                     // generic
  for (size_t i = 0; i < reads.size(); ++i) {
    const auto [offset, length] = reads[i];
    testing::CompletedRead read = testing::ReadOnce(**engine, "data", offset, length);
    ASSERT_TRUE(read.status.ok()) << read.status;
    EXPECT_EQ(read.path, i < 4 ? ReadPathKind::kSimple : ReadPathKind::kGeneric) << offset;
    EXPECT_TRUE(read.data == *ReadFileRange(path, offset, length)) << offset << "+" << length;
  }
}

// A filesystem on a partition: FIEMAP offsets are relative to the partition, so the importer must
// open the whole disk and add the partition start.
TEST(PartitionTest, ExtentsOnAPartitionAreOffsetByItsStart) {
  if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  if (!testing::RunCommand("command -v sfdisk && command -v partx").ok()) {
    GTEST_SKIP() << "needs root and sfdisk/partx, which are not installed (tests/run.sh installs "
                    "fdisk)";
  }
  TempDir dir;
  auto disk = testing::LoopDevice::Create(dir.path() + "/disk.img", 512 * kMiB);
  ASSERT_TRUE(disk.ok()) << disk.status();
  const std::string disk_path = (*disk)->path();
  // One partition starting at sector 6144 (3 MiB). sfdisk asks the kernel to re-read the table,
  // which works on loop devices scanned for partitions; otherwise partx adds it.
  ASSERT_TRUE(testing::RunCommand("echo 'start=6144, type=83' | sfdisk -q " + disk_path).ok());
  const std::string partition = disk_path + "p1";
  auto added = testing::RunCommand("test -b " + partition + " || partx -a " + disk_path);
  ASSERT_TRUE(added.ok()) << added.status();
  auto fs = testing::MountedFilesystem::Create(FsType::kExt4, partition, dir.path() + "/mnt");
  ASSERT_TRUE(fs.ok()) << fs.status();
  const std::string path = (*fs)->mount_point() + "/data";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(3 * kMiB + 5, 11), true).ok());

  auto location = LocateOnDisk([&] {
    struct stat st;
    stat(path.c_str(), &st);
    return st.st_dev;
  }());
  ASSERT_TRUE(location.ok()) << location.status();
  EXPECT_EQ(location->partition_start_bytes, 6144u * 512);
  EXPECT_EQ(location->disk_path, disk_path);

  Catalog catalog;
  ASSERT_TRUE(catalog.ImportFile("data", path).ok());
  auto map = catalog.Resolve("data");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)->source(), FileSource::kFiemap);
  EXPECT_EQ(catalog.device((*map)->extents()[0].device).path(), disk_path);
  ExpectMapMatchesFilesystem(catalog, **map, path, 100, 5);
  fs->reset();
  testing::RunCommand("partx -d " + disk_path).IgnoreError();
}

// FiemapExtentFolder on synthetic FIEMAP answers (no filesystem needed).
fiemap_extent Fe(uint64_t logical, uint64_t physical, uint64_t length, uint32_t flags = 0) {
  fiemap_extent fe = {};
  fe.fe_logical = logical;
  fe.fe_physical = physical;
  fe.fe_length = length;
  fe.fe_flags = flags;
  return fe;
}

TEST(FiemapExtentFolderTest, MergesAdjacentClipsToTheSizeAndAddsThePartitionStart) {
  FiemapExtentFolder folder(/*rounded_size=*/5 * 4096, /*partition_start_bytes=*/kMiB);
  const fiemap_extent first[] = {Fe(0, 8192, 4096), Fe(4096, 12288, 4096)};
  ASSERT_TRUE(folder.Add(first, 2));
  EXPECT_FALSE(folder.done());
  EXPECT_EQ(folder.next_start(), 8192u);
  const fiemap_extent second[] = {Fe(8192, 16384, 4096, FIEMAP_EXTENT_UNWRITTEN),
                                  Fe(16384, 69632, 8192), Fe(1 << 20, 0, 4096, FIEMAP_EXTENT_LAST)};
  ASSERT_TRUE(folder.Add(second, 3));
  EXPECT_TRUE(folder.done());
  ASSERT_EQ(folder.extents().size(), 3u);
  EXPECT_EQ(folder.extents()[0].logical_offset, 0u);
  EXPECT_EQ(folder.extents()[0].physical_offset, kMiB + 8192);
  EXPECT_EQ(folder.extents()[0].length, 8192u);  // merged
  EXPECT_TRUE(folder.extents()[1].unwritten);    // contiguous, but unwritten: not merged
  EXPECT_EQ(folder.extents()[2].logical_offset, 16384u);
  EXPECT_EQ(folder.extents()[2].length, 4096u);  // clipped; the extent beyond the size dropped
}

TEST(FiemapExtentFolderTest, AnswersNoFilesystemGivesTakeTheFileRoute) {
  const std::vector<std::vector<fiemap_extent>> answers = {
      {Fe(0, 0, 8192), Fe(4096, 65536, 4096)},   // overlapping
      {Fe(8192, 0, 4096), Fe(0, 65536, 4096)},   // out of order
      {Fe(0, 0, 0)},                             // empty
      {Fe(UINT64_MAX - 4095, 0, 8192)},          // past 64 bits, file side
      {Fe(0, UINT64_MAX - 4095, 4096)},          // past 64 bits with the partition
      {Fe(0, 0, 4096, FIEMAP_EXTENT_DELALLOC)},  // not at a device offset
  };
  for (const auto& answer : answers) {
    FiemapExtentFolder folder(1 << 20, /*partition_start_bytes=*/512);
    EXPECT_FALSE(folder.Add(answer.data(), static_cast<uint32_t>(answer.size())))
        << answer[0].fe_logical << " " << answer[0].fe_length;
    EXPECT_FALSE(folder.file_route_reason().empty());
  }
}

}  // namespace
}  // namespace blockread::storage
