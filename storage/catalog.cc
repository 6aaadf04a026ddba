#include "storage/catalog.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "storage/catalog_internal.h"
#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::storage {

std::string EchoedName(absl::string_view name) {
  if (name.size() <= kMaxEchoedNameBytes) return std::string(name);
  return absl::StrCat(name.substr(0, kMaxEchoedNameBytes), "... (", name.size(), " bytes)");
}

absl::Status UnknownFileError(absl::string_view name) {
  return absl::NotFoundError(absl::StrCat("unknown file '", EchoedName(name), "'"));
}

namespace {

// Small files are checked before their raw-device map is served: ext4 has been seen (in
// never_stale_test) to map a file that just left inline data to a block that did not hold its
// bytes yet. Under the lease the file cannot change, so the file's own bytes are the truth.
constexpr uint64_t kVerifiedMapBytes = 1 << 20;

// Whether `map`'s raw-device bytes equal the file's own (read buffered through a new descriptor
// of the same open file). Only for maps of at most kVerifiedMapBytes.
bool RawBytesMatchFile(const FileMap& map, int file_fd, const Device& disk) {
  const uint64_t size = map.size();
  const int buffered = open(absl::StrCat("/proc/self/fd/", file_fd).c_str(), O_RDONLY | O_CLOEXEC);
  if (buffered < 0) return false;
  std::vector<char> expected(size);
  const ssize_t got = pread(buffered, expected.data(), size, 0);
  close(buffered);
  if (got != static_cast<ssize_t>(size)) return false;
  const uint64_t block = disk.logical_block_size();
  // What the map serves as zeros (holes, unwritten extents, and the gaps between extents and
  // after the last one, which read as holes) must be zeros in the file too.
  const auto zeros_in_file = [&](uint64_t from, uint64_t to) {
    return from >= to || std::all_of(expected.begin() + static_cast<ptrdiff_t>(from),
                                     expected.begin() + static_cast<ptrdiff_t>(to),
                                     [](char c) { return c == 0; });
  };
  uint64_t checked = 0;  // [0, checked) of the file is known to match
  for (const Extent& e : map.extents()) {
    const uint64_t end = std::min(e.logical_end(), size);
    if (e.logical_offset >= end) continue;
    if (!zeros_in_file(checked, e.logical_offset)) return false;
    checked = end;
    const uint64_t want = end - e.logical_offset;
    if (e.type != ExtentType::kMapped) {
      if (!zeros_in_file(e.logical_offset, end)) return false;
      continue;
    }
    const uint64_t bytes = RoundUp(want, block);
    std::unique_ptr<char, decltype(&free)> raw(
        static_cast<char*>(aligned_alloc(4096, RoundUp(bytes, 4096))), &free);
    if (!raw || pread(disk.fd(), raw.get(), bytes, static_cast<off_t>(e.physical_offset)) !=
                    static_cast<ssize_t>(bytes)) {
      return false;
    }
    if (memcmp(raw.get(), expected.data() + e.logical_offset, want) != 0) return false;
  }
  return zeros_in_file(checked, size);
}

// Two inotify instances watch each served directory. Name events have one of their own, because

}  // namespace

absl::Status Catalog::AddEntry(FileEntry& entry) {
  if (entry.name.empty()) return absl::InvalidArgumentError("a file name must not be empty");
  std::lock_guard lock(versions_mu_);
  // Setup: no read runs yet, so the table is changed in place.
  if (!names_.InsertBeforeReaders(&entry)) {
    return absl::AlreadyExistsError(absl::StrCat("file name '", entry.name, "' is used twice"));
  }
  entry.reachable = true;
  return absl::OkStatus();
}

absl::Status Catalog::AddStaticFile(FileMap map) {
  if (Find(map.name()) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("file name '", map.name(), "' is used twice"));
  }
  FileEntry* entry;
  {
    std::lock_guard lock(watch_mu_);
    entry = NewEntry();
  }
  entry->name = map.name();
  entry->present = false;
  auto version = std::make_unique<FileVersion>();
  version->map = std::make_shared<const FileMap>(std::move(map));
  Publish(*entry, std::move(version));
  return AddEntry(*entry);
}

absl::Status Catalog::AddWholeDevice(std::string name, std::string path) {
  auto device = Device::Open(name, std::move(path));
  if (!device.ok()) return device.status();
  const uint64_t size = (*device)->size();
  const uint32_t block_size = (*device)->logical_block_size();
  auto id = AddDevice(*std::move(device));
  if (!id.ok()) return id.status();
  std::vector<Extent> extents;
  if (size > 0) extents.push_back(Extent{0, size, ExtentType::kMapped, *id, 0});
  auto map = FileMap::Create(std::move(name), size, block_size, FileSource::kWholeDevice,
                             std::move(extents));
  if (!map.ok()) return map.status();
  return AddStaticFile(*std::move(map));
}

