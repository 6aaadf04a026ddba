#include "storage/device_identity.h"

#include <blkid/blkid.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace blockread::storage {
namespace {

// The first line of a sysfs attribute, trimmed; empty if absent or blank.
std::string ReadAttribute(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return std::string(absl::StripAsciiWhitespace(line));
}

std::string HardwareIdentity(dev_t device_number) {
  const std::string sys =
      absl::StrFormat("/sys/dev/block/%u:%u/", major(device_number), minor(device_number));
  for (const char* attribute : {"wwid", "device/wwid", "device/serial"}) {
    if (std::string id = ReadAttribute(sys + attribute); !id.empty()) {
      return absl::StrCat(attribute, ":", id);
    }
  }
  return "";
}

std::string LabelIdentity(int fd) {
  blkid_probe probe = blkid_new_probe();
  if (probe == nullptr) return "";
  std::string identity;
  if (blkid_probe_set_device(probe, fd, 0, 0) == 0) {
    blkid_probe_enable_superblocks(probe, 1);
    blkid_probe_set_superblocks_flags(probe, BLKID_SUBLKS_UUID | BLKID_SUBLKS_TYPE);
    blkid_probe_enable_partitions(probe, 1);
    if (blkid_do_safeprobe(probe) == 0) {
      const char* value = nullptr;
      const char* type = nullptr;
      if (blkid_probe_lookup_value(probe, "PTUUID", &value, nullptr) == 0) {
        blkid_probe_lookup_value(probe, "PTTYPE", &type, nullptr);
        identity = absl::StrCat("ptuuid:", type != nullptr ? type : "", ":", value);
      } else if (blkid_probe_lookup_value(probe, "UUID", &value, nullptr) == 0) {
        blkid_probe_lookup_value(probe, "TYPE", &type, nullptr);
        identity = absl::StrCat("uuid:", type != nullptr ? type : "", ":", value);
      }
    }
  }
  blkid_free_probe(probe);
  return identity;
}

std::string ContentIdentity(int fd, uint64_t size, uint32_t block_size) {
  const size_t length = std::max<uint32_t>(block_size, 4096);
  if (size < length) return "";
  void* raw = nullptr;
  if (posix_memalign(&raw, length, length) != 0) return "";
  std::unique_ptr<char, decltype(&free)> buffer(static_cast<char*>(raw), &free);
  size_t hash = absl::HashOf(size);
  const uint64_t last = (size - length) / length * length;
  for (uint64_t offset : {uint64_t{0}, last / 2 / length * length, last}) {
    if (pread(fd, buffer.get(), length, static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(length)) {
      return "";
    }
    hash = absl::HashOf(hash, absl::string_view(buffer.get(), length));
  }
  return absl::StrFormat("content:%u:%016x", size, hash);
}

}  // namespace

DeviceIdentity IdentifyDisk(int fd, dev_t device_number, uint64_t size, uint32_t block_size) {
  if (std::string id = HardwareIdentity(device_number); !id.empty()) return {std::move(id)};
  if (std::string id = LabelIdentity(fd); !id.empty()) return {std::move(id)};
  return {ContentIdentity(fd, size, block_size)};
}

}  // namespace blockread::storage
