// The catalog: the devices the server owns and the extent maps of the files it serves, kept
// current by a watcher thread so that reads never see stale bytes and pay nothing for it.
#ifndef BLOCKREAD_STORAGE_CATALOG_H_
#define BLOCKREAD_STORAGE_CATALOG_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/device.h"
#include "storage/device_identity.h"
#include "storage/extent_map.h"
#include "storage/fiemap.h"
#include "storage/read_epochs.h"

namespace blockread::storage {

// How many files created in served trees after startup can be served at once, unless the server
// is told otherwise (--max-new-files).
inline constexpr size_t kDefaultNewFileSlots = 2048;

// A file's map as of one Resolve(): an owning reference, valid however long it is kept.
using FileMapRef = std::shared_ptr<const FileMap>;

// A client-supplied name as it may be echoed back in a message: at most kMaxEchoedNameBytes of
// it, then how long it was, so a huge name does not come back whole.
inline constexpr size_t kMaxEchoedNameBytes = 256;
std::string EchoedName(absl::string_view name);

// NOT_FOUND for a name the catalog does not serve (or, said the same way so as not to confirm
// that it exists, one the caller may not see).
absl::Status UnknownFileError(absl::string_view name);

// The signal the kernel sends the catalog's watcher thread when a lease of a served file is
// broken (F_SETSIG). Directed at that thread only (F_SETOWN_EX), which blocks it and reads it
// from a signalfd: other threads never see it.
int LeaseBreakSignal();
// Blocks the lease-break signal and SIGIO in the calling thread and the threads it starts later.
// Taking a lease briefly makes the whole process the signal's target, and an unblocked thread
// would die of it (their default action): call this in main() before any thread starts. The
// first import also calls it on its own thread.
void BlockLeaseSignals();

// What a served file is now: its map, or why it cannot be read. Immutable once published.
struct FileVersion {
  FileMapRef map;            // null when the file cannot be served now
  absl::Status unavailable;  // why not, in the client's terms (when map is null)
  std::string route_note;    // why it is read through the file itself, empty otherwise
};

// How the served files are held, for stats: imported files leased (read from the raw device)
// and those read through the file itself (no lease: being written, refused, or a filesystem whose
// offsets cannot be trusted).
struct RouteCounts {
  uint64_t leased = 0;
  uint64_t file_route = 0;
  uint64_t unavailable = 0;
};

// Threading: the catalog is built by one thread (the Add*/Import* calls), then served from any
// number of threads. Devices never change after setup (a served tree reserves, at setup, device
// slots for the files created in it later). What a name serves (its FileVersion), and which
// names a served tree holds, are changed only by the catalog's watcher thread, which the first
// import starts:
//  - Every FIEMAP-imported file is held open (O_RDONLY | O_DIRECT, opened beneath its served
//    root, no symlink followed, never blocking) with a read lease on it. Before any open of the
//    file for writing or truncate returns, the kernel signals the watcher, which publishes a
//    version read through the file itself (O_DIRECT: the kernel writes dirty pages back first,
//    so it is exact), waits until raw-device reads of the old version have finished
//    (ReadEpochs), and only then releases the lease. After the writer closes it (inotify
//    IN_CLOSE_WRITE, or a retry every second), it takes the lease again first and re-maps the
//    file under it (FIEMAP_FLAG_SYNC).
//  - inotify on the served directories keeps names current: a name renamed over or removed is
//    re-opened; a new regular file is leased and mapped, anything else (a symlink, a FIFO, a
//    directory) is refused. The old inode stays open until reads of it have finished, so its
//    blocks are no other file's meanwhile.
//  - A served tree is live: every directory in it is watched, files created, moved in or
//    renamed into it are served once no writer holds them open, and names removed or moved out
//    answer NOT_FOUND. A directory created, moved, or renamed over (at any depth) makes the
//    watcher walk the tree again and re-open every served name of it by its path, so a moved
//    grandparent or a swapped directory never leaves old bytes under the old name. The names are
//    changed (the name table replaced whole) only once the new files are open; re-mapping a
//    replaced or new file (which writes it back) comes after, so workers waiting for name changes
//    (storage/name_sync.h) never wait for a writeback.
//  - A file that cannot get a lease (open for writing elsewhere, a filesystem that refuses
//    leases, no CAP_LEASE) is read through the file itself; the log, RouteNote() and
//    route_counts() say so.
class Catalog {
 public:
  Catalog();
  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  // ---- Setup (one thread, before the first read) ----