std::unique_ptr<const FileVersion> Catalog::VersionOf(FileEntry& entry, const std::string& why,
                                                      bool leased) {
  auto version = std::make_unique<FileVersion>();
  const std::string path = entry.display();
  std::string reason = why;
  if (leased) {
    // Exact: with the lease held no writer can open the file until it is released.
    auto mapped = MapOpenFile(Open(entry).fd, path);
    absl::StatusOr<DeviceId> disk = absl::UnknownError("");
    if (!mapped.ok()) {
      const uint64_t incident = LogIncident(
          LogLevel::kWarning, absl::StrCat("file ", entry.name, ": ", mapped.status().message()));
      reason = absl::StrCat("its extents could not be mapped (", IncidentNote(incident), ")");
    } else if (!mapped->file_route_reason.empty()) {
      reason = mapped->file_route_reason;
    } else if (disk = DiskFor(*mapped); !disk.ok()) {
      reason = std::string(disk.status().message());
    } else {
      const Device& device = *devices_[*disk];
      const uint32_t block_size = device.logical_block_size();
      const uint64_t size = mapped->identity.size;
      const uint64_t rounded_size = RoundUp(size, block_size);
      std::vector<Extent> extents;
      extents.reserve(mapped->extents.size());
      for (const DeviceExtent& e : mapped->extents) {
        if (e.logical_offset >= rounded_size) break;
        Extent extent{e.logical_offset, std::min(e.length, rounded_size - e.logical_offset),
                      e.unwritten ? ExtentType::kUnwritten : ExtentType::kMapped, *disk,
                      e.physical_offset};
        if (std::string problem = ExtentProblem(extent, device.size(), block_size);
            !problem.empty()) {
          reason = absl::StrFormat("FIEMAP extent at file offset %u cannot be served from %s: %s",
                                   e.logical_offset, device.path(), problem);
          break;
        }
        extents.push_back(extent);
      }
      if (reason == why) {
        auto map =
            FileMap::Create(entry.name, size, block_size, FileSource::kFiemap, std::move(extents));
        if (map.ok() && map->size() <= kVerifiedMapBytes &&
            !RawBytesMatchFile(*map, Open(entry).fd, device)) {
          reason = kMapNotYetValid;
          LogWarning(
              absl::StrFormat("file %s: its new FIEMAP map does not read back its bytes; "
                              "read through the file and mapped again in a second",
                              entry.name));
        } else if (map.ok()) {
          version->map = std::make_shared<const FileMap>(*std::move(map));
          version->epoch_domain = epoch_domains_[*disk];
          version->served_now = &entry.current;
          return version;
        } else {
          reason = std::string(map.status().message());
        }
      }
    }
  }
  return FileRouteVersion(entry.name, Open(entry).device, std::move(reason));
}

std::unique_ptr<const FileVersion> Catalog::FileRouteVersion(absl::string_view name,
                                                             DeviceId device_id,
                                                             std::string why) const {
  // The file's own device reads whatever the name names now. Its size follows the file at each
  // read: a writer may be extending or truncating it right now.
  auto version = std::make_unique<FileVersion>();
  const Device& device = *devices_[device_id];
  version->map = std::make_shared<const FileMap>(FileMap::FollowingFile(
      std::string(name), device.logical_block_size(), device_id, device.fd()));
  version->route_note = std::move(why);
  return version;
}

Catalog::OpenFile& Catalog::Open(const FileEntry& entry) const {
  return *open_files_[static_cast<size_t>(entry.slot)];
}

void Catalog::Publish(FileEntry& entry, std::unique_ptr<const FileVersion> version) {
  std::unique_ptr<const FileVersion> old;
  {
    std::lock_guard lock(versions_mu_);
    old = std::move(entry.owned);
    entry.owned = std::move(version);
    entry.current.store(entry.owned.get(), std::memory_order_release);
  }
  // Reads that loaded the old version may still be using its map (or, for a replaced or removed
  // name, its inode): only once they have finished may a writer in, an inode close or the map go.
  if (old && entry.reachable) epochs_.WaitForEarlierReads();
}

absl::Status Catalog::ImportFile(std::string name, std::string path) {
  auto source = BeneathParent(path);
  if (!source.ok()) return source.status();
  return ImportBeneath(std::move(name), *std::move(source), nullptr);
}

