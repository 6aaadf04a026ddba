// The open-file cache: served names are many, descriptors are few. A served file is opened (into
// a slot: a file-route device reserved at setup, whose descriptor is re-pointed at it with dup3)
// when a read first asks for it, and closed again when room is needed for another one. Slots are
// picked for closing by CLOCK (the kernel's page reclaim in miniature): reads set a referenced bit
// on the files they find, the hand clears it as it passes, and an open file the hand finds clear
// was not read for a whole turn of it. A file is made cold (reads see "not open" and ask for it
// again) and only once no read can still use its open file is its lease dropped and its descriptor
// let go, so a file that is closed is never read stale: the next read opens what the name names
// then. Runs on the watcher thread under watch_mu_, except RequestOpen (any thread).
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/catalog_internal.h"
#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::storage {
namespace {

// Direct-I/O alignment of the slots' reads: a multiple of any served filesystem's logical block
// size (4096 covers every disk in use; a file route reads the block-aligned covering range).
constexpr uint32_t kOpenSlotBlockSize = 4096;

}  // namespace

void Catalog::SealDevices() {
  std::lock_guard lock(watch_mu_);
  if (devices_sealed_) return;
  // Setup is done: what the walks of the served trees allocated and freed (a path per file) goes
  // back to the system, rather than staying in the heap for the server's lifetime (a quarter of
  // the memory of a million names).
  malloc_trim(0);
  GrowOpenSlots();
  devices_sealed_ = true;
  if (open_slot_count_ == 0) return;
  rlimit files = {};
  getrlimit(RLIMIT_NOFILE, &files);
  LogInfo(absl::StrFormat(
      "served files are opened on their first read, at most %u at once (--max-open-files %u, "
      "the served names plus %u, and RLIMIT_NOFILE %u less %u descriptors kept for devices, "
      "connections and the rest)",
      open_slot_count_, max_open_files_, kOpenSlotHeadroom, files.rlim_cur, kReservedDescriptors));
}

void Catalog::GrowOpenSlots() {
  if (devices_sealed_ || !watcher_) return;
  const size_t target =
      std::max<size_t>(1, std::min(max_open_files_, file_count() + kOpenSlotHeadroom));
  if (open_slot_count_ >= target) return;
  rlimit files = {};
  getrlimit(RLIMIT_NOFILE, &files);
  const size_t limit = static_cast<size_t>(files.rlim_cur);
  // Descriptors open already (another catalog's slots, in a process with several) are not room.
  size_t in_use = 0;
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc/self/fd", error), end; !error && it != end;
       it.increment(error)) {
    ++in_use;
  }
  const size_t room =
      limit > kReservedDescriptors + in_use ? limit - kReservedDescriptors - in_use : 0;
  const size_t first = open_slot_count_;
  // At least one slot, whatever the limit: a cache of none could open nothing.
  const size_t slots = std::max<size_t>(std::min(target, first + room), std::max<size_t>(first, 1));
  for (size_t i = first; i < slots; ++i) {
    const int placeholder = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (placeholder < 0) {
      LogWarning(absl::StrFormat("only %u of %u open-file slots reserved: %s", i, slots,
                                 PosixErrorMessage(errno, "open /dev/null")));
      break;
    }
    auto added = AddDevice(
        Device::FileRouteSlot(absl::StrCat("file-slot:", i), placeholder, kOpenSlotBlockSize));
    if (!added.ok()) break;
    auto slot = std::make_unique<OpenFile>();
    slot->device = *added;
    slot->fd = devices_[*added]->fd();
    std::lock_guard lock(lease_mu_);  // the lease thread may be at a break: no slot moves under it
    open_files_.push_back(std::move(slot));
  }
  open_slot_count_ = open_files_.size();
  for (size_t i = open_slot_count_; i > first; --i) {
    free_open_slots_.push_back(static_cast<uint32_t>(i - 1));
  }
}

