// The served names: read by any number of threads without a lock, changed by one writer at a cost
// that grows with the names changed, not with the table. The table is split into kShards shards by
// the names' hash; a change copies only the shards it touches (copy-on-write) and publishes each
// copy with a release store, then hands back the shards it replaced, which the writer frees once
// no reader can still be using them (storage/read_epochs.h). A million names make shards of about
// a thousand, so creating a file copies a thousand names, not a million.
//
// A shard holds the entries themselves (a pointer each), found by their own `name` strings (no
// copy of a name anywhere): an entry's name must not change while any shard, published or
// retired, holds it.
#ifndef BLOCKREAD_STORAGE_NAME_TABLE_H_
#define BLOCKREAD_STORAGE_NAME_TABLE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace blockread::storage {

// `Entry` has a `std::string name`: the name it is found under.
//
// Threading: Find() from any thread, while the shard it reads cannot be freed: inside a reader's
// epoch, or under a lock the writer holds while it calls Change(). Everything else on the writer's
// thread (or the owner's lock).
template <typename Entry>
class NameTable {
  // Entries hash and compare by name, and are found by a name alone.
  struct ByName {
    using is_transparent = void;
    static absl::string_view NameOf(absl::string_view name) { return name; }
    static absl::string_view NameOf(const Entry* entry) { return entry->name; }
    template <typename T>
    size_t operator()(const T& key) const {
      return absl::Hash<absl::string_view>()(NameOf(key));
    }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return NameOf(a) == NameOf(b);
    }
  };

 public:
  using Shard = absl::flat_hash_set<Entry*, ByName, ByName>;
  // Shards replaced by Change(): free them once no reader can be using them.
  using Retired = std::vector<std::unique_ptr<const Shard>>;

  NameTable() {
    for (size_t i = 0; i < kShards; ++i) {
      owned_[i] = std::make_unique<Shard>();
      shards_[i].store(owned_[i].get(), std::memory_order_release);
    }
  }
  NameTable(const NameTable&) = delete;
  NameTable& operator=(const NameTable&) = delete;

  // One hash, one acquire load, one probe (the shard's map is given the hash computed here).
  Entry* Find(absl::string_view name) const {
    const size_t hash = typename Shard::hasher()(name);
    const Shard& shard = *shards_[ShardOf(hash)].load(std::memory_order_acquire);
    auto it = shard.find(name, hash);
    return it == shard.end() ? nullptr : *it;
  }

  // Before any reader: adds `entry` under its name in place. False when the name is taken.
  bool InsertBeforeReaders(Entry* entry) {
    const bool inserted = Owned(entry->name).insert(entry).second;
    size_ += inserted;
    return inserted;
  }

  // Removes the names of `gone` (where they still name that entry), then adds those of `added`;
  // an added name that is taken is left out and appended to `refused`. Copies each touched shard
  // once, publishes the copies, and returns the shards they replaced.
  Retired Change(const std::vector<Entry*>& gone, const std::vector<Entry*>& added,
                 std::vector<Entry*>* refused) {
    std::array<std::unique_ptr<Shard>, kShards> copies;
    const auto copy_of = [&](absl::string_view name) -> Shard& {
      const size_t i = ShardOf(typename Shard::hasher()(name));
      if (copies[i] == nullptr) copies[i] = std::make_unique<Shard>(*owned_[i]);
      return *copies[i];
    };
    for (Entry* entry : gone) {
      Shard& shard = copy_of(entry->name);
      auto it = shard.find(absl::string_view(entry->name));
      if (it != shard.end() && *it == entry) {
        shard.erase(it);
        --size_;
      }
    }
    for (Entry* entry : added) {
      if (copy_of(entry->name).insert(entry).second) {
        ++size_;
      } else {
        refused->push_back(entry);
      }
    }
    Retired retired;
    for (size_t i = 0; i < kShards; ++i) {
      if (copies[i] == nullptr) continue;
      shards_[i].store(copies[i].get(), std::memory_order_release);
      retired.push_back(std::move(owned_[i]));
      owned_[i] = std::move(copies[i]);
    }
    return retired;
  }

  // Every (name, entry), in no order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& shard : owned_) {
      for (Entry* entry : *shard) fn(absl::string_view(entry->name), entry);
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr int kShardBits = 10;
  static constexpr size_t kShards = size_t{1} << kShardBits;
  // The hash's top bits pick the shard; the map inside uses its low bits (and the same hash).
  static size_t ShardOf(size_t hash) { return hash >> (8 * sizeof(size_t) - kShardBits); }
  Shard& Owned(absl::string_view name) { return *owned_[ShardOf(typename Shard::hasher()(name))]; }

  std::array<std::atomic<const Shard*>, kShards> shards_;
  std::array<std::unique_ptr<Shard>, kShards> owned_;
  size_t size_ = 0;
};

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_NAME_TABLE_H_
