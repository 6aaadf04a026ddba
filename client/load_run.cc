#include "client/load_run.h"

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/wire/crc32c.h"

namespace blockread::client::load {
namespace {

// Checks one successful read. Returns false (and records the failure, stopping the run) on a
// mismatch.
bool Verify(Run& run, const FileTarget& file, uint64_t offset, const std::string& data,
            bool has_crc, uint32_t crc) {
  std::string failure;
  if (run.verify_fd >= 0) {
    std::string expected(data.size(), '\0');
    const ssize_t n =
        pread(run.verify_fd, expected.data(), expected.size(), static_cast<off_t>(offset));
    expected.resize(n < 0 ? 0 : static_cast<size_t>(n));
    if (expected != data) {
      size_t i = 0;
      while (i < data.size() && i < expected.size() && data[i] == expected[i]) ++i;
      failure = absl::StrFormat(
          "verify: %s at offset %u: first differing byte at offset %u (got 0x%02x, expected "
          "0x%02x; %u bytes returned, %u expected)",
          file.name, offset, offset + i, i < data.size() ? static_cast<unsigned char>(data[i]) : 0,
          i < expected.size() ? static_cast<unsigned char>(expected[i]) : 0, data.size(),
          expected.size());
    }
  } else {
    const uint32_t actual = wire::Crc32c(data.data(), data.size());
    if (!has_crc || actual != crc) {
      failure = absl::StrFormat(
          "verify: %s at offset %u: CRC32C of the %u bytes received is %08x, the server sent "
          "%08x",
          file.name, offset, data.size(), actual, crc);
    }
  }
  if (failure.empty()) return true;
  std::lock_guard lock(run.failure_mu);
  if (run.failure.empty()) run.failure = failure;
  run.stop.store(true);
  return false;
}

}  // namespace

void Record(Run& run, ThreadStats& stats, const FileTarget& file, uint64_t offset,
            uint64_t start_ns, const grpc::Status& status, const std::string& data, bool has_crc,
            uint32_t crc, const v1::ServerTiming& timing) {
  const uint64_t now = MonotonicNowNs();
  stats.returned.Add(1);
  if (!status.ok()) {
    ++stats.errors[absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()))];
    return;
  }
  if (run.options.verify && !Verify(run, file, offset, data, has_crc, crc)) return;
  if (start_ns < run.measure_start_ns || now > run.measure_end_ns) return;
  stats.reads.Add(1);
  stats.bytes.Add(data.size());
  stats.latency_ns.Record(now - start_ns);
  stats.queue_ns.Add(timing.queue_ns());
  stats.device_ns.Add(timing.device_ns());
  stats.server_ns.Add(timing.total_ns());
  if (run.options.number > 0 && run.counted_reads.fetch_add(1) + 1 >= run.options.number) {
    run.stop.store(true);
  }
}

bool Running(const Run& run) {
  return !run.stop.load(std::memory_order_relaxed) && MonotonicNowNs() < run.measure_end_ns;
}

grpc::Status NoReplica(const FileTarget& file) {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("no server holding ", file.name, " is reachable now"));
}

}  // namespace blockread::client::load
