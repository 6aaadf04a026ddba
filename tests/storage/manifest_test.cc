#include "storage/manifest.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/support/loop_device.h"
#include "tests/support/map_reader.h"

namespace blockread::storage {
namespace {

using testing::RandomBytes;
using testing::TempDir;
using testing::WriteAt;

constexpr uint64_t kDeviceBytes = 1 << 20;

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_path_ = dir_.path() + "/disk.img";
    device_bytes_ = RandomBytes(kDeviceBytes, 7);
    ASSERT_TRUE(WriteAt(device_path_, 0, device_bytes_, true).ok());
  }

  // Writes `text` (with $DEV replaced by the device path) and loads it into catalog_.
  absl::Status Load(const std::string& text) {
    manifest_path_ = dir_.path() + "/m.textproto";
    std::ofstream(manifest_path_) << absl::StrReplaceAll(text, {{"$DEV", device_path_}});
    return LoadManifest(manifest_path_, catalog_);
  }

  // Expects Load(text) to fail with INVALID_ARGUMENT at `line` with `message` in it.
  void ExpectError(const std::string& text, int line, const std::string& message) {
    absl::Status status = Load(text);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(absl::StrCat(manifest_path_, ":", line, ":")),
              std::string::npos)
        << status;
    EXPECT_NE(status.message().find(message), std::string::npos) << status;
    EXPECT_EQ(catalog_.file_count(), 0u) << "a failed load must add nothing";
    EXPECT_EQ(catalog_.device_count(), 0u) << "a failed load must add nothing";
  }

  TempDir dir_;
  std::string device_path_;
  std::string manifest_path_;
  std::vector<char> device_bytes_;
  Catalog catalog_;
};

TEST_F(ManifestTest, LoadsDevicesAndFilesAndReadsThem) {
  ASSERT_TRUE(Load(R"(
device { name: "d0" path: "$DEV" }
file {
  name: "a"
  size: 20000
  extent { logical_offset: 0 length: 8192 device: "d0" physical_offset: 65536 }
  extent { logical_offset: 8192 length: 4096 type: HOLE }
  extent { logical_offset: 12288 length: 4096 type: UNWRITTEN device: "d0" physical_offset: 0 }
  extent { logical_offset: 16384 length: 4096 device: "d0" physical_offset: 4096 }
}
file { name: "empty" size: 0 version: "2026-12-01" }
)")
                  .ok());
  EXPECT_EQ(catalog_.FileNames(), (std::vector<std::string>{"a", "empty"}));
  EXPECT_EQ(catalog_.DeclaredVersion("empty"), "2026-12-01");
  EXPECT_EQ(catalog_.DeclaredVersion("a"), "") << "no version unless declared";
  auto map = catalog_.Resolve("a");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)->source(), FileSource::kManifest);
  auto bytes = testing::ReadThroughMap(catalog_, **map, 0, 1 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_EQ(bytes->size(), 20000u);
  std::vector<char> expected(20000, 0);
  std::copy_n(device_bytes_.begin() + 65536, 8192, expected.begin());
  std::copy_n(device_bytes_.begin() + 4096, 20000 - 16384, expected.begin() + 16384);
  EXPECT_EQ(*bytes, expected);
}

TEST_F(ManifestTest, SyntaxErrorNamesTheLine) {
  ExpectError("device { name: \"d0\" path: \"$DEV\" }\nfile { name: \"a\" size: x }\n", 2,
              "Expected integer");
}

TEST_F(ManifestTest, UnknownDevice) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file {
  name: "a" size: 4096
  extent { logical_offset: 0 length: 4096 device: "nope" physical_offset: 0 }
})",
              4, "file 'a': extent 0 at offset 0: unknown device 'nope'");
}

TEST_F(ManifestTest, DuplicateDeviceName) {
  ExpectError("device { name: \"d0\" path: \"$DEV\" }\ndevice { name: \"d0\" path: \"$DEV\" }", 2,
              "duplicate device name 'd0'");
}

TEST_F(ManifestTest, DuplicateFileName) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file { name: "a" size: 4096 extent { length: 4096 device: "d0" } }
file { name: "a" size: 4096 extent { length: 4096 device: "d0" } })",
              3, "file 'a': duplicate file name");
}

TEST_F(ManifestTest, OverlappingExtents) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file {
  name: "a" size: 16384
  extent { logical_offset: 0 length: 8192 device: "d0" }
  extent { logical_offset: 4096 length: 8192 device: "d0" physical_offset: 65536 }
})",
              5, "extent 1 at offset 4096: overlaps the extent before it, which ends at 8192");
}

TEST_F(ManifestTest, UnsortedExtents) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file {
  name: "a" size: 16384
  extent { logical_offset: 8192 length: 8192 device: "d0" }
  extent { logical_offset: 0 length: 4096 device: "d0" physical_offset: 65536 }
})",
              5, "extent 1 at offset 0: is out of order");
}

TEST_F(ManifestTest, MisalignedOffsetsAndLengths) {
  const std::string head =
      "device { name: \"d0\" path: \"$DEV\" }\nfile { name: \"a\" size: 8192\n";
  ExpectError(head + "extent { logical_offset: 100 length: 4096 device: \"d0\" } }", 3,
              "logical offset 100 is not a multiple of the device block size");
  ExpectError(head + "extent { length: 4000 device: \"d0\" } }", 3,
              "length 4000 is not a multiple of the device block size");
  ExpectError(head + "extent { length: 8192 device: \"d0\" physical_offset: 100 } }", 3,
              "physical offset 100 is not a multiple of the device block size");
}

TEST_F(ManifestTest, ExtentOutsideItsDevice) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file { name: "a" size: 8192
  extent { length: 8192 device: "d0" physical_offset: 1044480 } })",
              3, "on device 'd0': physical range [1044480, 1052672) lies outside the device");
}

TEST_F(ManifestTest, SizeBeyondTheLastExtent) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file { name: "a" size: 16384
  extent { length: 8192 device: "d0" } })",
              2, "file 'a': size 16384 is beyond the end of the last extent (8192)");
}

TEST_F(ManifestTest, ExtentBeyondTheFileSize) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file { name: "a" size: 4096
  extent { length: 4096 device: "d0" }
  extent { logical_offset: 4096 length: 4096 device: "d0" } })",
              4, "extent 1 at offset 4096: starts at or beyond the file size 4096");
}

TEST_F(ManifestTest, HoleNamingADevice) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file { name: "a" size: 4096
  extent { length: 4096 type: HOLE device: "d0" } })",
              3, "is a HOLE but names a device");
}

// proto3 enums are open: the text parser takes a number the schema does not define.
TEST_F(ManifestTest, UnknownExtentType) {
  ExpectError(R"(device { name: "d0" path: "$DEV" }
file { name: "a" size: 8192
  extent { length: 4096 device: "d0" }
  extent { logical_offset: 4096 length: 4096 type: 7 device: "d0" } })",
              4, "file 'a': extent 1 at offset 4096: has unknown type 7");
}

TEST_F(ManifestTest, MissingDeviceNamesThePath) {
  absl::Status status = Load("device { name: \"d0\" path: \"/nonexistent/disk\" }");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find(":1: device d0: cannot open /nonexistent/disk"),
            std::string::npos)
      << status;
}

TEST_F(ManifestTest, MissingManifest) {
  absl::Status status = LoadManifest(dir_.path() + "/none.textproto", catalog_);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
}

}  // namespace
}  // namespace blockread::storage
