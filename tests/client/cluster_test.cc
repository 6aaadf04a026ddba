// Scale-out (issue 15) with real servers on 127.0.0.1: each serves one file they all share
// ("shared", the same image) and one of its own ("own<i>"). The cluster client and the CLI see one
// namespace. A server SIGKILLed while readers hammer the shared file costs none of its reads;
// reads of the dead server's own file fail UNAVAILABLE naming it; once it is back on its port,
// reads reach it again. A server added to a target file mid-run gets a share of the reads.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cluster_client.h"
#include "client/server_choice.h"
#include "gtest/gtest.h"
#include "tests/support/loop_device.h"
#include "tests/support/nbd_device.h"
#include "tests/support/server_process.h"

namespace blockread::testing {
namespace {

using client::BackoffPolicy;
using client::BlockReadClient;
using client::ClusterClient;
using client::ClusterOptions;
using client::LeastLoadedOfTwo;
using client::ServerHealth;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kImageBytes = 4 << 20;

// Reads served so far by `server`, on both paths.
uint64_t ReadsServed(const std::string& target) {
  auto stats = BlockReadClient::Connect(target)->Stats();
  if (!stats.ok()) return 0;
  uint64_t reads = 0;
  for (const v1::PathStats& path : stats->paths()) reads += path.reads();
  return reads;
}

// ---- How a replica is chosen (client/server_choice.h), on the clock given ----

TEST(ServerChoiceTest, AFailedServerIsBackedOffUntilItAnswers) {
  ServerHealth health;
  BackoffPolicy policy;
  std::mt19937_64 rng(1);
  const auto now = ServerHealth::Clock::now();
  health.Failed(policy, rng);
  EXPECT_FALSE(health.Available(ServerHealth::Clock::now()));
  EXPECT_GE(health.retry_at(), now + policy.initial / 2);
  health.Failed(policy, rng);  // while backed off: the same failure, not another
  EXPECT_EQ(health.failures(), 1);
  health.Succeeded();
  EXPECT_TRUE(health.Available(ServerHealth::Clock::now()));
  EXPECT_EQ(health.failures(), 0);
}

TEST(ServerChoiceTest, LatencyRisesAtOnceFallsGraduallyAndDecaysWithoutAnswers) {
  using std::chrono::milliseconds;
  ServerHealth health;
  const auto t0 = ServerHealth::Clock::now();
  EXPECT_EQ(health.LatencyNs(t0), 0);
  health.Answered(milliseconds(1), t0);
  EXPECT_DOUBLE_EQ(health.LatencyNs(t0), 1e6);
  health.Answered(milliseconds(20), t0);  // a slow answer counts at once
  EXPECT_DOUBLE_EQ(health.LatencyNs(t0), 20e6);
  health.Answered(milliseconds(0), t0);  // a fast one pulls it down by the weight
  EXPECT_DOUBLE_EQ(health.LatencyNs(t0), 20e6 * (1 - ServerHealth::kLatencyWeight));
  health.GaveUpAfter(milliseconds(1), t0);  // a cancelled read only says "at least"
  EXPECT_DOUBLE_EQ(health.LatencyNs(t0), 20e6 * (1 - ServerHealth::kLatencyWeight));
  const double before = health.LatencyNs(t0);
  EXPECT_NEAR(health.LatencyNs(t0 + ServerHealth::kLatencyDecay), before / std::exp(1.0), 1);
  EXPECT_LT(health.LatencyNs(t0 + 10 * ServerHealth::kLatencyDecay), 1e3);
  EXPECT_DOUBLE_EQ(health.LastLatencyNs(), before) << "what it took when it last answered";
  health.outstanding = 1;  // a read it has not answered: the estimate holds
  EXPECT_DOUBLE_EQ(health.LatencyNs(t0 + 10 * ServerHealth::kLatencyDecay), before);
}

TEST(ServerChoiceTest, TwoChoicesPickTheShorterExpectedWait) {
  using std::chrono::microseconds;
  std::mt19937_64 rng(1);
  ServerHealth servers[2];
  const auto pick = [&] {
    return LeastLoadedOfTwo(
        2, [&](size_t i) -> ServerHealth& { return servers[i]; }, rng);
  };
  // Nothing known of either: fewer outstanding wins.
  servers[0].outstanding = 3;
  servers[1].outstanding = 1;
  EXPECT_EQ(pick(), 1u);
  // Server 1 answers in 20 ms, server 0 in 200 us: server 0 even with 8 reads outstanding.
  const auto now = ServerHealth::Clock::now();
  servers[0].Answered(microseconds(200), now);
  servers[1].Answered(microseconds(20000), now);
  servers[0].outstanding = 8;
  servers[1].outstanding = 0;
  for (int i = 0; i < 100; ++i) ASSERT_EQ(pick(), 0u);
  // The floor: a server that stopped answering (no latency known) is not handed every read.
  ServerHealth silent, answering;
  silent.outstanding = 100;
  answering.Answered(microseconds(100), ServerHealth::Clock::now());
  ServerHealth* pair[2] = {&silent, &answering};
  EXPECT_EQ(LeastLoadedOfTwo(
                2, [&](size_t i) -> ServerHealth& { return *pair[i]; }, rng),
            1u);
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = RandomBytes(kImageBytes, 5);
    ASSERT_TRUE(WriteAt(dir_.path() + "/shared.img", 0, shared_, true).ok());
    for (int i = 0; i < 5; ++i) {
      own_.push_back(RandomBytes(kImageBytes, 10 + i));
      ASSERT_TRUE(WriteAt(absl::StrCat(dir_.path(), "/own", i, ".img"), 0, own_.back(), true).ok());
    }
  }