  // Takes ownership of an open device. Fails on a duplicate device name.
  absl::StatusOr<DeviceId> AddDevice(std::unique_ptr<Device> device);

  // Adds a file whose extents never change (whole device, manifest). Fails on a duplicate name.
  absl::Status AddStaticFile(FileMap map);

  // Opens the block device or regular file at `path` and serves it whole as file `name`.
  absl::Status AddWholeDevice(std::string name, std::string path);

  // Imports the file at `path` (on a mounted filesystem) as file `name`: leased and mapped
  // through FIEMAP, with its filesystem's disk opened as a device (once per disk), or, where that
  // cannot be exact, through the file itself; the route and its reason are logged.
  absl::Status ImportFile(std::string name, std::string path);

  // Declares the content version of served file `name` (reported to clients, who use files of
  // one name on several servers as replicas only when sizes and versions agree). NOT_FOUND when
  // no file is named `name`; `name` "*" gives every file without a version this one.
  absl::Status DeclareVersion(absl::string_view name, std::string version);

  // Imports `path`: a regular file is served as its base name; a directory's regular files
  // (recursively, symlinks not followed) as their path relative to it, opened beneath it, and
  // kept live from then on (see above). Returns how many files were added (an empty directory is
  // served, with nothing in it yet). The first directory reserves new_file_slots() device slots,
  // shared by every served tree, for the files created after startup.
  absl::StatusOr<size_t> ImportTree(const std::string& path);
  // How many files created in served trees after startup can be served at once (each slot holds
  // one descriptor from startup on). Set before the first ImportTree() of a directory.
  void set_new_file_slots(size_t slots) { new_file_slots_ = slots; }
  size_t new_file_slots() const { return new_file_slots_; }

  // ---- Serving (any thread) ----

  size_t device_count() const { return devices_.size(); }
  const Device& device(DeviceId id) const { return *devices_[id]; }
  std::optional<DeviceId> FindDevice(absl::string_view name) const;

  // The read path's lookup: no syscall, no lock, one acquire load. The map stays valid until the
  // caller's ReadEpochs::Reader exits, so call it only between Enter() and Exit() of a reader
  // from epochs(). Null with *unavailable set when the name is unknown or cannot be served now.
  const FileMap* LookupForRead(absl::string_view name, absl::Status* unavailable) const;
  ReadEpochs& epochs() { return epochs_; }

  // The current map of `name`, kept alive by the returned reference (for StatFile, tools and
  // tests; takes a lock). NOT_FOUND for unknown or removed names.
  absl::StatusOr<FileMapRef> Resolve(absl::string_view name) const;
  // The version DeclareVersion() gave `name`; empty if none (or unknown).
  std::string DeclaredVersion(absl::string_view name) const;
  // Why `name` is read through the file itself now; empty if it is not (or is unknown).
  std::string RouteNote(absl::string_view name) const;
  RouteCounts route_counts() const;

  // Returns once the watcher has handled every change made to served files before the call (an
  // inotify event or lease break already queued). For tests and tools; never on a worker.
  void WaitUntilCurrent();

  // Runs `task` on the watcher thread (named "blockread-watch") and returns once it has run;
  // false, with `task` not run, when there is no watcher (no imported file). For state only that
  // thread can set on itself, such as its capabilities when the server drops privileges.
  bool RunOnWatcherThread(const std::function<void()>& task);

  // Name changes, for the read path (storage/name_sync.h). inotify queues a rename's or unlink's
  // event inside the syscall, but the watcher applies it later: a read that starts after
  // rename() returned must not resolve the name before then.
  //
  // A descriptor that polls readable (POLLIN) while a name event in a served directory (create,
  // remove, rename; not writes) waits for the watcher; -1 when no imported file is watched.
  // Poll it; never read it.
  int NameEventsFd() const;
  // Asks the watcher to handle every change queued before the call, without waiting; returns the
  // ticket HasCaughtUp() takes. Wakes the watcher (one eventfd write). Any thread.
  uint64_t RequestCatchUp();
  // Whether the watcher has handled the changes of `ticket`: one acquire load. Any thread.
  bool HasCaughtUp(uint64_t ticket) const;
  // Whether the watcher may be between reading name events from NameEventsFd() and applying
  // them (the descriptor no longer polls readable, yet the names are not current): one acquire
  // load. Any thread.
  bool ApplyingNameEvents() const {
    return (name_events_seq_.load(std::memory_order_acquire) & 1) != 0;
  }

