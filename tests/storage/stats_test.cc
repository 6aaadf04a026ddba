#include "storage/stats.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace blockread::storage {
namespace {

// One writer per shard, readers merging concurrently: no locks, no torn values, and once the
// writers stop the snapshot is exact. Run under TSan by tests/run.sh.
TEST(StatsShardTest, ConcurrentWritersAndReaders) {
  constexpr int kWriters = 2;
  constexpr uint64_t kOps = 200000;
  std::vector<std::unique_ptr<StatsShard>> shards;
  for (int i = 0; i < kWriters; ++i) shards.push_back(std::make_unique<StatsShard>(1));
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!stop.load()) {
      StatsSnapshot snapshot;
      for (auto& shard : shards) snapshot.Add(*shard);
      const uint64_t now = snapshot.path(ReadPathKind::kSimple).requests;
      EXPECT_GE(now, last);  // counters only grow
      last = now;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      StatsShard& shard = *shards[w];
      for (uint64_t i = 0; i < kOps; ++i) {
        PathStats& path = shard.path(ReadPathKind::kSimple);
        path.requests.Add(1);
        path.bytes.Add(4096);
        path.total_ns.Record(i);
        shard.fallback(FallbackReason::kUnaligned).Add(1);
        shard.device(0).inflight.Set(i % 7);
      }
    });
  }
  for (auto& t : writers) t.join();
  stop.store(true);
  reader.join();
  StatsSnapshot snapshot;
  for (auto& shard : shards) snapshot.Add(*shard);
  EXPECT_EQ(snapshot.path(ReadPathKind::kSimple).requests, kWriters * kOps);
  EXPECT_EQ(snapshot.path(ReadPathKind::kSimple).bytes, kWriters * kOps * 4096);
  EXPECT_EQ(snapshot.path(ReadPathKind::kSimple).total_ns.count, kWriters * kOps);
  EXPECT_EQ(snapshot.fallback(FallbackReason::kUnaligned), kWriters * kOps);
}

}  // namespace
}  // namespace blockread::storage