  // Server i: "shared" and "own<i>"; on `port` when given (a restart).
  std::unique_ptr<ServerProcess> StartServer(int i, int port = 0) {
    std::vector<std::string> args = {absl::StrCat("--device=shared=", dir_.path(),
                                                  "/shared.img,own", i, "=", dir_.path(), "/own", i,
                                                  ".img")};
    if (port != 0) args.push_back(absl::StrCat("--listen=127.0.0.1:", port));
    auto server = ServerProcess::Start(args, absl::StrCat(dir_.path(), "/server", i, ".log"));
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  // Servers 0 .. count-1, and their addresses.
  void StartServers(int count, std::vector<std::unique_ptr<ServerProcess>>* servers,
                    std::vector<std::string>* addresses) {
    for (int i = 0; i < count; ++i) {
      servers->push_back(StartServer(i));
      ASSERT_NE(servers->back(), nullptr);
      addresses->push_back(servers->back()->target());
    }
  }

  // Readers stop, then the cluster client goes, also when a test ends early: the locals of a
  // test body are gone before TearDown, so the readers' client is the fixture's.
  void TearDown() override {
    StopReaders();
    cluster_.reset();
  }
  // The fixture's cluster client over `targets`.
  void ConnectCluster(const std::string& targets, const ClusterOptions& options) {
    auto cluster = ClusterClient::Connect(targets, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // Readers of random 4 KiB blocks of "shared" on `threads` threads until Stop().
  void StartReaders(ClusterClient& cluster, int threads) {
    start_ = Clock::now();
    for (int t = 0; t < threads; ++t) {
      readers_.emplace_back([this, &cluster, t] {
        std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
        while (!stop_) {
          const uint64_t offset = rng() % (kImageBytes / 4096) * 4096;
          client::ReadCallOptions call;
          call.deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
          auto read = cluster.Read("shared", offset, 4096, call);
          if (!read.ok()) {
            ++failed_;
            std::lock_guard lock(mu_);
            if (first_failure_.empty()) first_failure_ = read.status().ToString();
            continue;
          }
          const bool exact = read->data() == std::string(shared_.data() + offset, 4096);
          ++(exact ? ok_ : wrong_);
          const double at_ms =
              std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
          std::lock_guard lock(mu_);
          completed_ms_.push_back(at_ms);
        }
      });
    }
  }
  void StopReaders() {
    stop_ = true;
    for (auto& t : readers_) t.join();
    readers_.clear();
  }
  // The longest time without a completed read after `after_ms` (when the server died).
  double LongestGapAfter(double after_ms) {
    std::lock_guard lock(mu_);
    std::sort(completed_ms_.begin(), completed_ms_.end());
    double gap = 0, previous = after_ms;
    for (double at : completed_ms_) {
      if (at < after_ms) continue;
      gap = std::max(gap, at - previous);
      previous = at;
    }
    return gap;
  }

  TempDir dir_;
  std::vector<char> shared_;
  std::vector<std::vector<char>> own_;
  std::unique_ptr<ClusterClient> cluster_;
  std::vector<std::thread> readers_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ok_{0}, wrong_{0}, failed_{0};
  std::mutex mu_;
  std::string first_failure_;
  std::vector<double> completed_ms_;
  Clock::time_point start_;
};

TEST_F(ClusterTest, TargetsResolveToEveryServerOnce) {
  auto listed = client::ResolveTargets("127.0.0.1:1, 127.0.0.1:2,127.0.0.1:1");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:2"}));
  // A name is resolved by the client: every address it has (localhost is in /etc/hosts).
  auto named = client::ResolveTargets("dns:///localhost:7420");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_NE(std::find(named->begin(), named->end(), "127.0.0.1:7420"), named->end())
      << absl::StrJoin(*named, ",");
  const std::string file = dir_.path() + "/targets";
  std::ofstream(file) << "127.0.0.1:3\n127.0.0.1:4\n";
  auto from_file = client::ResolveTargets("127.0.0.1:2,@" + file);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(*from_file, (std::vector<std::string>{"127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"}));
  EXPECT_EQ(client::ResolveTargets("@" + dir_.path() + "/missing").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client::ResolveTargets(" , ").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClusterTest, AServerKilledUnderLoadCostsNoReadOfAReplicatedFileAndIsUsedAgainWhenBack) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  ASSERT_NO_FATAL_FAILURE(StartServers(4, &servers, &addresses));
  const std::string targets = absl::StrJoin(addresses, ",");
  ClusterOptions options;
  options.backoff.max = std::chrono::milliseconds(2000);  // the test waits for the return
  ASSERT_NO_FATAL_FAILURE(ConnectCluster(targets, options));

  // One namespace: the shared file on all four, each own file on its server.
  auto listed = cluster_->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 5u);
  for (const ClusterClient::ListedFile& file : *listed) {
    if (file.info.name() == "shared") {
      EXPECT_EQ(file.servers, addresses);
    } else {
      const int i = file.info.name().back() - '0';
      EXPECT_EQ(file.servers, std::vector<std::string>{addresses[i]}) << file.info.name();
    }
  }
  const ProcessExit ls =
      RunToExit({CliBinary(), "--target=" + targets, "ls"}, dir_.path() + "/ls.out", 30);
  EXPECT_EQ(ls.status, 0) << ls.output;
  EXPECT_NE(ls.output.find(targets), std::string::npos) << "ls shows the shared file's servers:\n"
                                                        << ls.output;
  for (int i = 0; i < 4; ++i) {
    auto own = cluster_->Read(absl::StrCat("own", i), 8192, 4096, {});
    ASSERT_TRUE(own.ok()) << own.status();
    EXPECT_EQ(own->data(), std::string(own_[i].data() + 8192, 4096));
  }

  StartReaders(*cluster_, 4);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int port = servers[2]->port();
  const double killed_at_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  ASSERT_EQ(kill(servers[2]->pid(), SIGKILL), 0);
  servers[2]->Stop();  // reaps it
  servers[2].reset();
  std::this_thread::sleep_for(std::chrono::seconds(2));

  // Its own file: nobody else has it.
  auto gone = cluster_->Read("own2", 0, 4096, {});
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable) << gone.status();
  EXPECT_NE(gone.status().message().find("file 'own2'"), std::string::npos) << gone.status();
  const ProcessExit cli = RunToExit({CliBinary(), "--target=" + targets, "read", "own2", "0", "4k"},
                                    dir_.path() + "/read.out", 30);
  EXPECT_EQ(WEXITSTATUS(cli.status), 3) << cli.output;
  EXPECT_NE(cli.output.find("own2"), std::string::npos) << cli.output;

  // Back on its port: its file is read again, and it takes shared reads again.
  servers[2] = StartServer(2, port);
  ASSERT_NE(servers[2], nullptr);
  const auto until = Clock::now() + std::chrono::seconds(20);
  absl::StatusOr<v1::ReadBlockResponse> back = absl::UnknownError("not tried");
  while (Clock::now() < until) {
    back = cluster_->Read("own2", 4096, 4096, {});
    if (back.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data(), std::string(own_[2].data() + 4096, 4096));
  uint64_t served_after_restart = 0;
  while (Clock::now() < until && (served_after_restart = ReadsServed(addresses[2])) < 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  StopReaders();
  std::printf(
      "cluster: 4 servers, 4 readers of the replicated file: %lu reads exact, %lu wrong, %lu "
      "failed; one server SIGKILLed: longest gap in completed reads %.1f ms; back on its port, it "
      "served %lu reads\n",
      ok_.load(), wrong_.load(), failed_.load(), LongestGapAfter(killed_at_ms),
      served_after_restart);
  EXPECT_EQ(failed_.load(), 0u) << first_failure_;
  EXPECT_EQ(wrong_.load(), 0u);
  EXPECT_GE(served_after_restart, 100u) << "reads did not go back to the restarted server";
  cluster_.reset();  // its streams end, so the servers need not wait for them
  for (auto& server : servers) EXPECT_EQ(server->Stop(), 0) << server->Log();
}

// `blockread load` over four servers, verifying every byte against the shared image, while one
// server is SIGKILLed and, later, restarted on its port: no read fails or differs, both in
// stream and in unary mode, and the restarted server serves reads again before the run ends.
TEST_F(ClusterTest, LoadRidesThroughAServerKilledAndRestartedMidRun) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  ASSERT_NO_FATAL_FAILURE(StartServers(4, &servers, &addresses));
  const std::string targets = absl::StrJoin(addresses, ",");
  for (const std::string mode : {"stream", "unary"}) {
    ProcessExit load;
    std::thread runner([&] {
      load = RunToExit({CliBinary(), "load", "--target=" + targets, "--file=shared", "--verify",
                        "--verify-file=" + dir_.path() + "/shared.img", "--mode=" + mode, "--qd=16",
                        "--runtime=10s", "--output=json"},
                       dir_.path() + "/load.out", 120);
    });
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const int port = servers[1]->port();
    ASSERT_EQ(kill(servers[1]->pid(), SIGKILL), 0);
    servers[1]->Stop();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    // Back within a few seconds: the load's back-off (a few seconds by then) finds it well
    // before the run ends.
    servers[1] = StartServer(1, port);
    ASSERT_NE(servers[1], nullptr);
    runner.join();
    const uint64_t served_by_restarted = ReadsServed(servers[1]->target());
    ASSERT_EQ(WEXITSTATUS(load.status), 0) << load.output;
    const std::string json_text = load.output.substr(load.output.find('{'));
    const nlohmann::json report = nlohmann::json::parse(json_text, nullptr, false);
    ASSERT_FALSE(report.is_discarded()) << load.output;
    EXPECT_TRUE(report["errors"].empty()) << mode << ": " << report["errors"].dump();
    EXPECT_GT(report["reads"].get<uint64_t>(), 1000u) << mode;
    double slowest_second = 1e18;
    for (const auto& second : report["per_second"]) {
      if (second["t"].get<double>() >= 1.0) {
        slowest_second = std::min(slowest_second, second["iops"].get<double>());
      }
    }
    std::printf(
        "cluster: load --mode=%s over 4 servers, one SIGKILLed at 2 s and restarted at ~3 s: "
        "%lu reads verified, errors %s, slowest second %.0f IOPS (mean %.0f); the restarted "
        "server served %lu reads\n",
        mode.c_str(), report["reads"].get<uint64_t>(), report["errors"].dump().c_str(),
        slowest_second, report["iops"].get<double>(), served_by_restarted);
    std::fflush(stdout);  // before the next run forks
    EXPECT_GT(served_by_restarted, 0u) << mode << ": reads did not go back to the restarted server";
  }
  for (auto& server : servers) EXPECT_EQ(server->Stop(), 0) << server->Log();
}

// What one `blockread load --mode=unary --qd=8` run over two replicas of "shared" reported, and
// the share of its reads the second replica served.
struct HedgingRun {
  nlohmann::json report;
  double second_share = 0;
  double hedged_share() const {
    return report["hedged"].get<double>() / report["issued"].get<double>();
  }
};

// Two replicas of "shared": server 0 reads the image itself, the second server reads it through
// an nbdkit device made slow (`options`); unary load runs with and without --hedge-after=p95,
// every byte verified. `during_run`, if given, runs on another thread while each load runs.
class HedgingTest : public ClusterTest {
 protected:
  void RunBoth(NbdDevice::Options options, const std::function<void(NbdDevice&)>& during_run,
               HedgingRun runs[2]) {
    if (std::string why = NbdDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
    options.image = dir_.path() + "/shared.img";
    auto device = NbdDevice::Create(dir_.path(), options);
    ASSERT_TRUE(device.ok()) << device.status();
    std::unique_ptr<ServerProcess> fast = StartServer(0);
    ASSERT_NE(fast, nullptr);
    auto second =
        ServerProcess::Start({"--device=shared=" + (*device)->path()}, dir_.path() + "/second.log");
    ASSERT_TRUE(second.ok()) << second.status();
    const std::string targets = fast->target() + "," + (*second)->target();
    for (int hedged = 0; hedged < 2; ++hedged) {
      std::vector<std::string> args = {
          CliBinary(),     "load",     "--target=" + targets,
          "--file=shared", "--verify", "--verify-file=" + dir_.path() + "/shared.img",
          "--mode=unary",  "--qd=8",   "--runtime=4s",
          "--output=json"};
      if (hedged == 1) args.push_back("--hedge-after=p95");
      const uint64_t second_before = ReadsServed((*second)->target());
      std::thread during;
      if (during_run) during = std::thread([&] { during_run(**device); });
      const ProcessExit load = RunToExit(args, dir_.path() + "/load.out", 120);
      if (during.joinable()) during.join();
      ASSERT_EQ(WEXITSTATUS(load.status), 0) << load.output;
      HedgingRun& run = runs[hedged];
      run.report = nlohmann::json::parse(load.output.substr(load.output.find('{')), nullptr, false);
      ASSERT_FALSE(run.report.is_discarded()) << load.output;
      EXPECT_TRUE(run.report["errors"].empty()) << run.report["errors"].dump();
      run.second_share = static_cast<double>(ReadsServed((*second)->target()) - second_before) /
                         run.report["issued"].get<double>();
    }
    EXPECT_LE(runs[1].hedged_share(), 0.05 + 1e-9) << "hedges past the 5% budget";
    EXPECT_EQ(runs[0].report["hedged"].get<uint64_t>(), 0u);
    EXPECT_EQ(fast->Stop(), 0) << fast->Log();
    EXPECT_EQ((*second)->Stop(), 0) << (*second)->Log();
  }

  static void Print(const char* scenario, const HedgingRun runs[2]) {
    const auto latency = [](const HedgingRun& run) {
      const nlohmann::json& us = run.report["lat_us"];
      return absl::StrFormat("p99 %.0f / p99.9 %.0f / max %.0f us", us["p99"].get<double>(),
                             us["p999"].get<double>(), us["max"].get<double>());
    };
    std::printf(
        "cluster: %s: unary QD8 %s without hedging (the second replica served %.2f%% of "
        "reads), %s with --hedge-after=p95 (%.2f%%; %.2f%% of reads hedged, %lu answered "
        "first)\n",
        scenario, latency(runs[0]).c_str(), runs[0].second_share * 100, latency(runs[1]).c_str(),
        runs[1].second_share * 100, runs[1].hedged_share() * 100,
        runs[1].report["hedges_won"].get<uint64_t>());
    std::fflush(stdout);
  }
};

// One replica 20 ms slower a read (nbdkit's delay filter): the choice of replica by latency keeps
// reads off it, and hedges are not sent to it (it would not answer sooner).
TEST_F(HedgingTest, AUniformlySlowReplicaIsAvoided) {
  NbdDevice::Options options;
  options.read_delay_ms = 20;
  HedgingRun runs[2];
  ASSERT_NO_FATAL_FAILURE(RunBoth(options, nullptr, runs));
  if (IsSkipped()) return;
  Print("two replicas, one 20 ms slower a read", runs);
}

// One replica stalls for a second mid-run (nbdkit's pause filter): the reads caught on it are
// hedged to the other replica, which answers them.
TEST_F(HedgingTest, ReadsCaughtOnAStalledReplicaAreHedgedToTheOther) {
  NbdDevice::Options options;
  options.pausable = true;
  HedgingRun runs[2];
  ASSERT_NO_FATAL_FAILURE(RunBoth(
      options,
      [](NbdDevice& device) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        EXPECT_TRUE(device.Pause().ok());
        std::this_thread::sleep_for(std::chrono::seconds(1));
        EXPECT_TRUE(device.Resume().ok());
      },
      runs));
  if (IsSkipped()) return;
  Print("two replicas, one stalled for 1 s mid-run", runs);
  EXPECT_GT(runs[1].report["hedges_won"].get<uint64_t>(), 0u)
      << "no read caught on the stalled replica was answered by the other";
}

TEST_F(ClusterTest, AServerAddedToTheTargetFileGetsAShareOfTheReads) {
  // Four servers listed in a target file that the client reads again every second; a fifth is
  // started and added to it mid-run.
  std::vector<std::unique_ptr<ServerProcess>> servers;
  const auto write_targets = [&](const std::string& path) {
    std::ofstream out(path);
    for (const auto& server : servers) out << server->target() << "\n";
  };
  for (int i = 0; i < 4; ++i) {
    servers.push_back(StartServer(i));
    ASSERT_NE(servers.back(), nullptr);
  }
  const std::string target_file = dir_.path() + "/targets";
  write_targets(target_file);
  ClusterOptions options;
  options.resolve_interval = std::chrono::milliseconds(1000);
  ASSERT_NO_FATAL_FAILURE(ConnectCluster("@" + target_file, options));
  StartReaders(*cluster_, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  servers.push_back(StartServer(4));
  ASSERT_NE(servers.back(), nullptr);
  const std::string added = servers.back()->target();
  write_targets(target_file + ".new");  // whole, then renamed in: never read half-written
  ASSERT_EQ(rename((target_file + ".new").c_str(), target_file.c_str()), 0);
  const auto added_at = Clock::now();
  uint64_t served = 0;
  while (Clock::now() < added_at + std::chrono::seconds(15) &&
         (served = ReadsServed(added)) < 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double took_s = std::chrono::duration<double>(Clock::now() - added_at).count();
  // Its share over a second once it is in.
  const uint64_t before_added = ReadsServed(added), before_all = ok_.load();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double share = static_cast<double>(ReadsServed(added) - before_added) /
                       static_cast<double>(std::max<uint64_t>(1, ok_.load() - before_all));
  StopReaders();
  std::printf(
      "cluster: a fifth server added to the target file served 100 reads %.1f s later, "
      "then %.0f%% of them\n",
      took_s, share * 100);
  EXPECT_GE(served, 100u) << "the added server got no reads within 15 s";
  EXPECT_EQ(failed_.load(), 0u) << first_failure_;
  EXPECT_EQ(wrong_.load(), 0u);
  cluster_.reset();
  for (auto& server : servers) EXPECT_EQ(server->Stop(), 0) << server->Log();
}

// The replica rule: files of one name are replicas only when size and declared version agree.
// Server 2 serves a different image of the same size as "shared", declared as another version:
// the client never reads "shared" from it, and every byte it gets is the majority's.
TEST_F(ClusterTest, FilesOfOneNameAreReplicasOnlyWhenTheirVersionsAgree) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < 3; ++i) {
    const std::string image = i < 2 ? "shared.img" : "own2.img";
    auto server = ServerProcess::Start(
        {absl::StrCat("--device=shared=", dir_.path(), "/", image, ",own", i, "=", dir_.path(),
                      "/own", i, ".img"),
         absl::StrCat("--file-version=shared=", i < 2 ? "v1" : "v2", ",*=base")},
        absl::StrCat(dir_.path(), "/server", i, ".log"));
    ASSERT_TRUE(server.ok()) << server.status();
    servers.push_back(*std::move(server));
    addresses.push_back(servers.back()->target());
  }
  ASSERT_NO_FATAL_FAILURE(ConnectCluster(absl::StrJoin(addresses, ","), ClusterOptions{}));
  auto info = cluster_->Stat("shared");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version(), "v1");
  auto own = cluster_->Stat("own1");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->version(), "base") << "'*' gives the files without a version one";
  auto listed = cluster_->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  for (const ClusterClient::ListedFile& file : *listed) {
    if (file.info.name() != "shared") continue;
    EXPECT_EQ(file.servers, (std::vector<std::string>{addresses[0], addresses[1]}));
  }

  const uint64_t served_before = ReadsServed(addresses[2]);
  for (int r = 0; r < 300; ++r) {
    const uint64_t offset = static_cast<uint64_t>(r) * 7 % (kImageBytes / 4096) * 4096;
    auto read = cluster_->Read("shared", offset, 4096, {});
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->data(), std::string(shared_.data() + offset, 4096)) << "offset " << offset;
  }
  EXPECT_EQ(ReadsServed(addresses[2]), served_before) << "read from the other version's server";
  cluster_.reset();
  for (auto& server : servers) EXPECT_EQ(server->Stop(), 0) << server->Log();

  // A version for a name no file has is a configuration error that names it.
  auto refused = ServerProcess::Start(
      {absl::StrCat("--device=shared=", dir_.path(), "/shared.img"), "--file-version=missing=1"},
      dir_.path() + "/refused.log");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("no served file is named 'missing'"),
            std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace blockread::testing