absl::Status Catalog::ImportBeneath(std::string name, BeneathPath source, Tree* tree) {
  if (Find(name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("file name '", name, "' is used twice"));
  }
  if (absl::Status started = StartWatcher(); !started.ok()) return started;
  const std::string path = source.display();
  std::lock_guard lock(watch_mu_);
  if (tree == nullptr) {
    // A file named on its own: said at startup when it is not there or not a regular file, and
    // its directory watched. (A tree's walk has seen its files' types and watched them already.)
    auto opened = OpenBeneath(source, O_PATH);
    if (!opened.ok()) {
      if (absl::IsResourceExhausted(opened.status())) {
        rlimit limit = {};
        getrlimit(RLIMIT_NOFILE, &limit);
        return absl::ResourceExhaustedError(absl::StrFormat(
            "cannot serve %s: the server is out of descriptors (RLIMIT_NOFILE %u); raise it "
            "(LimitNOFILE= in systemd, ulimit -n), or lower --max-open-files",
            path, limit.rlim_cur));
      }
      return opened.status();
    }
    struct stat st;
    const bool regular = fstat(*opened, &st) == 0 && S_ISREG(st.st_mode);
    close(*opened);
    if (!regular) return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
    AddDiskOf(st.st_dev);
    if (absl::Status s = WatchDirectory(path.substr(0, path.rfind('/'))); !s.ok()) return s;
  }
  FileEntry* entry = NewEntry();
  entry->name = std::move(name);
  entry->tree = tree;
  // A tree's file is at (its root, its name); one served on its own keeps where it is.
  if (tree == nullptr) entry->own_source = std::make_unique<const BeneathPath>(std::move(source));
  IndexPath(*entry);
  if (absl::Status added = AddEntry(*entry); !added.ok()) {
    UnindexPath(*entry);
    free_entries_.push_back(entry);
    return added;
  }
  // A file named on its own is opened, leased and mapped now (the operator named it; a tree's
  // files wait for their first read). It may be closed later like any other to make room.
  if (tree == nullptr) {
    GrowOpenSlots();
    if (!free_open_slots_.empty() && OpenIntoSlot(*entry)) TakeLease(*entry);
  }
  return absl::OkStatus();
}

void Catalog::AddDiskOf(dev_t filesystem) {
  auto disk = LocateOnDisk(filesystem);
  if (!disk.ok()) return;  // btrfs, tmpfs ...: its files are read through themselves
  for (const std::unique_ptr<Device>& device : devices_) {
    if (device->kind() == DeviceKind::kBlockDevice &&
        device->device_number() == disk->disk_device) {
      return;
    }
  }
  auto device = Device::Open(std::filesystem::path(disk->disk_path).filename(), disk->disk_path);
  if (!device.ok()) {
    LogWarning(absl::StrCat("files on ", disk->disk_path,
                            " are read through themselves: ", device.status().message()));
    return;
  }
  (void)AddDevice(*std::move(device));
}

absl::StatusOr<size_t> Catalog::ImportTree(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error) return PosixError(error, absl::StrCat("cannot serve ", path));
  if (fs::is_regular_file(status)) {
    absl::Status added = ImportFile(fs::path(path).filename().string(), path);
    if (!added.ok()) return added;
    return 1;
  }
  if (!fs::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve ", path, ": not a regular file or directory"));
  }
  // Display paths (events, logs) are the root's path and the relative path joined by one '/'.
  std::string root_path = path;
  while (root_path.size() > 1 && root_path.back() == '/') root_path.pop_back();
  auto directory = RootDirectory::Open(root_path);
  if (!directory.ok()) return directory.status();
  if (absl::Status started = StartWatcher(); !started.ok()) return started;
  Tree* tree;
  absl::StatusOr<std::vector<std::string>> found;
  {
    std::lock_guard lock(watch_mu_);
    struct stat st;
    if (fstat((*directory)->fd(), &st) == 0) AddDiskOf(st.st_dev);
    trees_.push_back(std::make_unique<Tree>(Tree{*std::move(directory)}));
    tree = trees_.back().get();
    found = WalkTree(*tree);  // watches first, then lists: nothing created meanwhile is missed
  }
  if (!found.ok()) return found.status();
  // Names only: each file is opened, leased and mapped on its first read.
  for (const std::string& relative : *found) {
    absl::Status added = ImportBeneath(relative, BeneathPath{tree->root, relative}, tree);
    if (!added.ok()) return added;
  }
  {
    std::lock_guard lock(watch_mu_);
    GrowOpenSlots();
  }
  if (found->empty()) {
    LogInfo(absl::StrFormat("%s holds no regular file yet; files created in it are served", path));
  }
  return found->size();
}

const FileVersion* Catalog::LookupForRead(absl::string_view name, absl::Status* unavailable) const {
  FileEntry* found = names_.Find(name);
  if (found == nullptr) [[unlikely]] {
    *unavailable = UnknownFileError(name);
    return nullptr;
  }
  const FileEntry& entry = *found;
  // CLOCK's referenced bit: a load, and a store only when the hand has cleared it.
  if (!entry.referenced.load(std::memory_order_relaxed)) [[unlikely]] {
    entry.referenced.store(true, std::memory_order_relaxed);
  }
  const FileVersion* version = entry.current.load(std::memory_order_acquire);
  if (version->map) [[likely]] {
    return version;
  }
  if (version == &cold_version_) RequestOpen(*found);  // *unavailable stays OK: not open
  *unavailable = version->unavailable;
  return nullptr;
}

