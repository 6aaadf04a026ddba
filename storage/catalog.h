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
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage/device.h"
#include "storage/device_identity.h"
#include "storage/extent_map.h"
#include "storage/fiemap.h"
#include "storage/lease_signals.h"
#include "storage/name_table.h"
#include "storage/read_epochs.h"

namespace blockread::storage {

// How many served files may be open at once (each holds one descriptor, and a read lease while it
// is read from the raw device), unless the server is told otherwise (--max-open-files). Names are
// not bounded by it: a file past the cap is opened on its first read, and the least recently read
// open file is closed to make room.
inline constexpr size_t kDefaultMaxOpenFiles = 16384;
// Descriptors the server keeps for everything but open served files (devices, connections,
// inotify, gRPC's own): the cap stays this far below RLIMIT_NOFILE.
inline constexpr size_t kReservedDescriptors = 512;
// Open-file slots beyond the names served at setup, for files created later (past it, files are
// still served, closing the least recently read).
inline constexpr size_t kOpenSlotHeadroom = 1024;

// A file's map as of one Resolve(): an owning reference, valid however long it is kept.
using FileMapRef = std::shared_ptr<const FileMap>;

// A client-supplied name as it may be echoed back in a message: at most kMaxEchoedNameBytes of
// it, then how long it was, so a huge name does not come back whole.
inline constexpr size_t kMaxEchoedNameBytes = 256;
std::string EchoedName(absl::string_view name);

// NOT_FOUND for a name the catalog does not serve (or, said the same way so as not to confirm
// that it exists, one the caller may not see).
absl::Status UnknownFileError(absl::string_view name);

// Whether pending name events concern a name: kUnknown until the watcher has read them.
enum class NameChange : uint8_t { kNo, kUnknown, kYes };

// What a served file is now: its map, or why it cannot be read. Immutable once published.
struct FileVersion {
  FileMapRef map;            // null when the file cannot be served now
  absl::Status unavailable;  // why not, in the client's terms (when map is null)
  std::string route_note;    // why it is read through the file itself, empty otherwise
  // A raw-device map a lease break can take away: its reads enter this epoch domain (its disk's)
  // and check that the name still serves this version (Catalog::StillServes). 0 for maps no
  // break changes.
  uint8_t epoch_domain = 0;
  // What the name it was made for serves now (its entry's current version).
  const std::atomic<const FileVersion*>* served_now = nullptr;
};

// How the served files are held, for stats: imported files leased (read from the raw device)
// and those read through the file itself (no lease: being written, refused, or a filesystem whose
// offsets cannot be trusted).
struct RouteCounts {
  uint64_t leased = 0;
  uint64_t file_route = 0;
  uint64_t unavailable = 0;
  uint64_t not_open = 0;  // names whose file is not open now (opened on their first read)
  // The open-file cache: its slots (the cap on descriptors of served files), how many files were
  // opened for reads, and how many were closed to make room.
  uint64_t open_slots = 0;
  uint64_t opens = 0;
  uint64_t evictions = 0;
};

// Threading: the catalog is built by one thread (the Add*/Import* calls), then served from any
// number of threads. Devices never change after setup (the first import reserves, at setup, the
// device slots of the open-file cache). What a name serves (its FileVersion), and which names a
// served tree holds, are changed only by the catalog's watcher thread, which the first import
// starts:
//  - Names are unbounded, descriptors are not. Startup walks the served trees and names their
//    files; it opens none. A file is opened (O_RDONLY | O_DIRECT, beneath its served root, no
//    symlink followed, never blocking) into a slot of the open-file cache when a read first asks
//    for it (LookupForRead answers "not open"; the watcher opens it, typically in tens of
//    microseconds), read through itself at once, then leased and mapped. When every slot is
//    taken, the files least recently read are made cold first (catalog_open_files.cc): once no
//    read can use them, their leases are dropped and their descriptors let go. A cold file is
//    never stale: its next read opens what its name names then.
//  - Every open file has a read lease when it can. Before any open of the file for writing or
//    truncate returns, the kernel signals the lease thread (never the watcher, which may be busy
//    writing a file back), which publishes a version read through the file itself (O_DIRECT: the
//    kernel writes dirty pages back first, so it is exact), waits until raw-device reads of the
//    old version's disk have finished (ReadEpochs domains: not the reads of other disks, a
//    stalled one included), and only then releases the lease. After the writer closes it (inotify
//    IN_CLOSE_WRITE, or a retry every second), it takes the lease again first and re-maps the file
//    under it (FIEMAP_FLAG_SYNC).
//  - inotify on the served directories keeps names current: a name renamed over makes its open
//    file cold (the next read opens the new one), a name removed answers NOT_FOUND, and a name
//    that now names a symlink, a FIFO or a directory is refused. The old inode stays open until
//    reads of it have finished, so its blocks are no other file's meanwhile.
//  - A served tree is live: every directory in it is watched, files created, moved in or renamed
//    into it are served once no writer holds them open (seen through the lease, so only where the
//    server may take one), and names removed or moved out answer NOT_FOUND. A directory created,
//    moved, or renamed over (at any depth) makes the watcher walk the tree again and look at every
//    served name of it by its path, so a moved grandparent or a swapped directory never leaves old
//    bytes under the old name.
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
  // served, with nothing in it yet). Walks names only: no file is opened or mapped here.
  absl::StatusOr<size_t> ImportTree(const std::string& path);
  // The most served files open at once (see kDefaultMaxOpenFiles). Set before the first import.
  // Imports reserve slots for the names served plus kOpenSlotHeadroom, at most this many and
  // RLIMIT_NOFILE - kReservedDescriptors; open_file_slots() is the number reserved.
  void set_max_open_files(size_t files) { max_open_files_ = files; }
  size_t open_file_slots() const { return open_slot_count_; }
  // Ends setup: no device is added after this (the open-file cache takes its final size, logged).
  // EngineContext::Create calls it; a server calls it once before its workers start, since
  // engines are made on several threads. Idempotent.
  void SealDevices();

