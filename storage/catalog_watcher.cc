// The catalog's watcher thread: name and content changes in the
// served directories (inotify), and the handlers that keep each served name's version current.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/catalog_internal.h"
#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::storage {

namespace {

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

}  // namespace

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
    for (int fd : {names_fd_, contents_fd_, wake_fd_}) {
      if (fd >= 0) close(fd);
    }
  }

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
  // Whether the files reads asked to have opened before `ticket` was requested are open now (or
  // answer why not): sooner than HasHandled, which also waits for their leases and maps.
  bool HasOpened(uint64_t ticket) const {
    return opened_.load(std::memory_order_acquire) >= ticket;
  }
  bool HasAppliedNames(uint64_t ticket) const {
    return names_applied_.load(std::memory_order_acquire) >= ticket;
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
    pthread_setname_np(pthread_self(), "blockread-watch");
    started.set_value(absl::OkStatus());

    absl::Time last_retry = absl::Now();
    while (!stop_.load()) {
      int timeout_ms = -1;
      {
        std::lock_guard lock(catalog_.watch_mu_);
        // Retries at least once a second while there are any, events or not: a steady stream of
        // writes elsewhere must not keep a closed file waiting.
        if (catalog_.HasRetries()) {
          const int64_t since = absl::ToInt64Milliseconds(absl::Now() - last_retry);
          timeout_ms = static_cast<int>(std::clamp<int64_t>(1000 - since, 0, 1000));
        }
      }
      pollfd fds[3] = {{names_fd_, POLLIN, 0}, {contents_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      const int ready = poll(fds, 3, timeout_ms);
      if (ready < 0 && errno != EINTR) {
        LogError(PosixErrorMessage(errno, "file watcher: poll"));
        return;
      }
      uint64_t ignored;
      while (read(wake_fd_, &ignored, sizeof(ignored)) > 0) {
      }
      const uint64_t ticket = requested_.load(std::memory_order_acquire);
      std::vector<FileEntry*> to_lease;
      {
        std::lock_guard lock(catalog_.watch_mu_);
        catalog_.TakeBrokenLeases();
        HandleInotifyEvents(ticket);
        // Files reads are waiting for: served through the file at once, and those reads go on
        // (the ticket) before the leases and maps, which write the files back.
        catalog_.OpenRequested(to_lease);
      }
      opened_.store(ticket, std::memory_order_release);
      {
        std::lock_guard lock(catalog_.watch_mu_);
        for (FileEntry* entry : to_lease) catalog_.TakeLease(*entry);
        if (catalog_.HasRetries() && absl::Now() - last_retry >= absl::Seconds(1)) {
          last_retry = absl::Now();
          catalog_.RetryLeases();
        }
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

  // What one read of an inotify instance said.
  struct Events {
    std::vector<FileEntry*> served;    // served files whose name or content changed
    std::vector<std::string> unknown;  // display paths created, moved in or closed, not served
    // Display paths of directories created, moved in or out, or removed in a served directory.
    std::vector<std::string> directories;
    bool rescan = false;  // events lost: walk everything
    bool lost = false;    // the kernel's queue overflowed (fs.inotify.max_queued_events)
    // What they concern, for the reads that wait (name events only).
    std::shared_ptr<ChangingNames> changing;
  };

  void HandleInotifyEvents(uint64_t turn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(catalog_.watch_mu_) {
    // Name events, with the sequence odd from before they are read until they are applied: a
    // worker whose poll of names_fd_ finds it drained cannot otherwise tell "read, not applied
    // yet" from "no event" (storage/name_sync.h). Applying them opens files and replaces names,
    // nothing more: mapping a replaced or new file (FIEMAP_FLAG_SYNC writes it back) waits until
    // the sequence is even again, served through the file meanwhile (exact).
    const uint64_t seq = catalog_.name_events_seq_.fetch_add(1, std::memory_order_seq_cst) + 1;
    Events names = ReadEvents(names_fd_, catalog_.name_watches_, /*name_events=*/true);
    // Reads of the names these events do not concern go on from here (NameMayBeChanging).
    names.changing->turn = turn;
    names.changing->seq = seq;
    catalog_.PublishChanging(std::move(names.changing));
    std::vector<FileEntry*> to_close, added, gone;
    if (names.rescan) {
      LogWarning(
          "file watcher: inotify events lost (queue overflow; fs.inotify.max_queued_events); "
          "walking every served tree and looking at every served name again");
      catalog_.Rescan(to_close, gone);
      catalog_.SyncTrees(added);
    } else {
      // By what they name: the files named, and the names below the directories that changed.
      for (FileEntry* entry : names.served) catalog_.Rebind(*entry, to_close, gone);
      for (const std::string& directory : names.directories) {
        catalog_.ChangeDirectory(directory, to_close, gone, added);
      }
      AddNewFiles(names.unknown, added);
      catalog_.DropStaleWatches(names.directories);
    }
    catalog_.Evict(to_close);
    catalog_.ChangeNames(added, gone);
    catalog_.name_events_seq_.fetch_add(1, std::memory_order_release);
    names_applied_.store(turn, std::memory_order_release);

    // Content events: workers do not wait for these.
    Events contents = ReadEvents(contents_fd_, catalog_.content_watches_, /*name_events=*/false);
    if (contents.rescan && !names.rescan) {
      if (contents.lost) {
        LogWarning(
            "file watcher: inotify events lost (queue overflow; fs.inotify."
            "max_queued_events); re-checking every served file");
      }
      std::vector<FileEntry*> closing, more, removed;
      catalog_.name_events_seq_.fetch_add(1, std::memory_order_seq_cst);
      catalog_.Rescan(closing, removed);
      catalog_.SyncTrees(more);
      catalog_.Evict(closing);
      catalog_.ChangeNames(more, removed);
      catalog_.name_events_seq_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (FileEntry* entry : contents.served) {
      // Not open: the next read opens what is there then. Not leased: the writer may be done
      // (take the lease and map it again), or still at work (the file route's size is brought up
      // to date). Leased: nothing should have changed it; map it again under the lease all the
      // same.
      if (entry->present && !entry->cold()) catalog_.TakeLease(*entry);
    }
    // New files whose writer closed them: served now (their names appear; no read waits).
    std::vector<FileEntry*> closed;
    AddNewFiles(contents.unknown, closed, /*just_closed=*/true);
    catalog_.ChangeNames(closed, {});
  }

  void AddNewFiles(const std::vector<std::string>& paths, std::vector<FileEntry*>& added,
                   bool just_closed = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(catalog_.watch_mu_) {
    std::string relative;
    for (const std::string& path : paths) {
      if (Tree* tree = catalog_.TreeOf(path, &relative)) {
        catalog_.AddNewFile(*tree, relative, added, just_closed);
      }
    }
  }

  // Reads every event queued on `fd` (one of the two inotify instances).
  Events ReadEvents(int fd, absl::flat_hash_map<int, WatchedDirectory>& directories,
                    bool name_events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(catalog_.watch_mu_) {
    alignas(inotify_event) char buffer[64 * 1024];
    Events events;
    events.changing = std::make_shared<ChangingNames>();
    ChangingNames& changing = *events.changing;
    std::string relative;
    for (;;) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n <= 0) break;
      for (ssize_t at = 0; at < n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
        if (event->mask & IN_IGNORED) {
          directories.erase(event->wd);  // the watch is gone (its directory removed)
          continue;
        }
        if (event->mask & IN_Q_OVERFLOW) {  // events lost: anything may have changed
          events.lost = events.rescan = changing.all = true;
          continue;
        }
        // A watched directory itself moved or removed: its parent's event (a directory moved or
        // removed in it) says so, or it is a served root, whose names stay relative to it.
        if (event->len == 0 || (event->mask & (IN_DELETE_SELF | IN_MOVE_SELF))) continue;
        auto directory = directories.find(event->wd);
        if (directory == directories.end()) continue;
        std::string path = absl::StrCat(directory->second.path, "/", event->name);
        const bool in_tree = catalog_.TreeOf(path, &relative) != nullptr;
        if ((event->mask & IN_ISDIR) && (event->mask & kNameEvents)) {
          // A directory created, moved in or out, or removed: the names below it.
          if (in_tree) {
            changing.names.insert(relative);
            changing.directories.insert(absl::StrCat(relative, "/"));
          }
          events.directories.push_back(std::move(path));
          continue;
        }
        if (FileEntry* entry = catalog_.ServedAt(path)) {
          events.served.push_back(entry);
          if (name_events) changing.names.insert(entry->name);
        } else if (event->mask & (IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE)) {
          if (name_events && in_tree) changing.names.insert(relative);
          events.unknown.push_back(std::move(path));
        }
      }
    }
    SortUnique(events.served);
    std::sort(events.unknown.begin(), events.unknown.end());
    events.unknown.erase(std::unique(events.unknown.begin(), events.unknown.end()),
                         events.unknown.end());
    std::sort(events.directories.begin(), events.directories.end());
    events.directories.erase(std::unique(events.directories.begin(), events.directories.end()),
                             events.directories.end());
    return events;
  }

  static void SortUnique(std::vector<FileEntry*>& entries) {
    std::sort(entries.begin(), entries.end());
    entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  }

  Catalog& catalog_;
  int names_fd_ = -1;     // kNameWatch on every served directory; workers poll it too
  int contents_fd_ = -1;  // kContentWatch on every served directory
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Tickets: requested_ counts RequestCatchUp() calls; handled_ is the last one whose changes
  // the watcher has handled. mu_ only pairs handled_cv_ with handled_ for blocking waiters.
  std::atomic<uint64_t> requested_{0};
  std::atomic<uint64_t> handled_{0};
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> names_applied_{0};
  std::mutex mu_;
  std::condition_variable handled_cv_;
  // RunOnWatcherThread()'s tasks, run before the ticket they were queued ahead of is handled.
  std::vector<const std::function<void()>*> tasks_;  // GUARDED_BY(mu_)
};

// Here rather than in catalog.cc: both need the whole Watcher (unique_ptr's deleter).
Catalog::Catalog() : names_generation_(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))) {
  cold_version_.route_note = "not open now: it is opened on its first read";
}

Catalog::~Catalog() {
  // Stopped before watcher_ is reset: its handlers use watcher_ until the thread exits. No handler
  // runs after this; the devices close their descriptors.
  // The watcher first: its handlers aim lease signals at the lease thread. Then the lease
  // thread, whose breaks still wake the (stopped, not yet freed) watcher.
  if (watcher_) watcher_->Stop();
  lease_signals_.reset();
  watcher_.reset();
}

void Catalog::TakeLease(FileEntry& entry) {
  if (!entry.present || entry.cold()) return;  // nothing open: the next read opens it
  std::string refusal;
  int lease_error = 0;
  bool leased;
  uint64_t breaks;
  OpenFile& open = Open(entry);
  {
    std::lock_guard lock(lease_mu_);
    if (!open.leased.load(std::memory_order_relaxed)) {
      if (fcntl(open.fd, F_SETLEASE, F_RDLCK) == 0) {
        open.leased.store(true, std::memory_order_relaxed);
        // Taking a lease makes the whole process the descriptor's signal owner again: aim the
        // break signal back at the lease thread. (In between, it would be process-directed:
        // BlockLeaseSignals keeps other threads from taking it.)
        lease_signals_->Aim(open.fd);
      } else {
        lease_error = errno;
        refusal = LeaseRefusal(lease_error);
      }
    }
    leased = open.leased.load(std::memory_order_relaxed);
    breaks = open.lease_breaks;
  }
  // The lease first, then the map under it (a writeback, and for small files a read back):
  // mapping first would let a writer in unseen. A break meanwhile wins (PublishUnlessBroken).
  if (lease_error == EAGAIN) {
    retry_leases_.insert(&entry);
  } else {
    retry_leases_.erase(&entry);
  }
  std::unique_ptr<const FileVersion> version = VersionOf(entry, refusal, leased);
  const FileVersion* now = version.get();  // freed only by this thread (the watcher)
  if (!PublishUnlessBroken(entry, std::move(version), breaks)) {
    retry_leases_.insert(&entry);
    return;
  }
  if (leased && (!now->map || now->map->source() != FileSource::kFiemap)) {
    // Read through the file for a reason the lease does not change (btrfs, inline data):
    // release it so writers do not wait on it for nothing.
    DropLease(entry);
    if (now->route_note == kMapNotYetValid) retry_leases_.insert(&entry);  // map it again soon
  }
  if (!now->route_note.empty() && now->route_note != kMapNotYetValid &&
      told_routes_.size() < kMaxToldRoutes && told_routes_.insert(now->route_note).second) {
    LogInfo(
        absl::StrFormat("file %s (%s) is read through the file itself: %s (said once for "
                        "each reason)",
                        entry.name, entry.display(), now->route_note));
  }
}

bool Catalog::PublishUnlessBroken(FileEntry& entry, std::unique_ptr<const FileVersion> version,
                                  uint64_t breaks) {
  std::unique_ptr<const FileVersion> old;
  {
    std::lock_guard lock(lease_mu_);
    OpenFile& open = Open(entry);
    if (open.lease_breaks != breaks) return false;  // a writer came: the file route stays
    if (version->epoch_domain != 0) open.raw_domain = version->epoch_domain;
    std::lock_guard versions_lock(versions_mu_);
    old = std::move(entry.owned);
    entry.owned = std::move(version);
    entry.current.store(entry.owned.get(), std::memory_order_release);
  }
  if (old && entry.reachable) epochs_.WaitForEarlierReads();
  return true;
}

void Catalog::DropLease(FileEntry& entry) {
  std::lock_guard lock(lease_mu_);
  if (entry.cold()) return;
  OpenFile& open = Open(entry);
  if (open.leased.load(std::memory_order_relaxed)) {
    fcntl(open.fd, F_SETLEASE, F_UNLCK);
    open.leased.store(false, std::memory_order_relaxed);
  }
}

void Catalog::TakeBrokenLeases() {
  std::vector<std::unique_ptr<const FileVersion>> versions;
  std::vector<FileEntry*> entries;
  {
    std::lock_guard lock(broken_mu_);
    versions.swap(broken_versions_);
    entries.swap(broken_entries_);
  }
  if (!versions.empty()) epochs_.WaitForEarlierReads();  // then `versions` may go
  for (FileEntry* entry : entries) {
    if (!entry->cold()) retry_leases_.insert(entry);
  }
}

void PointAtNothing(int fd) {
  const int placeholder = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (placeholder >= 0) {
    dup3(placeholder, fd, O_CLOEXEC);
    close(placeholder);
  }
}

void Catalog::Rebind(FileEntry& entry, std::vector<FileEntry*>& to_close,
                     std::vector<FileEntry*>& gone) {
  auto opened = OpenBeneath(entry.source(), O_PATH);
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
  } else {
    const bool regular = fstat(*opened, &st) == 0 && S_ISREG(st.st_mode);
    close(*opened);
    if (!regular) {
      problem = absl::FailedPreconditionError(absl::StrFormat(
          "file %s was replaced by something that is not a regular file", EchoedName(entry.name)));
    }
  }
  if (problem.ok()) {
    const bool was_served = entry.present;
    entry.present = true;
    if (!entry.cold() && InodeOf(st) == Open(entry).inode) return;  // it still serves that file
    if (entry.cold() && entry.owned == nullptr) return;  // the next read opens what is there
    // Another file, or a regular file again: made cold, so the next read opens it. The old file
    // stays open (and leased) until reads that may use it have finished (Evict).
    to_close.push_back(&entry);
    if (was_served) {
      LogInfo(absl::StrFormat("file %s: %s names another file now; serving that", entry.name,
                              entry.display()));
    }
    return;
  }
  entry.present = false;
  if (entry.tree != nullptr && absl::IsNotFound(problem)) {
    // Gone from a served tree: the name leaves the table (ChangeNames), and only once no read
    // can still reach the old file is its descriptor let go.
    UnindexPath(entry);
    gone.push_back(&entry);
    return;
  }
  auto version = std::make_unique<FileVersion>();
  version->unavailable = problem;
  Publish(entry, std::move(version));  // waits for reads of the old file
  ReleaseSlot(entry);
  LogInfo(absl::StrCat("file ", entry.name, ": ", problem.message()));
}

void Catalog::Rescan(std::vector<FileEntry*>& to_close, std::vector<FileEntry*>& gone) {
  std::vector<FileEntry*> served;
  served.reserve(tree_paths_.size() + own_paths_.size());
  for (FileEntry* entry : tree_paths_) served.push_back(entry);
  for (const auto& [path, entry] : own_paths_) served.push_back(entry);
  for (FileEntry* entry : served) Rebind(*entry, to_close, gone);
}

void Catalog::RetryLeases() {
  const std::vector<FileEntry*> retry(retry_leases_.begin(), retry_leases_.end());
  for (FileEntry* entry : retry) {
    if (entry->present && !entry->cold() && !Open(*entry).leased.load(std::memory_order_relaxed)) {
      TakeLease(*entry);
    } else {
      retry_leases_.erase(entry);
    }
  }
  // New files that were still open for writing: served once their writers are gone.
  std::vector<std::pair<Tree*, std::string>> waiting;
  for (const auto& [path, file] : pending_) waiting.push_back(file);
  std::vector<FileEntry*> added;
  for (const auto& [tree, relative] : waiting) AddNewFile(*tree, relative, added);
  WatchUnwatched(added);
  ChangeNames(added, {});
}

void Catalog::DropStaleWatches(const std::vector<std::string>& directories) {
  const auto stale = [&](const WatchedDirectory& watched) {
    if (watched.generation == walk_generation_) return false;  // a walk just watched it there
    for (const std::string& directory : directories) {
      if (watched.path == directory ||
          (absl::StartsWith(watched.path, directory) && watched.path[directory.size()] == '/')) {
        return true;
      }
    }
    return false;
  };
  for (auto [fd, watches] : {std::pair{watcher_->names_fd(), &name_watches_},
                             std::pair{watcher_->contents_fd(), &content_watches_}}) {
    std::vector<int> drop;
    for (const auto& [wd, watched] : *watches) {
      if (stale(watched)) drop.push_back(wd);
    }
    for (int wd : drop) {
      inotify_rm_watch(fd, wd);  // its IN_IGNORED follows; the watch is forgotten now
      watches->erase(wd);
    }
  }
  ++walk_generation_;
}

absl::Status Catalog::WatchDirectory(const std::string& directory) {
  for (const auto& [inotify_fd, mask, directories] :
       {std::tuple{watcher_->names_fd(), kNameWatch, &name_watches_},
        std::tuple{watcher_->contents_fd(), kContentWatch, &content_watches_}}) {
    // The same directory watched again returns its watch: the path is brought up to date (a
    // directory moved within the tree is watched under its new path from then on).
    const int wd = inotify_add_watch(inotify_fd, directory.c_str(), mask);
    if (wd < 0) {
      if (errno == ENOSPC) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "cannot watch %s: the inotify watch limit is reached (one watch per served "
            "directory, two instances); raise fs.inotify.max_user_watches",
            directory));
      }
      return PosixError(errno, absl::StrCat("inotify_add_watch ", directory));
    }
    (*directories)[wd] = WatchedDirectory{directory, walk_generation_};
  }
  return absl::OkStatus();
}

