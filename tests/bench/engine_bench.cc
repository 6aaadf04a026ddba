// In-process benchmark of the storage engine, fio-like: one pinned worker keeps QD random 4 KiB
// reads in flight against one device, with the simple path on (simple_max_bytes=4096) and off
// (0), and runs fio (io_uring, O_DIRECT, registered files and buffers) on the same device at the
// same QD on the same CPU, side by side, printing a table shaped like the seeds'. A benchmark, not
// a test: nothing here asserts a speed.
//
//   engine_bench --device=/dev/loopN [--cpu=1] [--qd=1,32,128] [--runtime=5] [--ramp=1] [--json]
//   engine_bench --device=... --qd=32 --number=20000 --simple-max-bytes=4096 --no-fio
//       (fixed work, for instruction counts under callgrind)
//
// With --file instead of --device it reads one file on a mounted ext4/XFS filesystem through each
// of --route's routes in turn at every QD, side by side (issue 11; tests/bench/run_route_bench.sh):
//   fiemap         Catalog::ImportFile: the filesystem's block device at the file's FIEMAP
//                  offsets, as the catalog serves an imported file today (its Resolve stats the
//                  path on every read, to notice a changed file)
//   fiemap-frozen  the same extents, resolved once at setup and served as a static map: the raw
//                  device route without that per-read stat
//   file           Catalog::AddWholeDevice on the file: O_DIRECT through the filesystem (the
//                  kernel's iomap direct-I/O path)
// and reports IOPS and the CPU time per read of the engine thread (getrusage RUSAGE_THREAD) and of
// the whole process (RUSAGE_SELF: also io_uring's io-wq workers, should a read be punted there).
// Before measuring, it checks that every route returns the file's bytes.
//
//   engine_bench --file=/mnt/ext4/data --route=fiemap,file [--qd=1,32,128] [--json]
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
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

ABSL_FLAG(std::string, device, "", "Block device (or regular file) to read; this or --file");
ABSL_FLAG(std::string, file, "",
          "A file on a mounted ext4/XFS filesystem to read through each of --route's routes "
          "(instead of --device; fio is not run)");
ABSL_FLAG(std::string, route, "fiemap,file",
          "With --file: comma-separated routes, run one after the other at each QD: fiemap "
          "(Catalog::ImportFile: the block device at the file's FIEMAP offsets), fiemap-frozen "
          "(the same extents resolved once, as a static map: no per-read stat), file "
          "(Catalog::AddWholeDevice on the file: O_DIRECT through the filesystem)");
ABSL_FLAG(int, cpu, 1, "CPU to pin the engine worker and fio to");
ABSL_FLAG(std::string, qd, "1,32,128", "Comma-separated queue depths");
ABSL_FLAG(double, runtime, 5, "Seconds measured per run (after --ramp)");
ABSL_FLAG(double, ramp, 1, "Seconds of warm-up per run, not counted");
ABSL_FLAG(int64_t, number, 0, "If > 0: do exactly this many reads per run instead of --runtime");
ABSL_FLAG(std::string, simple_max_bytes, "0,4096",
          "Comma-separated simple_max_bytes values to run (0 = simple path off)");
ABSL_FLAG(std::string, wait, "spin",
          "With --file: comma-separated ways to wait while reads are in flight: spin (PollOnce "
          "again at once, as the server's worker does: the thread is always busy, so its CPU "
          "time per read is about 1/IOPS) or block (sleep in io_uring_wait_cqe until a "
          "completion: the thread's CPU time is the work the reads cost)");
ABSL_FLAG(bool, fio, true, "Also run fio on the same device, QD and CPU");
ABSL_FLAG(bool, json, false, "Print the results as JSON instead of a table");

