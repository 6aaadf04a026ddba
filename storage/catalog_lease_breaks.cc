// Lease breaks, on a thread of their own. Before a writer's open() (or truncate) of a leased file
// returns, the kernel signals this thread, which switches the file to the file route (exact: an
// O_DIRECT read through the file sees the writer's bytes), waits only for the raw-device reads of
// the file's disk domain that may still use the old map (storage/read_epochs.h), and releases the
// lease. It never waits behind the watcher: not a writeback (FIEMAP_FLAG_SYNC), a re-map, a verify
// read, a walk, nor a stalled device that the file is not on. The old version is freed, and the
// lease taken again, by the watcher later.
#include <fcntl.h>

#include "absl/container/flat_hash_set.h"
#include "storage/catalog_internal.h"

namespace blockread::storage {

absl::Status Catalog::StartLeaseBreaker() {
  auto thread = LeaseSignalThread::Start(
      [this](const absl::flat_hash_set<int>& fds, bool check_all) { BreakLeases(fds, check_all); });
  if (!thread.ok()) return thread.status();
  lease_signals_ = *std::move(thread);
  return absl::OkStatus();
}

void Catalog::BreakLeases(const absl::flat_hash_set<int>& fds, bool check_all) {
  std::vector<OpenFile*> broken;
  std::lock_guard lock(lease_mu_);
  const auto leased = [](OpenFile* open) {
    return open->leased.load(std::memory_order_relaxed);  // else an old signal: handled
  };
  if (check_all) {
    for (const auto& [fd, open] : by_lease_fd_) {
      if (leased(open) && fcntl(fd, F_GETLEASE) != F_RDLCK) broken.push_back(open);
    }
  } else {
    for (int fd : fds) {
      auto it = by_lease_fd_.find(fd);
      if (it != by_lease_fd_.end() && leased(it->second)) broken.push_back(it->second);
    }
  }
  if (broken.empty()) return;
  // New reads go through the file (exact) from here.
  std::vector<std::unique_ptr<const FileVersion>> old;
  std::vector<FileEntry*> entries;
  absl::flat_hash_set<uint8_t> domains;
  for (OpenFile* open : broken) {
    open->leased.store(false, std::memory_order_relaxed);
    ++open->lease_breaks;
    if (open->raw_domain != 0) domains.insert(open->raw_domain);
    FileEntry* entry = open->holder;  // a leased slot has one
    entries.push_back(entry);
    std::lock_guard versions_lock(versions_mu_);
    if (entry->owned == nullptr || entry->owned->epoch_domain == 0) continue;  // not read raw now
    old.push_back(std::move(entry->owned));
    entry->owned = FileRouteVersion(entry->name, open->device,
                                    "it is being written (the lease was broken by a writer)");
    entry->current.store(entry->owned.get(), std::memory_order_release);
  }
  // Once raw reads that may use the old maps are done (those of the files' disks alone), the
  // writers may proceed.
  for (uint8_t domain : domains) epochs_.WaitForDomainReads(domain);
  for (OpenFile* open : broken) fcntl(open->fd, F_SETLEASE, F_UNLCK);
  {
    // Reads that found the old versions before they entered their domain may still hold them:
    // the watcher frees them after a wait for every read, and takes the leases again later.
    std::lock_guard broken_lock(broken_mu_);
    for (auto& version : old) broken_versions_.push_back(std::move(version));
    broken_entries_.insert(broken_entries_.end(), entries.begin(), entries.end());
  }
  RequestCatchUp();
}

}  // namespace blockread::storage
