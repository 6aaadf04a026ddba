// Catalog: whole devices, names (duplicates, sorted listing, unknown names) and ImportTree on a
// real ext4 filesystem on a real loop device. Every map is read back, straight from its device,
// and compared with what the file or device returns.
#include "storage/catalog.h"

#include <unistd.h>

#include <filesystem>

#include "gtest/gtest.h"
#include "storage/read_path.h"
#include "tests/support/engine_driver.h"
#include "tests/support/loop_device.h"
#include "tests/support/map_reader.h"

namespace blockread::storage {
namespace {

using testing::FsType;
using testing::LoopDevice;
using testing::RandomBytes;
using testing::ReadFileRange;
using testing::ReadThroughMap;
using testing::TempDir;
using testing::WriteAt;

constexpr uint64_t kMiB = 1 << 20;

// The whole of file `name` read through its map equals the whole of `path` read normally.
void ExpectServedAs(Catalog& catalog, const std::string& name, const std::string& path) {
  auto map = catalog.Resolve(name);
  ASSERT_TRUE(map.ok()) << name << ": " << map.status();
  // One block more than the map's size: the read comes back short exactly where the file ends.
  auto expected = ReadFileRange(path, 0, (*map)->size() + 4096);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ((*map)->size(), expected->size()) << name;
  auto actual = ReadThroughMap(catalog, **map, 0, (*map)->size());
  ASSERT_TRUE(actual.ok()) << name << ": " << actual.status();
  EXPECT_TRUE(*actual == *expected) << name << ": bytes differ from " << path;
}

TEST(CatalogTest, WholeRegularFileIsOneMappedExtent) {
  TempDir dir;
  const std::string path = dir.path() + "/disk.img";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(3 * kMiB, 1), true).ok());
  Catalog catalog;
  ASSERT_TRUE(catalog.AddWholeDevice("disk", path).ok());
  EXPECT_EQ(catalog.file_count(), 1u);
  ASSERT_EQ(catalog.device_count(), 1u);
  EXPECT_EQ(catalog.device(0).kind(), DeviceKind::kRegularFile);
  EXPECT_EQ(catalog.FindDevice("disk"), DeviceId{0});
  auto map = catalog.Resolve("disk");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)->name(), "disk");
  EXPECT_EQ((*map)->source(), FileSource::kWholeDevice);
  EXPECT_EQ((*map)->size(), 3 * kMiB);
  EXPECT_EQ((*map)->extents(),
            (std::vector<Extent>{{0, 3 * kMiB, ExtentType::kMapped, DeviceId{0}, 0}}));
  ExpectServedAs(catalog, "disk", path);
}

TEST(CatalogTest, WholeBlockDevice) {
  if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string image = dir.path() + "/disk.img";
  ASSERT_TRUE(WriteAt(image, 0, RandomBytes(16 * kMiB, 2), true).ok());
  auto loop = LoopDevice::Create(image, 16 * kMiB, 4096);
  ASSERT_TRUE(loop.ok()) << loop.status();
  Catalog catalog;
  ASSERT_TRUE(catalog.AddWholeDevice("nvme", (*loop)->path()).ok());
  EXPECT_EQ(catalog.device(0).kind(), DeviceKind::kBlockDevice);
  auto map = catalog.Resolve("nvme");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)->block_size(), 4096u) << "the device's logical block size";
  ExpectServedAs(catalog, "nvme", (*loop)->path());
}

TEST(CatalogTest, NamesAreUniqueAndListedSorted) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) {
    paths.push_back(dir.path() + "/d" + std::to_string(i));
    ASSERT_TRUE(WriteAt(paths.back(), 0, RandomBytes(4096, 10 + i), true).ok());
  }
  Catalog catalog;
  ASSERT_TRUE(catalog.AddWholeDevice("b", paths[0]).ok());
  ASSERT_TRUE(catalog.AddWholeDevice("a/z", paths[1]).ok());
  ASSERT_TRUE(catalog.AddWholeDevice("B", paths[2]).ok());
  EXPECT_EQ(catalog.FileNames(), (std::vector<std::string>{"B", "a/z", "b"}));

  absl::Status again = catalog.AddWholeDevice("b", paths[1]);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_NE(again.message().find("'b'"), std::string::npos) << again;
  absl::Status imported = catalog.ImportFile("a/z", paths[0]);
  EXPECT_EQ(imported.code(), absl::StatusCode::kAlreadyExists) << imported;
  EXPECT_EQ(catalog.file_count(), 3u);
  EXPECT_EQ(catalog.FileNames(), (std::vector<std::string>{"B", "a/z", "b"}));
  // The first file of a name is still the one served.
  ExpectServedAs(catalog, "b", paths[0]);
}

