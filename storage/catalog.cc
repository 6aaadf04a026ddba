#include "storage/catalog.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <system_error>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

int LeaseBreakSignal() { return SIGRTMIN + 4; }

namespace {

// The lease-break signal, and SIGIO, which the kernel sends instead when its signal queue is full.
sigset_t LeaseSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, LeaseBreakSignal());
  sigaddset(&signals, SIGIO);
  return signals;
}

}  // namespace

void BlockLeaseSignals() {
  const sigset_t signals = LeaseSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

namespace {

using InodeKey = std::pair<dev_t, ino_t>;

InodeKey InodeOf(const struct stat& st) { return {st.st_dev, st.st_ino}; }

// Why a read lease could not be taken, as the log and StatFile say it.
std::string LeaseRefusal(int error) {
  switch (error) {
    case EAGAIN:
      return "it is open for writing (no read lease while a writer has it open)";
    case EACCES:
    case EPERM:
      return "the server may not take a lease on it (it needs CAP_LEASE or to own the file)";
    case EINVAL:
      return "its filesystem does not support leases";
    default:
      return absl::StrCat("no read lease: ", PosixErrorMessage(error, "").substr(2));
  }
}

// Small files are checked before their raw-device map is served: ext4 has been seen (in
// never_stale_test) to map a file that just left inline data to a block that did not hold its
// bytes yet. Under the lease the file cannot change, so the file's own bytes are the truth.
constexpr uint64_t kVerifiedMapBytes = 1 << 20;
constexpr char kMapNotYetValid[] = "the filesystem's extent map does not hold its bytes yet";

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
// every worker polls it before resolving names (see NameEventsFd()): writes to files (IN_MODIFY on
// each write()) must not make the workers wait for the watcher.
constexpr uint32_t kNameEvents = IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM;
constexpr uint32_t kContentEvents = IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB;
constexpr uint32_t kNameWatch = kNameEvents | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
constexpr uint32_t kContentWatch = kContentEvents | IN_ONLYDIR;

}  // namespace

struct Catalog::FileEntry {
  std::string name;
  std::string declared_version;  // set during setup only
  // What the name serves: the read path loads it with acquire; only Publish() stores it.
  std::atomic<const FileVersion*> current{nullptr};
  std::unique_ptr<const FileVersion> owned;  // replaced under versions_mu_

  // Imported files only; the watcher's (guarded by watch_mu_).
  BeneathPath source;
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

// The watcher thread: owns the signalfd the lease-break signal arrives on and the inotify
// descriptor of the served directories; runs the catalog's handlers under watch_mu_.
class Catalog::Watcher {
 public:
  explicit Watcher(Catalog& catalog) : catalog_(catalog) {}

  absl::Status Start() {
    for (int* fd : {&names_fd_, &contents_fd_}) {
      *fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
      if (*fd < 0) return PosixError(errno, "inotify_init1 (watching served files)");
    }
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return PosixError(errno, "eventfd");
    std::promise<absl::Status> started;
    std::future<absl::Status> result = started.get_future();
    thread_ = std::thread([this, &started] { Run(started); });
    return result.get();
  }

  // Returns once the thread has finished its last handler and exited.
  void Stop() {
    if (thread_.joinable()) {
      stop_.store(true);
      Wake();
      thread_.join();
    }
  }

  ~Watcher() {
    Stop();
    for (int fd : {signal_fd_, names_fd_, contents_fd_, wake_fd_}) {
      if (fd >= 0) close(fd);
    }
  }

  pid_t tid() const { return tid_; }
  int names_fd() const { return names_fd_; }
  int contents_fd() const { return contents_fd_; }

  // A ticket for every change queued before the call; the watcher wakes and handles them.
  uint64_t RequestCatchUp() {
    // Counted before the wake-up: the watcher drains the eventfd before it reads requested_, so
    // either it sees this ticket or the eventfd wakes it again.
    const uint64_t ticket = requested_.fetch_add(1, std::memory_order_acq_rel) + 1;
    Wake();
    return ticket;
  }
  bool HasHandled(uint64_t ticket) const {
    return handled_.load(std::memory_order_acquire) >= ticket;
  }
  void WaitUntilCurrent() {
    const uint64_t ticket = RequestCatchUp();
    std::unique_lock lock(mu_);
    handled_cv_.wait(lock, [&] { return HasHandled(ticket); });
  }

  void Run(const std::function<void()>& task) {
    {
      std::lock_guard lock(mu_);  // queued before the ticket below is requested
      tasks_.push_back(&task);
    }
    WaitUntilCurrent();
  }

 private:
  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  void Run(std::promise<absl::Status>& started) {
    // The lease signal is aimed at this thread only (F_SETOWN_EX); a plain SIGIO replaces it
    // when the kernel's signal queue overflows. Both are read from the signalfd.
    BlockLeaseSignals();
    pthread_setname_np(pthread_self(), "blockread-watch");
    const sigset_t signals = LeaseSignals();
    signal_fd_ = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
    tid_ = gettid();
    if (signal_fd_ < 0) {
      started.set_value(PosixError(errno, "signalfd (lease breaks of served files)"));
      return;
    }
    started.set_value(absl::OkStatus());

    while (!stop_.load()) {
      bool retry_pending;
      {
        std::lock_guard lock(catalog_.watch_mu_);
        retry_pending = std::any_of(
            catalog_.by_display_path_.begin(), catalog_.by_display_path_.end(),
            [](const auto& item) { return item.second->retry_lease && !item.second->leased; });
      }
      pollfd fds[4] = {{signal_fd_, POLLIN, 0},
                       {names_fd_, POLLIN, 0},
                       {contents_fd_, POLLIN, 0},
                       {wake_fd_, POLLIN, 0}};
      const int ready = poll(fds, 4, retry_pending ? 1000 : -1);
      if (ready < 0 && errno != EINTR) {
        LogError(PosixErrorMessage(errno, "file watcher: poll"));
        return;
      }
      uint64_t ignored;
      while (read(wake_fd_, &ignored, sizeof(ignored)) > 0) {
      }
      const uint64_t ticket = requested_.load(std::memory_order_acquire);
      {
        std::lock_guard lock(catalog_.watch_mu_);
        HandleSignals();
        HandleInotifyEvents();
        if (ready == 0) catalog_.RetryLeases();
      }
      std::vector<const std::function<void()>*> tasks;
      {
        std::lock_guard lock(mu_);
        tasks.swap(tasks_);
      }
      for (const std::function<void()>* task : tasks) (*task)();
      {
        std::lock_guard lock(mu_);  // so that no WaitUntilCurrent() misses the notification
        handled_.store(ticket, std::memory_order_release);
      }
      handled_cv_.notify_all();
    }
  }

  void HandleSignals() ABSL_EXCLUSIVE_LOCKS_REQUIRED(catalog_.watch_mu_) {
    signalfd_siginfo info;
    bool overflow = false;
    std::vector<FileEntry*> broken;
    while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      if (static_cast<int>(info.ssi_signo) != LeaseBreakSignal()) {
        overflow = true;  // SIGIO: the signal queue overflowed; breaks may have been lost
        continue;
      }
      auto it = catalog_.by_lease_fd_.find(static_cast<int>(info.ssi_fd));
      if (it != catalog_.by_lease_fd_.end()) broken.push_back(it->second);
    }
    for (FileEntry* entry : broken) catalog_.OnLeaseBreak(*entry);
    if (overflow) {
      LogWarning("file watcher: lease signals overflowed; checking every lease");
      for (const auto& [path, entry] : catalog_.by_display_path_) {
        if (entry->leased && fcntl(entry->inode_fd, F_GETLEASE) != F_RDLCK) {
          catalog_.OnLeaseBreak(*entry);
        }
      }
    }
  }

  void HandleInotifyEvents() ABSL_EXCLUSIVE_LOCKS_REQUIRED(catalog_.watch_mu_) {
    // Name events, with the sequence odd from before they are read until they are applied: a
    // worker whose poll of names_fd_ finds it drained cannot otherwise tell "read, not applied
    // yet" from "no event" (storage/name_sync.h).
    catalog_.name_events_seq_.fetch_add(1, std::memory_order_seq_cst);
    std::vector<FileEntry*> renamed;
    const bool names_lost = ReadEvents(names_fd_, catalog_.name_watches_, renamed);
    SortUnique(renamed);
    if (names_lost) {
      RescanAll();
    } else {
      for (FileEntry* entry : renamed) catalog_.Rebind(*entry);
    }
    catalog_.name_events_seq_.fetch_add(1, std::memory_order_release);

    // Content events: workers do not wait for these.
    std::vector<FileEntry*> changed;
    if (ReadEvents(contents_fd_, catalog_.content_watches_, changed)) {
      if (!names_lost) RescanAll();
      return;
    }
    SortUnique(changed);
    for (FileEntry* entry : changed) {
      if (std::binary_search(renamed.begin(), renamed.end(), entry)) continue;
      // Not leased: the writer may be done (take the lease and map it again), or still at work
      // (the file route's size is brought up to date). Leased: nothing should have changed it;
      // map it again under the lease all the same.
      if (entry->leased) {
        catalog_.Publish(*entry, catalog_.VersionOf(*entry, "", /*may_add_devices=*/false));
      } else {
        catalog_.TakeLease(*entry);
      }
    }
  }

  void RescanAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(catalog_.watch_mu_) {
    LogWarning("file watcher: events lost or a served directory moved; re-checking every file");
    catalog_.Rescan();
  }

  static void SortUnique(std::vector<FileEntry*>& entries) {
    std::sort(entries.begin(), entries.end());
    entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  }

  // Reads every event queued on `fd` (one of the two inotify instances), adding the served files
  // they name to `files`. True when events were lost or a served directory went away.
  bool ReadEvents(int fd, const absl::flat_hash_map<int, std::string>& directories,
                  std::vector<FileEntry*>& files)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(catalog_.watch_mu_) {
    alignas(inotify_event) char buffer[64 * 1024];
    bool rescan = false;
    for (;;) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n <= 0) break;
      for (ssize_t at = 0; at < n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
        if (event->mask & (IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
          rescan = true;  // events lost, or a served directory went away: check every name
          continue;
        }
        if (event->len == 0) continue;
        auto directory = directories.find(event->wd);
        if (directory == directories.end()) continue;
        auto entry =
            catalog_.by_display_path_.find(absl::StrCat(directory->second, "/", event->name));
        if (entry != catalog_.by_display_path_.end()) files.push_back(entry->second);
      }
    }
    return rescan;
  }

  Catalog& catalog_;
  int signal_fd_ = -1;
  int names_fd_ = -1;     // kNameWatch on every served directory; workers poll it too
  int contents_fd_ = -1;  // kContentWatch on every served directory
  int wake_fd_ = -1;
  pid_t tid_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Tickets: requested_ counts RequestCatchUp() calls; handled_ is the last one whose changes
  // the watcher has handled. mu_ only pairs handled_cv_ with handled_ for blocking waiters.
  std::atomic<uint64_t> requested_{0};
  std::atomic<uint64_t> handled_{0};
  std::mutex mu_;
  std::condition_variable handled_cv_;
  // RunOnWatcherThread()'s tasks, run before the ticket they were queued ahead of is handled.
  std::vector<const std::function<void()>*> tasks_;  // GUARDED_BY(mu_)
};

