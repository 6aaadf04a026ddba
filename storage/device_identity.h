#ifndef BLOCKREAD_STORAGE_DEVICE_IDENTITY_H_
#define BLOCKREAD_STORAGE_DEVICE_IDENTITY_H_

// What makes a block device the same disk when its path comes back (Catalog::CheckDevices): the
// kernel name and number of a disk say nothing of which disk it is once it has gone away.
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace blockread::storage {

// The strongest identity a disk offers, in order: the WWN or serial the device reports (sysfs
// wwid, device/wwid, device/serial); the UUID of the filesystem or partition table on it
// (libblkid); else a fingerprint of its size and three of its blocks (first, middle, last), for
// raw disks that carry neither (loop devices over images, raw dataset disks). Empty when none
// could be had (the blocks could not be read): the caller then knows nothing and says so.
// Reads at most three blocks of `fd` (O_DIRECT, `block_size` aligned). Any thread.
struct DeviceIdentity {
  std::string value;  // compared as a whole; "wwid:...", "uuid:ext4:...", "content:..."
  bool empty() const { return value.empty(); }
  bool operator==(const DeviceIdentity& other) const { return value == other.value; }
};
DeviceIdentity IdentifyDisk(int fd, dev_t device_number, uint64_t size, uint32_t block_size);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_DEVICE_IDENTITY_H_
