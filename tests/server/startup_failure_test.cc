// A server that cannot start its engine says why and exits non-zero within seconds, as a new user
// sees it: under a seccomp filter that blocks io_uring_setup (what container runtimes' default
// profiles do), --io-engine=io_uring names io_uring, the cause and the fix, and the process exits
// 1, not on a signal. With the default engine (auto) the same server falls back to psync, says so
// in one line, and serves the same bytes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "tests/support/loop_device.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/server_process.h"

namespace blockread::testing {
namespace {

TEST(StartupFailureTest, IoUringBlockedBySeccompIsNamedWithItsFixAndExitsOne) {
  TempDir dir;
  const ProcessExit exit =
      RunToExit({DenyIoUringBinary(), ServerBinary(), "--listen=127.0.0.1:0",
                 "--metrics-listen=", "--io-engine=io_uring", "--data-dir=" + dir.path() + "/data"},
                dir.path() + "/out", 30);
  ASSERT_TRUE(WIFEXITED(exit.status)) << "ended by a signal, status " << exit.status << ":\n"
                                      << exit.output;
  EXPECT_EQ(WEXITSTATUS(exit.status), 1) << exit.output;
  EXPECT_LT(exit.seconds, 10) << exit.output;
  EXPECT_NE(exit.output.find("io_uring is not available"), std::string::npos) << exit.output;
  EXPECT_NE(exit.output.find("Operation not permitted"), std::string::npos) << exit.output;
  EXPECT_NE(exit.output.find("seccomp profile"), std::string::npos) << exit.output;
  EXPECT_NE(exit.output.find("deploy/seccomp-io_uring.json"), std::string::npos) << exit.output;
  EXPECT_NE(exit.output.find("--io-engine=psync"), std::string::npos) << exit.output;
  EXPECT_EQ(exit.output.find("alarm.cc"), std::string::npos) << exit.output;
}

TEST(StartupFailureTest, AutoFallsBackToPsyncWithOneLineAndServesTheSameBytes) {
  TempDir dir;
  const std::string data = "--data-dir=" + dir.path() + "/data";
  // The same demo device, served once with io_uring and once with io_uring blocked.
  auto uring = ServerProcess::Start({data}, dir.path() + "/uring.log");
  ASSERT_TRUE(uring.ok()) << uring.status();
  auto psync = ServerProcess::Start({data}, dir.path() + "/psync.log", 60, {DenyIoUringBinary()});
  ASSERT_TRUE(psync.ok()) << psync.status();

  const std::string log = (*psync)->Log();
  size_t lines = 0;
  for (size_t at = log.find("io_engine auto: "); at != std::string::npos;
       at = log.find("io_engine auto: ", at + 1)) {
    ++lines;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    EXPECT_NE(line.find("Operation not permitted"), std::string::npos) << line;
    EXPECT_NE(line.find("deploy/seccomp-io_uring.json"), std::string::npos) << line;
    EXPECT_NE(line.find("psync"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 1u) << "one line for the whole server, not one per worker:\n" << log;
  EXPECT_NE(log.find("io_engine=psync"), std::string::npos) << log;
  EXPECT_EQ((*uring)->Log().find("io_engine auto: "), std::string::npos) << (*uring)->Log();

  auto from_uring = client::BlockReadClient::Connect((*uring)->target());
  auto from_psync = client::BlockReadClient::Connect((*psync)->target());
  const auto backend_of = [](client::BlockReadClient& client) {
    auto stats = client.Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() && stats->devices_size() > 0 ? stats->devices(0).backend() : "";
  };
  EXPECT_EQ(backend_of(*from_uring), "io_uring");
  auto files = from_psync->List();
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_FALSE(files->empty());
  uint64_t compared = 0;
  for (const v1::FileInfo& f : *files) {
    // Simple-path 4 KiB reads and generic ones (unaligned, large, across EOF).
    for (auto [offset, length] :
         std::vector<std::pair<uint64_t, uint64_t>>{{0, 4096},
                                                    {8192, 4096},
                                                    {1, 4095},
                                                    {777, 300000},
                                                    {0, 1 << 20},
                                                    {f.size() > 100 ? f.size() - 100 : 0, 4096}}) {
      if (offset > f.size()) continue;
      auto want = from_uring->Read(f.name(), offset, length);
      auto got = from_psync->Read(f.name(), offset, length);
      ASSERT_TRUE(want.ok()) << f.name() << ": " << want.status();
      ASSERT_TRUE(got.ok()) << f.name() << ": " << got.status();
      ASSERT_EQ(got->data(), want->data()) << f.name() << " at " << offset << " +" << length;
      compared += got->data().size();
    }
  }
  EXPECT_GT(compared, 1u << 20);
  auto stats = from_psync->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const v1::DeviceStats& device : stats->devices()) {
    EXPECT_EQ(device.backend(), "psync") << device.name();
    EXPECT_EQ(device.backend_workers().at("psync"), static_cast<uint32_t>(stats->workers_size()));
  }
  // The same fact in /metrics and in `blockread stats`.
  auto metrics = Scrape((*psync)->metrics_port());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::string device = stats->devices(0).name();
  EXPECT_EQ(metrics->Value("blockread_device_backend_workers",
                           {{"device", device}, {"backend", "psync"}}),
            stats->workers_size());
  EXPECT_EQ(metrics->Value("blockread_device_backend_workers",
                           {{"device", device}, {"backend", "io_uring"}}),
            0);
  const ProcessExit cli = RunToExit({CliBinary(), "stats", "--target=" + (*psync)->target()},
                                    dir.path() + "/cli.out", 30);
  EXPECT_TRUE(WIFEXITED(cli.status) && WEXITSTATUS(cli.status) == 0) << cli.output;
  EXPECT_NE(cli.output.find("psync"), std::string::npos) << cli.output;
  EXPECT_EQ((*psync)->Stop(), 0);
  EXPECT_EQ((*uring)->Stop(), 0);
}

TEST(StartupFailureTest, AWorkerThatCannotBePinnedIsNamedAndExitsOne) {
  // The server checks --cpus against the affinity mask before starting; a worker pinned to a CPU
  // the mask lacks is refused up front, naming the CPU.
  TempDir dir;
  const ProcessExit exit =
      RunToExit({"/usr/bin/taskset", "-c", "0", ServerBinary(), "--listen=127.0.0.1:0",
                 "--metrics-listen=", "--cpus=1", "--data-dir=" + dir.path() + "/data"},
                dir.path() + "/out", 30);
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs two CPUs";
  ASSERT_TRUE(WIFEXITED(exit.status)) << exit.output;
  EXPECT_NE(WEXITSTATUS(exit.status), 0) << exit.output;
  EXPECT_LT(exit.seconds, 10) << exit.output;
  EXPECT_NE(exit.output.find("CPU 1"), std::string::npos) << exit.output;
}

}  // namespace
}  // namespace blockread::testing