void Catalog::RequestOpen(FileEntry& entry) const {
  if (entry.open_requested.exchange(true, std::memory_order_acq_rel)) return;  // queued already
  std::lock_guard lock(open_requests_mu_);
  open_requests_.push_back(&entry);
}

void Catalog::OpenRequested(std::vector<FileEntry*>& to_lease) {
  std::vector<FileEntry*> requested;
  {
    std::lock_guard lock(open_requests_mu_);
    requested.swap(open_requests_);
  }
  if (requested.empty()) return;
  std::vector<FileEntry*> wanted;
  for (FileEntry* entry : requested) {
    if (entry->cold() && entry->reachable && entry->owned == nullptr) wanted.push_back(entry);
  }
  // Room first, for all of them at once: closing files waits for reads once per batch. A little
  // more than needed, so that a run of cold reads does not wait once per file.
  if (wanted.size() > free_open_slots_.size()) {
    const size_t more = wanted.size() - free_open_slots_.size() + open_slot_count_ / 64;
    std::vector<FileEntry*> victims;
    for (size_t looked = 0; victims.size() < more && looked < 2 * open_slot_count_; ++looked) {
      FileEntry* held = open_files_[clock_hand_]->holder;
      clock_hand_ = (clock_hand_ + 1) % open_slot_count_;
      if (held == nullptr) continue;
      if (held->referenced.load(std::memory_order_relaxed)) {
        held->referenced.store(false, std::memory_order_relaxed);
        continue;
      }
      victims.push_back(held);
    }
    Evict(victims);
  }
  for (FileEntry* entry : wanted) {
    if (free_open_slots_.empty()) break;  // every open file was read since: asked for again
    if (OpenIntoSlot(*entry)) to_lease.push_back(entry);
  }
  // A read that still finds one cold (no slot was free) asks again.
  for (FileEntry* entry : requested) entry->open_requested.store(false, std::memory_order_release);
}

