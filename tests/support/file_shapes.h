// Files of every shape a FIEMAP import and the read paths must get right.
#ifndef BLOCKREAD_TESTS_SUPPORT_FILE_SHAPES_H_
#define BLOCKREAD_TESTS_SUPPORT_FILE_SHAPES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/loop_device.h"

namespace blockread::testing {

// Names of the files WriteShapes() makes.
extern const std::vector<std::string> kShapes;

// Writes into `root`: sparse (holes, trailing hole), unwritten (fallocated, partly written,
// preallocated past EOF), frag_a/frag_b (written interleaved in small synced chunks), punched
// (128 extents), tiny (40 bytes: inline data on ext4 with inline_data), tail (5000 bytes), empty,
// big (80 MiB + 777), unsynced (written, never synced). Fails the current test on error.
void WriteShapes(const std::string& root, uint64_t seed);

// A 512 MiB loop filesystem of `type` holding WriteShapes(root + "/" + subdir) (subdir "" : the
// root). ext4 is made with inline_data, so the tiny file takes the DATA_INLINE route.
absl::StatusOr<std::unique_ptr<LoopFilesystem>> MakeShapesFilesystem(
    FsType type, const std::string& work_dir, uint64_t seed, const std::string& subdir = "");

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_FILE_SHAPES_H_
