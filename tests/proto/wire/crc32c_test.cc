// CRC32C as the wire carries it (ReadBlockResponse.crc32c): the standard Castagnoli CRC, whatever
// the buffer's size or alignment.
#include "proto/wire/crc32c.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blockread::wire {
namespace {

TEST(Crc32cTest, StandardCheckValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF.
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

// A bitwise reference: the reflected polynomial 0x82F63B78.
uint32_t Reference(const char* data, size_t length) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < length; ++i) {
    crc ^= static_cast<unsigned char>(data[i]);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(Crc32cTest, MatchesABitwiseReferenceAtEveryLengthAndOffset) {
  std::vector<char> data(4096 + 64);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (char& c : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t length : {1u, 7u, 8u, 63u, 64u, 65u, 511u, 4096u}) {
      ASSERT_EQ(Crc32c(data.data() + offset, length), Reference(data.data() + offset, length))
          << offset << " " << length;
    }
  }
}

}  // namespace
}  // namespace blockread::wire
