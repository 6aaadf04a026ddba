// `blockread stats`'s view of GetStats: rates and percentiles over the interval between two
// samples come from the deltas, and a server restart falls back to since-start figures.
#include "client/stats_view.h"

#include "gtest/gtest.h"

namespace blockread::client {
namespace {

void AddBuckets(v1::Histogram* h, uint64_t upper_bound_ns, uint64_t count) {
  v1::Histogram::Bucket* b = h->add_buckets();
  b->set_upper_bound_ns(upper_bound_ns);
  b->set_count(count);
  h->set_count(h->count() + count);
  h->set_sum_ns(h->sum_ns() + upper_bound_ns * count);
}

v1::GetStatsResponse Sample(uint64_t uptime_s, uint64_t simple_reads, uint64_t slow_reads,
                            uint64_t unaligned) {
  v1::GetStatsResponse s;
  s.set_uptime_ns(uptime_s * 1000000000);
  v1::PathStats* simple = s.add_paths();
  simple->set_path(v1::SIMPLE);
  simple->set_reads(simple_reads + slow_reads);
  simple->set_bytes((simple_reads + slow_reads) * 4096);
  // Fast reads at ~100 us, slow ones at ~10 ms (bucket upper bounds of the server's layout).
  AddBuckets(simple->mutable_total_latency(), 102399, simple_reads);
  if (slow_reads > 0) AddBuckets(simple->mutable_total_latency(), 10485759, slow_reads);
  v1::PathStats* generic = s.add_paths();
  generic->set_path(v1::GENERIC);
  generic->set_reads(unaligned);
  v1::FallbackCount* f = s.add_fallbacks();
  f->set_reason(v1::FALLBACK_UNALIGNED);
  f->set_count(unaligned);
  return s;
}

TEST(StatsViewTest, RatesAndPercentilesComeFromTheIntervalDeltas) {
  // 10 s in: 1000 fast reads. 12 s in: 100 more, all slow, and 100 unaligned.
  const v1::GetStatsResponse before = Sample(10, 1000, 0, 0);
  const v1::GetStatsResponse now = Sample(12, 1000, 100, 100);

  const nlohmann::json since_start = StatsViewJson(now, nullptr);
  EXPECT_EQ(since_start["interval"], "since the server started");
  EXPECT_DOUBLE_EQ(since_start["paths"]["simple"]["iops"].get<double>(), 1100 / 12.0);
  EXPECT_LT(since_start["paths"]["simple"]["latency_us"]["total"]["p50"].get<double>(), 110);

  const nlohmann::json interval = StatsViewJson(now, &before);
  EXPECT_EQ(interval["interval"], "since the previous sample");
  EXPECT_DOUBLE_EQ(interval["interval_s"].get<double>(), 2);
  const nlohmann::json& simple = interval["paths"]["simple"];
  EXPECT_EQ(simple["reads"], 1100);
  EXPECT_EQ(simple["interval_reads"], 100);
  EXPECT_DOUBLE_EQ(simple["iops"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(simple["mib_s"].get<double>(), 50 * 4096.0 / (1 << 20));
  EXPECT_DOUBLE_EQ(simple["share"].get<double>(), 0.5);
  // Only the interval's reads count: they were all slow.
  EXPECT_GT(simple["latency_us"]["total"]["p50"].get<double>(), 9000);
  EXPECT_EQ(interval["fallbacks_interval"]["unaligned"], 100);
  EXPECT_EQ(interval["fallbacks"]["unaligned"], 100);

  const std::string table = StatsViewText(now, &before);
  EXPECT_NE(table.find("unaligned=100/100"), std::string::npos) << table;
}

TEST(StatsViewTest, ARestartedServerIsShownSinceItsStart) {
  const v1::GetStatsResponse before = Sample(100, 5000, 0, 0);
  const v1::GetStatsResponse after_restart = Sample(3, 300, 0, 0);
  const nlohmann::json view = StatsViewJson(after_restart, &before);
  EXPECT_EQ(view["interval"], "since the server started");
  EXPECT_DOUBLE_EQ(view["paths"]["simple"]["iops"].get<double>(), 100);
}

}  // namespace
}  // namespace blockread::client
