// A device served by a path that goes away and comes back is served again only if it is the
// same disk (storage/device_identity.h): a different disk of the same size at that path (the
// next disk enumerated under the old name, another image behind a loop device) stays down, and
// the log says why; so does another image attached at the same device number once the first was
// let go. Real loop devices; reads through the real engine, checked byte for byte.
#include <unistd.h>

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

using testing::LoopDevice;
using testing::RandomBytes;
using testing::TempDir;
using testing::WriteAt;

constexpr uint64_t kImageBytes = 16 << 20;

enum class Content { kRaw, kExt4 };

class DeviceIdentityTest : public ::testing::TestWithParam<Content> {
 protected:
  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    for (const std::string& image : {ImageA(), ImageB()}) {
      ASSERT_TRUE(
          WriteAt(image, 0, RandomBytes(kImageBytes, image == ImageA() ? 1 : 2), true).ok());
      if (GetParam() == Content::kExt4) {
        // Each its own filesystem UUID; the identity is that, not the (changing) blocks.
        ASSERT_TRUE(testing::RunCommand("mkfs.ext4 -q -F " + image).ok());
      }
    }
  }

  std::string ImageA() const { return dir_.path() + "/a.img"; }
  std::string ImageB() const { return dir_.path() + "/b.img"; }
  std::string Stable() const { return dir_.path() + "/by-id-disk"; }

  // Attaches `image` on a new loop device and points the stable path at it.
  void AttachAtStablePath(const std::string& image) {
    auto loop = LoopDevice::Create(image, kImageBytes);
    ASSERT_TRUE(loop.ok()) << loop.status();
    unlink(Stable().c_str());
    ASSERT_EQ(symlink((*loop)->path().c_str(), Stable().c_str()), 0);
    loops_.push_back(*std::move(loop));
  }

  void ExpectServesImage(EngineContext& engine, const std::string& image) {
    testing::CompletedRead read = testing::ReadOnce(engine, "disk", 1 << 20, 256 * 1024);
    ASSERT_TRUE(read.status.ok()) << read.status;
    auto expected = testing::ReadFileRange(image, 1 << 20, 256 * 1024);
    ASSERT_TRUE(expected.ok());
    EXPECT_TRUE(read.data == *expected) << "served bytes are not " << image << "'s";
  }

  void ExpectUnavailable(EngineContext& engine) {
    testing::CompletedRead read = testing::ReadOnce(engine, "disk", 0, 4096);
    EXPECT_EQ(read.status.code(), absl::StatusCode::kUnavailable) << read.status;
  }

  TempDir dir_;
  std::vector<std::unique_ptr<LoopDevice>> loops_;  // outlive the catalog (declared first)
};

TEST_P(DeviceIdentityTest, AnotherDiskOfTheSameSizeAtItsPathIsNotServedAndItsOwnIs) {
  AttachAtStablePath(ImageA());
  Catalog catalog;
  ASSERT_TRUE(catalog.AddWholeDevice("disk", Stable()).ok());
  auto engine = EngineContext::Create(catalog, EngineConfig());
  ASSERT_TRUE(engine.ok()) << engine.status();
  ExpectServesImage(**engine, ImageA());

  // Gone: down.
  ASSERT_EQ(unlink(Stable().c_str()), 0);
  catalog.CheckDevices();
  EXPECT_FALSE(catalog.device_up(0));
  ExpectUnavailable(**engine);

  // Back at its path as another disk of the same size and block size: still down, and said why.
  ::testing::internal::CaptureStderr();
  AttachAtStablePath(ImageB());
  catalog.CheckDevices();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(catalog.device_up(0));
  ExpectUnavailable(**engine);
  EXPECT_NE(log.find("is back as another disk"), std::string::npos) << log;
  // While up, the path re-pointed at another disk: it goes down, it is not served.
  ::testing::internal::CaptureStderr();
  AttachAtStablePath(ImageA());
  catalog.CheckDevices();
  ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(catalog.device_up(0));
  ExpectServesImage(**engine, ImageA());
  AttachAtStablePath(ImageB());
  ::testing::internal::CaptureStderr();
  catalog.CheckDevices();
  ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(catalog.device_up(0));
  ExpectUnavailable(**engine);

  // Its own disk back (a new loop device over the original image): served again, exact.
  ::testing::internal::CaptureStderr();
  AttachAtStablePath(ImageA());
  catalog.CheckDevices();
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(catalog.device_up(0));
  ExpectServesImage(**engine, ImageA());
}

// A disk that goes down is let go: a loop device the server held can be detached, and another
// image attached at the same device number. Under that same number, it is checked all the same:
// not served; its own image re-attached there is.
TEST_P(DeviceIdentityTest, AtTheSameDeviceNumberAnotherDiskIsNotServedAndItsOwnIs) {
  auto attached = testing::RunCommand("losetup --find --show --direct-io=on " + ImageA());
  ASSERT_TRUE(attached.ok()) << attached.status();
  const std::string loop(absl::StripAsciiWhitespace(*attached));
  absl::Cleanup detach = [&] { (void)testing::RunCommand("losetup -d " + loop); };
  ASSERT_EQ(symlink(loop.c_str(), Stable().c_str()), 0);
  const std::string backing =
      "/sys/block/" + loop.substr(loop.rfind('/') + 1) + "/loop/backing_file";
  const auto attach_at_same_number = [&](const std::string& image) {
    // Detached (the catalog let go of it, or losetup -d would only defer the detach) ...
    ASSERT_TRUE(testing::RunCommand("losetup -d " + loop).ok());
    for (int i = 0; i < 200 && access(backing.c_str(), F_OK) == 0; ++i) usleep(10000);
    ASSERT_NE(access(backing.c_str(), F_OK), 0) << loop << " is still held open";
    // ... and attached again at its number.
    auto again = testing::RunCommand("losetup --direct-io=on " + loop + " " + image);
    ASSERT_TRUE(again.ok()) << again.status();
  };
  {
    Catalog catalog;
    ASSERT_TRUE(catalog.AddWholeDevice("disk", Stable()).ok());
    auto engine = EngineContext::Create(catalog, EngineConfig());
    ASSERT_TRUE(engine.ok()) << engine.status();
    ExpectServesImage(**engine, ImageA());

    // Gone (its stable path removed): down, and let go.
    ASSERT_EQ(unlink(Stable().c_str()), 0);
    ::testing::internal::CaptureStderr();
    catalog.CheckDevices();
    ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(catalog.device_up(0));
    ExpectUnavailable(**engine);  // the engine lets go of it too
    attach_at_same_number(ImageB());
    ASSERT_EQ(symlink(loop.c_str(), Stable().c_str()), 0);
    ::testing::internal::CaptureStderr();
    catalog.CheckDevices();
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(catalog.device_up(0)) << "another image at the same number is served";
    ExpectUnavailable(**engine);
    EXPECT_NE(log.find("is back as another disk"), std::string::npos) << log;

    attach_at_same_number(ImageA());
    ::testing::internal::CaptureStderr();
    catalog.CheckDevices();
    ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(catalog.device_up(0));
    ExpectServesImage(**engine, ImageA());
  }
}

INSTANTIATE_TEST_SUITE_P(Contents, DeviceIdentityTest,
                         ::testing::Values(Content::kRaw, Content::kExt4), [](const auto& info) {
                           return info.param == Content::kRaw ? "raw" : "ext4";
                         });

}  // namespace
}  // namespace blockread::storage