namespace blockread::bench {
namespace {

using storage::Catalog;
using storage::Device;
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
  // CPU time over the measured reads: the engine thread's (user, system) and the whole process's.
  uint64_t thread_user_us = 0;
  uint64_t thread_sys_us = 0;
  uint64_t process_us = 0;
  // Busy time of the pinned CPU as /proc/stat counts it (user, nice, system, irq, softirq and
  // steal, in clock ticks, so +-10 ms): minus the engine thread's own, what else ran there (other
  // load, kernel workers, the hypervisor). And how often the engine thread was preempted.
  uint64_t pinned_cpu_busy_us = 0;
  uint64_t involuntary_switches = 0;
  double seconds = 0;  // the measured window
  // PollOnce turns that finished no read: spinning while the device works. They cost user-space
  // instructions that scale with the device's latency, not with the reads.
  uint64_t empty_polls = 0;
};

// What one run reads: file `file` (of `size` bytes) of `catalog`.
struct Target {
  std::string route;
  std::unique_ptr<Catalog> catalog;
  std::string file;
  uint64_t size = 0;
};

struct CpuSample {
  uint64_t thread_user_us = 0;
  uint64_t thread_sys_us = 0;
  uint64_t process_us = 0;
  uint64_t pinned_cpu_busy_us = 0;
  uint64_t involuntary_switches = 0;
};

uint64_t Microseconds(const timeval& t) {
  return static_cast<uint64_t>(t.tv_sec) * 1000000 + static_cast<uint64_t>(t.tv_usec);
}

// Non-idle time of `cpu` so far, from its /proc/stat line; 0 if unreadable.
uint64_t CpuBusyUs(int cpu) {
  FILE* stat = fopen("/proc/stat", "r");
  if (stat == nullptr) return 0;
  const std::string prefix = absl::StrCat("cpu", cpu, " ");
  char line[512];
  uint64_t busy_ticks = 0;
  while (fgets(line, sizeof(line), stat) != nullptr) {
    if (strncmp(line, prefix.c_str(), prefix.size()) != 0) continue;
    unsigned long long v[8] = {};  // user nice system idle iowait irq softirq steal
    if (sscanf(line + prefix.size(), "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
               &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
      busy_ticks = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    }
    break;
  }
  fclose(stat);
  return busy_ticks * 1000000 / static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
}

CpuSample SampleCpu() {
  rusage thread{};
  rusage process{};
  getrusage(RUSAGE_THREAD, &thread);
  getrusage(RUSAGE_SELF, &process);
  return CpuSample{Microseconds(thread.ru_utime), Microseconds(thread.ru_stime),
                   Microseconds(process.ru_utime) + Microseconds(process.ru_stime),
                   CpuBusyUs(absl::GetFlag(FLAGS_cpu)), static_cast<uint64_t>(thread.ru_nivcsw)};
}

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

// The backends of the context being created, as EngineContext::Create hands them to the wrapper
// (the benchmark is single-threaded), so --wait=block can sleep on them.
std::vector<storage::IoBackend*> created_backends;

std::unique_ptr<storage::IoBackend> RememberBackend(std::unique_ptr<storage::IoBackend> backend) {
  created_backends.push_back(backend.get());
  return backend;
}

absl::StatusOr<RunResult> RunEngine(Catalog& catalog, const std::string& file, uint64_t file_bytes,
                                    int qd, uint64_t simple_max_bytes, bool block = false) {
  EngineConfig config;
  config.simple_max_bytes = simple_max_bytes;
  config.simple_slots = static_cast<uint32_t>(std::max(qd, 1));
  config.generic_slots = static_cast<uint32_t>(std::max(qd, 1));
  config.max_read_bytes = 64 << 10;  // keeps the generic buffers small at QD128
  created_backends.clear();
  auto engine = EngineContext::Create(catalog, config, &RememberBackend);
  if (!engine.ok()) return engine.status();
  EngineContext& e = **engine;
  const std::vector<storage::IoBackend*> backends = created_backends;
  const uint64_t blocks = file_bytes / 4096;
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
  uint64_t empty_polls = 0;
  uint64_t empty_polls_at_start = 0;
  CpuSample cpu_at_start = SampleCpu();
  storage::StatsSnapshot stats_at_start;
  for (uint64_t iteration = 0;; ++iteration) {
    while (started - loop.completed < static_cast<uint64_t>(qd) &&
           (number == 0 || started < static_cast<uint64_t>(number))) {
      absl::Status refusal;
      if (e.StartRead(storage::ReadRequest{file, (random.Next() % blocks) * 4096, 4096, 0}, &OnDone,
                      &loop, &refusal) != storage::StartOutcome::kQueued) {
        ++loop.errors;
        ++loop.completed;
      }
      ++started;
    }
    if (e.PollOnce() == 0) {
      ++empty_polls;
      if (block) {
        // Sleep until the first backend with reads out has a completion; the next PollOnce
        // reaps it. (One device per run, so one backend has reads out.)
        for (storage::IoBackend* backend : backends) {
          if (backend->inflight() > 0) {
            backend->WaitForCompletion();
            break;
          }
        }
      }
    }
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
      empty_polls_at_start = empty_polls;
      cpu_at_start = SampleCpu();
      stats_at_start.Add(e.stats());
    }
    if (measuring && now >= measure_end) break;
  }
  const auto end = Clock::now();
  const CpuSample cpu_at_end = SampleCpu();
  while (e.reads_in_flight() > 0) e.PollOnce();
  RunResult result;
  result.reads = loop.completed - completed_at_start;
  result.errors = loop.errors;
  const double seconds = std::chrono::duration<double>(end - measure_start).count();
  result.iops = static_cast<double>(result.reads) / seconds;
  result.thread_user_us = cpu_at_end.thread_user_us - cpu_at_start.thread_user_us;
  result.thread_sys_us = cpu_at_end.thread_sys_us - cpu_at_start.thread_sys_us;
  result.process_us = cpu_at_end.process_us - cpu_at_start.process_us;
  result.pinned_cpu_busy_us = cpu_at_end.pinned_cpu_busy_us - cpu_at_start.pinned_cpu_busy_us;
  result.involuntary_switches = cpu_at_end.involuntary_switches - cpu_at_start.involuntary_switches;
  result.seconds = seconds;
  result.empty_polls = empty_polls - empty_polls_at_start;
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

// ---- --file: one file through each route ----

absl::StatusOr<Target> BuildTarget(const std::string& route, const std::string& path) {
  Target target;
  target.route = route;
  target.file = "file";
  target.catalog = std::make_unique<Catalog>();
  if (route == "file") {
    if (absl::Status s = target.catalog->AddWholeDevice(target.file, path); !s.ok()) return s;
    const Device& device = target.catalog->device(0);
    if (device.kind() == storage::DeviceKind::kBlockDevice) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is a block device, not a file"));
    }
    target.size = device.size();
    return target;
  }
  if (route != "fiemap" && route != "fiemap-frozen") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown route '", route, "' (fiemap, fiemap-frozen or file)"));
  }
  if (absl::Status s = target.catalog->ImportFile(target.file, path); !s.ok()) return s;
  auto map = target.catalog->Resolve(target.file);
  if (!map.ok()) return map.status();
  if ((*map)->source() != storage::FileSource::kFiemap) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the catalog serves ", path,
        " through the file itself, not the device (its log line says why): no raw-device route "
        "to measure"));
  }
  target.size = (*map)->size();
  if (route == "fiemap") return target;
  // fiemap-frozen: the same devices, in the same order so the extents' DeviceIds hold, and the
  // imported map as a static file, which Resolve returns without looking at the path.
  auto frozen = std::make_unique<Catalog>();
  for (storage::DeviceId id = 0; id < target.catalog->device_count(); ++id) {
    const Device& device = target.catalog->device(id);
    auto reopened = Device::Open(device.name(), device.path());
    if (!reopened.ok()) return reopened.status();
    auto added = frozen->AddDevice(*std::move(reopened));
    if (!added.ok()) return added.status();
  }
  if (absl::Status s = frozen->AddStaticFile(storage::FileMap(**map)); !s.ok()) return s;
  target.catalog = std::move(frozen);
  return target;
}