  // ---- Devices that go away and come back ----
  // Checks every device opened by its path (whole devices, manifest devices; not files read
  // through themselves). A device whose path is gone goes down: reads of its files answer
  // UNAVAILABLE. A device whose path is there again, or names another device now, is reopened
  // (the configured path, so a /dev/disk/by-id symlink finds the disk under its new node) when
  // its size and block size are unchanged and, for a block device, it is the same disk
  // (storage/device_identity.h; another disk stays down, and the log says which identity it
  // has), and its descriptor re-pointed at the new open file
  // (dup3: the DeviceId and the descriptor number stay); workers re-register it on their next
  // read (DeviceEvents). Logs each change. One thread at a time (the server's device monitor).
  void CheckDevices();
  // Whether device `id` is up. Any thread.
  bool device_up(DeviceId id) const {
    return device_states_[id]->up.load(std::memory_order_acquire);
  }
  // Counts device changes (down, reopened): a worker that has seen a different value looks at
  // device_up() and device_reopened_at() again. One relaxed load; any thread.
  uint64_t device_events() const { return device_events_.load(std::memory_order_acquire); }
  // The device_events() value at which `id` was last reopened (0: never).
  uint64_t device_reopened_at(DeviceId id) const {
    return device_states_[id]->reopened_at.load(std::memory_order_acquire);
  }

  // All file names served now, sorted.
  std::vector<std::string> FileNames() const;
  // Grows each time names are added to or removed from the served set (after the new set is
  // published); starts at the wall clock's nanoseconds, so a restarted server's is larger.
  uint64_t names_generation() const { return names_generation_.load(std::memory_order_acquire); }
  size_t file_count() const;

 private:
  struct FileEntry;
  struct Tree;
  class Watcher;
  // The served names. The read path finds a name in the table names_ points at (inside its
  // reader's epoch); the watcher replaces the table whole when names come or go and frees the
  // old one once no read can be using it.
  using NameTable = absl::flat_hash_map<std::string, FileEntry*>;

  absl::Status AddEntry(std::unique_ptr<FileEntry> entry);
  absl::Status ImportBeneath(std::string name, BeneathPath source, Tree* tree);
  // The disk device holding `mapped`'s extents, opened now if this is setup.
  absl::StatusOr<DeviceId> DiskFor(const FiemapResult& mapped, bool may_add_devices);
  // Publishes `version` as what `entry` serves; once reads that may use the old one have
  // finished, returns (the old version is freed then). No wait for an entry no name reaches.
  void Publish(FileEntry& entry, std::unique_ptr<const FileVersion> version);
  // Builds what `entry` should serve now from its open inode: the raw-device map if it is leased
  // and FIEMAP can map it, else the file route with `why`.
  std::unique_ptr<const FileVersion> VersionOf(FileEntry& entry, const std::string& why,
                                               bool may_add_devices);
  // The entry serving `name` now, or null (takes versions_mu_).
  FileEntry* Find(absl::string_view name) const;