Catalog::Catalog() = default;

Catalog::~Catalog() {
  // Stopped before watcher_ is reset: its handlers use watcher_ until the thread exits. No handler
  // runs after this; the devices close their descriptors.
  if (watcher_) watcher_->Stop();
  watcher_.reset();
}

absl::StatusOr<DeviceId> Catalog::AddDevice(std::unique_ptr<Device> device) {
  if (FindDevice(device->name())) {
    return absl::AlreadyExistsError(
        absl::StrCat("device name '", device->name(), "' is used twice"));
  }
  auto state = std::make_unique<DeviceState>();
  struct stat st {};
  if (fstat(device->fd(), &st) == 0) {
    state->opened_dev = st.st_dev;
    state->opened_ino = st.st_ino;
    state->opened_rdev = st.st_rdev;
  }
  devices_.push_back(std::move(device));
  device_states_.push_back(std::move(state));
  return static_cast<DeviceId>(devices_.size() - 1);
}

void Catalog::CheckDevices() {
  for (DeviceId id = 0; id < devices_.size(); ++id) {
    const Device& device = *devices_[id];
    if (device.kind() == DeviceKind::kFileRoute) continue;  // the watcher's business
    DeviceState& state = *device_states_[id];
    const bool up = state.up.load(std::memory_order_relaxed);
    struct stat now {};
    const bool present = stat(device.path().c_str(), &now) == 0;
    const bool same = present && (S_ISBLK(now.st_mode) ? now.st_rdev == state.opened_rdev
                                                       : now.st_dev == state.opened_dev &&
                                                             now.st_ino == state.opened_ino);
    if (present && same && up) continue;
    std::string why;
    if (present) {
      auto reopened = Device::Open(device.name(), device.path());
      if (!reopened.ok()) {
        why = std::string(reopened.status().message());
      } else if ((*reopened)->size() != device.size() ||
                 (*reopened)->logical_block_size() != device.logical_block_size()) {
        why = absl::StrFormat("it is back with %u bytes in blocks of %u, not %u in blocks of %u",
                              (*reopened)->size(), (*reopened)->logical_block_size(), device.size(),
                              device.logical_block_size());
      } else if (dup3((*reopened)->fd(), device.fd(), O_CLOEXEC) < 0) {
        why = PosixErrorMessage(errno, "dup3");
      } else {
        state.opened_dev = now.st_dev;
        state.opened_ino = now.st_ino;
        state.opened_rdev = now.st_rdev;
        const uint64_t event = device_events_.load(std::memory_order_relaxed) + 1;
        state.reopened_at.store(event, std::memory_order_release);
        state.up.store(true, std::memory_order_release);
        device_events_.store(event, std::memory_order_release);
        LogInfo(absl::StrFormat("device %s (%s) %s: reopened, serving its files again",
                                device.name(), device.path(),
                                up ? "names another device now" : "is back"));
        continue;
      }
    } else {
      why = "its path is gone";
    }
    if (!up) continue;  // still down; said so when it went
    state.up.store(false, std::memory_order_release);
    device_events_.fetch_add(1, std::memory_order_acq_rel);
    LogWarning(absl::StrFormat(
        "device %s (%s) is down (%s): reads of its files answer UNAVAILABLE; it is reopened "
        "when its path is back",
        device.name(), device.path(), why));
  }
}