struct Check {
  std::vector<char> data;
  bool done = false;
  absl::Status status;
};

bool OnCheckDone(void* context, const ReadResult& result) {
  auto* check = static_cast<Check*>(context);
  check->done = true;
  check->status = result.status;
  check->data.assign(result.data, result.data + result.length);
  return false;
}

// Reads `count` random 4 KiB blocks of the target's file through its engine and compares them with
// what a plain read of `path` returns: a route that reads the wrong blocks must not be timed.
absl::Status CheckSameBytes(Target& target, const std::string& path, int count) {
  auto engine = EngineContext::Create(*target.catalog, EngineConfig());
  if (!engine.ok()) return engine.status();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  Random random;
  random.x ^= 0x9E3779B97F4A7C15ULL;  // other blocks than the timed runs start with
  std::vector<char> expected(4096);
  absl::Status problem;
  for (int i = 0; i < count && problem.ok(); ++i) {
    const uint64_t offset = (random.Next() % (target.size / 4096)) * 4096;
    if (pread(fd, expected.data(), expected.size(), static_cast<off_t>(offset)) != 4096) {
      problem = absl::DataLossError(absl::StrCat("short pread of ", path, " at ", offset));
      break;
    }
    Check check;
    absl::Status refusal;
    if ((*engine)->StartRead(storage::ReadRequest{target.file, offset, 4096, 0}, &OnCheckDone,
                             &check, &refusal) != storage::StartOutcome::kQueued) {
      problem = refusal.ok() ? absl::InternalError("read not queued") : refusal;
      break;
    }
    while (!check.done) (*engine)->PollOnce();
    if (!check.status.ok()) {
      problem = check.status;
    } else if (check.data != expected) {
      problem = absl::DataLossError(absl::StrFormat(
          "route %s returned other bytes than the file holds at offset %u", target.route, offset));
    }
  }
  close(fd);
  return problem;
}