Catalog::FileEntry* Catalog::Find(absl::string_view name) const {
  std::lock_guard lock(versions_mu_);
  return names_.Find(name);
}

absl::StatusOr<FileMapRef> Catalog::Resolve(absl::string_view name) {
  FileEntry* entry = Find(name);
  if (entry == nullptr) return UnknownFileError(name);
  if (entry->current.load(std::memory_order_acquire) == &cold_version_) {
    RequestOpen(*entry);
    WaitUntilCurrent();
  }
  return ResolveWithoutOpening(name);
}

void Catalog::Prefetch(absl::string_view name) {
  FileEntry* entry = Find(name);
  if (entry == nullptr || entry->current.load(std::memory_order_acquire) != &cold_version_) return;
  RequestOpen(*entry);
  RequestCatchUp();
}

absl::StatusOr<FileMapRef> Catalog::ResolveWaitingAtMost(absl::string_view name,
                                                         absl::Duration wait) {
  FileEntry* entry = Find(name);
  if (entry != nullptr && entry->current.load(std::memory_order_acquire) == &cold_version_) {
    RequestOpen(*entry);
    const uint64_t ticket = RequestCatchUp();
    const absl::Time deadline = absl::Now() + wait;
    while (!HasCaughtUp(ticket) && absl::Now() < deadline) absl::SleepFor(absl::Microseconds(50));
  }
  return ResolveWithoutOpening(name);
}

absl::StatusOr<FileMapRef> Catalog::ResolveWithoutOpening(absl::string_view name) const {
  BeneathPath source;
  {
    std::lock_guard lock(versions_mu_);
    const FileEntry* entry = names_.Find(name);
    if (entry == nullptr) return UnknownFileError(name);
    if (entry->owned != nullptr) {
      const FileVersion& version = *entry->owned;
      if (version.map) return version.map;
      return version.unavailable;
    }
    // Copied under the lock: an entry is reused for another name only after a table without it
    // has been published under this lock.
    source = entry->source();
  }
  // Not open: its size now, by a stat beneath its root.
  return DescribeCold(name, source);
}

absl::Status Catalog::DeclareVersion(absl::string_view name, std::string version) {
  std::lock_guard lock(versions_mu_);
  if (name == "*") {
    default_version_ = &*declared_versions_.insert(std::move(version)).first;
    names_.ForEach([&](absl::string_view, FileEntry* entry) {
      if (entry->declared_version == nullptr) entry->declared_version = default_version_;
    });
    return absl::OkStatus();
  }
  FileEntry* entry = names_.Find(name);
  if (entry == nullptr) return UnknownFileError(name);
  entry->declared_version = &*declared_versions_.insert(std::move(version)).first;
  return absl::OkStatus();
}

std::string Catalog::DeclaredVersion(absl::string_view name) const {
  std::lock_guard lock(versions_mu_);
  const FileEntry* entry = names_.Find(name);
  return entry == nullptr || entry->declared_version == nullptr ? "" : *entry->declared_version;
}

std::string Catalog::RouteNote(absl::string_view name) const {
  std::lock_guard lock(versions_mu_);
  const FileEntry* entry = names_.Find(name);
  if (entry == nullptr) return "";
  return entry->owned != nullptr ? entry->owned->route_note : cold_version_.route_note;
}

RouteCounts Catalog::route_counts() const {
  RouteCounts counts;
  std::lock_guard lock(versions_mu_);
  counts.open_slots = open_slot_count_;
  counts.opens = opens_.load(std::memory_order_relaxed);
  counts.evictions = evictions_.load(std::memory_order_relaxed);
  names_.ForEach([&](absl::string_view, const FileEntry* entry) {
    if (entry->owned == nullptr) {
      ++counts.not_open;
      return;
    }
    const FileVersion& version = *entry->owned;
    if (!version.map) {
      ++counts.unavailable;
    } else if (version.map->source() == FileSource::kFiemap) {
      ++counts.leased;
    } else if (version.map->source() == FileSource::kFileRoute) {
      ++counts.file_route;
    }
  });
  return counts;
}

std::vector<std::string> Catalog::FileNames() const {
  std::vector<std::string> names;
  {
    std::lock_guard lock(versions_mu_);
    names.reserve(names_.size());
    names_.ForEach([&](absl::string_view name, const FileEntry*) { names.emplace_back(name); });
  }
  std::sort(names.begin(), names.end());
  return names;
}

size_t Catalog::file_count() const {
  std::lock_guard lock(versions_mu_);
  return names_.size();
}

}  // namespace blockread::storage