std::optional<DeviceId> Catalog::FindDevice(absl::string_view name) const {
  for (DeviceId id = 0; id < devices_.size(); ++id) {
    if (devices_[id]->name() == name) return id;
  }
  return std::nullopt;
}

absl::Status Catalog::AddEntry(std::string name, std::unique_ptr<FileEntry> entry) {
  if (name.empty()) return absl::InvalidArgumentError("a file name must not be empty");
  auto [it, inserted] = files_.try_emplace(std::move(name), std::move(entry));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("file name '", it->first, "' is used twice"));
  }
  return absl::OkStatus();
}

absl::Status Catalog::AddStaticFile(FileMap map) {
  auto entry = std::make_unique<FileEntry>();
  entry->name = map.name();
  auto version = std::make_unique<FileVersion>();
  version->map = std::make_shared<const FileMap>(std::move(map));
  Publish(*entry, std::move(version));
  std::string name = entry->name;
  return AddEntry(std::move(name), std::move(entry));
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

absl::StatusOr<DeviceId> Catalog::DiskFor(const FiemapResult& mapped, bool may_add_devices) {
  for (DeviceId id = 0; id < devices_.size(); ++id) {
    if (devices_[id]->kind() == DeviceKind::kBlockDevice &&
        devices_[id]->device_number() == mapped.disk_device) {
      return id;
    }
  }
  if (!may_add_devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it now lives on ", mapped.disk_path, ", which the server did not open at startup"));
  }
  const std::string disk_name = std::filesystem::path(mapped.disk_path).filename();
  auto device = Device::Open(disk_name, mapped.disk_path);
  if (!device.ok()) return device.status();
  return AddDevice(*std::move(device));
}

std::unique_ptr<const FileVersion> Catalog::VersionOf(FileEntry& entry, const std::string& why,
                                                      bool may_add_devices) {
  auto version = std::make_unique<FileVersion>();
  const std::string path = entry.source.display();
  std::string reason = why;
  if (entry.leased) {
    // Exact: with the lease held no writer can open the file until it is released.
    auto mapped = MapOpenFile(entry.inode_fd, path);
    absl::StatusOr<DeviceId> disk = absl::UnknownError("");
    if (!mapped.ok()) {
      const uint64_t incident = LogIncident(
          LogLevel::kWarning, absl::StrCat("file ", entry.name, ": ", mapped.status().message()));
      reason = absl::StrCat("its extents could not be mapped (", IncidentNote(incident), ")");
    } else if (!mapped->file_route_reason.empty()) {
      reason = mapped->file_route_reason;
    } else if (disk = DiskFor(*mapped, may_add_devices); !disk.ok()) {
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
            !RawBytesMatchFile(*map, entry.inode_fd, device)) {
          reason = kMapNotYetValid;
          LogWarning(
              absl::StrFormat("file %s: its new FIEMAP map does not read back its bytes; "
                              "read through the file and mapped again in a second",
                              entry.name));
        } else if (map.ok()) {
          version->map = std::make_shared<const FileMap>(*std::move(map));
          return version;
        } else {
          reason = std::string(map.status().message());
        }
      }
    }
  }
  // The file route: the file's own device reads whatever the name names now. Its size follows
  // the file at each read: a writer may be extending or truncating it right now.
  const Device& device = *devices_[entry.file_device];
  version->map = std::make_shared<const FileMap>(FileMap::FollowingFile(
      entry.name, device.logical_block_size(), entry.file_device, device.fd()));
  version->route_note = reason;
  return version;
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
  if (old) epochs_.WaitForEarlierReads();
}

