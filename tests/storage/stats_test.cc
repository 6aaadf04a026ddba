#include "storage/stats.h"

#include <algorithm>
#include <random>
#include <thread>

#include "gtest/gtest.h"

namespace blockread::storage {
namespace {

TEST(LatencyBucketsTest, BoundsAreContiguousAndTight) {
  for (int i = 0; i + 1 < LatencyBuckets::kCount; ++i) {
    ASSERT_EQ(LatencyBuckets::UpperBound(i) + 1, LatencyBuckets::LowerBound(i + 1)) << i;
    ASSERT_EQ(LatencyBuckets::IndexOf(LatencyBuckets::LowerBound(i)), i);
    ASSERT_EQ(LatencyBuckets::IndexOf(LatencyBuckets::UpperBound(i)), i);
  }
  // Relative width at most 1/8 beyond the linear range.
  for (int i = LatencyBuckets::kSubBuckets; i + 1 < LatencyBuckets::kCount; ++i) {
    const double low = static_cast<double>(LatencyBuckets::LowerBound(i));
    const double high = static_cast<double>(LatencyBuckets::UpperBound(i));
    ASSERT_LE((high - low) / low, 0.125 + 1e-9) << i;
  }
  EXPECT_EQ(LatencyBuckets::IndexOf(UINT64_MAX), LatencyBuckets::kCount - 1);
}

TEST(HistogramTest, PercentilesMatchASortedReferenceWithinABucket) {
  std::mt19937_64 rng(9);
  std::lognormal_distribution<double> latency(10.0, 1.0);  // ~22 us median, long tail
  LatencyHistogram histogram;
  std::vector<uint64_t> values;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = static_cast<uint64_t>(latency(rng));
    values.push_back(v);
    histogram.Record(v);
  }
  std::sort(values.begin(), values.end());
  HistogramSnapshot snapshot;
  histogram.AddTo(snapshot);
  EXPECT_EQ(snapshot.count, values.size());
  for (double q : {0.01, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    const uint64_t exact = values[static_cast<size_t>(std::max(0.0, q * values.size() - 1))];
    const uint64_t estimate = snapshot.Percentile(q);
    EXPECT_GE(estimate, exact) << q;  // the bucket's upper bound
    EXPECT_LE(static_cast<double>(estimate), exact * 1.125 + 1) << q;
  }
}

TEST(HistogramTest, MergeAddsCounts) {
  LatencyHistogram a, b;
  for (uint64_t v = 1; v <= 1000; ++v) (v % 2 ? a : b).Record(v * 1000);
  HistogramSnapshot merged;
  a.AddTo(merged);
  b.AddTo(merged);
  HistogramSnapshot only_a;
  a.AddTo(only_a);
  HistogramSnapshot again = only_a;
  HistogramSnapshot only_b;
  b.AddTo(only_b);
  again.Merge(only_b);
  EXPECT_EQ(merged.buckets, again.buckets);
  EXPECT_EQ(merged.count, 1000u);
  EXPECT_EQ(merged.sum, 500500u * 1000);
  EXPECT_NEAR(static_cast<double>(merged.Percentile(0.5)), 500000.0, 500000.0 * 0.125);
}

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
