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

// One per served name, a million of them for a million names: kept small (about 100 bytes, and
// the name's own heap bytes past 15), the open file's state only a few fields.
struct Catalog::FileEntry {
  // The served name: for a tree's file also its path relative to the tree's root. The name table
  // and the path index view it: it changes only while the entry is in neither.
  std::string name;
  // What the name serves: the read path loads it with acquire; only the watcher stores it.
  // &Catalog::cold_version_ while the file is not open.
  std::atomic<const FileVersion*> current{nullptr};
  std::unique_ptr<const FileVersion> owned;  // replaced under versions_mu_; null while cold
  // Imported files only; the watcher's (guarded by watch_mu_). A tree's file is at (tree->root,
  // name); a file served on its own at *own_source.
  Tree* tree = nullptr;
  std::unique_ptr<const BeneathPath> own_source;
  // DeclareVersion()'s (shared: catalog.declared_versions_), or null.
  const std::string* declared_version = nullptr;
  // While open: the slot of the open-file cache that holds its file (Catalog::OpenFile, with the
  // descriptor and the lease); -1 while cold. Written under watch_mu_ and lease_mu_.
  int32_t slot = -1;
  // Whether a name table holds this entry, or did until reads of that table finished: publishing
  // a new version waits for reads of the old one only then.
  bool reachable = false;
  bool present = false;  // the name named a regular file when last looked at (watcher's)
  // Set by reads that find it (relaxed, only when clear): read since the cache's CLOCK hand last
  // passed it, so it is not the one closed to make room.
  mutable std::atomic<bool> referenced{false};
  // A read found it cold and queued it for opening; cleared once the watcher has looked at it.
  mutable std::atomic<bool> open_requested{false};

  bool cold() const { return slot < 0; }
  BeneathPath source() const {
    return tree != nullptr ? BeneathPath{tree->root, name} : *own_source;
  }
  std::string display() const {
    return tree != nullptr ? tree->DisplayOf(name) : own_source->display();
  }
};

// A slot of the open-file cache: a file-route device reserved at setup, whose descriptor is
// re-pointed (dup3) at the file it holds (/dev/null while free), and that file's lease. The lease
// is taken on the descriptor, and holding it keeps the file's blocks from going to another file
// while reads may still use them. Slots are bounded by the cache's cap, names are not: what only
// an open file needs lives here, not in each FileEntry.
struct Catalog::OpenFile {
  DeviceId device = kNoDevice;  // set when the slot is made
  int fd = -1;                  // the device's descriptor
  // The entry whose file it holds; null while free. Written under watch_mu_ and lease_mu_.
  FileEntry* holder = nullptr;
  InodeKey inode{};  // the held file's (the watcher's)
  // Written under lease_mu_ (by the watcher, and by a break on the lease thread).
  std::atomic<bool> leased{false};
  uint32_t lease_breaks = 0;  // breaks so far (PublishUnlessBroken); under lease_mu_
  // The epoch domain of the last raw map published for the held file (0: none): a break waits
  // for its reads. Under lease_mu_.
  uint8_t raw_domain = 0;
};

// Points `fd` at /dev/null (dup3), keeping its number: a file route's device that serves nothing.
void PointAtNothing(int fd);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_CATALOG_INTERNAL_H_