void Catalog::TakeLease(FileEntry& entry) {
  if (!entry.present) return;  // nothing to lease: Rebind serves the name again when it returns
  std::string refusal;
  int lease_error = 0;
  if (!entry.leased) {
    if (fcntl(entry.inode_fd, F_SETLEASE, F_RDLCK) == 0) {
      entry.leased = true;
      // Taking a lease makes the whole process the descriptor's signal owner again: aim the
      // break signal back at the watcher thread. (In between, it would be process-directed:
      // BlockLeaseSignals keeps other threads from taking it.)
      AimSignalsAtWatcher(entry.inode_fd);
    } else {
      lease_error = errno;
      refusal = LeaseRefusal(lease_error);
    }
  }
  // The lease first, then the map under it: mapping first would let a writer in unseen.
  entry.retry_lease = lease_error == EAGAIN;
  const bool first = entry.owned == nullptr;
  Publish(entry, VersionOf(entry, refusal, /*may_add_devices=*/first));
  const FileVersion& now = *entry.owned;
  if (entry.leased && (!now.map || now.map->source() != FileSource::kFiemap)) {
    // Read through the file for a reason the lease does not change (btrfs, inline data):
    // release it so writers do not wait on it for nothing.
    fcntl(entry.inode_fd, F_SETLEASE, F_UNLCK);
    entry.leased = false;
    if (now.route_note == kMapNotYetValid) entry.retry_lease = true;  // map it again in a second
  }
  if (first && !now.route_note.empty()) {
    LogInfo(absl::StrFormat("file %s (%s) is read through the file itself: %s", entry.name,
                            entry.source.display(), now.route_note));
  }
}

