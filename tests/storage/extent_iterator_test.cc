#include "storage/extent_iterator.h"

#include <random>

#include "gtest/gtest.h"

namespace blockread::storage {
namespace {

// Random maps (mapped, unwritten and hole extents, gaps, a partial last block) and random ranges:
// the segments cover exactly the range, in order, without overlap; each lies inside one extent of
// the map with the right type and physical offset; mapped ones respect max_io_bytes.
TEST(ExtentIteratorTest, RandomMapsAndRanges) {
  std::mt19937_64 rng(20261202);
  for (int round = 0; round < 2000; ++round) {
    const uint32_t block = 512u << (rng() % 4);
    std::vector<Extent> extents;
    uint64_t pos = 0;
    const int count = static_cast<int>(rng() % 12);
    for (int i = 0; i < count; ++i) {
      pos += (rng() % 3) * block;
      const uint64_t length = (1 + rng() % 64) * block;
      const ExtentType type = rng() % 4 == 0 ? ExtentType::kUnwritten : ExtentType::kMapped;
      extents.push_back(
          Extent{pos, length, type, static_cast<DeviceId>(rng() % 3), (rng() % 100000) * block});
      pos += length;
    }
    const uint64_t size = pos + rng() % (3 * block) + 1;
    auto map = FileMap::Create("f", size, block, FileSource::kManifest, extents);
    ASSERT_TRUE(map.ok()) << map.status();
    const uint64_t rounded = RoundUp(size, block);
    const uint64_t max_io = block * (1 + rng() % 16);

    for (int r = 0; r < 20; ++r) {
      const uint64_t offset = rng() % rounded;
      const uint64_t length = rng() % (rounded - offset) + 1;
      ExtentIterator it(*map, offset, length, max_io);
      uint64_t expected_next = offset;
      for (Segment s; it.Next(&s);) {
        ASSERT_EQ(s.file_offset, expected_next) << "gap or overlap";
        ASSERT_GT(s.length, 0u);
        const Extent e = map->Lookup(s.file_offset);
        ASSERT_LE(s.file_offset + s.length, e.logical_end()) << "segment leaves its extent";
        ASSERT_EQ(s.type, e.type);
        if (e.type != ExtentType::kHole) {
          ASSERT_EQ(s.device, e.device);
          ASSERT_EQ(s.physical_offset, e.physical_offset + (s.file_offset - e.logical_offset));
        }
        if (s.type == ExtentType::kMapped) {
          ASSERT_LE(s.length, max_io);
        }
        expected_next = s.file_offset + s.length;
      }
      ASSERT_EQ(expected_next, offset + length) << "range not covered";
    }
  }
}

TEST(ExtentIteratorTest, SplitsLongMappedRunsAndKeepsHolesWhole) {
  auto map = FileMap::Create("f", 1 << 20, 4096, FileSource::kManifest,
                             {Extent{0, 512 * 1024, ExtentType::kMapped, 0, 4096}});
  ASSERT_TRUE(map.ok());
  ExtentIterator it(*map, 0, 1 << 20, 128 * 1024);
  std::vector<Segment> segments;
  for (Segment s; it.Next(&s);) segments.push_back(s);
  ASSERT_EQ(segments.size(), 5u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(segments[i].type, ExtentType::kMapped);
    EXPECT_EQ(segments[i].length, 128u * 1024);
    EXPECT_EQ(segments[i].physical_offset, 4096u + i * 128 * 1024);
  }
  EXPECT_EQ(segments[4].type, ExtentType::kHole);
  EXPECT_EQ(segments[4].length, 512u * 1024);
}

}  // namespace
}  // namespace blockread::storage
