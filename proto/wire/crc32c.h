// CRC32C (Castagnoli, the iSCSI/ext4/NVMe polynomial) of a buffer, from Intel ISA-L: the checksum
// of ReadBlockResponse.crc32c and ReadResult.crc32c. The server computes it, clients check it.
#ifndef BLOCKREAD_PROTO_WIRE_CRC32C_H_
#define BLOCKREAD_PROTO_WIRE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace blockread::wire {

// The standard CRC32C: Crc32c("123456789", 9) == 0xE3069283.
uint32_t Crc32c(const char* data, size_t length);

}  // namespace blockread::wire

#endif  // BLOCKREAD_PROTO_WIRE_CRC32C_H_
