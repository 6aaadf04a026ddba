// Served trees kept live: walking them (every directory watched), naming files created in them
// after startup, and replacing the name table when names come and go. Runs on the watcher thread
// (and the setup thread, before serving), under watch_mu_.
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

absl::StatusOr<std::vector<std::string>> Catalog::WalkTree(Tree& tree,
                                                           const std::string& relative_start) {
  namespace fs = std::filesystem;
  const fs::path root(tree.root->path());
  const std::string start = tree.DisplayOf(relative_start);
  // A directory removed or renamed while it is walked ends the walk with an error: walk again
  // (the events of that change make the watcher walk once more anyway).
  for (int attempt = 1;; ++attempt) {
    std::vector<std::string> files;
    if (absl::Status s = WatchDirectory(start); !s.ok()) return s;
    std::error_code error;
    // Each directory is watched when the walk reaches its entry, before the walk lists it: a file
    // created in it meanwhile is listed or has its event queued (or both).
    for (auto it = fs::recursive_directory_iterator(start, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      std::error_code type_error;
      const fs::file_status status = it->symlink_status(type_error);  // symlinks not followed
      if (type_error) continue;
      std::string relative = it->path().lexically_relative(root).generic_string();
      if (fs::is_directory(status)) {
        const std::string display = tree.DisplayOf(relative);
        absl::Status watched = WatchDirectory(display);
        if (absl::IsResourceExhausted(watched)) {
          // Out of inotify watches: changes in it could not be seen, so its files are not served
          // (rather than served stale) until a watch can be had (RetryLeases looks each second).
          it.disable_recursion_pending();
          NoteUnwatched(display, watched);
        }
        // Any other error: gone meanwhile; its events make the watcher walk again.
      } else if (fs::is_regular_file(status)) {
        files.push_back(std::move(relative));
      }
    }
    if (!error) {
      std::sort(files.begin(), files.end());
      return files;
    }
    if (attempt == 3) return PosixError(error, absl::StrCat("walking ", start));
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

void Catalog::ChangeDirectory(const std::string& directory, std::vector<FileEntry*>& to_close,
                              std::vector<FileEntry*>& gone, std::vector<FileEntry*>& added) {
  // The served names at or below it: removed, moved away, or replaced by what is there now.
  for (FileEntry* entry : ServedBelow(directory)) Rebind(*entry, to_close, gone);
  // What it holds now, if it is a directory in a served tree (created or moved in).
  std::string relative;
  Tree* tree = TreeOf(directory, &relative);
  std::error_code error;
  if (tree == nullptr ||
      !std::filesystem::is_directory(std::filesystem::symlink_status(directory, error))) {
    return;
  }
  auto files = WalkTree(*tree, relative);
  if (!files.ok()) {
    if (absl::IsResourceExhausted(files.status())) {
      NoteUnwatched(directory, files.status());
    } else {
      LogWarning(absl::StrCat("file watcher: ", files.status().message(),
                              "; files created there may not be served"));
    }
    return;
  }
  unwatched_.erase(directory);
  for (const std::string& file : *files) AddNewFile(*tree, file, added);
}

void Catalog::NoteUnwatched(const std::string& directory, const absl::Status& why) {
  if (unwatched_.insert(directory).second && unwatched_.size() == 1) {
    LogWarning(absl::StrCat(why.message(),
                            "; the files below it (and below any other directory that cannot be "
                            "watched) are not served until it can be (looked at every second)"));
  }
}

void Catalog::WatchUnwatched(std::vector<FileEntry*>& added) {
  const std::vector<std::string> directories(unwatched_.begin(), unwatched_.end());
  std::vector<FileEntry*> to_close, gone;
  for (const std::string& directory : directories) {
    unwatched_.erase(directory);
    ChangeDirectory(directory, to_close, gone, added);  // back in unwatched_ if still short
    if (unwatched_.contains(directory)) break;          // no watch to be had: the rest wait too
  }
  if (unwatched_.empty() && !directories.empty()) {
    LogInfo("every directory of the served trees is watched again: all their files are served");
  }
}

void Catalog::SyncTrees(std::vector<FileEntry*>& added) {
  for (const std::unique_ptr<Tree>& tree : trees_) {
    auto files = WalkTree(*tree);
    if (!files.ok()) {
      LogWarning(absl::StrCat("file watcher: ", files.status().message(),
                              "; files created there may not be served"));
      continue;
    }
    for (const std::string& relative : *files) AddNewFile(*tree, relative, added);
  }
}

void Catalog::AddNewFile(Tree& tree, const std::string& relative, std::vector<FileEntry*>& added,
                         bool just_closed) {
  if (tree_paths_.contains(TreePath{&tree, relative})) return;  // served already
  const std::string display = tree.DisplayOf(relative);
  BeneathPath source{tree.root, relative};
  auto opened = OpenBeneath(source, O_RDONLY);
  struct stat st;
  if (!opened.ok() || fstat(*opened, &st) != 0 || !S_ISREG(st.st_mode)) {
    // Gone again, a symlink, a FIFO, a directory: not served.
    if (opened.ok()) close(*opened);
    pending_.erase(display);
    return;
  }
  // Served once closed after writing: no read lease can be had while a writer holds it open.
  // Without leases (no CAP_LEASE for a file the server does not own, a filesystem without them)
  // a writer cannot be seen: such a file is served at once, read through itself.
  bool writer = fcntl(*opened, F_SETLEASE, F_RDLCK) != 0 && errno == EAGAIN;
  // The kernel queues IN_CLOSE_WRITE before it drops the closing writer's write access (both in
  // the same __fput): a file whose writer just closed it can still refuse the lease for a few
  // microseconds. Look again briefly rather than a second later.
  for (int again = 0; writer && just_closed && again < 20; ++again) {
    usleep(50);
    writer = fcntl(*opened, F_SETLEASE, F_RDLCK) != 0 && errno == EAGAIN;
  }
  if (!writer) fcntl(*opened, F_SETLEASE, F_UNLCK);
  close(*opened);
  if (writer) {
    // IN_CLOSE_WRITE, or the retry each second.
    if (pending_.size() < kMaxPendingNewFiles) pending_.try_emplace(display, &tree, relative);
    return;
  }
  pending_.erase(display);
  FileEntry* entry = NewEntry();
  entry->name = relative;
  entry->tree = &tree;
  IndexPath(*entry);
  added.push_back(entry);
}

Catalog::FileEntry* Catalog::ServedAt(absl::string_view display) {
  std::string relative;
  if (Tree* tree = TreeOf(display, &relative)) {
    auto it = tree_paths_.find(TreePath{tree, relative});
    return it == tree_paths_.end() ? nullptr : *it;
  }
  auto it = own_paths_.find(display);
  return it == own_paths_.end() ? nullptr : it->second;
}

void Catalog::IndexPath(FileEntry& entry) {
  if (entry.tree != nullptr) {
    tree_paths_.insert(&entry);
  } else {
    own_paths_[entry.display()] = &entry;
  }
}

void Catalog::UnindexPath(FileEntry& entry) {
  if (entry.tree != nullptr) {
    auto it = tree_paths_.find(TreePath{entry.tree, entry.name});
    if (it != tree_paths_.end() && *it == &entry) tree_paths_.erase(it);
  } else {
    auto it = own_paths_.find(entry.display());
    if (it != own_paths_.end() && it->second == &entry) own_paths_.erase(it);
  }
}

std::vector<Catalog::FileEntry*> Catalog::ServedBelow(const std::string& directory) {
  std::vector<FileEntry*> below;
  // Not one range with the directory itself: "d.x/..." sorts between "d" and "d/...".
  const std::string prefix = directory + "/";
  std::string relative;
  if (Tree* tree = TreeOf(directory, &relative)) {
    if (auto it = tree_paths_.find(TreePath{tree, relative}); it != tree_paths_.end()) {
      below.push_back(*it);  // a served file where the directory is now
    }
    const std::string relative_prefix = relative + "/";
    for (auto it = tree_paths_.lower_bound(TreePath{tree, relative_prefix});
         it != tree_paths_.end() && (*it)->tree == tree &&
         absl::StartsWith((*it)->name, relative_prefix);
         ++it) {
      below.push_back(*it);
    }
  } else {
    // The directory holds whole trees (a root, or above one): all their names.
    for (const std::unique_ptr<Tree>& tree : trees_) {
      const std::string& root = tree->root->path();
      if (root != directory && !absl::StartsWith(root, prefix)) continue;
      for (auto it = tree_paths_.lower_bound(TreePath{tree.get(), ""});
           it != tree_paths_.end() && (*it)->tree == tree.get(); ++it) {
        below.push_back(*it);
      }
    }
  }
  if (auto it = own_paths_.find(directory); it != own_paths_.end()) below.push_back(it->second);
  for (auto it = own_paths_.lower_bound(prefix);
       it != own_paths_.end() && absl::StartsWith(it->first, prefix); ++it) {
    below.push_back(it->second);
  }
  return below;
}

void Catalog::ChangeNames(const std::vector<FileEntry*>& added,
                          const std::vector<FileEntry*>& gone) {
  if (added.empty() && gone.empty()) return;
  std::vector<FileEntry*> refused;
  NameTable<FileEntry>::Retired retired;  // freed on return, once no read can be using them
  {
    std::lock_guard lock(versions_mu_);
    retired = names_.Change(gone, added, &refused);
  }
  for (FileEntry* entry : added) entry->reachable = true;
  for (FileEntry* entry : refused) {
    LogWarning(absl::StrFormat("file %s is not served: another served file is named %s",
                               entry->display(), entry->name));
    UnindexPath(*entry);
    entry->reachable = false;
  }
  names_generation_.fetch_add(1, std::memory_order_acq_rel);
  free_entries_.insert(free_entries_.end(), refused.begin(), refused.end());
  // Once no read can be using the replaced shards, nothing reaches the removed entries: their
  // files are let go and the entries serve the next new names.
  epochs_.WaitForEarlierReads();
  std::vector<std::unique_ptr<const FileVersion>> versions;
  for (FileEntry* entry : gone) {
    entry->reachable = false;
    ReleaseSlot(*entry);
    pending_.erase(entry->display());
    {
      std::lock_guard lock(versions_mu_);
      versions.push_back(std::move(entry->owned));
      entry->current.store(&cold_version_, std::memory_order_release);
    }
    free_entries_.push_back(entry);
  }
}

}  // namespace blockread::storage
