// A reader of the Prometheus text exposition format (what /metrics serves), for tests: every
// sample by name and labels, and every family's TYPE. Strict: a line it cannot parse is an error,
// so a malformed exposition fails the test rather than being skipped.
#ifndef BLOCKREAD_TESTS_SUPPORT_PROMETHEUS_TEXT_H_
#define BLOCKREAD_TESTS_SUPPORT_PROMETHEUS_TEXT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace blockread::testing {

using Labels = std::map<std::string, std::string>;

struct Exposition {
  // Sample name (e.g. blockread_reads_total, or a histogram's _bucket/_count/_sum) -> its
  // samples by label set.
  std::map<std::string, std::map<Labels, double>> samples;
  // Family name -> "counter", "gauge", "histogram", ...
  std::map<std::string, std::string> types;

  // The sample's value; 0 when the exposition does not have it (counters start at zero).
  double Value(const std::string& name, const Labels& labels = {}) const;
  bool Has(const std::string& name, const Labels& labels) const;
};

absl::StatusOr<Exposition> ParseExposition(const std::string& text);

// GETs http://127.0.0.1:PORT/metrics with curl and parses it.
absl::StatusOr<Exposition> Scrape(int port);

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_PROMETHEUS_TEXT_H_