  // Watcher thread (catalog_watcher.cc, catalog_tree.cc). All REQUIRE watch_mu_.
  absl::Status StartWatcher();
  void TakeLease(FileEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  void OnLeaseBreak(FileEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Re-opens `entry`'s name. When it names another file now, that file is served through itself
  // at once and `entry` is added to `to_lease` (leased and mapped once names are current); when it
  // names nothing, the name answers NOT_FOUND, and a tree's entry is added to `gone`.
  void Rebind(FileEntry& entry, std::vector<FileEntry*>& to_lease, std::vector<FileEntry*>& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Every served name re-opened, every tree walked again.
  void Rescan(std::vector<FileEntry*>& to_lease, std::vector<FileEntry*>& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  void RetryLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Starts watching `entry`'s inode: lease signal aimed at the watcher thread, its directory
  // watched.
  absl::Status Watch(FileEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Watches `directory` (a display path) in both inotify instances.
  absl::Status WatchDirectory(const std::string& directory)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // F_SETSIG and F_SETOWN_EX: lease breaks of `fd` signal the watcher thread alone.
  void AimSignalsAtWatcher(int fd);

  // Served trees (catalog_tree.cc).
  // Watches every directory of `tree` and returns its regular files (relative paths, sorted).
  absl::StatusOr<std::vector<std::string>> WalkTree(Tree& tree)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // The tree whose root holds display path `path`, and the path relative to it; null if none.
  Tree* TreeOf(absl::string_view path, std::string* relative)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Serves `relative` of `tree` if it is a regular file no writer holds open and no name serves
  // yet (else remembers it until its writer closes it). Adds the entry to `added` (served through
  // the file until names are current, then leased: `to_lease`).
  void AddNewFile(Tree& tree, const std::string& relative, std::vector<FileEntry*>& added,
                  std::vector<FileEntry*>& to_lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Walks every tree again, adding the files not served yet.
  void SyncTrees(std::vector<FileEntry*>& added, std::vector<FileEntry*>& to_lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Publishes a name table with `added` and without `gone`; once no read can use the old one,
  // `gone`'s slots are free for new files.
  void ChangeNames(const std::vector<FileEntry*>& added, const std::vector<FileEntry*>& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  void ReserveNewFileSlots(uint32_t block_size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);

  std::vector<std::unique_ptr<Device>> devices_;
  // Per device: up or down, and what its path named when it was (re)opened (CheckDevices).
  struct DeviceState {
    std::atomic<bool> up{true};
    std::atomic<uint64_t> reopened_at{0};
    dev_t opened_dev = 0;  // st_dev and st_ino (files), st_rdev (block devices) of the open file
    ino_t opened_ino = 0;
    dev_t opened_rdev = 0;
    // Which disk a block device was when it was first opened: one that comes back as another
    // disk is not served (storage/device_identity.h). Empty: none could be had.
    DeviceIdentity identity;
    std::string down_reason;  // why it is down, as last logged
  };
  std::vector<std::unique_ptr<DeviceState>> device_states_;
  std::atomic<uint64_t> device_events_{0};
  // Every entry ever made (served, removed, or a vacant slot); freed with the catalog only, so a
  // pointer to one is always valid.
  std::vector<std::unique_ptr<FileEntry>> entries_;
  std::atomic<const NameTable*> names_{nullptr};
  std::atomic<uint64_t> names_generation_;
  ReadEpochs epochs_;
  // Guards publishing versions and name tables against Resolve()'s and the listings' reads.
  mutable std::mutex versions_mu_;
  std::unique_ptr<NameTable> owned_names_ ABSL_GUARDED_BY(versions_mu_);
  // Guards the watcher's state (the entries' inode fields, the tables below) against setup.
  std::mutex watch_mu_;
  absl::flat_hash_map<int, FileEntry*> by_lease_fd_ ABSL_GUARDED_BY(watch_mu_);
  absl::flat_hash_map<std::string, FileEntry*> by_display_path_ ABSL_GUARDED_BY(watch_mu_);
  // The served directories, by watch descriptor, in each inotify instance.
  absl::flat_hash_map<int, std::string> name_watches_ ABSL_GUARDED_BY(watch_mu_);
  absl::flat_hash_map<int, std::string> content_watches_ ABSL_GUARDED_BY(watch_mu_);
  std::vector<std::unique_ptr<Tree>> trees_ ABSL_GUARDED_BY(watch_mu_);
  // Slots for files created after startup, not serving any now.
  std::vector<FileEntry*> vacant_ ABSL_GUARDED_BY(watch_mu_);
  // New files a writer still held open: display path -> their tree and relative path.
  absl::flat_hash_map<std::string, std::pair<Tree*, std::string>> pending_
      ABSL_GUARDED_BY(watch_mu_);
  bool told_slots_full_ ABSL_GUARDED_BY(watch_mu_) = false;
  size_t new_file_slots_ = kDefaultNewFileSlots;
  std::string default_version_;  // DeclareVersion("*"), for files created later too
  std::unique_ptr<Watcher> watcher_;
  // Odd while the watcher reads and applies inotify events (see ApplyingNameEvents()).
  std::atomic<uint64_t> name_events_seq_{0};
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_CATALOG_H_
