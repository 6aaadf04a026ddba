// The catalog: the devices the server owns and the extent maps of the files it serves.
#ifndef BLOCKREAD_STORAGE_CATALOG_H_
#define BLOCKREAD_STORAGE_CATALOG_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/device.h"
#include "storage/extent_map.h"
#include "storage/fiemap.h"

namespace blockread::storage {

// A file's map as of one Resolve(). Holding it keeps the map alive even if the file is re-imported
// meanwhile. For static sources (whole device, manifest) it carries no reference count, so
// copying it costs no atomic operation.
using FileMapRef = std::shared_ptr<const FileMap>;

// A client-supplied name as it may be echoed back in a message: at most kMaxEchoedNameBytes of
// it, then how long it was, so a huge name does not come back whole.
inline constexpr size_t kMaxEchoedNameBytes = 256;
std::string EchoedName(absl::string_view name);

// NOT_FOUND for a name the catalog does not serve (or, said the same way so as not to confirm
// that it exists, one the caller may not see).
absl::Status UnknownFileError(absl::string_view name);

// Threading: the catalog is built by one thread (the Add*/Import* calls), then served from any
// number of threads (the const accessors and Resolve()). Devices and the set of file names never
// change after setup; only the maps of imported files are replaced, under a per-file lock, when
// their source file changes.
class Catalog {
 public:
  Catalog() = default;
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  // ---- Setup (one thread, before the first Resolve) ----

  // Takes ownership of an open device. Fails on a duplicate device name.
  absl::StatusOr<DeviceId> AddDevice(std::unique_ptr<Device> device);

  // Adds a file whose extents never change (whole device, manifest). Fails on a duplicate name.
  absl::Status AddStaticFile(FileMap map);

  // Opens the block device or regular file at `path` and serves it whole as file `name`.
  absl::Status AddWholeDevice(std::string name, std::string path);

  // Imports the file at `path` (on a mounted filesystem) as file `name`: through FIEMAP, with its
  // filesystem's disk opened as a device (once per disk), or, where FIEMAP offsets cannot be
  // trusted, through the file itself; the route and its reason are logged. The file is opened,
  // now and at every re-import, beneath its directory without following symlinks
  // (storage/open_beneath.h).
  absl::Status ImportFile(std::string name, std::string path);

  // Imports `path`: a regular file is served as its base name; a directory's regular files
  // (recursively, symlinks not followed) as their path relative to it, opened beneath it. Returns
  // how many files were added; fails if none.
  absl::StatusOr<size_t> ImportTree(const std::string& path);

  // ---- Serving (any thread) ----

  size_t device_count() const { return devices_.size(); }
  const Device& device(DeviceId id) const { return *devices_[id]; }
  std::optional<DeviceId> FindDevice(absl::string_view name) const;

  // The current map of file `name`. For an imported file this first checks (one stat of its
  // path) that the file is unchanged since import; if it changed it is re-imported, and if that
  // is impossible (removed, replaced under the file route, moved to another disk) the error says
  // so. NOT_FOUND for unknown names. Never returns a stale map.
  absl::StatusOr<FileMapRef> Resolve(absl::string_view name);

  // All file names, sorted.
  std::vector<std::string> FileNames() const;
  size_t file_count() const { return files_.size(); }

 private:
  struct FileEntry {
    // Static files: set once, never changes, read without the lock.
    FileMapRef static_map;
    // Imported files: where the file is, beneath its served root.
    BeneathPath source;
    // std::shared_mutex, not absl::Mutex: Debian's Abseil is not built for ThreadSanitizer, which
    // then cannot see absl::Mutex synchronize; pthread-based locks it does see.
    std::shared_mutex mu;
    FileMapRef imported_map ABSL_GUARDED_BY(mu);
    FileIdentity identity ABSL_GUARDED_BY(mu);
  };

  // Maps `path` and builds its map, opening its disk (or the file itself) as a device if this is
  // setup (`may_add_devices`); on re-import the device must be the one already used.
  absl::StatusOr<FileMap> BuildImportedMap(const std::string& name, const BeneathPath& source,
                                           bool may_add_devices, FileIdentity* identity);
  absl::Status ImportBeneath(std::string name, BeneathPath source);
  absl::StatusOr<FileMapRef> Reimport(absl::string_view name, FileEntry& entry,
                                      const FileIdentity& current);
  absl::Status AddEntry(std::string name, std::unique_ptr<FileEntry> entry);
  // A re-import error as Resolve's callers (clients) may see it: same code, details logged.
  static absl::Status InClientTerms(absl::string_view name, const absl::Status& status);

  std::vector<std::unique_ptr<Device>> devices_;
  absl::flat_hash_map<std::string, std::unique_ptr<FileEntry>> files_;
  // Devices opened for file-route imports, by the (st_dev, st_ino) of the file they hold open:
  // a descriptor is only ever used for the inode it was opened on.
  absl::flat_hash_map<std::pair<dev_t, ino_t>, DeviceId> file_route_devices_;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_CATALOG_H_
