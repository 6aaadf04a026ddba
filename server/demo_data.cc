#include "server/demo_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/log.h"
#include "storage/manifest.h"
#include "storage/posix_status.h"

namespace blockread::server {
namespace {

constexpr uint64_t kDeviceBytes = 64 << 20;
constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

struct DemoExtent {
  uint64_t logical;
  uint64_t length;
  bool hole;
  uint64_t physical;
};
struct DemoFile {
  std::string name;
  uint64_t size;
  std::vector<DemoExtent> extents;
};

// The layout on the 64 MiB device (physical offsets), 4 KiB aligned throughout.
std::vector<DemoFile> Layout() {
  std::vector<DemoFile> files;
  files.push_back({"hello.txt", 0, {{0, 4 * kKiB, false, 0}}});  // size set from the text
  files.push_back({"random-4m", 4 * kMiB, {{0, 4 * kMiB, false, 1 * kMiB}}});
  files.push_back({"sparse",
                   6 * kMiB,
                   {{0, 256 * kKiB, false, 5 * kMiB},
                    {256 * kKiB, 1 * kMiB - 256 * kKiB, true, 0},
                    {1 * kMiB, 512 * kKiB, false, 5 * kMiB + 256 * kKiB},
                    {1 * kMiB + 512 * kKiB, 6 * kMiB - (1 * kMiB + 512 * kKiB), true, 0}}});
  DemoFile fragmented{"fragmented", 64 * 16 * kKiB, {}};
  for (uint64_t i = 0; i < 64; ++i) {
    // Piece i of the file sits at the (63 - i)-th slot, with a gap between slots: no two pieces
    // are adjacent on the device.
    fragmented.extents.push_back(
        {i * 16 * kKiB, 16 * kKiB, false, 8 * kMiB + (63 - i) * 32 * kKiB});
  }
  files.push_back(fragmented);
  files.push_back({"large", 16 * kMiB, {{0, 16 * kMiB, false, 16 * kMiB}}});
  return files;
}

constexpr char kHello[] =
    "Hello from blockread!\n"
    "This file lives on the demo device (a regular file standing in for an NVMe namespace).\n"
    "Try: blockread read hello.txt 0 4096, blockread explain fragmented 0 65536\n";

// Writes the demo image afresh. Whatever `path` was is unlinked first, and the new file is created
// exclusively: a symlink planted there (say, to a real disk) is replaced, never followed.
absl::Status WriteDevice(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return storage::PosixError(errno, absl::StrCat("cannot replace ", path));
  }
  int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return storage::PosixError(errno, absl::StrCat("cannot create ", path));
  std::vector<char> chunk(kMiB);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  int error = 0;  // errno of the first failure; EIO for a short write, which sets none
  for (uint64_t off = 0; off < kDeviceBytes && error == 0; off += kMiB) {
    for (size_t i = 0; i < chunk.size(); i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      memcpy(chunk.data() + i, &x, 8);
    }
    if (off == 0) {  // hello.txt's block: the text, zero padded
      memset(chunk.data(), 0, 4 * kKiB);
      memcpy(chunk.data(), kHello, sizeof(kHello) - 1);
    }
    const ssize_t written = pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(off));
    if (written != static_cast<ssize_t>(chunk.size())) error = written < 0 ? errno : EIO;
  }
  if (error == 0 && fsync(fd) != 0) error = errno;
  close(fd);
  if (error != 0) return storage::PosixError(error, absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// `block_size`: the device's direct-I/O alignment, which hello.txt's one extent is rounded to.
std::string ManifestText(const std::string& device_path, uint32_t block_size) {
  std::string out = absl::StrCat(
      "# The blockread demo: files laid out on a regular file used as a device.\n"
      "device { name: \"demo\" path: \"",
      device_path, "\" }\n");
  for (DemoFile file : Layout()) {
    if (file.name == "hello.txt") {
      file.size = sizeof(kHello) - 1;
      file.extents[0].length = (file.size + block_size - 1) / block_size * block_size;
    }
    absl::StrAppend(&out, "file {\n  name: \"", file.name, "\"\n  size: ", file.size, "\n");
    for (const DemoExtent& e : file.extents) {
      if (e.hole) {
        absl::StrAppendFormat(&out, "  extent { logical_offset: %u length: %u type: HOLE }\n",
                              e.logical, e.length);
      } else {
        absl::StrAppendFormat(&out,
                              "  extent { logical_offset: %u length: %u device: \"demo\" "
                              "physical_offset: %u }\n",
                              e.logical, e.length, e.physical);
      }
    }
    absl::StrAppend(&out, "}\n");
  }
  return out;
}

// The directory is the server's alone (0700): it holds a manifest, and a manifest names devices.
absl::Status MakePrivateDirectory(const std::string& data_dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::path directory = fs::absolute(fs::path(data_dir)).lexically_normal();
  if (directory.filename().empty()) directory = directory.parent_path();  // "data/"
  fs::create_directories(directory.parent_path(), error);
  if (error) {
    return storage::PosixError(
        error, absl::StrCat("--data-dir: cannot create ", directory.parent_path().string()));
  }
  if (mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
    return storage::PosixError(errno, absl::StrCat("--data-dir: cannot create ", data_dir));
  }
  struct stat st {};
  if (lstat(data_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data-dir: ", data_dir, " is not a directory"));
  }
  if ((st.st_mode & 0077) != 0) {
    storage::LogWarning(absl::StrFormat(
        "--data-dir %s is open to other users (mode %04o); the demo files are public anyway, "
        "but a directory of its own with mode 0700 is what the server creates",
        data_dir, st.st_mode & 07777));
  }
  return absl::OkStatus();
}

// The demo image is usable only as what the server made: a regular file (not a symlink, not a
// device) of the demo size.
bool IsDemoImage(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         static_cast<uint64_t>(st.st_size) == kDeviceBytes;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

absl::Status AddDemoData(const std::string& data_dir, storage::Catalog& catalog) {
  namespace fs = std::filesystem;
  if (absl::Status s = MakePrivateDirectory(data_dir); !s.ok()) return s;
  const std::string device = fs::absolute(fs::path(data_dir) / "demo-device.img").string();
  const std::string manifest = (fs::path(data_dir) / "demo.manifest").string();
  if (!IsDemoImage(device)) {
    storage::LogInfo(absl::StrCat("creating the demo device under ", data_dir));
    if (absl::Status s = WriteDevice(device); !s.ok()) return s;
  }
  auto opened = storage::Device::Open("demo", device);
  if (!opened.ok()) return opened.status();
  // An existing manifest is trusted only if it is exactly the demo layout on this image: one
  // that names another device (a real disk, another user's file) is replaced, never served.
  const std::string expected = ManifestText(device, (*opened)->logical_block_size());
  if (ReadWholeFile(manifest) != expected) {
    if (fs::exists(manifest)) {
      storage::LogWarning(absl::StrCat(manifest,
                                       " is not the demo layout on the demo image beside it: "
                                       "writing the demo manifest over it"));
    }
    const std::string temporary = manifest + ".tmp";
    std::ofstream(temporary) << expected;
    std::error_code error;
    fs::rename(temporary, manifest, error);  // the manifest appears only once it is whole
    if (error) return storage::PosixError(error, absl::StrCat("cannot write ", manifest));
  }
  return storage::LoadManifest(manifest, catalog);
}

}  // namespace blockread::server
