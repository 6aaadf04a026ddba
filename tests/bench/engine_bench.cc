// In-process benchmark of the storage engine, fio-like: one pinned worker keeps QD random 4 KiB
// reads in flight against one device, with the simple path on (simple_max_bytes=4096) and off
// (0), and runs fio (io_uring, O_DIRECT, registered files and buffers) on the same device at the
// same QD on the same CPU, side by side, printing a table shaped like the seeds'. A benchmark, not
// a test: nothing here asserts a speed.
//
//   engine_bench --device=/dev/loopN [--cpu=1] [--qd=1,32,128] [--runtime=5] [--ramp=1] [--json]
//   engine_bench --device=... --qd=32 --number=20000 --simple-max-bytes=4096 --no-fio
//       (fixed work, for instruction counts under callgrind)
#include <sched.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "storage/catalog.h"
#include "storage/read_path.h"

ABSL_FLAG(std::string, device, "", "Block device (or regular file) to read; required");
ABSL_FLAG(int, cpu, 1, "CPU to pin the engine worker and fio to");
ABSL_FLAG(std::string, qd, "1,32,128", "Comma-separated queue depths");
ABSL_FLAG(double, runtime, 5, "Seconds measured per run (after --ramp)");
ABSL_FLAG(double, ramp, 1, "Seconds of warm-up per run, not counted");
ABSL_FLAG(int64_t, number, 0, "If > 0: do exactly this many reads per run instead of --runtime");
ABSL_FLAG(std::string, simple_max_bytes, "0,4096",
          "Comma-separated simple_max_bytes values to run (0 = simple path off)");
ABSL_FLAG(bool, fio, true, "Also run fio on the same device, QD and CPU");
ABSL_FLAG(bool, json, false, "Print the results as JSON instead of a table");