absl::Status Catalog::StartWatcher() {
  if (watcher_) return absl::OkStatus();
  BlockLeaseSignals();  // in this thread and the threads it starts from now on
  // Open files are a cache below RLIMIT_NOFILE: take the whole hard limit (the soft one is often
  // 1024), so the cache can be as large as the operator allows.
  rlimit files = {};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  auto watcher = std::make_unique<Watcher>(*this);
  if (absl::Status started = watcher->Start(); !started.ok()) return started;
  watcher_ = std::move(watcher);
  if (absl::Status started = StartLeaseBreaker(); !started.ok()) return started;
  return absl::OkStatus();
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

bool Catalog::HasOpened(uint64_t ticket) const { return !watcher_ || watcher_->HasOpened(ticket); }

bool Catalog::HasAppliedNames(uint64_t ticket) const {
  return !watcher_ || watcher_->HasAppliedNames(ticket);
}

void Catalog::PublishChanging(std::shared_ptr<const ChangingNames> changing) {
  std::shared_ptr<const ChangingNames> old;
  std::lock_guard lock(changing_mu_);
  old.swap(changing_);  // freed after the lock is let go
  changing_ = std::move(changing);
}

NameChange Catalog::NameMayBeChanging(absl::string_view name, uint64_t turn) const {
  std::shared_ptr<const ChangingNames> changing;
  {
    std::lock_guard lock(changing_mu_);
    changing = changing_;
  }
  if (turn == 0) {
    const uint64_t seq = name_events_seq_.load(std::memory_order_acquire);
    if ((seq & 1) == 0) return NameChange::kNo;  // that batch is applied
    if (changing == nullptr || changing->seq != seq) return NameChange::kUnknown;
  } else if (changing == nullptr || changing->turn < turn) {
    return NameChange::kUnknown;  // the events have not been read yet: they may name anything
  }
  if (changing->all || changing->names.contains(name)) return NameChange::kYes;
  for (size_t slash = name.find('/'); slash != absl::string_view::npos;
       slash = name.find('/', slash + 1)) {
    if (changing->directories.contains(name.substr(0, slash + 1))) return NameChange::kYes;
  }
  return NameChange::kNo;
}

}  // namespace blockread::storage