  // ---- Serving (any thread) ----

  size_t device_count() const { return devices_.size(); }
  const Device& device(DeviceId id) const { return *devices_[id]; }
  std::optional<DeviceId> FindDevice(absl::string_view name) const;

  // The read path's lookup: no syscall, no lock, one acquire load. The map stays valid until the
  // caller's ReadEpochs::Reader exits, so call it only between Enter() and Exit() of a reader
  // from epochs(). Null with *unavailable set when the name is unknown or cannot be served now.
  // Null with *unavailable OK when the file is not open (cold): the first such read asks the
  // watcher to open it; wait for a RequestCatchUp() ticket and look it up again.
  // A raw-device map can be taken from the file by a lease break at any moment: a read of a version
  // with an epoch_domain enters that domain and checks StillServes() before any I/O; see
  // storage/read_epochs.h. Returns the version found (its map is not null), or null.
  const FileVersion* LookupForRead(absl::string_view name, absl::Status* unavailable) const;
  static bool StillServes(const FileVersion* version) {
    return version->served_now->load(std::memory_order_acquire) == version;
  }
  ReadEpochs& epochs() { return epochs_; }

  // The current map of `name`, kept alive by the returned reference, opening the file first if it
  // is not open (for tools and tests: it waits for the watcher, so never call it on a thread
  // whose engine has reads in flight). NOT_FOUND for unknown or removed names.
  absl::StatusOr<FileMapRef> Resolve(absl::string_view name);
  // The same without opening it (any thread, workers included): a file that is not open is
  // described by its size now (one stat beneath its root), as a map without extents whose route
  // note says it is opened on its first read.
  absl::StatusOr<FileMapRef> ResolveWithoutOpening(absl::string_view name) const;
  // Asks the watcher to open `name` if it is not open, without waiting (a file someone asks
  // about is likely to be read next). Any thread.
  void Prefetch(absl::string_view name);
  // Resolve(), waiting at most `wait` for the file to be opened and mapped; then as
  // ResolveWithoutOpening(). For diagnostics on a worker (Explain): a worker must not wait long,
  // since the watcher may be waiting for that worker's own reads.
  absl::StatusOr<FileMapRef> ResolveWaitingAtMost(absl::string_view name, absl::Duration wait);
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
  // Whether the files that reads found cold before `ticket` was requested have been opened (or
  // answer why not): one acquire load, sooner than HasCaughtUp(). Any thread.
  bool HasOpened(uint64_t ticket) const;
  // Whether the watcher may be between reading name events from NameEventsFd() and applying
  // them (the descriptor no longer polls readable, yet the names are not current): one acquire
  // load. Any thread.
  bool ApplyingNameEvents() const {
    return (name_events_seq_.load(std::memory_order_acquire) & 1) != 0;
  }
  // Whether the name events of the watcher's turn for `ticket` (RequestCatchUp) are applied:
  // sooner than HasCaughtUp(), which also waits for the turn's opens, leases and maps. Any thread.
  bool HasAppliedNames(uint64_t ticket) const;
  // Whether a read of `name` must wait for the name events being applied. `turn` != 0: the
  // events read by the watcher's turn for that ticket or a later one (kUnknown until that turn
  // has read them); 0: those of the batch being applied now (kUnknown while its names are not
  // published). kNo when they concern neither `name` nor a directory above it. Takes a lock:
  // only while name events are pending. Any thread.
  NameChange NameMayBeChanging(absl::string_view name, uint64_t turn) const;

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
  struct OpenFile;
  struct Tree;
  class Watcher;