TEST(CatalogTest, UnknownNamesAndPaths) {
  Catalog catalog;
  auto unknown = catalog.Resolve("nope");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  EXPECT_NE(unknown.status().message().find("'nope'"), std::string::npos) << unknown.status();

  absl::Status missing = catalog.AddWholeDevice("x", "/nonexistent/disk");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_EQ(catalog.file_count(), 0u);
  EXPECT_EQ(catalog.device_count(), 0u);
  EXPECT_TRUE(catalog.FileNames().empty());
  EXPECT_EQ(catalog.ImportTree("/nonexistent/tree").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(catalog.ImportTree("/dev/null").status().code(), absl::StatusCode::kInvalidArgument);
}

// ImportTree on a real ext4 filesystem: regular files anywhere below the root, named by their
// path relative to it; symlinks not followed; the filesystem's disk opened once for all of them.
TEST(CatalogImportTreeTest, ServesEveryRegularFileOfAnExt4Tree) {
  if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  auto fs = testing::MakeLoopFilesystem(FsType::kExt4, dir.path(), 256 * kMiB);
  ASSERT_TRUE(fs.ok()) << fs.status();
  const std::string root = (*fs)->root() + "/tree";
  std::filesystem::create_directories(root + "/sub/deeper");
  std::filesystem::create_directories(root + "/empty_dir");
  ASSERT_TRUE(WriteAt(root + "/top", 0, RandomBytes(100 * 1024 + 5, 3), true).ok());
  ASSERT_TRUE(WriteAt(root + "/sub/inner", 0, RandomBytes(2 * kMiB + 123, 4), true).ok());
  ASSERT_TRUE(WriteAt(root + "/sub/deeper/small", 0, RandomBytes(4096, 5), true).ok());
  // A hole in the middle: the map has one, and it reads as zeros.
  ASSERT_TRUE(WriteAt(root + "/sub/sparse", 0, RandomBytes(8192, 6), false).ok());
  ASSERT_TRUE(WriteAt(root + "/sub/sparse", 4 * kMiB, RandomBytes(8192, 7), true).ok());
  std::filesystem::create_symlink(root + "/top", root + "/link_to_top");
  std::filesystem::create_symlink(root + "/sub", root + "/link_to_sub");

  Catalog catalog;
  auto added = catalog.ImportTree(root);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 4u);
  EXPECT_EQ(catalog.FileNames(),
            (std::vector<std::string>{"sub/deeper/small", "sub/inner", "sub/sparse", "top"}));
  // One device for the filesystem's disk and the open-file cache's slots (each a file-route
  // device whose descriptor is re-pointed at the file it holds).
  ASSERT_EQ(catalog.device_count(), 1u + catalog.open_file_slots());
  int block_devices = 0;
  for (DeviceId id = 0; id < catalog.device_count(); ++id) {
    if (catalog.device(id).kind() != DeviceKind::kBlockDevice) continue;
    ++block_devices;
    EXPECT_EQ(catalog.device(id).path(), (*fs)->device->path());
  }
  EXPECT_EQ(block_devices, 1);
  for (const std::string& name : catalog.FileNames()) {
    ExpectServedAs(catalog, name, root + "/" + name);
    auto map = catalog.Resolve(name);
    ASSERT_TRUE(map.ok());
    EXPECT_EQ((*map)->source(), FileSource::kFiemap) << name;
  }
  auto sparse = catalog.Resolve("sub/sparse");
  ASSERT_TRUE(sparse.ok());
  EXPECT_EQ((*sparse)->Lookup(kMiB).type, ExtentType::kHole);

  // The same tree again: every name is taken.
  EXPECT_EQ(catalog.ImportTree(root).status().code(), absl::StatusCode::kAlreadyExists);
  // One file: served under its base name.
  Catalog single;
  auto one = single.ImportTree(root + "/sub/inner");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, 1u);
  EXPECT_EQ(single.FileNames(), (std::vector<std::string>{"inner"}));
  ExpectServedAs(single, "inner", root + "/sub/inner");
  // A tree with no regular file in it yet is served (files created in it later are; see
  // live_tree_test); a path that names nothing is not.
  auto none = Catalog().ImportTree(root + "/empty_dir");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0u);
  EXPECT_EQ(Catalog().ImportTree(root + "/no_such_dir").status().code(),
            absl::StatusCode::kNotFound);
}

// ext4's FIEMAP reports an fscrypt file's extents without FIEMAP_EXTENT_DATA_ENCRYPTED: its
// blocks on the device are ciphertext. It is read through the file (plaintext), and says why.
TEST(CatalogImportTreeTest, AnEncryptedExt4FileIsReadThroughTheFileNotTheDevice) {
  if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  if (!testing::RunCommand("command -v e4crypt").ok()) GTEST_SKIP() << "needs e4crypt (e2fsprogs)";
  TempDir dir;
  auto fs = testing::MakeLoopFilesystem(FsType::kExt4, dir.path(), 64 * kMiB, "-O encrypt");
  ASSERT_TRUE(fs.ok()) << fs.status();
  const std::string root = (*fs)->root() + "/secret";
  std::filesystem::create_directories(root);
  // A v1 policy with a passphrase key in the session keyring (fixed salt: the test's own key).
  auto keyed = testing::RunCommand(
      "printf %s blockread-test | e4crypt add_key -S 0x0123456789abcdef " + root + " 2>&1");
  if (!keyed.ok()) GTEST_SKIP() << "no session keyring for e4crypt: " << keyed.status();
  ASSERT_TRUE(WriteAt(root + "/f.bin", 0, RandomBytes(64 * 1024, 21), true).ok());
  Catalog catalog;
  ASSERT_TRUE(catalog.ImportTree(root).ok());
  auto map = catalog.Resolve("f.bin");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)->source(), FileSource::kFileRoute);
  EXPECT_NE(catalog.RouteNote("f.bin").find("encrypted"), std::string::npos)
      << catalog.RouteNote("f.bin");
  // Through the real engine: the plaintext the filesystem returns.
  auto engine = EngineContext::Create(catalog, EngineConfig());
  ASSERT_TRUE(engine.ok()) << engine.status();
  testing::CompletedRead read = testing::ReadOnce(**engine, "f.bin", 0, 64 * 1024);
  ASSERT_TRUE(read.status.ok()) << read.status;
  auto expected = ReadFileRange(root + "/f.bin", 0, 64 * 1024);
  ASSERT_TRUE(expected.ok());
  EXPECT_TRUE(read.data == *expected) << "served bytes are not the file's plaintext";
}

}  // namespace
}  // namespace blockread::storage
