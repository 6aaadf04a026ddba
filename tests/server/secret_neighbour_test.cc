// Issue 12, "secret neighbour": a device where files full of a known secret pattern sit next to
// the served files (before, after and between them, and in blocks freed by a deleted secret file
// that a served file's preallocation took over), served by a real blockread-server on real ext4
// and XFS filesystems on loop devices, and through a manifest on a device image. No read of any
// served file, at any offset and length (block-aligned for the simple path, odd for the generic
// one, across EOF and beyond it) returns the pattern, and every read that succeeds returns
// exactly the bytes the filesystem (or the manifest's author) says the file holds.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "storage/fiemap.h"
#include "tests/support/loop_device.h"
#include "tests/support/server_process.h"

namespace blockread {
namespace {

using client::BlockReadClient;
using testing::FsType;
using testing::ServerProcess;
using testing::TempDir;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
// 16 bytes, repeated: any 31 contiguous bytes of a secret file hold one whole copy.
constexpr char kMarker[] = "<SECRET-NEIGHB!>";
constexpr size_t kMarkerBytes = sizeof(kMarker) - 1;

std::vector<char> SecretBytes(size_t size) {
  std::vector<char> out(size);
  for (size_t i = 0; i < size; ++i) out[i] = kMarker[i % kMarkerBytes];
  return out;
}

bool HoldsSecret(const std::string& data) {
  return data.find(std::string(kMarker, kMarkerBytes)) != std::string::npos;
}

// The (offset, length) pairs every served file is read at: every 4 KiB block and a few across
// and past EOF (the simple path's shape), and seeded random ones of odd offsets and lengths (the
// generic path's).
std::vector<std::pair<uint64_t, uint64_t>> ReadShapes(uint64_t size, uint64_t seed) {
  std::vector<std::pair<uint64_t, uint64_t>> shapes;
  for (uint64_t offset = 0; offset < size + 8 * kKiB; offset += 4 * kKiB) {
    shapes.emplace_back(offset, 4 * kKiB);
  }
  std::mt19937_64 rng(seed);
  const uint64_t lengths[] = {1, 511, 512, 4095, 4097, 8192, 64 * kKiB + 7, kMiB};
  for (int i = 0; i < 300; ++i) {
    const uint64_t offset = rng() % (size + 4 * kKiB);
    shapes.emplace_back(offset, lengths[rng() % std::size(lengths)]);
  }
  shapes.emplace_back(size > 0 ? size - 1 : 0, kMiB);  // the last byte and whatever follows
  return shapes;
}

// Reads `name` at every shape; `expected(offset, length)` is what the file holds there (short
// at EOF). Returns how many reads returned data.
int CheckEveryRead(BlockReadClient& client, const std::string& name, uint64_t size,
                   const std::function<std::string(uint64_t, uint64_t)>& expected) {
  int served = 0;
  for (const auto& [offset, length] : ReadShapes(size, std::hash<std::string>()(name))) {
    auto read = client.Read(name, offset, length);
    const std::string where = absl::StrFormat("%s at %u+%u (size %u)", name, offset, length, size);
    if (!read.ok()) {
      EXPECT_FALSE(HoldsSecret(std::string(read.status().message()))) << where;
      EXPECT_GE(offset, size) << where << ": " << read.status();
      continue;
    }
    ++served;
    EXPECT_FALSE(HoldsSecret(read->data())) << where << ": the neighbour's secret came back";
    EXPECT_TRUE(read->data() == expected(offset, length)) << where << ": not the file's bytes";
  }
  return served;
}

// Whether the device image holds the secret anywhere in [offset, offset + length).
bool ImageHoldsSecret(const std::string& image, uint64_t offset, uint64_t length) {
  std::ifstream in(image, std::ios::binary);
  std::string bytes(length, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(bytes.data(), static_cast<std::streamsize>(length));
  return HoldsSecret(bytes);
}

class SecretNeighbourFsTest : public ::testing::TestWithParam<FsType> {};

TEST_P(SecretNeighbourFsTest, NoReadOfAServedFileReturnsTheNeighboursSecret) {
  if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const FsType type = GetParam();
  auto fs =
      testing::MakeLoopFilesystem(type, dir.path(), type == FsType::kXfs ? 320 * kMiB : 64 * kMiB);
  ASSERT_TRUE(fs.ok()) << fs.status();
  const std::string served = (*fs)->root() + "/served";
  const std::string secret = (*fs)->root() + "/secret";
  ASSERT_EQ(mkdir(served.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(secret.c_str(), 0700), 0);
  // Created and synced one after another, so the allocator lays them out interleaved.
  int secrets = 0;
  const auto write_secret = [&](uint64_t bytes) {
    ASSERT_TRUE(
        testing::WriteAt(absl::StrCat(secret, "/s", secrets++), 0, SecretBytes(bytes), true).ok());
  };
  write_secret(256 * kKiB);
  ASSERT_TRUE(
      testing::WriteAt(served + "/odd-size", 0, testing::RandomBytes(100 * kKiB + 123, 1), true)
          .ok());
  write_secret(256 * kKiB);
  ASSERT_TRUE(
      testing::WriteAt(served + "/one-past-a-mib", 0, testing::RandomBytes(kMiB + 1, 2), true)
          .ok());
  write_secret(256 * kKiB);
  // Islands of data with holes between them and after them.
  ASSERT_TRUE(
      testing::WriteAt(served + "/sparse", 0, testing::RandomBytes(4 * kKiB, 3), true).ok());
  ASSERT_TRUE(
      testing::WriteAt(served + "/sparse", 64 * kKiB, testing::RandomBytes(5000, 4), true).ok());
  ASSERT_EQ(truncate((served + "/sparse").c_str(), 200 * kKiB + 9), 0);
  write_secret(256 * kKiB);
  // A big secret, deleted: its blocks still hold the pattern. A filler takes every other free
  // block first, so the served file preallocated next (unwritten extents) must take them over.
  const std::string doomed = secret + "/doomed";
  ASSERT_TRUE(testing::WriteAt(doomed, 0, SecretBytes(8 * kMiB), true).ok());
  {
    struct statvfs vfs {};
    ASSERT_EQ(statvfs(secret.c_str(), &vfs), 0);
    const uint64_t free_bytes = vfs.f_bavail * vfs.f_frsize;
    const int fd = open((secret + "/filler").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    // Room left for the filesystem's own metadata.
    ASSERT_EQ(fallocate(fd, 0, 0, static_cast<off_t>(free_bytes - 2 * kMiB)), 0) << strerror(errno);
    ASSERT_EQ(fsync(fd), 0);
    close(fd);
  }
  ASSERT_EQ(unlink(doomed.c_str()), 0);
  sync();  // the freed blocks become allocatable once the journal has committed the unlink
  const std::string prealloc = served + "/preallocated";
  {
    const int fd = open(prealloc.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fallocate(fd, 0, 0, 8 * kMiB), 0);
    const std::vector<char> middle = testing::RandomBytes(4 * kKiB, 5);
    ASSERT_EQ(pwrite(fd, middle.data(), middle.size(), kMiB), static_cast<ssize_t>(middle.size()));
    // Preallocated beyond EOF as well: never part of the file.
    ASSERT_EQ(ftruncate(fd, 3 * kMiB + 17), 0);
    ASSERT_EQ(fallocate(fd, FALLOC_FL_KEEP_SIZE, 3 * kMiB + 17, 5 * kMiB), 0);
    ASSERT_EQ(fsync(fd), 0);
    close(fd);
  }
  sync();

  // The premise: the preallocated file's unwritten extents sit on blocks that hold the secret.
  auto map = storage::MapFileExtents(prealloc);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_TRUE(map->file_route_reason.empty()) << map->file_route_reason;
  bool secret_under_unwritten = false;
  for (const storage::DeviceExtent& e : map->extents) {
    if (e.unwritten) {
      secret_under_unwritten |=
          ImageHoldsSecret((*fs)->device->image_path(), e.physical_offset, e.length);
    }
  }
  EXPECT_TRUE(secret_under_unwritten)
      << "premise: the deleted secret's blocks should sit under the preallocation";

  auto server = ServerProcess::Start({"--serve_files=" + served, "--metrics_listen="},
                                     dir.path() + "/server.log");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = BlockReadClient::Connect((*server)->target());
  for (const std::string name : {"odd-size", "one-past-a-mib", "sparse", "preallocated"}) {
    const std::string path = served + "/" + name;
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    // Files are opened, leased and mapped on their first read or stat: wait for the map.
    auto info = client->Stat(name);
    for (int tries = 0; info.ok() && info->source() != v1::FIEMAP && tries < 500; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      info = client->Stat(name);
    }
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->source(), v1::FIEMAP) << name << " should be read from the raw device";
    const int served_reads = CheckEveryRead(*client, name, st.st_size, [&](uint64_t o, uint64_t l) {
      auto bytes = testing::ReadFileRange(path, o, l);
      return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : "<unreadable>";
    });
    EXPECT_GT(served_reads, 100) << name;
  }
  client.reset();
  EXPECT_EQ((*server)->Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Filesystems, SecretNeighbourFsTest,
                         ::testing::Values(FsType::kExt4, FsType::kXfs),
                         [](const auto& info) { return testing::FsTypeName(info.param); });

// A manifest layout on a device image that is secret everywhere the manifest does not put file
// bytes: a file whose last extent runs past its size to the block boundary, a gap between
// extents, an explicit HOLE, files back to back.
TEST(SecretNeighbourManifestTest, NoReadOfAServedFileReturnsTheNeighboursSecret) {
  TempDir dir;
  const std::string image = dir.path() + "/device.img";
  std::vector<char> device = SecretBytes(4 * kMiB);
  struct Piece {
    uint64_t logical, length, physical;
  };
  struct File {
    std::string name;
    uint64_t size;
    std::vector<Piece> data;  // the rest of the file reads as zeros
    std::string extents;      // manifest text
    std::vector<char> bytes;
  };
  std::vector<File> files = {
      {"tail-past-size", 10000, {{0, 10000, 4096}}, "", {}},
      {"gap", 20000, {{0, 8192, 16384}, {16384, 3616, 32768}}, "", {}},
      {"hole", 3 * 4096 + 5, {{0, 4096, 40960}, {8192, 4096 + 5, 45056}}, "", {}},
      {"neighbour-a", 4096, {{0, 4096, 53248}}, "", {}},
      {"neighbour-b", 4096, {{0, 4096, 57344}}, "", {}},
  };
  files[0].extents =
      "extent { logical_offset: 0 length: 10240 device: \"d\" physical_offset: 4096 }";
  files[1].extents =
      "extent { logical_offset: 0 length: 8192 device: \"d\" physical_offset: 16384 } "
      "extent { logical_offset: 16384 length: 4096 device: \"d\" physical_offset: 32768 }";
  files[2].extents =
      "extent { logical_offset: 0 length: 4096 device: \"d\" physical_offset: 40960 } "
      "extent { logical_offset: 4096 length: 4096 type: HOLE } "
      "extent { logical_offset: 8192 length: 4608 device: \"d\" physical_offset: 45056 }";
  files[3].extents =
      "extent { logical_offset: 0 length: 4096 device: \"d\" physical_offset: 53248 }";
  files[4].extents =
      "extent { logical_offset: 0 length: 4096 device: \"d\" physical_offset: 57344 }";
  std::string manifest = absl::StrCat("device { name: \"d\" path: \"", image, "\" }\n");
  uint64_t seed = 10;
  for (File& file : files) {
    file.bytes.assign(file.size, 0);
    for (const Piece& piece : file.data) {
      const std::vector<char> random = testing::RandomBytes(piece.length, seed++);
      std::copy(random.begin(), random.end(), file.bytes.begin() + piece.logical);
      std::copy(random.begin(), random.end(), device.begin() + piece.physical);
    }
    absl::StrAppend(&manifest, "file { name: \"", file.name, "\" size: ", file.size, " ",
                    file.extents, " }\n");
  }
  std::ofstream(image, std::ios::binary).write(device.data(), device.size());
  std::ofstream(dir.path() + "/layout.manifest") << manifest;

  auto server =
      ServerProcess::Start({"--manifest=" + dir.path() + "/layout.manifest", "--metrics_listen="},
                           dir.path() + "/server.log");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = BlockReadClient::Connect((*server)->target());
  for (const File& file : files) {
    CheckEveryRead(*client, file.name, file.size, [&](uint64_t o, uint64_t l) {
      if (o >= file.size) return std::string();
      const uint64_t end = std::min(file.size, o + l);
      return std::string(file.bytes.begin() + o, file.bytes.begin() + end);
    });
  }
  client.reset();
  EXPECT_EQ((*server)->Stop(), 0);
}

}  // namespace
}  // namespace blockread