  // Names `entry` (setup only: the table is changed in place).
  absl::Status AddEntry(FileEntry& entry);
  // Opens (once) the disk holding filesystem `filesystem`, so that its files' extents can be read
  // from it; nothing when it has none (btrfs, tmpfs) or cannot be opened (said in the log).
  void AddDiskOf(dev_t filesystem) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  absl::Status ImportBeneath(std::string name, BeneathPath source, Tree* tree);
  // The device holding `mapped`'s extents (opened at setup: AddDiskOf).
  absl::StatusOr<DeviceId> DiskFor(const FiemapResult& mapped);
  // Publishes `version` as what `entry` serves; once reads that may use the old one have
  // finished, returns (the old version is freed then). No wait for an entry no name reaches.
  void Publish(FileEntry& entry, std::unique_ptr<const FileVersion> version);
  // Builds what `entry` should serve now from its open inode: the raw-device map if `leased` and
  // FIEMAP can map it, else the file route with `why`.
  std::unique_ptr<const FileVersion> VersionOf(FileEntry& entry, const std::string& why,
                                               bool leased);
  // The file route of open file `name` held by slot device `device`: reads go through its
  // descriptor. No syscall.
  std::unique_ptr<const FileVersion> FileRouteVersion(absl::string_view name, DeviceId device,
                                                      std::string why) const;
  // The slot holding open `entry`'s file (the watcher's; REQUIRES !entry.cold()).
  OpenFile& Open(const FileEntry& entry) const;
  // The entry serving `name` now, or null (takes versions_mu_).
  FileEntry* Find(absl::string_view name) const;