void Catalog::OnLeaseBreak(FileEntry& entry) {
  if (!entry.leased) return;  // an old signal: already handled
  entry.leased = false;
  // New reads go through the file (exact); once raw-device reads of the old map are done, the
  // writer may proceed.
  Publish(entry, VersionOf(entry, "it is being written (the lease was broken by a writer)",
                           /*may_add_devices=*/false));
  fcntl(entry.inode_fd, F_SETLEASE, F_UNLCK);
  entry.retry_lease = true;
}

void Catalog::Rebind(FileEntry& entry) {
  auto opened = OpenBeneath(entry.source, O_RDONLY | O_DIRECT);
  absl::Status problem;
  struct stat st;
  if (!opened.ok()) {
    problem = absl::IsNotFound(opened.status())
                  ? absl::NotFoundError(absl::StrFormat("file %s was removed since it was imported",
                                                        EchoedName(entry.name)))
                  : absl::FailedPreconditionError(absl::StrFormat(
                        "file %s was replaced by something the server does not serve (a symbolic "
                        "link, a FIFO or a device)",
                        EchoedName(entry.name)));
  } else if (fstat(*opened, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(*opened);
    problem = absl::FailedPreconditionError(absl::StrFormat(
        "file %s was replaced by something that is not a regular file", EchoedName(entry.name)));
  } else if (entry.present && InodeOf(st) == entry.inode) {
    close(*opened);
    return;  // the name still serves the same file
  }
  // The old file stays open (and leased: the lease belongs to the open file, which this
  // duplicate shares) until reads that may use it have finished, so its blocks go to no other
  // file meanwhile and its writers wait.
  const int old_file = fcntl(entry.inode_fd, F_DUPFD_CLOEXEC, 0);
  entry.leased = false;
  entry.retry_lease = false;
  if (problem.ok()) {
    dup3(*opened, entry.inode_fd, O_CLOEXEC);  // new reads of the file route read the new file
    close(*opened);
    entry.inode = InodeOf(st);
    entry.present = true;
    AimSignalsAtWatcher(entry.inode_fd);  // per open file: the new one needs it too
    TakeLease(entry);  // publishes the new file's version, waits for reads of the old one
    LogInfo(absl::StrFormat("file %s: %s names another file now; serving that", entry.name,
                            entry.source.display()));
  } else {
    auto version = std::make_unique<FileVersion>();
    version->unavailable = problem;
    Publish(entry, std::move(version));  // waits for reads of the old file
    const int placeholder = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (placeholder >= 0) {
      dup3(placeholder, entry.inode_fd, O_CLOEXEC);
      close(placeholder);
    }
    entry.present = false;
    entry.inode = {};
    LogInfo(absl::StrCat("file ", entry.name, ": ", problem.message()));
  }
  if (old_file >= 0) close(old_file);
}

void Catalog::Rescan() {
  for (const auto& [path, entry] : by_display_path_) {
    Rebind(*entry);
    if (entry->leased && fcntl(entry->inode_fd, F_GETLEASE) != F_RDLCK) OnLeaseBreak(*entry);
  }
}

void Catalog::RetryLeases() {
  for (const auto& [path, entry] : by_display_path_) {
    if (entry->retry_lease && !entry->leased && entry->present) TakeLease(*entry);
  }
}

void Catalog::AimSignalsAtWatcher(int fd) {
  f_owner_ex owner = {F_OWNER_TID, watcher_->tid()};
  fcntl(fd, F_SETSIG, LeaseBreakSignal());
  fcntl(fd, F_SETOWN_EX, &owner);
}

absl::Status Catalog::Watch(FileEntry& entry) {
  const int fd = entry.inode_fd;
  AimSignalsAtWatcher(fd);
  by_lease_fd_[fd] = &entry;
  const std::string display = entry.source.display();
  const std::string directory = display.substr(0, display.rfind('/'));
  for (const auto& [inotify_fd, mask, directories] :
       {std::tuple{watcher_->names_fd(), kNameWatch, &name_watches_},
        std::tuple{watcher_->contents_fd(), kContentWatch, &content_watches_}}) {
    const int wd = inotify_add_watch(inotify_fd, directory.c_str(), mask);
    if (wd < 0) return PosixError(errno, absl::StrCat("inotify_add_watch ", directory));
    (*directories)[wd] = directory;
  }
  by_display_path_[display] = &entry;
  return absl::OkStatus();
}

absl::Status Catalog::ImportFile(std::string name, std::string path) {
  auto source = BeneathParent(path);
  if (!source.ok()) return source.status();
  return ImportBeneath(std::move(name), *std::move(source));
}

absl::Status Catalog::ImportBeneath(std::string name, BeneathPath source) {
  if (files_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("file name '", name, "' is used twice"));
  }
  if (!watcher_) {
    BlockLeaseSignals();  // in this thread and the threads it starts from now on
    // One descriptor per served file: take the whole hard limit (the soft one is often 1024).
    rlimit files = {};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      setrlimit(RLIMIT_NOFILE, &files);
    }
    auto watcher = std::make_unique<Watcher>(*this);
    if (absl::Status started = watcher->Start(); !started.ok()) return started;
    watcher_ = std::move(watcher);
  }
  const std::string path = source.display();
  auto opened = OpenBeneath(source, O_RDONLY | O_DIRECT);
  if (!opened.ok()) {
    if (absl::IsResourceExhausted(opened.status())) {
      rlimit limit = {};
      getrlimit(RLIMIT_NOFILE, &limit);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot serve %s: the server holds one descriptor per served file and reached "
          "RLIMIT_NOFILE (%u); raise it (LimitNOFILE= in systemd, ulimit -n)",
          path, limit.rlim_cur));
    }
    return opened.status();
  }
  struct stat st;
  if (fstat(*opened, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(*opened);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  auto entry = std::make_unique<FileEntry>();
  entry->name = name;
  entry->source = std::move(source);
  entry->inode = InodeOf(st);
  entry->present = true;
  // One descriptor per file: the file's own device, which also holds the lease.
  Device::Options options;
  options.file_route = true;
  options.adopt_fd = *opened;
  auto device = Device::Open(absl::StrCat("file:", name), path, options);
  if (!device.ok()) return device.status();
  std::lock_guard lock(watch_mu_);
  auto added = AddDevice(*std::move(device));
  if (!added.ok()) return added.status();
  entry->file_device = *added;
  entry->inode_fd = devices_[*added]->fd();
  if (absl::Status watched = Watch(*entry); !watched.ok()) return watched;
  TakeLease(*entry);
  if (!entry->owned->map) {
    by_lease_fd_.erase(entry->inode_fd);
    by_display_path_.erase(path);
    return entry->owned->unavailable;
  }
  return AddEntry(std::move(name), std::move(entry));
}

absl::StatusOr<size_t> Catalog::ImportTree(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path root(path);
  const fs::file_status status = fs::status(root, error);
  if (error) return PosixError(error, absl::StrCat("cannot serve ", path));
  if (fs::is_regular_file(status)) {
    absl::Status added = ImportFile(root.filename().string(), path);
    if (!added.ok()) return added;
    return 1;
  }
  if (!fs::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve ", path, ": not a regular file or directory"));
  }
  std::vector<fs::path> found;
  for (auto it = fs::recursive_directory_iterator(root, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file() && !it->is_symlink()) found.push_back(it->path());
  }
  if (error) return PosixError(error, absl::StrCat("walking ", path));
  if (found.empty()) return absl::NotFoundError(absl::StrCat(path, " holds no regular files"));
  std::sort(found.begin(), found.end());
  auto directory = RootDirectory::Open(path);
  if (!directory.ok()) return directory.status();
  for (const fs::path& file : found) {
    std::string relative = file.lexically_relative(root).generic_string();
    absl::Status added = ImportBeneath(relative, BeneathPath{*directory, relative});
    if (!added.ok()) return added;
  }
  return found.size();
}

const FileMap* Catalog::LookupForRead(absl::string_view name, absl::Status* unavailable) const {
  auto it = files_.find(name);
  if (it == files_.end()) [[unlikely]] {
    *unavailable = UnknownFileError(name);
    return nullptr;
  }
  const FileVersion* version = it->second->current.load(std::memory_order_acquire);
  if (version->map) [[likely]] {
    return version->map.get();
  }
  *unavailable = version->unavailable;
  return nullptr;
}

absl::StatusOr<FileMapRef> Catalog::Resolve(absl::string_view name) const {
  auto it = files_.find(name);
  if (it == files_.end()) return UnknownFileError(name);
  std::lock_guard lock(versions_mu_);
  const FileVersion& version = *it->second->owned;
  if (version.map) return version.map;
  return version.unavailable;
}

absl::Status Catalog::DeclareVersion(absl::string_view name, std::string version) {
  if (name == "*") {
    for (auto& [file_name, entry] : files_) {
      if (entry->declared_version.empty()) entry->declared_version = version;
    }
    return absl::OkStatus();
  }
  auto it = files_.find(name);
  if (it == files_.end()) return UnknownFileError(name);
  it->second->declared_version = std::move(version);
  return absl::OkStatus();
}

const std::string& Catalog::DeclaredVersion(absl::string_view name) const {
  static const std::string kNone;
  auto it = files_.find(name);
  return it == files_.end() ? kNone : it->second->declared_version;
}

std::string Catalog::RouteNote(absl::string_view name) const {
  auto it = files_.find(name);
  if (it == files_.end()) return "";
  std::lock_guard lock(versions_mu_);
  return it->second->owned->route_note;
}

RouteCounts Catalog::route_counts() const {
  RouteCounts counts;
  std::lock_guard lock(versions_mu_);
  for (const auto& [name, entry] : files_) {
    const FileVersion& version = *entry->owned;
    if (!version.map) {
      ++counts.unavailable;
    } else if (version.map->source() == FileSource::kFiemap) {
      ++counts.leased;
    } else if (version.map->source() == FileSource::kFileRoute) {
      ++counts.file_route;
    }
  }
  return counts;
}

void Catalog::WaitUntilCurrent() {
  if (watcher_) watcher_->WaitUntilCurrent();
}

bool Catalog::RunOnWatcherThread(const std::function<void()>& task) {
  if (!watcher_) return false;
  watcher_->Run(task);
  return true;
}

int Catalog::NameEventsFd() const { return watcher_ ? watcher_->names_fd() : -1; }

uint64_t Catalog::RequestCatchUp() { return watcher_ ? watcher_->RequestCatchUp() : 0; }

bool Catalog::HasCaughtUp(uint64_t ticket) const {
  return !watcher_ || watcher_->HasHandled(ticket);
}

std::vector<std::string> Catalog::FileNames() const {
  std::vector<std::string> names;
  names.reserve(files_.size());
  for (const auto& [name, entry] : files_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace blockread::storage
