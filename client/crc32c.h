// CRC32C (Castagnoli, the iSCSI/ext4/NVMe polynomial) of a buffer, from Intel ISA-L. A leaf
// library of its own: the server computes it for responses, clients check it.
#ifndef BLOCKREAD_CLIENT_CRC32C_H_
#define BLOCKREAD_CLIENT_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace blockread {

// The standard CRC32C: Crc32c("123456789", 9) == 0xE3069283.
uint32_t Crc32c(const char* data, size_t length);

}  // namespace blockread

#endif  // BLOCKREAD_CLIENT_CRC32C_H_