bool Catalog::OpenIntoSlot(FileEntry& entry) {
  auto opened = OpenBeneath(entry.source(), O_RDONLY | O_DIRECT);
  struct stat st;
  absl::Status problem;
  if (!opened.ok()) {
    problem =
        absl::IsNotFound(opened.status())
            ? absl::NotFoundError(absl::StrFormat("file %s was removed", EchoedName(entry.name)))
        : absl::IsResourceExhausted(opened.status())
            ? absl::ResourceExhaustedError(
                  absl::StrFormat("file %s cannot be opened now: the server is out of descriptors",
                                  EchoedName(entry.name)))
            : absl::FailedPreconditionError(
                  absl::StrFormat("file %s was replaced by something the server does not serve (a "
                                  "symbolic link, a FIFO or a device)",
                                  EchoedName(entry.name)));
    if (!absl::IsNotFound(opened.status())) {
      LogWarning(absl::StrCat("file ", entry.name, ": ", opened.status().message()));
    }
  } else if (fstat(*opened, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(*opened);
    problem = absl::FailedPreconditionError(absl::StrFormat(
        "file %s was replaced by something that is not a regular file", EchoedName(entry.name)));
  }
  if (!problem.ok()) {
    auto version = std::make_unique<FileVersion>();
    version->unavailable = problem;
    Publish(entry, std::move(version));
    entry.present = false;
    return false;
  }
  const uint32_t slot = free_open_slots_.back();
  free_open_slots_.pop_back();
  OpenFile& open = *open_files_[slot];
  {
    std::lock_guard lock(lease_mu_);
    dup3(*opened, open.fd, O_CLOEXEC);
    open.holder = &entry;
    open.leased.store(false, std::memory_order_relaxed);
    open.raw_domain = 0;
    lease_signals_->Aim(open.fd);
    by_lease_fd_[open.fd] = &open;
    entry.slot = static_cast<int32_t>(slot);
  }
  close(*opened);
  open.inode = InodeOf(st);
  entry.present = true;
  entry.referenced.store(true, std::memory_order_relaxed);
  opens_.fetch_add(1, std::memory_order_relaxed);
  // Read through the file at once (exact); leased and mapped next (a writeback).
  Publish(entry, FileRouteVersion(entry.name, open.device,
                                  "it was opened a moment ago (it is mapped next)"));
  return true;
}

void Catalog::Evict(const std::vector<FileEntry*>& entries) {
  if (entries.empty()) return;
  std::vector<std::unique_ptr<const FileVersion>> old;
  {
    std::lock_guard lock(versions_mu_);
    for (FileEntry* entry : entries) {
      old.push_back(std::move(entry->owned));
      entry->current.store(&cold_version_, std::memory_order_release);
    }
  }
  // Reads that found the open file may still be reading it (raw device under the lease, or its
  // descriptor): only then is the lease dropped and the descriptor let go.
  epochs_.WaitForEarlierReads();
  for (FileEntry* entry : entries) ReleaseSlot(*entry);
  evictions_.fetch_add(entries.size(), std::memory_order_relaxed);
}

void Catalog::ReleaseSlot(FileEntry& entry) {
  if (entry.cold()) return;
  const uint32_t slot = static_cast<uint32_t>(entry.slot);
  OpenFile& open = *open_files_[slot];
  {
    std::lock_guard lock(lease_mu_);
    if (open.leased.load(std::memory_order_relaxed)) fcntl(open.fd, F_SETLEASE, F_UNLCK);
    open.leased.store(false, std::memory_order_relaxed);
    open.raw_domain = 0;
    by_lease_fd_.erase(open.fd);
    PointAtNothing(open.fd);
    open.holder = nullptr;
    entry.slot = -1;
  }
  open.inode = {};
  free_open_slots_.push_back(slot);
  retry_leases_.erase(&entry);
}

Catalog::FileEntry* Catalog::NewEntry() {
  FileEntry* entry;
  if (!free_entries_.empty()) {
    entry = free_entries_.back();
    free_entries_.pop_back();
  } else {
    // In chunks: no allocation (and its overhead) per name.
    if (entries_.empty() || entries_in_last_chunk_ == kEntriesPerChunk) {
      entries_.push_back(std::make_unique<FileEntry[]>(kEntriesPerChunk));
      entries_in_last_chunk_ = 0;
    }
    entry = &entries_.back()[entries_in_last_chunk_++];
  }
  entry->name.clear();
  entry->declared_version = default_version_;
  entry->current.store(&cold_version_, std::memory_order_release);
  entry->owned.reset();
  entry->reachable = false;
  entry->referenced.store(false, std::memory_order_relaxed);
  entry->open_requested.store(false, std::memory_order_relaxed);
  entry->own_source.reset();
  entry->tree = nullptr;
  entry->present = true;
  return entry;
}

absl::StatusOr<FileMapRef> Catalog::DescribeCold(absl::string_view name,
                                                 const BeneathPath& source) const {
  auto opened = OpenBeneath(source, O_PATH);
  if (!opened.ok()) {
    if (absl::IsNotFound(opened.status())) return UnknownFileError(name);
    return absl::FailedPreconditionError(absl::StrFormat(
        "file %s was replaced by something the server does not serve", EchoedName(name)));
  }
  struct stat st;
  const bool regular = fstat(*opened, &st) == 0 && S_ISREG(st.st_mode);
  close(*opened);
  if (!regular) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "file %s was replaced by something that is not a regular file", EchoedName(name)));
  }
  auto map = FileMap::Create(std::string(name), static_cast<uint64_t>(st.st_size),
                             kOpenSlotBlockSize, FileSource::kFileRoute, {});
  if (!map.ok()) return map.status();
  return std::make_shared<const FileMap>(*std::move(map));
}

}  // namespace blockread::storage