namespace blockread::bench {
namespace {

using storage::Catalog;
using storage::EngineConfig;
using storage::EngineContext;
using storage::ReadResult;

constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

struct RunResult {
  double iops = 0;
  uint64_t reads = 0;
  uint64_t errors = 0;
  uint64_t p50_ns = 0;
  uint64_t p99_ns = 0;
};

struct Loop {
  uint64_t completed = 0;
  uint64_t errors = 0;
};

bool OnDone(void* context, const ReadResult& result) {
  auto* loop = static_cast<Loop*>(context);
  ++loop->completed;
  if (!result.status.ok()) ++loop->errors;
  return false;
}

// xorshift: cheap enough not to show in the profile.
struct Random {
  uint64_t x = 0x2545F4914F6CDD1DULL;
  uint64_t Next() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  }
};

absl::StatusOr<RunResult> RunEngine(Catalog& catalog, uint64_t device_bytes, int qd,
                                    uint64_t simple_max_bytes) {
  EngineConfig config;
  config.simple_max_bytes = simple_max_bytes;
  config.simple_slots = static_cast<uint32_t>(std::max(qd, 1));
  config.generic_slots = static_cast<uint32_t>(std::max(qd, 1));
  config.max_read_bytes = 64 << 10;  // keeps the generic buffers small at QD128
  auto engine = EngineContext::Create(catalog, config);
  if (!engine.ok()) return engine.status();
  EngineContext& e = **engine;
  const uint64_t blocks = device_bytes / 4096;
  Random random;
  Loop loop;
  uint64_t started = 0;
  using Clock = std::chrono::steady_clock;
  const int64_t number = absl::GetFlag(FLAGS_number);
  const auto ramp = std::chrono::duration<double>(number > 0 ? 0 : absl::GetFlag(FLAGS_ramp));
  const auto runtime = std::chrono::duration<double>(absl::GetFlag(FLAGS_runtime));
  const auto begin = Clock::now();
  auto measure_start = begin + std::chrono::duration_cast<Clock::duration>(ramp);
  const auto measure_end = measure_start + std::chrono::duration_cast<Clock::duration>(runtime);
  bool measuring = ramp.count() == 0;
  uint64_t completed_at_start = 0;
  storage::StatsSnapshot stats_at_start;
  for (uint64_t iteration = 0;; ++iteration) {
    while (started - loop.completed < static_cast<uint64_t>(qd) &&
           (number == 0 || started < static_cast<uint64_t>(number))) {
      absl::Status refusal;
      if (e.StartRead(storage::ReadRequest{"device", (random.Next() % blocks) * 4096, 4096, 0},
                      &OnDone, &loop, &refusal) != storage::StartOutcome::kQueued) {
        ++loop.errors;
        ++loop.completed;
      }
      ++started;
    }
    e.PollOnce();
    if (number > 0) {
      if (loop.completed >= static_cast<uint64_t>(number)) break;
      continue;
    }
    if ((iteration & 63) != 0) continue;  // read the clock now and then
    const auto now = Clock::now();
    if (!measuring && now >= measure_start) {
      measuring = true;
      measure_start = now;
      completed_at_start = loop.completed;
      stats_at_start.Add(e.stats());
    }
    if (measuring && now >= measure_end) break;
  }
  const auto end = Clock::now();
  while (e.reads_in_flight() > 0) e.PollOnce();
  RunResult result;
  result.reads = loop.completed - completed_at_start;
  result.errors = loop.errors;
  const double seconds = std::chrono::duration<double>(end - measure_start).count();
  result.iops = static_cast<double>(result.reads) / seconds;
  storage::StatsSnapshot stats;
  stats.Add(e.stats());
  storage::HistogramSnapshot total;
  for (int p = 0; p < storage::kReadPathCount; ++p) total.Merge(stats.paths[p].total_ns);
  result.p50_ns = total.Percentile(0.5);
  result.p99_ns = total.Percentile(0.99);
  return result;
}

// fio's read IOPS from its JSON output, or nullopt if fio is missing or failed.
std::optional<double> RunFio(const std::string& device, int qd, int cpu) {
  const std::string command = absl::StrFormat(
      "fio --name=bench --filename=%s --ioengine=io_uring --direct=1 --rw=randread --bs=4k "
      "--iodepth=%d --iodepth_batch_submit=%d --iodepth_batch_complete_min=1 --fixedbufs=1 "
      "--registerfiles=1 --cpus_allowed=%d --runtime=%g --ramp_time=%g --time_based "
      "--randrepeat=0 --norandommap --output-format=json 2>/dev/null",
      device, qd, qd, cpu, absl::GetFlag(FLAGS_runtime), absl::GetFlag(FLAGS_ramp));
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  if (pclose(pipe) != 0) return std::nullopt;
  const size_t read = output.find("\"read\" :");
  const size_t iops = read == std::string::npos ? read : output.find("\"iops\" :", read);
  if (iops == std::string::npos) return std::nullopt;
  double value = 0;
  const size_t start = iops + 8;
  const size_t stop = output.find_first_of(",\n", start);
  if (!absl::SimpleAtod(output.substr(start, stop - start), &value)) return std::nullopt;
  return value;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "In-process engine benchmark: 4 KiB random reads, simple path on/off, fio side by side.\n"
      "Usage: engine_bench --device=/dev/loopN [flags]; see tests/bench/run_engine_bench.sh");
  absl::ParseCommandLine(argc, argv);
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device.empty()) {
    fprintf(stderr, "engine_bench: --device is required (see --help)\n");
    return 2;
  }
  const int cpu = absl::GetFlag(FLAGS_cpu);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    fprintf(stderr, "engine_bench: cannot pin to CPU %d\n", cpu);
    return 2;
  }
  Catalog catalog;
  if (absl::Status s = catalog.AddWholeDevice("device", device); !s.ok()) {
    fprintf(stderr, "engine_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const uint64_t device_bytes = catalog.device(0).size();

  std::vector<int> depths;
  for (absl::string_view q : absl::StrSplit(absl::GetFlag(FLAGS_qd), ',')) {
    int v;
    if (!absl::SimpleAtoi(q, &v) || v < 1) {
      fprintf(stderr, "engine_bench: bad --qd\n");
      return 2;
    }
    depths.push_back(v);
  }
  std::vector<uint64_t> simple_values;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_simple_max_bytes), ',')) {
    uint64_t v;
    if (!absl::SimpleAtoi(s, &v)) {
      fprintf(stderr, "engine_bench: bad --simple_max_bytes\n");
      return 2;
    }
    simple_values.push_back(v);
  }

  const bool json = absl::GetFlag(FLAGS_json);
  std::vector<std::string> rows;
  if (!json) {
    printf("device %s, cpu %d, 4 KiB randread, %gs per run after %gs ramp\n", device.c_str(), cpu,
           absl::GetFlag(FLAGS_runtime), absl::GetFlag(FLAGS_ramp));
    printf("%5s %12s %12s %8s %12s %12s %10s %10s\n", "qd", "simple=0", "simple=1", "gain", "fio",
           "simple=1/fio", "p50(s=1)", "p99(s=1)");
  }
  for (int qd : depths) {
    std::optional<RunResult> off, on;
    for (uint64_t simple : simple_values) {
      fprintf(stderr, "engine_bench: qd=%d simple_max_bytes=%lu ...\n", qd, simple);
      auto result = RunEngine(catalog, device_bytes, qd, simple);
      if (!result.ok()) {
        fprintf(stderr, "engine_bench: %s\n", std::string(result.status().message()).c_str());
        return 1;
      }
      if (result->errors > 0) fprintf(stderr, "engine_bench: %lu read errors\n", result->errors);
      (simple == 0 ? off : on) = *result;
    }
    std::optional<double> fio;
    if (absl::GetFlag(FLAGS_fio)) {
      fprintf(stderr, "engine_bench: qd=%d fio ...\n", qd);
      fio = RunFio(device, qd, cpu);
    }
    // What this run did not measure (no simple_max_bytes=0 run, no positive one, --nofio) is NaN
    // and prints as "-" in the table and null in JSON. Plain doubles, not std::optional<double>:
    // every value is initialized, where GCC 12 at -O3 could not prove an optional's payload was.
    const double off_iops = off ? off->iops : kNotMeasured;
    const double on_iops = on ? on->iops : kNotMeasured;
    const double fio_iops = fio.value_or(kNotMeasured);
    const double gain_pct = (on_iops / off_iops - 1) * 100;  // NaN when either is
    const double on_over_fio = on_iops / fio_iops;
    const double p50_us = on ? on->p50_ns / 1000.0 : kNotMeasured;
    const double p99_us = on ? on->p99_ns / 1000.0 : kNotMeasured;
    if (json) {
      auto field = [](double v) {
        return std::isnan(v) ? std::string("null") : absl::StrFormat("%.4f", v);
      };
      rows.push_back(absl::StrFormat(
          "{\"qd\": %d, \"simple0_iops\": %s, \"simple1_iops\": %s, \"gain_pct\": %s, "
          "\"fio_iops\": %s, \"simple1_over_fio\": %s, \"simple1_p50_us\": %s, "
          "\"simple1_p99_us\": %s}",
          qd, field(off_iops), field(on_iops), field(gain_pct), field(fio_iops), field(on_over_fio),
          field(p50_us), field(p99_us)));
    } else {
      auto cell = [](const absl::FormatSpec<double>& format, double v) {
        return std::isnan(v) ? std::string("-") : absl::StrFormat(format, v);
      };
      printf("%5d %12s %12s %8s %12s %12s %10s %10s\n", qd, cell("%.0f", off_iops).c_str(),
             cell("%.0f", on_iops).c_str(), cell("%+.2f%%", gain_pct).c_str(),
             cell("%.0f", fio_iops).c_str(), cell("%.3f", on_over_fio).c_str(),
             cell("%.1fus", p50_us).c_str(), cell("%.1fus", p99_us).c_str());
      fflush(stdout);
    }
  }
  if (json)
    printf("{\"device\": \"%s\", \"cpu\": %d, \"rows\": [%s]}\n", device.c_str(), cpu,
           absl::StrJoin(rows, ", ").c_str());
  return 0;
}

}  // namespace
}  // namespace blockread::bench

int main(int argc, char** argv) { return blockread::bench::Main(argc, argv); }
