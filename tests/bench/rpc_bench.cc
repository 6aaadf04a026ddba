// BlockReadClient::Read() against a running server: latency of sequential calls, throughput at a
// queue depth (one thread per outstanding call), and the server's CPU time per read (from
// /proc/PID/stat, when --server_pid is given). A benchmark, not a test.
//
// Each thread its own client (the default): every call is a ReadBlock RPC. --shared_client: all
// threads call one client, whose concurrent Read() calls are coalesced onto shared streams;
// add --nocoalesce for the same shared client making one ReadBlock RPC per call.
//
//   rpc_bench --target=127.0.0.1:7420 --file=random-4m --qd=1 --number=10000 --server_pid=N
//   rpc_bench --qd=32 --number=0 --seconds=10 --shared_client [--nocoalesce]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/blockread_client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:7420", "Server address");
ABSL_FLAG(std::string, file, "random-4m", "File to read");
ABSL_FLAG(int, qd, 1, "Calls in flight (one thread each)");
ABSL_FLAG(int64_t, number, 10000, "Reads in total (0: use --seconds)");
ABSL_FLAG(double, seconds, 10, "Duration when --number is 0");
ABSL_FLAG(int, server_pid, 0, "Server process, for its CPU time per read");
ABSL_FLAG(uint64_t, bs, 4096, "Read size");
ABSL_FLAG(bool, shared_client, false, "All threads call one BlockReadClient");
ABSL_FLAG(bool, coalesce, true, "Coalesce concurrent Read() calls (ClientOptions::coalescing)");
ABSL_FLAG(int, coalesce_streams, blockread::client::CoalescingOptions().streams,
          "CoalescingOptions::streams");
ABSL_FLAG(int, coalesce_batch, blockread::client::CoalescingOptions().max_batch,
          "CoalescingOptions::max_batch");
ABSL_FLAG(int64_t, linger_us, blockread::client::CoalescingOptions().linger.count(),
          "CoalescingOptions::linger, microseconds");

namespace {

// utime + stime of a process, in seconds.
double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Unary ReadBlock latency, IOPS and server CPU per read.");
  absl::ParseCommandLine(argc, argv);
  const std::string file = absl::GetFlag(FLAGS_file);
  const int qd = absl::GetFlag(FLAGS_qd);
  const int64_t number = absl::GetFlag(FLAGS_number);
  const uint64_t bs = absl::GetFlag(FLAGS_bs);
  const int server_pid = absl::GetFlag(FLAGS_server_pid);
  auto probe = blockread::client::BlockReadClient::Connect(absl::GetFlag(FLAGS_target));
  auto info = probe->Stat(file);
  if (!info.ok()) {
    fprintf(stderr, "rpc_bench: %s\n", std::string(info.status().message()).c_str());
    return 1;
  }
  const uint64_t blocks = info->size() / bs;
  std::atomic<int64_t> issued{0}, errors{0};
  std::vector<std::vector<uint64_t>> latencies(qd);
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  blockread::client::ClientOptions options;
  options.coalescing.enabled = absl::GetFlag(FLAGS_coalesce);
  options.coalescing.streams = absl::GetFlag(FLAGS_coalesce_streams);
  options.coalescing.max_batch = absl::GetFlag(FLAGS_coalesce_batch);
  options.coalescing.linger = std::chrono::microseconds(absl::GetFlag(FLAGS_linger_us));
  std::shared_ptr<blockread::client::BlockReadClient> shared;
  if (absl::GetFlag(FLAGS_shared_client)) {
    shared = blockread::client::BlockReadClient::Connect(absl::GetFlag(FLAGS_target), options);
  }
  const double cpu_before = server_pid ? ProcessCpuSeconds(server_pid) : 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < qd; ++t) {
    threads.emplace_back([&, t] {
      std::shared_ptr<blockread::client::BlockReadClient> client =
          shared != nullptr
              ? shared
              : blockread::client::BlockReadClient::Connect(absl::GetFlag(FLAGS_target), options);
      std::mt19937_64 rng(t + 1);
      for (;;) {
        if (number > 0 ? issued.fetch_add(1) >= number : std::chrono::steady_clock::now() >= end) {
          break;
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto response = client->Read(file, (rng() % blocks) * bs, bs);
        const auto t1 = std::chrono::steady_clock::now();
        if (!response.ok()) {
          ++errors;
          continue;
        }
        latencies[t].push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_after = server_pid ? ProcessCpuSeconds(server_pid) : 0;
  std::vector<uint64_t> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  if (all.empty()) {
    fprintf(stderr, "rpc_bench: no successful reads (%ld errors)\n", errors.load());
    return 1;
  }
  auto pct = [&](double q) {
    return all[std::min(all.size() - 1, static_cast<size_t>(q * all.size()))] / 1000.0;
  };
  printf("qd=%d reads=%zu errors=%ld elapsed=%.2fs iops=%.0f p50=%.1fus p99=%.1fus p99.9=%.1fus",
         qd, all.size(), errors.load(), elapsed, all.size() / elapsed, pct(0.5), pct(0.99),
         pct(0.999));
  if (server_pid) {
    printf(" server_cpu=%.2fs server_cpu_per_read=%.1fus", cpu_after - cpu_before,
           (cpu_after - cpu_before) / all.size() * 1e6);
  }
  printf("\n");
  return 0;
}
