#include "storage/extent_map.h"

#include <random>

#include "gtest/gtest.h"

namespace blockread::storage {
namespace {

Extent Mapped(uint64_t logical, uint64_t length, uint64_t physical) {
  return Extent{logical, length, ExtentType::kMapped, 0, physical};
}

TEST(FileMapTest, LookupFindsExtentsAndSynthesizesHoles) {
  auto map = FileMap::Create("f", 40960, 4096, FileSource::kManifest,
                             {Mapped(4096, 8192, 1 << 20), Mapped(16384, 4096, 0)});
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->Lookup(0), (Extent{0, 4096, ExtentType::kHole, kNoDevice, 0}));
  EXPECT_EQ(map->Lookup(4096), Mapped(4096, 8192, 1 << 20));
  EXPECT_EQ(map->Lookup(12287), Mapped(4096, 8192, 1 << 20));
  EXPECT_EQ(map->Lookup(12288), (Extent{12288, 4096, ExtentType::kHole, kNoDevice, 0}));
  EXPECT_EQ(map->Lookup(16384), Mapped(16384, 4096, 0));
  // Trailing gap: a hole up to the block-rounded size.
  EXPECT_EQ(map->Lookup(40959), (Extent{20480, 20480, ExtentType::kHole, kNoDevice, 0}));
}

TEST(FileMapTest, RejectsBrokenStructure) {
  auto check = [](std::vector<Extent> extents, const std::string& expected) {
    auto map = FileMap::Create("f", 65536, 4096, FileSource::kManifest, std::move(extents));
    ASSERT_FALSE(map.ok());
    EXPECT_NE(map.status().message().find(expected), std::string::npos) << map.status();
  };
  check({Mapped(0, 0, 0)}, "zero length");
  check({Mapped(8192, 4096, 0), Mapped(0, 4096, 0)}, "overlaps or precedes");
  check({Mapped(0, 8192, 0), Mapped(4096, 4096, 0)}, "overlaps or precedes");
  check({Mapped(65536, 4096, 0)}, "starts at or beyond the file size");
  check({Mapped(61440, 8192, 0)}, "ends beyond the file size");
  check({Extent{0, 4096, ExtentType::kHole, 0, 0}}, "names a device");
  check({Extent{0, 4096, ExtentType::kUnwritten, kNoDevice, 0}}, "needs a device");
}

// Random maps: every offset's extent covers it, and consecutive lookups tile the file.
TEST(FileMapTest, RandomMapsTileTheFile) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::vector<Extent> extents;
    uint64_t pos = 0;
    const int count = static_cast<int>(rng() % 20);
    for (int i = 0; i < count; ++i) {
      pos += (rng() % 4) * 512;  // maybe a gap
      const uint64_t length = (1 + rng() % 8) * 512;
      extents.push_back(Mapped(pos, length, rng() % 1000 * 512));
      pos += length;
    }
    const uint64_t size = pos + rng() % 4096 + 1;
    auto map = FileMap::Create("f", size, 512, FileSource::kManifest, extents);
    ASSERT_TRUE(map.ok()) << map.status();
    uint64_t offset = 0;
    while (offset < size) {
      const Extent e = map->Lookup(offset);
      ASSERT_EQ(e.logical_offset, offset);
      ASSERT_GT(e.length, 0u);
      offset = e.logical_end();
    }
  }
}

TEST(ExtentProblemTest, NamesTheProblem) {
  EXPECT_EQ(ExtentProblem(Mapped(0, 4096, 4096), 8192, 512), "");
  EXPECT_NE(ExtentProblem(Mapped(100, 4096, 0), 8192, 512).find("logical offset 100"),
            std::string::npos);
  EXPECT_NE(ExtentProblem(Mapped(0, 1000, 0), 8192, 512).find("length 1000"), std::string::npos);
  EXPECT_NE(ExtentProblem(Mapped(0, 512, 7), 8192, 512).find("physical offset 7"),
            std::string::npos);
  EXPECT_NE(ExtentProblem(Mapped(0, 8192, 4096), 8192, 512).find("outside the device"),
            std::string::npos);
}

}  // namespace
}  // namespace blockread::storage
