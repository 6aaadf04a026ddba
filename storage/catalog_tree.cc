// Served trees kept live: walking them (every directory watched), serving files created in them
// after startup from slots reserved at setup, and replacing the name table when names come and
// go. Runs on the watcher thread (and the setup thread, before serving), under watch_mu_.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/catalog_internal.h"
#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::storage {

// New files remembered while no slot is free or a writer holds them open (about 100 bytes each).
constexpr size_t kMaxPendingNewFiles = 65536;

absl::StatusOr<std::vector<std::string>> Catalog::WalkTree(Tree& tree) {
  namespace fs = std::filesystem;
  const fs::path root(tree.root->path());
  // A directory removed or renamed while it is walked ends the walk with an error: walk again
  // (the events of that change make the watcher walk once more anyway).
  for (int attempt = 1;; ++attempt) {
    std::vector<std::string> files;
    if (absl::Status s = WatchDirectory(tree.root->path()); !s.ok()) return s;
    std::error_code error;
    // Each directory is watched when the walk reaches its entry, before the walk lists it: a file
    // created in it meanwhile is listed or has its event queued (or both).
    for (auto it = fs::recursive_directory_iterator(root, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      std::error_code type_error;
      const fs::file_status status = it->symlink_status(type_error);  // symlinks not followed
      if (type_error) continue;
      std::string relative = it->path().lexically_relative(root).generic_string();
      if (fs::is_directory(status)) {
        absl::Status watched = WatchDirectory(tree.DisplayOf(relative));
        if (absl::IsResourceExhausted(watched)) return watched;  // gone meanwhile: walked again
      } else if (fs::is_regular_file(status)) {
        files.push_back(std::move(relative));
      }
    }
    if (!error) {
      std::sort(files.begin(), files.end());
      return files;
    }
    if (attempt == 3) return PosixError(error, absl::StrCat("walking ", tree.root->path()));
  }
}

Catalog::Tree* Catalog::TreeOf(absl::string_view path, std::string* relative) {
  for (const std::unique_ptr<Tree>& tree : trees_) {
    const std::string& root = tree->root->path();
    if (path.size() > root.size() + 1 && absl::StartsWith(path, root) && path[root.size()] == '/') {
      *relative = std::string(path.substr(root.size() + 1));
      return tree.get();
    }
  }
  return nullptr;
}

void Catalog::SyncTrees(std::vector<FileEntry*>& added, std::vector<FileEntry*>& to_lease) {
  for (const std::unique_ptr<Tree>& tree : trees_) {
    auto files = WalkTree(*tree);
    if (!files.ok()) {
      LogWarning(absl::StrCat("file watcher: ", files.status().message(),
                              "; files created there may not be served"));
      continue;
    }
    for (const std::string& relative : *files) AddNewFile(*tree, relative, added, to_lease);
  }
}

void Catalog::AddNewFile(Tree& tree, const std::string& relative, std::vector<FileEntry*>& added,
                         std::vector<FileEntry*>& to_lease) {
  const std::string display = tree.DisplayOf(relative);
  if (by_display_path_.contains(display)) return;  // served already
  BeneathPath source{tree.root, relative};
  auto opened = OpenBeneath(source, O_RDONLY | O_DIRECT);
  struct stat st;
  if (!opened.ok() || fstat(*opened, &st) != 0 || !S_ISREG(st.st_mode)) {
    // Gone again, a symlink, a FIFO, a directory: not served.
    if (opened.ok()) close(*opened);
    pending_.erase(display);
    return;
  }
  // Served once closed after writing: no read lease can be had while a writer holds it open.
  if (fcntl(*opened, F_SETLEASE, F_RDLCK) == 0) {
    fcntl(*opened, F_SETLEASE, F_UNLCK);
  } else if (errno == EAGAIN) {
    close(*opened);
    pending_.try_emplace(display, &tree, relative);  // IN_CLOSE_WRITE, or the retry each second
    return;
  }  // else no leases here (no CAP_LEASE, a filesystem without them): served through the file
  pending_.erase(display);
  const bool name_taken = Find(relative) != nullptr ||
                          std::any_of(added.begin(), added.end(),
                                      [&](const FileEntry* e) { return e->name == relative; });
  if (name_taken || vacant_.empty()) {
    close(*opened);
    if (name_taken) {
      LogWarning(absl::StrFormat("file %s is not served: another served file is named %s",
                                 display, relative));
      return;
    }
    // Tried again each second while slots are free (RetryLeases); the walk after any directory
    // change finds the ones not remembered.
    if (pending_.size() < kMaxPendingNewFiles) pending_.try_emplace(display, &tree, relative);
    if (!told_slots_full_) {
      told_slots_full_ = true;
      LogWarning(absl::StrFormat(
          "file %s is not served yet: %u files created since startup are served already, as "
          "many as --max-new-files allows (each holds a descriptor from startup on); it is "
          "served once a served file is removed, or after a restart",
          display, new_file_slots_));
    }
    return;
  }
  FileEntry& entry = *vacant_.back();
  vacant_.pop_back();
  dup3(*opened, entry.inode_fd, O_CLOEXEC);
  close(*opened);
  // No name reaches the slot: its fields change without versions_mu_.
  entry.name = relative;
  entry.declared_version = default_version_;
  entry.source = std::move(source);
  entry.tree = &tree;
  entry.inode = InodeOf(st);
  entry.present = true;
  entry.leased = false;
  entry.retry_lease = false;
  AimSignalsAtWatcher(entry.inode_fd);
  by_display_path_[display] = &entry;
  // Read through the file until names are current; then leased and mapped.
  Publish(entry, VersionOf(entry, "it was created a moment ago (it is mapped next)",
                           /*may_add_devices=*/false));
  added.push_back(&entry);
  to_lease.push_back(&entry);
}

void Catalog::ChangeNames(const std::vector<FileEntry*>& added,
                          const std::vector<FileEntry*>& gone) {
  if (added.empty() && gone.empty()) return;
  std::unique_ptr<NameTable> next;
  {
    std::lock_guard lock(versions_mu_);
    next = std::make_unique<NameTable>(*owned_names_);
  }
  for (FileEntry* entry : gone) {
    auto it = next->find(entry->name);
    if (it != next->end() && it->second == entry) next->erase(it);
  }
  for (FileEntry* entry : added) {
    (*next)[entry->name] = entry;
    entry->reachable = true;
  }
  std::unique_ptr<NameTable> old;
  {
    std::lock_guard lock(versions_mu_);
    old = std::move(owned_names_);
    owned_names_ = std::move(next);
    names_.store(owned_names_.get(), std::memory_order_release);
  }
  names_generation_.fetch_add(1, std::memory_order_acq_rel);
  // Once no read can be using the old table, nothing reaches the removed entries: their files are
  // let go and their slots serve the next new files.
  epochs_.WaitForEarlierReads();
  for (FileEntry* entry : gone) {
    entry->reachable = false;
    auto version = std::make_unique<FileVersion>();
    version->unavailable = UnknownFileError(entry->name);
    Publish(*entry, std::move(version));
    PointAtNothing(entry->inode_fd);
    entry->inode = {};
    entry->leased = false;
    entry->retry_lease = false;
    vacant_.push_back(entry);
  }
  if (!gone.empty()) told_slots_full_ = false;
}

void Catalog::ReserveNewFileSlots(uint32_t block_size) {
  for (size_t i = 0; i < new_file_slots_; ++i) {
    const int placeholder = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (placeholder < 0) {
      LogWarning(absl::StrFormat("only %u of %u slots for new files reserved: %s", i,
                                 new_file_slots_, PosixErrorMessage(errno, "open /dev/null")));
      return;
    }
    auto added = AddDevice(Device::FileRouteSlot(absl::StrCat("file-slot:", i), placeholder,
                                                 block_size));
    if (!added.ok()) return;
    auto entry = std::make_unique<FileEntry>();
    entry->file_device = *added;
    entry->inode_fd = placeholder;
    auto version = std::make_unique<FileVersion>();
    version->unavailable = absl::NotFoundError("no file");
    Publish(*entry, std::move(version));
    by_lease_fd_[placeholder] = entry.get();
    vacant_.push_back(entry.get());
    entries_.push_back(std::move(entry));
  }
}

}  // namespace blockread::storage
