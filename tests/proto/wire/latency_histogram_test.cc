// The latency histogram layout shared by the engine, GetStats, /metrics and the load client.
#include "proto/wire/latency_histogram.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace blockread::wire {
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

}  // namespace
}  // namespace blockread::wire
