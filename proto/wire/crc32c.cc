#include "proto/wire/crc32c.h"

#include <isa-l/crc.h>

namespace blockread::wire {

uint32_t Crc32c(const char* data, size_t length) {
  // ISA-L's crc32_iscsi takes and returns the raw register: start from ~0 and invert at the end
  // for the standard CRC32C. It takes an int length, so feed big buffers in pieces.
  uint32_t crc = 0xFFFFFFFFu;
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  while (length > 0) {
    const int piece = static_cast<int>(length > (1u << 30) ? (1u << 30) : length);
    crc = crc32_iscsi(const_cast<unsigned char*>(bytes), piece, crc);
    bytes += piece;
    length -= static_cast<size_t>(piece);
  }
  return ~crc;
}

}  // namespace blockread::wire