  // Watcher thread (catalog_watcher.cc, catalog_tree.cc). All REQUIRE watch_mu_.
  absl::Status StartWatcher();
  // Takes `entry`'s lease if it has none, then maps it under the lease and publishes the map (a
  // writeback; the file route if the lease or the map cannot be had). A break meanwhile wins.
  void TakeLease(FileEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Publishes `version` unless `entry`'s lease was broken since its count was `breaks` (then
  // false: the break published the file route, and `version` may be a map the writer changes).
  bool PublishUnlessBroken(FileEntry& entry, std::unique_ptr<const FileVersion> version,
                           uint64_t breaks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Releases `entry`'s lease if it holds one.
  void DropLease(FileEntry& entry);
  // The versions lease breaks replaced, freed once no read can use them, and their files' leases
  // queued to be taken again (RetryLeases).
  void TakeBrokenLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Lease breaks (catalog_lease_breaks.cc), on the lease signal thread: `fds`' files (or, with
  // `check_all`, every file whose lease is gone) switched to the file route, raw reads of their
  // disks' domains waited for, their leases released. Takes lease_mu_, never watch_mu_.
  absl::Status StartLeaseBreaker();
  void BreakLeases(const absl::flat_hash_set<int>& fds, bool check_all);
  // Looks at what `entry`'s name names now (a stat beneath its root; nothing is opened for
  // reading). Another file than the open one: `entry` is added to `to_close` (made cold: the next
  // read opens what the name names then). Nothing, in a served tree: added to `gone`. Something
  // that is not a regular file, or nothing for a file served on its own: its reads answer why.
  void Rebind(FileEntry& entry, std::vector<FileEntry*>& to_close, std::vector<FileEntry*>& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Every served name looked at again (Rebind), every tree walked again.
  void Rescan(std::vector<FileEntry*>& to_close, std::vector<FileEntry*>& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Leases refused or broken by a writer taken again, new files whose writer held them open
  // looked at again, and directories no watch could be had for tried again. The watcher runs it at
  // least once a second while there are any.
  void RetryLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  bool HasRetries() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) {
    return !retry_leases_.empty() || !pending_.empty() || !unwatched_.empty();
  }
  // The served entry at display path `display`, or null.
  FileEntry* ServedAt(absl::string_view display) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Indexes `entry` by its path (its source must not change until UnindexPath), or forgets it.
  void IndexPath(FileEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  void UnindexPath(FileEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // The served entries at or below display path `directory`.
  std::vector<FileEntry*> ServedBelow(const std::string& directory)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Watches `directory` (a display path) in both inotify instances.
  absl::Status WatchDirectory(const std::string& directory)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);

  // Served trees (catalog_tree.cc).
  // Watches every directory of `tree` below `relative` (the root: empty) and returns its regular
  // files (relative paths, sorted).
  absl::StatusOr<std::vector<std::string>> WalkTree(Tree& tree, const std::string& relative = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // A directory at display path `directory` was created, moved in or out, or removed: the served
  // names below it looked at again (Rebind), and its files named if it is in a tree now.
  void ChangeDirectory(const std::string& directory, std::vector<FileEntry*>& to_close,
                       std::vector<FileEntry*>& gone, std::vector<FileEntry*>& added)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Removes the watches at or below `directories` that no walk since the last call refreshed:
  // directories moved out of the trees or removed.
  void DropStaleWatches(const std::vector<std::string>& directories)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // The tree whose root holds display path `path`, and the path relative to it; null if none.
  Tree* TreeOf(absl::string_view path, std::string* relative)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Names `relative` of `tree` (cold: opened on its first read) if it is a regular file no writer
  // holds open (else remembers it until its writer closes it) and no name serves yet. Adds the
  // new entry to `added`.
  // `just_closed`: its writer closed it a moment ago (IN_CLOSE_WRITE).
  void AddNewFile(Tree& tree, const std::string& relative, std::vector<FileEntry*>& added,
                  bool just_closed = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // A directory of a tree that could not be watched (out of inotify watches): its files are not
  // served until it can be; said once.
  void NoteUnwatched(const std::string& directory, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Tries those directories again (RetryLeases), naming their files once they are watched.
  void WatchUnwatched(std::vector<FileEntry*>& added) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Walks every tree again, adding the files not served yet.
  void SyncTrees(std::vector<FileEntry*>& added) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Publishes a name table with `added` and without `gone`; once no read can use the old one,
  // `gone`'s files are let go and their entries reused. A name in `added` that another entry
  // holds already is not served (said in the log).
  void ChangeNames(const std::vector<FileEntry*>& added, const std::vector<FileEntry*>& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // The open-file cache (catalog_open_files.cc). A slot is a file-route device whose descriptor
  // is re-pointed (dup3) at the file it holds, /dev/null while free.
  // Adds slots up to the served names plus kOpenSlotHeadroom, at most max_open_files_ and the
  // descriptors RLIMIT_NOFILE leaves; nothing once the devices are sealed.
  void GrowOpenSlots() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Opens the files reads asked for (LookupForRead of a cold name), served through the file at
  // once and added to `to_lease` (leased and mapped after).
  void OpenRequested(std::vector<FileEntry*>& to_lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Opens cold `entry` into a slot (closing the least recently read files when none is free).
  // False when its name no longer names a regular file (its version says why then).
  bool OpenIntoSlot(FileEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Makes `entries` cold: published as not open, then, once no read can use their old versions,
  // their leases dropped and their slots freed.
  void Evict(const std::vector<FileEntry*>& entries) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Frees `entry`'s slot (no read may reach its open file any more).
  void ReleaseSlot(FileEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // Queues a cold entry for the watcher to open (the first read that finds it cold). Any thread.
  void RequestOpen(FileEntry& entry) const;
  // A new entry for `name` (reusing one that left the table), cold.
  FileEntry* NewEntry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_);
  // What cold file `name` (at `source`) is now, by one stat beneath its root: its size, or why it
  // is not served.
  absl::StatusOr<FileMapRef> DescribeCold(absl::string_view name, const BeneathPath& source) const;

  std::vector<std::unique_ptr<Device>> devices_;
  // Per device: the epoch domain of raw reads of it (1..ReadEpochs::kDomains-1 for block
  // devices, 0 for others).
  std::vector<uint8_t> epoch_domains_;
  uint32_t block_devices_ = 0;  // how many were added (they take domains in turn)
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
  // Every entry ever made (served, or free for reuse: free_entries_), in chunks; freed with the
  // catalog only, so a pointer to one is always valid.
  static constexpr size_t kEntriesPerChunk = 4096;
  std::vector<std::unique_ptr<FileEntry[]>> entries_ ABSL_GUARDED_BY(watch_mu_);
  size_t entries_in_last_chunk_ ABSL_GUARDED_BY(watch_mu_) = 0;
  // The served names. The read path finds a name without a lock (inside its reader's epoch); the
  // watcher changes them under versions_mu_ (storage/name_table.h) and frees replaced shards once
  // no read can be using them.
  NameTable<FileEntry> names_;
  std::atomic<uint64_t> names_generation_;
  ReadEpochs epochs_;
  // Guards publishing versions and name tables against Resolve()'s and the listings' reads.
  mutable std::mutex versions_mu_;
  // Guards the watcher's state (the entries' inode fields, the tables below) against setup.
  std::mutex watch_mu_;
  // Leases: the slot of each open descriptor, the slots' holders, `leased`, `lease_breaks` and
  // `raw_domain`, and the descriptors themselves (re-pointed or released only under it, so a
  // break never releases another file's lease). Taken by the lease thread and the watcher
  // (after watch_mu_, before versions_mu_); held by a break while it waits for raw reads.
  std::mutex lease_mu_;
  absl::flat_hash_map<int, OpenFile*> by_lease_fd_ ABSL_GUARDED_BY(lease_mu_);
  std::unique_ptr<LeaseSignalThread> lease_signals_;
  // What breaks leave for the watcher (TakeBrokenLeases).
  std::mutex broken_mu_;
  std::vector<std::unique_ptr<const FileVersion>> broken_versions_ ABSL_GUARDED_BY(broken_mu_);
  std::vector<FileEntry*> broken_entries_ ABSL_GUARDED_BY(broken_mu_);
  // The served entries by path, ordered, so that the names under a directory that changed are
  // found without a walk of all: a tree's files by (tree, relative path: the entry's name), the
  // set holding the entries themselves (a pointer each, no copy of a million paths); files served
  // on their own (few) by display path. Through the helpers below.
  using TreePath = std::pair<const Tree*, absl::string_view>;
  struct ByTreePath {
    using is_transparent = void;
    static TreePath KeyOf(const TreePath& key) { return key; }
    template <typename Entry>
    static TreePath KeyOf(const Entry* entry) {
      return {entry->tree, entry->name};
    }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return KeyOf(a) < KeyOf(b);
    }
  };
  absl::btree_set<FileEntry*, ByTreePath> tree_paths_ ABSL_GUARDED_BY(watch_mu_);
  absl::btree_map<std::string, FileEntry*> own_paths_ ABSL_GUARDED_BY(watch_mu_);
  // The served directories, by watch descriptor, in each inotify instance.
  // Each with the walk generation that last watched it: after a directory event, watches still
  // under the old path and not refreshed by a walk are of directories that left the tree.
  struct WatchedDirectory {
    std::string path;
    uint64_t generation = 0;
  };
  absl::flat_hash_map<int, WatchedDirectory> name_watches_ ABSL_GUARDED_BY(watch_mu_);
  absl::flat_hash_map<int, WatchedDirectory> content_watches_ ABSL_GUARDED_BY(watch_mu_);
  uint64_t walk_generation_ ABSL_GUARDED_BY(watch_mu_) = 0;
  std::vector<std::unique_ptr<Tree>> trees_ ABSL_GUARDED_BY(watch_mu_);
  // The open-file cache: its slots (grown under watch_mu_ and lease_mu_, before the devices are
  // sealed; read under either), the free ones, and the CLOCK hand (the next slot looked at for
  // eviction).
  std::vector<std::unique_ptr<OpenFile>> open_files_;
  std::vector<uint32_t> free_open_slots_ ABSL_GUARDED_BY(watch_mu_);
  size_t clock_hand_ ABSL_GUARDED_BY(watch_mu_) = 0;
  size_t open_slot_count_ = 0;
  bool devices_sealed_ ABSL_GUARDED_BY(watch_mu_) = false;
  size_t max_open_files_ = kDefaultMaxOpenFiles;
  std::atomic<uint64_t> opens_{0};
  std::atomic<uint64_t> evictions_{0};
  // Entries that left the name table, no longer reachable by any read: reused for new names.
  std::vector<FileEntry*> free_entries_ ABSL_GUARDED_BY(watch_mu_);
  // Entries whose lease is to be taken again (a writer closed, or a map not valid yet).
  absl::flat_hash_set<FileEntry*> retry_leases_ ABSL_GUARDED_BY(watch_mu_);
  // Cold entries reads asked to have opened (RequestOpen).
  mutable std::mutex open_requests_mu_;
  mutable std::vector<FileEntry*> open_requests_ ABSL_GUARDED_BY(open_requests_mu_);
  // What a cold name serves: nothing yet, and no reason (LookupForRead asks for it to be opened).
  FileVersion cold_version_;
  // Reasons for reading files through themselves already logged (once each, a few at most).
  static constexpr size_t kMaxToldRoutes = 64;
  absl::flat_hash_set<std::string> told_routes_ ABSL_GUARDED_BY(watch_mu_);
  // Display paths of tree directories no watch could be had for (NoteUnwatched).
  absl::flat_hash_set<std::string> unwatched_ ABSL_GUARDED_BY(watch_mu_);
  // New files a writer still held open: display path -> their tree and relative path.
  absl::flat_hash_map<std::string, std::pair<Tree*, std::string>> pending_
      ABSL_GUARDED_BY(watch_mu_);
  // The versions DeclareVersion() gave, each once (entries point at them), and the one given "*",
  // for files created later too. Under versions_mu_.
  absl::node_hash_set<std::string> declared_versions_;
  const std::string* default_version_ = nullptr;
  std::unique_ptr<Watcher> watcher_;
  // Odd while the watcher reads and applies inotify events (see ApplyingNameEvents()).
  std::atomic<uint64_t> name_events_seq_{0};
  // What the batch of name events being applied concerns, published once the watcher has read
  // them (NameMayBeChanging).
  struct ChangingNames {
    uint64_t turn = 0;                       // the watcher's turn (the ticket it serves)
    uint64_t seq = 0;                        // name_events_seq_ (odd) while they are applied
    bool all = false;                        // events lost, or a served root moved: every name
    absl::flat_hash_set<std::string> names;  // served names (tree-relative, or own name)
    absl::flat_hash_set<std::string> directories;  // tree-relative, with a trailing '/'
  };
  mutable std::mutex changing_mu_;
  std::shared_ptr<const ChangingNames> changing_ ABSL_GUARDED_BY(changing_mu_);
  void PublishChanging(std::shared_ptr<const ChangingNames> changing);
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_CATALOG_H_
