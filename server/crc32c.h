// CRC32C (Castagnoli, the iSCSI/ext4/NVMe polynomial) of a buffer, from Intel ISA-L.
#ifndef BLOCKREAD_SERVER_CRC32C_H_
#define BLOCKREAD_SERVER_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace blockread::server {

// The standard CRC32C: Crc32c("123456789", 9) == 0xE3069283.
uint32_t Crc32c(const char* data, size_t length);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_CRC32C_H_
