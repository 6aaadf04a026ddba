// What `blockread stats` shows: a server's GetStats response, and when a previous response is
// given, the rates and latency percentiles over the interval between the two (from the counter
// and histogram deltas), as a table or as JSON. Pure functions of the responses.
#ifndef BLOCKREAD_CLIENT_STATS_VIEW_H_
#define BLOCKREAD_CLIENT_STATS_VIEW_H_

#include <nlohmann/json.hpp>
#include <string>

#include "blockread/v1/blockread.pb.h"
#include "proto/wire/latency_histogram.h"

namespace blockread::client {

// The server's histogram as a bucket array of the same layout.
wire::HistogramSnapshot ToSnapshot(const v1::Histogram& histogram);

// `before` may be null: then the interval is the server's uptime (rates since start). When
// given, it must be an earlier response of the same server (a restart shows as counters going
// back; the view then falls back to since-start figures).
nlohmann::json StatsViewJson(const v1::GetStatsResponse& now, const v1::GetStatsResponse* before);
std::string StatsViewText(const v1::GetStatsResponse& now, const v1::GetStatsResponse* before);

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_STATS_VIEW_H_
