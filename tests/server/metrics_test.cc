// /metrics, GetStats and `blockread stats` against a real server on the demo device: during a
// real load, scraped with curl, the counters move by exactly the reads the test made, per path,
// per fallback reason, per device and per RPC; `blockread stats --json` agrees with the scrape;
// the Grafana dashboard queries only metrics a real scrape has.
#include <sched.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "proto/wire/labels.h"
#include "tests/support/loop_device.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/server_process.h"

namespace blockread {
namespace {

using client::BlockReadClient;
using testing::Exposition;
using testing::Labels;
using testing::RunCommand;
using testing::Scrape;
using testing::ServerProcess;
using testing::TempDir;

constexpr uint64_t kSimpleMax = 64 << 10;

// A read the test sends, and the path and fallback reason the server must report for it.
struct PlannedRead {
  std::string file;
  uint64_t offset;
  uint64_t length;
  v1::ReadPath path;
  v1::FallbackReason fallback;
  int device_ios;  // device I/Os the engine issues for it
  int times;
};

// The demo layout (server/demo_data.cc): random-4m is one extent, sparse has a hole at
// [256K, 1M), fragmented is 64 extents of 16K, hello.txt is 184 bytes.
const std::vector<PlannedRead>& Plan() {
  static const auto* plan = new std::vector<PlannedRead>{
      {"random-4m", 64 << 10, 4096, v1::SIMPLE, v1::FALLBACK_NONE, 1, 10},
      {"random-4m", 1 << 20, kSimpleMax, v1::SIMPLE, v1::FALLBACK_NONE, 1, 1},
      {"random-4m", 0, 128 << 10, v1::GENERIC, v1::FALLBACK_TOO_LARGE, 1, 3},
      {"random-4m", 1, 100, v1::GENERIC, v1::FALLBACK_UNALIGNED, 1, 4},
      {"sparse", 512 << 10, 4096, v1::GENERIC, v1::FALLBACK_NOT_MAPPED, 0, 5},
      {"fragmented", 8 << 10, 16 << 10, v1::GENERIC, v1::FALLBACK_SPANS_EXTENTS, 2, 6},
      {"hello.txt", 0, 4096, v1::GENERIC, v1::FALLBACK_BEYOND_EOF, 1, 2},
  };
  return *plan;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = ServerProcess::Start(
        {"--data_dir=" + dir_.path() + "/data", absl::StrCat("--simple_max_bytes=", kSimpleMax)},
        dir_.path() + "/server.log");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_NE(server_->metrics_port(), 0);
    client_ = BlockReadClient::Connect(server_->target());
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    }
  }
  Exposition MustScrape() {
    auto scraped = Scrape(server_->metrics_port());
    EXPECT_TRUE(scraped.ok()) << scraped.status();
    return scraped.ok() ? *scraped : Exposition();
  }
  std::string Cli(const std::string& args) {
    return absl::StrCat(testing::CliBinary(), " --target=", server_->target(), " ", args);
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<BlockReadClient> client_;
};

double Delta(const Exposition& after, const Exposition& before, const std::string& name,
             const Labels& labels = {}) {
  return after.Value(name, labels) - before.Value(name, labels);
}

// Every histogram series: buckets ascending in le and non-decreasing, +Inf equal to _count.
void ExpectWellFormedHistograms(const Exposition& e, const std::string& family) {
  ASSERT_EQ(e.types.at(family), "histogram");
  std::map<Labels, std::vector<std::pair<double, double>>> series;
  for (const auto& [labels, value] : e.samples.at(family + "_bucket")) {
    Labels key = labels;
    const double le = std::stod(key.at("le") == "+Inf" ? "inf" : key.at("le"));
    key.erase("le");
    series[key].emplace_back(le, value);
  }
  ASSERT_FALSE(series.empty());
  for (auto& [labels, buckets] : series) {
    std::sort(buckets.begin(), buckets.end());
    for (size_t i = 1; i < buckets.size(); ++i) {
      EXPECT_LE(buckets[i - 1].second, buckets[i].second) << family;
    }
    EXPECT_TRUE(std::isinf(buckets.back().first));
    EXPECT_EQ(buckets.back().second, e.Value(family + "_count", labels)) << family;
  }
}

TEST_F(MetricsTest, CountersMoveByExactlyTheReadsMadeDuringALoad) {
  const Exposition before = MustScrape();
  ASSERT_EQ(before.samples.at("blockread_build_info").size(), 1u);
  const auto& [build_labels, build_value] = *before.samples.at("blockread_build_info").begin();
  EXPECT_EQ(build_value, 1);
  EXPECT_FALSE(build_labels.at("version").empty());
  auto hello = client_->Stat("hello.txt");
  ASSERT_TRUE(hello.ok()) << hello.status();

  // A real load from the bundled client (simple-path 4K reads), scraped every 20 ms meanwhile.
  constexpr int kLoadReads = 4000;
  std::atomic<bool> load_done{false};
  absl::StatusOr<std::string> load_output;
  std::thread load([&] {
    load_output = RunCommand(Cli(absl::StrCat("load --file=random-4m --bs=4k --qd=8 --ramp=0 ",
                                              "--number=", kLoadReads, " --output=json")));
    load_done = true;
  });
  int scrapes_during_load = 0;
  double last_simple = before.Value("blockread_reads_total", {{"path", "simple"}});
  while (!load_done) {
    const Exposition during = MustScrape();
    const double simple = during.Value("blockread_reads_total", {{"path", "simple"}});
    EXPECT_GE(simple, last_simple) << "a counter went backwards";
    last_simple = simple;
    ++scrapes_during_load;
    // The planned reads, sent while the load runs.
    if (scrapes_during_load == 1) {
      for (const PlannedRead& r : Plan()) {
        for (int i = 0; i < r.times; ++i) {
          auto response = client_->Read(r.file, r.offset, r.length);
          ASSERT_TRUE(response.ok()) << r.file << " " << response.status();
          EXPECT_EQ(response->path(), r.path) << r.file << " at " << r.offset;
          EXPECT_EQ(response->fallback(), r.fallback) << r.file << " at " << r.offset;
        }
      }
      // Refused before a path is chosen: beyond the end of the file.
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(client_->Read("hello.txt", 1 << 20, 4096).status().code(),
                  absl::StatusCode::kOutOfRange);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  load.join();
  ASSERT_TRUE(load_output.ok()) << load_output.status();
  const nlohmann::json load_result = nlohmann::json::parse(*load_output);
  const uint64_t load_reads = load_result["issued"];
  ASSERT_GE(load_reads, static_cast<uint64_t>(kLoadReads));
  ASSERT_EQ(load_result["returned"], load_reads);
  EXPECT_GE(scrapes_during_load, 2);

  const Exposition after = MustScrape();
  uint64_t simple = load_reads, generic = 0, simple_bytes = load_reads * 4096, generic_bytes = 0;
  uint64_t device_ios = load_reads;
  std::map<std::string, uint64_t> fallbacks;
  for (const PlannedRead& r : Plan()) {
    const uint64_t length = r.file == "hello.txt" ? hello->size() : r.length;
    (r.path == v1::SIMPLE ? simple : generic) += r.times;
    (r.path == v1::SIMPLE ? simple_bytes : generic_bytes) += r.times * length;
    if (r.path == v1::GENERIC) fallbacks[wire::FallbackLabel(r.fallback)] += r.times;
    device_ios += static_cast<uint64_t>(r.times * r.device_ios);
  }
  EXPECT_EQ(Delta(after, before, "blockread_reads_total", {{"path", "simple"}}), simple);
  EXPECT_EQ(Delta(after, before, "blockread_reads_total", {{"path", "generic"}}), generic);
  EXPECT_EQ(Delta(after, before, "blockread_read_bytes_total", {{"path", "simple"}}), simple_bytes);
  EXPECT_EQ(Delta(after, before, "blockread_read_bytes_total", {{"path", "generic"}}),
            generic_bytes);
  for (int r = v1::FALLBACK_DISABLED; r < v1::FALLBACK_FILE_ROUTE; ++r) {
    const std::string reason = wire::FallbackLabel(r);
    EXPECT_EQ(Delta(after, before, "blockread_fallbacks_total", {{"reason", reason}}),
              fallbacks[reason])
        << reason;
  }
  EXPECT_EQ(Delta(after, before, "blockread_read_rejections_total", {{"code", "OUT_OF_RANGE"}}), 2);
  ASSERT_TRUE(after.samples.contains("blockread_read_errors_total"));
  for (const auto& [labels, value] : after.samples.at("blockread_read_errors_total")) {
    EXPECT_EQ(value, 0) << "no device errors here: " << labels.at("path") << " "
                        << labels.at("code");
  }
  EXPECT_EQ(Delta(after, before, "blockread_rpcs_total", {{"method", "ReadBlock"}, {"code", "OK"}}),
            simple + generic);
  EXPECT_EQ(Delta(after, before, "blockread_rpcs_total",
                  {{"method", "ReadBlock"}, {"code", "OUT_OF_RANGE"}}),
            2);
  EXPECT_EQ(Delta(after, before, "blockread_device_reads_total", {{"device", "demo"}}), device_ios);
  EXPECT_EQ(after.Value("blockread_device_inflight", {{"device", "demo"}}), 0);

  // Histograms: one sample per read in every stage, well formed.
  ExpectWellFormedHistograms(after, "blockread_read_duration_seconds");
  for (const char* stage : {"queue", "device", "total"}) {
    EXPECT_EQ(Delta(after, before, "blockread_read_duration_seconds_count",
                    {{"path", "simple"}, {"stage", stage}}),
              simple)
        << stage;
    EXPECT_EQ(Delta(after, before, "blockread_read_duration_seconds_count",
                    {{"path", "generic"}, {"stage", stage}}),
              generic)
        << stage;
  }

  // Poll modes and worker loop accounting: loop devices have no poll queues.
  const auto& busy = after.samples.at("blockread_worker_busy_seconds_total");
  ASSERT_FALSE(busy.empty());
  EXPECT_EQ(after.Value("blockread_device_poll_mode", {{"device", "demo"}, {"mode", "interrupt"}}),
            static_cast<double>(busy.size()));
  EXPECT_EQ(after.Value("blockread_device_poll_mode", {{"device", "demo"}, {"mode", "iopoll"}}), 0);
  double busy_total = 0, empty_polls = 0;
  for (const auto& [labels, value] : busy) {
    busy_total += value;
    empty_polls += after.Value("blockread_worker_empty_polls_total", labels);
    EXPECT_TRUE(after.Has("blockread_worker_idle_seconds_total", labels));
  }
  EXPECT_GT(busy_total, 0);
  EXPECT_GT(empty_polls, 0);
  // A worker with nothing to do blocks on its queue, and that time shows as idle while it lasts:
  // busy + idle grows with the wall clock.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const Exposition quiet = MustScrape();
  for (const auto& [labels, value] : busy) {
    const double elapsed =
        quiet.Value("blockread_uptime_seconds") - after.Value("blockread_uptime_seconds");
    const double accounted = Delta(quiet, after, "blockread_worker_busy_seconds_total", labels) +
                             Delta(quiet, after, "blockread_worker_idle_seconds_total", labels);
    EXPECT_NEAR(accounted, elapsed, 0.05) << labels.at("worker");
  }

  // No label carries a file, offset or client: every label value is from a bounded set.
  const std::set<std::string> allowed_labels = {
      "path",   "stage", "code",    "reason",       "device",   "mode",    "method",
      "worker", "le",    "version", "grpc_version", "quantile", "backend", "route"};
  for (const auto& [name, series] : after.samples) {
    for (const auto& [labels, value] : series) {
      for (const auto& [key, label_value] : labels) {
        EXPECT_TRUE(allowed_labels.contains(key)) << name << " has label " << key;
        EXPECT_EQ(label_value.find("random-4m"), std::string::npos) << name;
      }
    }
  }

  // `blockread stats --json` reads the same numbers through GetStats.
  auto stats_output = RunCommand(Cli("stats --json"));
  ASSERT_TRUE(stats_output.ok()) << stats_output.status();
  const nlohmann::json stats = nlohmann::json::parse(*stats_output);
  const Exposition now = MustScrape();
  for (const char* path : {"simple", "generic"}) {
    const nlohmann::json& p = stats["paths"][path];
    EXPECT_EQ(p["reads"].get<double>(), now.Value("blockread_reads_total", {{"path", path}}));
    EXPECT_EQ(p["bytes"].get<double>(), now.Value("blockread_read_bytes_total", {{"path", path}}));
    EXPECT_EQ(p["errors"].get<double>(), 0);
    for (const char* stage : {"queue", "device", "total"}) {
      EXPECT_EQ(
          p["latency_us"][stage]["count"].get<double>(),
          now.Value("blockread_read_duration_seconds_count", {{"path", path}, {"stage", stage}}));
    }
  }
  for (const auto& [reason, count] : stats["fallbacks"].items()) {
    EXPECT_EQ(count.get<double>(), now.Value("blockread_fallbacks_total", {{"reason", reason}}))
        << reason;
  }
  for (const auto& [code, count] : stats["rejected"].items()) {
    EXPECT_EQ(count.get<double>(), now.Value("blockread_read_rejections_total", {{"code", code}}));
  }
  // The backend the workers read the device through (a loop device: io_uring in interrupt mode).
  EXPECT_EQ(stats["devices"][0]["backend"].get<std::string>(), "io_uring");
  EXPECT_EQ(stats["devices"][0]["reads"].get<double>(),
            now.Value("blockread_device_reads_total", {{"device", "demo"}}));
  for (const nlohmann::json& rpc : stats["rpcs"]) {
    if (rpc["method"] == "GetStats") continue;  // the scrape does not count; GetStats does
    EXPECT_EQ(rpc["count"].get<double>(),
              now.Value("blockread_rpcs_total", {{"method", rpc["method"].get<std::string>()},
                                                 {"code", rpc["code"].get<std::string>()}}))
        << rpc.dump();
  }
  // The table view and --watch refresh with interval rates.
  auto table = RunCommand(Cli("stats"));
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_NE(table->find("simple"), std::string::npos) << *table;
  EXPECT_NE(table->find("not_mapped=5/5"), std::string::npos) << *table;
  auto watch = RunCommand(Cli("stats --json --watch 0.2 --count 2"));
  ASSERT_TRUE(watch.ok()) << watch.status();
  std::vector<nlohmann::json> samples;
  std::istringstream lines(*watch);
  for (std::string line; std::getline(lines, line);) samples.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(samples.size(), 2u) << *watch;
  EXPECT_EQ(samples[0]["interval"], "since the server started");
  EXPECT_EQ(samples[1]["interval"], "since the previous sample");
  EXPECT_NEAR(samples[1]["interval_s"].get<double>(), 0.2, 0.15);
  EXPECT_EQ(samples[1]["paths"]["simple"]["interval_reads"], 0) << "no reads between samples";
}

// The status codes blockread.proto's header documents for reads ("//   NOT_FOUND  unknown ...").
std::set<std::string> DocumentedReadCodes() {
  std::ifstream proto(std::string(BLOCKREAD_SOURCE_DIR) + "/proto/blockread/v1/blockread.proto");
  const std::regex documented(R"(^//   ([A-Z][A-Z_]+)\b)");
  std::set<std::string> codes;
  for (std::string line; std::getline(proto, line) && line.starts_with("//");) {
    std::smatch match;
    if (std::regex_search(line, match, documented)) codes.insert(match[1]);
  }
  return codes;
}

// The label values a series of `family` has for `key`, over all its series.
std::set<std::string> LabelValues(const Exposition& e, const std::string& family,
                                  const std::string& key) {
  std::set<std::string> values;
  if (!e.samples.contains(family)) return values;
  for (const auto& [labels, value] : e.samples.at(family)) values.insert(labels.at(key));
  return values;
}

// Before any read, every labelled family has every known label value, at 0: dashboards and alerts
// (rate(), absent()) see a zero rather than "no data" until the first error.
TEST_F(MetricsTest, AFreshServerHasEveryKnownSeriesAtZero) {
  const Exposition fresh = MustScrape();
  const std::set<std::string> codes = DocumentedReadCodes();
  ASSERT_TRUE(codes.contains("DATA_LOSS") && codes.contains("OUT_OF_RANGE"))
      << "cannot read the status codes from blockread.proto";
  const std::vector<std::string> paths = {"simple", "generic"};

  EXPECT_EQ(LabelValues(fresh, "blockread_read_errors_total", "code"), codes);
  EXPECT_EQ(LabelValues(fresh, "blockread_read_rejections_total", "code"), codes);
  for (const std::string& code : codes) {
    for (const std::string& path : paths) {
      EXPECT_TRUE(fresh.Has("blockread_read_errors_total", {{"path", path}, {"code", code}}))
          << path << " " << code;
    }
    EXPECT_TRUE(fresh.Has("blockread_read_rejections_total", {{"code", code}})) << code;
  }
  for (const auto& [labels, value] : fresh.samples.at("blockread_read_errors_total")) {
    EXPECT_EQ(value, 0) << labels.at("path") << " " << labels.at("code");
  }
  for (const auto& [labels, value] : fresh.samples.at("blockread_read_rejections_total")) {
    EXPECT_EQ(value, 0) << labels.at("code");
  }

  for (const std::string& path : paths) {
    EXPECT_TRUE(fresh.Has("blockread_reads_total", {{"path", path}})) << path;
    EXPECT_TRUE(fresh.Has("blockread_read_bytes_total", {{"path", path}})) << path;
    for (const char* stage : {"queue", "device", "total"}) {
      EXPECT_TRUE(
          fresh.Has("blockread_read_duration_seconds_count", {{"path", path}, {"stage", stage}}))
          << path << " " << stage;
    }
  }
  // FALLBACK_FILE_ROUTE, the last, is retired: never counted.
  for (int r = v1::FALLBACK_DISABLED; r < v1::FALLBACK_FILE_ROUTE; ++r) {
    EXPECT_TRUE(fresh.Has("blockread_fallbacks_total", {{"reason", wire::FallbackLabel(r)}}))
        << wire::FallbackLabel(r);
  }
  EXPECT_TRUE(fresh.Has("blockread_device_errors_total", {{"device", "demo"}}));
  // Loop devices and regular files have no poll queues: every worker reads through io_uring in
  // interrupt mode, and the polled backend shows 0 workers rather than no data.
  EXPECT_GT(fresh.Value("blockread_device_backend_workers",
                        {{"device", "demo"}, {"backend", "io_uring"}}),
            0);
  EXPECT_EQ(fresh.Value("blockread_device_backend_workers",
                        {{"device", "demo"}, {"backend", "io_uring_iopoll"}}),
            0);

  // Every method the server serves, with code OK, whether or not it has been called.
  std::vector<std::string> methods;
  const google::protobuf::ServiceDescriptor* api =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "blockread.v1.BlockRead");
  ASSERT_NE(api, nullptr);
  for (int i = 0; i < api->method_count(); ++i) methods.push_back(api->method(i)->name());
  for (const char* health : {"Check", "Watch"}) {
    methods.push_back(absl::StrCat("grpc.health.v1.Health/", health));
  }
  for (const std::string& method : methods) {
    EXPECT_TRUE(fresh.Has("blockread_rpcs_total", {{"method", method}, {"code", "OK"}})) << method;
  }
  EXPECT_EQ(fresh.Value("blockread_rpcs_total", {{"method", "ReadBlock"}, {"code", "OK"}}), 0);
  EXPECT_EQ(fresh.Value("blockread_rpcs_total", {{"method", "Explain"}, {"code", "OK"}}), 0);
}

TEST_F(MetricsTest, DashboardQueriesOnlyMetricsTheServerExports) {
  std::ifstream file(std::string(BLOCKREAD_SOURCE_DIR) + "/deploy/grafana/blockread.json");
  ASSERT_TRUE(file.good());
  const nlohmann::json dashboard = nlohmann::json::parse(file);  // throws (fails) if not JSON
  EXPECT_FALSE(dashboard["title"].get<std::string>().empty());
  EXPECT_FALSE(dashboard["uid"].get<std::string>().empty());
  ASSERT_FALSE(dashboard["panels"].empty());

  // One read on each path so the error-free families have their series too.
  ASSERT_TRUE(client_->Read("random-4m", 0, 4096).ok());
  ASSERT_TRUE(client_->Read("random-4m", 1, 10).ok());
  const Exposition scraped = MustScrape();

  std::vector<std::string> exprs;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& node) {
    if (node.is_object()) {
      for (const auto& [key, value] : node.items()) {
        if (key == "expr" && value.is_string()) exprs.push_back(value);
        walk(value);
      }
    } else if (node.is_array()) {
      for (const nlohmann::json& child : node) walk(child);
    }
  };
  walk(dashboard);
  ASSERT_GE(exprs.size(), 8u);
  const std::regex metric(R"(blockread_[a-z0-9_]+)");
  std::set<std::string> queried;
  for (const std::string& expr : exprs) {
    for (auto it = std::sregex_iterator(expr.begin(), expr.end(), metric);
         it != std::sregex_iterator(); ++it) {
      queried.insert(it->str());
    }
  }
  for (const std::string& name : queried) {
    std::string family = name;
    for (const char* suffix : {"_bucket", "_count", "_sum"}) {
      if (family.ends_with(suffix) &&
          scraped.types.contains(family.substr(0, family.size() - std::string(suffix).size()))) {
        family = family.substr(0, family.size() - std::string(suffix).size());
      }
    }
    EXPECT_TRUE(scraped.types.contains(family))
        << "the dashboard queries " << name << ", which /metrics does not export";
  }
  // It covers what operators need at a glance.
  for (const char* needed : {"blockread_reads_total", "blockread_read_bytes_total",
                             "blockread_read_duration_seconds_bucket", "blockread_fallbacks_total",
                             "blockread_device_errors_total", "blockread_worker_busy_seconds_total",
                             "blockread_worker_idle_seconds_total"}) {
    EXPECT_TRUE(queried.contains(needed)) << needed;
  }
}

// The CPU list each thread of `pid` whose name starts with `prefix` may run on.
std::vector<std::string> ThreadCpuLists(pid_t pid, const std::string& prefix) {
  std::vector<std::string> out;
  const std::filesystem::path tasks = absl::StrCat("/proc/", pid, "/task");
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (!name.starts_with(prefix)) continue;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("Cpus_allowed_list:"))
        out.push_back(line.substr(line.find_last_of("\t ") + 1));
    }
  }
  return out;
}

