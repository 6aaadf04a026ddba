#include "storage/device.h"

#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/loop_device.h"

namespace blockread::storage {
namespace {

using testing::LoopDevice;
using testing::RandomBytes;
using testing::TempDir;
using testing::WriteAt;

void ExpectError(const absl::StatusOr<std::unique_ptr<Device>>& device, absl::StatusCode code,
                 const std::string& message) {
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), code) << device.status();
  EXPECT_NE(device.status().message().find(message), std::string::npos) << device.status();
}

TEST(DeviceTest, RegularFileAsDevice) {
  TempDir dir;
  const std::string path = dir.path() + "/disk.img";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(1 << 20, 1), true).ok());
  auto device = Device::Open("d", path);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->kind(), DeviceKind::kRegularFile);
  EXPECT_EQ((*device)->size(), 1u << 20);
  EXPECT_GE((*device)->logical_block_size(), 512u);
  EXPECT_EQ((*device)->logical_block_size() & ((*device)->logical_block_size() - 1), 0u);
  EXPECT_FALSE((*device)->io_poll_supported());
}

TEST(DeviceTest, MissingPath) {
  ExpectError(Device::Open("d", "/nonexistent/disk"), absl::StatusCode::kNotFound,
              "device d: cannot open /nonexistent/disk: No such file or directory");
}

TEST(DeviceTest, NotABlockDeviceOrRegularFile) {
  TempDir dir;
  ExpectError(Device::Open("d", dir.path()), absl::StatusCode::kInvalidArgument,
              "is neither a block device nor a regular file");
}

TEST(DeviceTest, SizeNotAMultipleOfTheBlockSize) {
  TempDir dir;
  const std::string path = dir.path() + "/odd.img";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(1000, 1), true).ok());
  ExpectError(Device::Open("d", path), absl::StatusCode::kInvalidArgument,
              "(1000 bytes) is not a multiple of its logical block size");
  Device::Options file_route;
  file_route.file_route = true;
  auto device = Device::Open("d", path, file_route);
  ASSERT_TRUE(device.ok()) << "the file route serves partial tail blocks: " << device.status();
  EXPECT_EQ((*device)->kind(), DeviceKind::kFileRoute);
}

TEST(DeviceTest, PermissionDenied) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop to another user";
  TempDir dir;
  const std::string path = dir.path() + "/private.img";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(4096, 1), true).ok());
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  // Root bypasses permission checks, so open as "nobody" in a child process.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto device = Device::Open("d", path);
    _exit(!device.ok() && device.status().code() == absl::StatusCode::kPermissionDenied &&
                  device.status().message().find("Permission denied") != std::string::npos
              ? 0
              : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "expected PERMISSION_DENIED naming the cause";
}

TEST(DeviceTest, ODirectUnsupported) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a ramfs";
  // ramfs has no direct I/O: open(O_DIRECT) fails with EINVAL there.
  TempDir dir;
  ASSERT_EQ(mount("ramfs", dir.path().c_str(), "ramfs", 0, nullptr), 0) << strerror(errno);
  const std::string path = dir.path() + "/disk.img";
  ASSERT_TRUE(WriteAt(path, 0, RandomBytes(4096, 1), false).ok());
  ExpectError(Device::Open("d", path), absl::StatusCode::kInvalidArgument,
              "does not support O_DIRECT");
  umount2(dir.path().c_str(), MNT_DETACH);
}

class LoopDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
  }
  TempDir dir_;
};

TEST_F(LoopDeviceTest, BlockDeviceGeometry) {
  for (uint32_t sector_size : {512u, 4096u}) {
    auto loop = LoopDevice::Create(dir_.path() + "/loop.img", 64 << 20, sector_size);
    ASSERT_TRUE(loop.ok()) << loop.status();
    auto device = Device::Open("loop", (*loop)->path());
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_EQ((*device)->kind(), DeviceKind::kBlockDevice);
    EXPECT_EQ((*device)->size(), 64u << 20);
    EXPECT_EQ((*device)->logical_block_size(), sector_size);
    EXPECT_NE((*device)->device_number(), 0u);
    // Loop devices have no poll queues.
    EXPECT_FALSE((*device)->io_poll_supported());
  }
}

}  // namespace
}  // namespace blockread::storage
