#include "tests/support/map_reader.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"

namespace blockread::testing {

using storage::Extent;
using storage::ExtentType;

absl::StatusOr<std::vector<char>> ReadThroughMap(const storage::Catalog& catalog,
                                                 const storage::FileMap& map, uint64_t offset,
                                                 uint64_t length) {
  const uint64_t size = map.SizeNow();
  if (offset >= size) return std::vector<char>();
  const uint64_t end = std::min(size, offset + length);
  std::vector<char> out(end - offset, 0);
  uint64_t pos = offset;
  while (pos < end) {
    const Extent e = map.Lookup(pos);
    const uint64_t piece_end = std::min(end, e.logical_end());
    if (e.type == ExtentType::kMapped) {
      const storage::Device& device = catalog.device(e.device);
      const uint64_t align = device.logical_block_size();
      const uint64_t physical = e.physical_offset + (pos - e.logical_offset);
      const uint64_t aligned_start = physical / align * align;
      const uint64_t aligned_end = storage::RoundUp(physical + (piece_end - pos), align);
      const size_t bytes = aligned_end - aligned_start;
      std::unique_ptr<char, decltype(&free)> buffer(
          static_cast<char*>(aligned_alloc(4096, storage::RoundUp(bytes, 4096))), &free);
      size_t done = 0;
      while (done < bytes) {
        ssize_t n = pread(device.fd(), buffer.get() + done, bytes - done, aligned_start + done);
        if (n < 0) {
          return absl::InternalError(absl::StrFormat("pread %s at %u: %s", device.path(),
                                                     aligned_start + done, strerror(errno)));
        }
        if (n == 0) break;  // file-route device: the file's end
        done += n;
      }
      const uint64_t skip = physical - aligned_start;
      const uint64_t want = piece_end - pos;
      if (done < skip + want) {
        return absl::DataLossError(
            absl::StrFormat("short read of %s at %u", device.path(), aligned_start));
      }
      memcpy(out.data() + (pos - offset), buffer.get() + skip, want);
    }
    pos = piece_end;
  }
  return out;
}

}  // namespace blockread::testing