int FileMain(const std::string& path, int cpu, const std::vector<int>& depths,
             const std::vector<uint64_t>& simple_values, bool json) {
  std::vector<Target> targets;
  for (absl::string_view route : absl::StrSplit(absl::GetFlag(FLAGS_route), ',')) {
    auto target = BuildTarget(std::string(route), path);
    if (target.ok()) {
      absl::Status same = CheckSameBytes(*target, path, 256);
      if (!same.ok()) target = same;
    }
    if (!target.ok()) {
      fprintf(stderr, "engine_bench: route %s: %s\n", std::string(route).c_str(),
              std::string(target.status().message()).c_str());
      return 2;
    }
    targets.push_back(*std::move(target));
  }
  if (targets.empty()) {
    fprintf(stderr, "engine_bench: no --route\n");
    return 2;
  }
  std::vector<std::string> waits;
  for (absl::string_view wait : absl::StrSplit(absl::GetFlag(FLAGS_wait), ',')) {
    if (wait != "spin" && wait != "block") {
      fprintf(stderr, "engine_bench: bad --wait (spin, block)\n");
      return 2;
    }
    waits.emplace_back(wait);
  }
  if (absl::GetFlag(FLAGS_fio)) {
    fprintf(stderr, "engine_bench: --file: fio is not run (it cannot read the FIEMAP route)\n");
  }
  const std::string& first = targets[0].route;
  std::vector<std::string> rows;
  if (!json) {
    printf("file %s (%lu bytes), cpu %d, 4 KiB randread, %gs per run after %gs ramp\n",
           path.c_str(), targets[0].size, cpu, absl::GetFlag(FLAGS_runtime),
           absl::GetFlag(FLAGS_ramp));
    printf("cpu us/read: the engine thread's user+sys time per read; proc: the whole process's\n");
    printf("%5s %6s %5s %-14s %10s %9s %9s %7s %7s %9s %9s %9s %9s %10s\n", "qd", "simple", "wait",
           "route", "iops", "iops/1st", "cpu_us/rd", "usr", "sys", "cpu/1st", "proc_us", "p50",
           "p99", "spins/rd");
  }
  for (int qd : depths) {
    for (uint64_t simple : simple_values) {
      for (const std::string& wait : waits) {
        std::optional<RunResult> base;
        for (Target& target : targets) {
          fprintf(stderr, "engine_bench: qd=%d simple_max_bytes=%lu wait=%s route=%s ...\n", qd,
                  simple, wait.c_str(), target.route.c_str());
          auto result =
              RunEngine(*target.catalog, target.file, target.size, qd, simple, wait == "block");
          if (!result.ok()) {
            fprintf(stderr, "engine_bench: %s\n", std::string(result.status().message()).c_str());
            return 1;
          }
          if (result->errors > 0)
            fprintf(stderr, "engine_bench: %lu read errors\n", result->errors);
          if (!base) base = *result;
          const double reads = static_cast<double>(std::max<uint64_t>(result->reads, 1));
          const double cpu_us = static_cast<double>(result->thread_user_us + result->thread_sys_us);
          const double base_cpu_us =
              static_cast<double>(base->thread_user_us + base->thread_sys_us);
          const double base_reads = static_cast<double>(std::max<uint64_t>(base->reads, 1));
          const double cpu_per_read = cpu_us / reads;
          const double cpu_ratio = cpu_per_read / (base_cpu_us / base_reads);
          const double iops_ratio = result->iops / base->iops;
          const double process_per_read = static_cast<double>(result->process_us) / reads;
          const double spins_per_read = static_cast<double>(result->empty_polls) / reads;
          if (json) {
            rows.push_back(absl::StrFormat(
                "{\"qd\": %d, \"simple_max_bytes\": %u, \"wait\": \"%s\", \"route\": \"%s\", "
                "\"iops\": %.1f, \"reads\": %u, \"errors\": %u, \"thread_user_us\": %u, "
                "\"thread_sys_us\": %u, \"process_cpu_us\": %u, \"cpu_us_per_read\": %.4f, "
                "\"process_cpu_us_per_read\": %.4f, \"empty_polls\": %u, \"p50_us\": %.1f, "
                "\"p99_us\": %.1f, \"seconds\": %.4f, \"pinned_cpu_busy_us\": %u, "
                "\"involuntary_switches\": %u}",
                qd, simple, wait, target.route, result->iops, result->reads, result->errors,
                result->thread_user_us, result->thread_sys_us, result->process_us, cpu_per_read,
                process_per_read, result->empty_polls, result->p50_ns / 1000.0,
                result->p99_ns / 1000.0, result->seconds, result->pinned_cpu_busy_us,
                result->involuntary_switches));
          } else {
            printf(
                "%5d %6lu %5s %-14s %10.0f %9.3f %9.2f %7.2f %7.2f %9.3f %9.2f %8.1fu %8.1fu "
                "%10.1f\n",
                qd, simple, wait.c_str(), target.route.c_str(), result->iops, iops_ratio,
                cpu_per_read, static_cast<double>(result->thread_user_us) / reads,
                static_cast<double>(result->thread_sys_us) / reads, cpu_ratio, process_per_read,
                result->p50_ns / 1000.0, result->p99_ns / 1000.0, spins_per_read);
            fflush(stdout);
          }
        }
      }
    }
  }
  if (json) {
    printf(
        "{\"file\": \"%s\", \"size\": %lu, \"cpu\": %d, \"first_route\": \"%s\", \"rows\": [%s]}\n",
        path.c_str(), targets[0].size, cpu, first.c_str(), absl::StrJoin(rows, ", ").c_str());
  }
  return 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "In-process engine benchmark: 4 KiB random reads, simple path on/off, fio side by side.\n"
      "Usage: engine_bench --device=/dev/loopN [flags]; see tests/bench/run_engine_bench.sh");
  absl::ParseCommandLine(argc, argv);
  const std::string device = absl::GetFlag(FLAGS_device);
  const std::string file = absl::GetFlag(FLAGS_file);
  if (device.empty() == file.empty()) {
    fprintf(stderr, "engine_bench: give --device or --file (see --help)\n");
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
  if (!file.empty()) return FileMain(file, cpu, depths, simple_values, json);

  Catalog catalog;
  if (absl::Status s = catalog.AddWholeDevice("device", device); !s.ok()) {
    fprintf(stderr, "engine_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const uint64_t device_bytes = catalog.device(0).size();
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
      auto result = RunEngine(catalog, "device", device_bytes, qd, simple);
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
