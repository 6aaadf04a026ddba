#include "tests/support/file_shapes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/support/loop_device.h"

namespace blockread::testing {

const std::vector<std::string> kShapes = {"sparse", "unwritten", "frag_a", "frag_b", "punched",
                                          "tiny",   "tail",      "empty",  "big",    "unsynced"};

// Every shape of file the importer must get right, written before the import.
void WriteShapes(const std::string& root, uint64_t seed) {
  constexpr uint64_t kMiB = 1 << 20;
  auto check = [](absl::Status s) { ASSERT_TRUE(s.ok()) << s; };
  // Sparse: data islands, holes between them and a trailing hole.
  const std::string sparse = root + "/sparse";
  check(WriteAt(sparse, 0, RandomBytes(64 * 1024, seed + 1), false));
  check(WriteAt(sparse, kMiB + 4096, RandomBytes(128 * 1024, seed + 2), false));
  check(WriteAt(sparse, 5 * kMiB + 512, RandomBytes(4096, seed + 3), true));
  ASSERT_EQ(truncate(sparse.c_str(), 8 * kMiB + 100), 0);

  // Unwritten: fallocated, partly written, plus preallocation beyond EOF.
  const std::string unwritten = root + "/unwritten";
  int fd = open(unwritten.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fallocate(fd, 0, 0, 4 * kMiB), 0);
  ASSERT_EQ(fallocate(fd, FALLOC_FL_KEEP_SIZE, 4 * kMiB, kMiB), 0);
  close(fd);
  check(WriteAt(unwritten, kMiB, RandomBytes(64 * 1024, seed + 4), true));

  // Fragmented: two files written interleaved in small synced chunks.
  for (int i = 0; i < 96; ++i) {
    check(WriteAt(root + "/frag_a", i * 16384, RandomBytes(16384, seed * 1000 + 2 * i), true));
    check(WriteAt(root + "/frag_b", i * 16384, RandomBytes(16384, seed * 1000 + 2 * i + 1), true));
  }

  // Punched: every other 8 KiB punched out, so the map alternates extent and hole 128 times.
  const std::string punched = root + "/punched";
  check(WriteAt(punched, 0, RandomBytes(2 * kMiB, seed + 9), true));
  fd = open(punched.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  for (uint64_t off = 8192; off < 2 * kMiB; off += 16384) {
    ASSERT_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, 8192), 0);
  }
  close(fd);

  check(WriteAt(root + "/tiny", 0, RandomBytes(40, seed + 5), true));
  check(WriteAt(root + "/tail", 0, RandomBytes(5000, seed + 6), true));
  check(WriteAt(root + "/empty", 0, {}, true));
  // Over 64 MiB, in chunks.
  for (uint64_t off = 0; off < 80 * kMiB; off += 8 * kMiB) {
    check(WriteAt(root + "/big", off, RandomBytes(8 * kMiB, seed + 100 + off), false));
  }
  check(WriteAt(root + "/big", 80 * kMiB, RandomBytes(777, seed + 7), true));
  // Written and not synced: still in the page cache (delayed allocation) at import.
  check(WriteAt(root + "/unsynced", 0, RandomBytes(kMiB + 123, seed + 8), false));
}

absl::StatusOr<std::unique_ptr<LoopFilesystem>> MakeShapesFilesystem(FsType type,
                                                                     const std::string& work_dir,
                                                                     uint64_t seed,
                                                                     const std::string& subdir) {
  constexpr uint64_t kImageBytes = 512 << 20;  // XFS needs more than 300 MB
  auto fs = MakeLoopFilesystem(type, work_dir, kImageBytes,
                               type == FsType::kExt4 ? "-O inline_data" : "");
  if (!fs.ok()) return fs.status();
  std::string dir = (*fs)->root();
  if (!subdir.empty()) {
    dir += "/" + subdir;
    if (mkdir(dir.c_str(), 0755) != 0) return absl::InternalError("mkdir " + dir);
  }
  WriteShapes(dir, seed);
  if (::testing::Test::HasFatalFailure()) return absl::InternalError("writing the shapes failed");
  return fs;
}

}  // namespace blockread::testing