TEST_F(MetricsTest, TheMetricsThreadsStayOffTheWorkersCpus) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  if (CPU_COUNT(&mask) < 2 || !CPU_ISSET(0, &mask)) {
    GTEST_SKIP() << "needs CPU 0 and another CPU in the affinity mask";
  }
  auto pinned = ServerProcess::Start({"--data_dir=" + dir_.path() + "/data", "--cpus=0"},
                                     dir_.path() + "/pinned.log");
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  ASSERT_TRUE(Scrape((*pinned)->metrics_port()).ok());
  const std::vector<std::string> lists = ThreadCpuLists((*pinned)->pid(), "civetweb");
  ASSERT_FALSE(lists.empty()) << "no civetweb threads found";
  for (const std::string& cpus : lists) {
    // Any list that leaves out CPU 0: "1", "1-3", "1,3", ...
    EXPECT_FALSE(cpus == "0" || cpus.starts_with("0-") || cpus.starts_with("0,")) << cpus;
  }
  EXPECT_EQ((*pinned)->Stop(), 0);
}

TEST_F(MetricsTest, MetricsCanBeTurnedOffAndABadAddressIsReported) {
  auto off = ServerProcess::Start({"--data-dir=" + dir_.path() + "/data", "--metrics-listen="},
                                  dir_.path() + "/off.log");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ((*off)->metrics_port(), 0);
  EXPECT_EQ((*off)->Stop(), 0);

  // The port our server already holds: the second server must refuse to start, saying why.
  auto taken = RunCommand(absl::StrCat(
      testing::ServerBinary(), " --data_dir=", dir_.path(),
      "/data --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:", server_->metrics_port()));
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("cannot serve metrics on 127.0.0.1:"), std::string::npos)
      << taken.status();
}

}  // namespace
}  // namespace blockread
