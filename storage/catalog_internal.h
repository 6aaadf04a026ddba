// What the catalog's source files (catalog.cc, catalog_watcher.cc, catalog_tree.cc,
// catalog_devices.cc) share and nothing else includes: the entries behind the served names.
#ifndef BLOCKREAD_STORAGE_CATALOG_INTERNAL_H_
#define BLOCKREAD_STORAGE_CATALOG_INTERNAL_H_

#include <sys/inotify.h>
#include <sys/stat.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "storage/catalog.h"
#include "storage/open_beneath.h"

namespace blockread::storage {

using InodeKey = std::pair<dev_t, ino_t>;
inline InodeKey InodeOf(const struct stat& st) { return {st.st_dev, st.st_ino}; }

// The route note of a file whose fresh FIEMAP map did not read back its bytes (VersionOf); its
// lease is retried in a second.
inline constexpr char kMapNotYetValid[] = "the filesystem's extent map does not hold its bytes yet";

// Two inotify instances watch each served directory. Name events have one of their own, because
// every worker polls it before resolving names (see NameEventsFd()): writes to files (IN_MODIFY on
// each write()) must not make the workers wait for the watcher. Symlinks are never followed.
inline constexpr uint32_t kNameEvents = IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM;
inline constexpr uint32_t kContentEvents = IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB;
inline constexpr uint32_t kNameWatch =
    kNameEvents | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW;
inline constexpr uint32_t kContentWatch = kContentEvents | IN_ONLYDIR | IN_DONT_FOLLOW;

// A directory served live (ImportTree): its files' names are their paths relative to it.
struct Catalog::Tree {
  std::shared_ptr<RootDirectory> root;
  // root->path() + "/" + relative: the display path of a file or directory in it.
  std::string DisplayOf(absl::string_view relative) const {
    return relative.empty() ? root->path() : absl::StrCat(root->path(), "/", relative);
  }
};

struct Catalog::FileEntry {
  std::string name;              // the watcher's (set when a slot takes a new file)
  std::string declared_version;  // set during setup, or when a slot takes a new file
  // What the name serves: the read path loads it with acquire; only Publish() stores it.
  std::atomic<const FileVersion*> current{nullptr};
  std::unique_ptr<const FileVersion> owned;  // replaced under versions_mu_
  // Whether a name table holds this entry, or did until reads of that table finished: publishing
  // a new version waits for reads of the old one only then.
  bool reachable = false;

  // Imported files only; the watcher's (guarded by watch_mu_).
  BeneathPath source;
  Tree* tree = nullptr;  // the served tree it belongs to; null for a file served on its own
  // The file's own device (file route), opened at import. Its descriptor is the file the name
  // serves: the lease is taken on it, and holding it keeps the file's blocks from going to
  // another file while reads may still use them. When the name is replaced the descriptor is
  // re-pointed (dup3) at the new file, so the device stays valid in every engine.
  DeviceId file_device = kNoDevice;
  int inode_fd = -1;     // that device's descriptor
  bool present = false;  // the name names a regular file (else inode_fd holds /dev/null)
  InodeKey inode{};
  bool leased = false;
  // A lease was refused because of a writer, or broken by one: try again when it closes.
  bool retry_lease = false;
};

// Points `fd` at /dev/null (dup3), keeping its number: a file route's device that serves nothing.
void PointAtNothing(int fd);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_CATALOG_INTERNAL_H_
