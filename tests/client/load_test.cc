// `blockread load`: option parsing, and short real runs against a real server (counts add up,
// both modes, verification by CRC32C and by a local copy, a mismatch stops the run).
#include "client/load.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "client/load_cli.h"
#include "client/load_report.h"
#include "gtest/gtest.h"
#include "storage/manifest.h"
#include "tests/support/loop_device.h"
#include "tests/support/map_reader.h"
#include "tests/support/server_process.h"

namespace blockread::client {
namespace {

TEST(LoadOptionsTest, DefaultsAndUnits) {
  auto defaults = ParseLoadArguments({});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->block_size, 4096u);
  EXPECT_EQ(defaults->queue_depth, 32);
  EXPECT_FALSE(defaults->stream);
  EXPECT_FALSE(defaults->sequential);
  EXPECT_EQ(defaults->runtime_s, 10);

  auto parsed = ParseLoadArguments({"--bs=128k", "--qd=8", "--mode=stream", "--batch=4",
                                    "--rw=read", "--runtime=2m", "--ramp=1s", "--threads=3",
                                    "--channels=2", "--target=a:1,b:2", "--file=x,y", "--rate=1000",
                                    "--output=json", "--seed=9"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->block_size, 128u * 1024);
  EXPECT_EQ(parsed->queue_depth, 8);
  EXPECT_TRUE(parsed->stream);
  EXPECT_EQ(parsed->batch, 4);
  EXPECT_TRUE(parsed->sequential);
  EXPECT_EQ(parsed->runtime_s, 120);
  EXPECT_EQ(parsed->ramp_s, 1);
  EXPECT_EQ(parsed->targets, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(parsed->files, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(parsed->rate, 1000);
  EXPECT_TRUE(parsed->json);
  EXPECT_EQ(ParseLoadArguments({"--bs=1m"})->block_size, 1u << 20);
}

// --qd keeps fio's meaning (reads in flight per thread); what is not given is derived from it
// and --bs, and what is given wins.
TEST(LoadOptionsTest, DerivedSettings) {
  auto derive = [](std::vector<std::string> args) {
    auto options = ParseLoadArguments(args);
    EXPECT_TRUE(options.ok()) << options.status();
    auto settings = DeriveLoadSettings(*options);
    EXPECT_TRUE(settings.ok()) << settings.status();
    return *settings;
  };
  // Unary: one channel per thread, as before.
  LoadSettings unary = derive({"--qd=32"});
  EXPECT_EQ(unary.threads, 1);
  EXPECT_EQ(unary.channels, 1);
  EXPECT_EQ(unary.streams, 0);
  EXPECT_EQ(unary.batch, 1);
  EXPECT_EQ(derive({"--qd=32", "--threads=3"}).channels, 3);

  for (const int qd : {1, 2, 7, 8, 32, 64, 256}) {
    for (const char* bs : {"4k", "16k", "128k", "1m"}) {
      const std::string qd_flag = absl::StrCat("--qd=", qd), bs_flag = absl::StrCat("--bs=", bs);
      LoadSettings s = derive({"--mode=stream", qd_flag, bs_flag});
      SCOPED_TRACE(absl::StrCat(qd_flag, " ", bs_flag));
      EXPECT_EQ(s.threads, 1) << "threads stay 1 unless given";
      EXPECT_GE(s.streams, 1);
      EXPECT_LE(s.streams, qd);
      EXPECT_GE(s.batch, 1);
      EXPECT_LE(s.batch, qd / s.streams) << "a stream carries at least a batch";
      EXPECT_GE(s.channels, 1);
      EXPECT_LE(s.channels, s.streams);
      EXPECT_LE(s.streams, 4);
      EXPECT_LE(s.batch, 16);
    }
  }
  // The derivation the README states and the sweep measured (streams x share, batch).
  struct Derived {
    const char* qd;
    const char* bs;
    int streams, batch;
  };
  for (const Derived& want :
       {Derived{"1", "4k", 1, 1}, Derived{"8", "4k", 2, 4}, Derived{"32", "4k", 2, 16},
        Derived{"64", "16k", 2, 16}, Derived{"8", "128k", 2, 4}, Derived{"32", "128k", 4, 8},
        Derived{"64", "128k", 4, 8}, Derived{"2", "1m", 2, 1}}) {
    LoadSettings s =
        derive({"--mode=stream", absl::StrCat("--qd=", want.qd), absl::StrCat("--bs=", want.bs)});
    EXPECT_EQ(s.streams, want.streams) << "--qd=" << want.qd << " --bs=" << want.bs;
    EXPECT_EQ(s.batch, want.batch) << "--qd=" << want.qd << " --bs=" << want.bs;
    EXPECT_EQ(s.channels, 1);
  }
  // A --bs that would wrap qd x bs still derives (1 GiB reads: 4 streams, a read each).
  EXPECT_EQ(derive({"--mode=stream", "--qd=8", "--bs=1g"}).streams, 4);
  // More reads in flight, or bigger ones: never fewer streams; bigger reads: never bigger
  // batches.
  EXPECT_LE(derive({"--mode=stream", "--qd=8"}).streams,
            derive({"--mode=stream", "--qd=64"}).streams);
  EXPECT_LE(derive({"--mode=stream", "--qd=32", "--bs=4k"}).streams,
            derive({"--mode=stream", "--qd=32", "--bs=128k"}).streams);
  EXPECT_GE(derive({"--mode=stream", "--qd=32", "--bs=4k"}).batch,
            derive({"--mode=stream", "--qd=32", "--bs=128k"}).batch);

  // Explicit flags win; the rest still fits them.
  LoadSettings given = derive(
      {"--mode=stream", "--qd=32", "--streams=2", "--batch=16", "--channels=1", "--threads=2"});
  EXPECT_EQ(given.threads, 2);
  EXPECT_EQ(given.streams, 2);
  EXPECT_EQ(given.batch, 16);
  EXPECT_EQ(given.channels, 1);
  LoadSettings big_batch = derive({"--mode=stream", "--qd=32", "--batch=32"});
  EXPECT_EQ(big_batch.batch, 32);
  EXPECT_EQ(big_batch.streams, 1) << "streams derived around an explicit batch";
  EXPECT_EQ(derive({"--mode=stream", "--qd=64", "--streams=1"}).streams, 1);
}

TEST(LoadOptionsTest, BadValuesNameTheOption) {
  auto expect_error = [](std::vector<std::string> args, const std::string& message) {
    auto parsed = ParseLoadArguments(args);
    ASSERT_FALSE(parsed.ok()) << args[0];
    EXPECT_NE(parsed.status().message().find(message), std::string::npos) << parsed.status();
  };
  expect_error({"--bs=4q"}, "--bs");
  expect_error({"--rw=write"}, "--rw");
  expect_error({"--mode=fast"}, "--mode");
  expect_error({"--qd=0"}, "--qd");
  expect_error({"--batch=4"}, "--batch needs --mode=stream");
  expect_error({"--streams=2"}, "--streams needs --mode=stream");
  expect_error({"--mode=stream", "--qd=2", "--batch=4"}, "--batch cannot exceed");
  expect_error({"--mode=stream", "--qd=8", "--streams=4", "--batch=4"}, "--batch cannot exceed");
  expect_error({"--mode=stream", "--qd=2", "--streams=3"}, "--streams cannot exceed --qd");
  expect_error({"--runtime=soon"}, "--runtime");
  expect_error({"--verify-file=/x"}, "--verify-file needs --verify");
  expect_error({"--output=xml"}, "--output");
  expect_error({"--nonsense"}, "nonsense");
}

class LoadRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::ServerProcess::Start({"--data_dir=" + dir_.path() + "/data"},
                                                dir_.path() + "/server.log");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    // A local copy of random-4m, from the demo device via the manifest.
    storage::Catalog reference;
    ASSERT_TRUE(storage::LoadManifest(dir_.path() + "/data/demo.manifest", reference).ok());
    auto bytes = testing::ReadThroughMap(reference, **reference.Resolve("random-4m"), 0, 4 << 20);
    ASSERT_TRUE(bytes.ok());
    copy_ = dir_.path() + "/random-4m.copy";
    ASSERT_TRUE(testing::WriteAt(copy_, 0, *bytes, true).ok());
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    }
  }
  LoadOptions Options() {
    LoadOptions o;
    o.targets = {server_->target()};
    o.runtime_s = 1;
    o.queue_depth = 8;
    o.progress = false;
    return o;
  }
  static void ExpectCountsAddUp(const LoadResult& r) {
    uint64_t errors = 0;
    for (const auto& [code, n] : r.errors) errors += n;
    EXPECT_EQ(r.issued, r.returned) << "every read issued came back";
    EXPECT_EQ(errors, 0u);
    EXPECT_GT(r.reads, 0u);
    EXPECT_LE(r.reads, r.returned);
    EXPECT_EQ(r.latency_ns.count, r.reads);
    uint64_t server_reads = 0;
    for (const auto& [path, n] : r.server_paths) server_reads += n;
    EXPECT_EQ(server_reads, r.returned) << "the server saw exactly the reads sent";
    EXPECT_TRUE(r.verify_failure.empty()) << r.verify_failure;
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::ServerProcess> server_;
  std::string copy_;
};

TEST_F(LoadRunTest, UnaryWithCrcVerification) {
  LoadOptions o = Options();
  o.verify = true;
  o.threads = 2;
  o.channels = 2;
  auto result = RunLoad(o);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectCountsAddUp(*result);
  EXPECT_GT(result->server_paths.at("simple"), 0u);
  const std::string json = LoadResultJson(o, *result);
  for (const char* key : {"\"iops\"", "\"bw_bytes\"", "\"lat_us\"", "\"p50\"", "\"p99\"",
                          "\"p999\"", "\"errors\"", "\"server_paths\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
}

TEST_F(LoadRunTest, StreamWithALocalCopy) {
  LoadOptions o = Options();
  o.stream = true;
  o.batch = 4;
  o.files = {"random-4m"};
  o.verify = true;
  o.verify_file = copy_;
  o.block_size = 16384;
  auto result = RunLoad(o);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectCountsAddUp(*result);
  EXPECT_GT(result->server_fallbacks.at("too_large"), 0u);
}

TEST_F(LoadRunTest, SeveralStreamsPerThreadOverSeveralChannels) {
  // 3 streams share --qd=8 unevenly (3, 3, 2) on 2 channels, from one thread.
  LoadOptions o = Options();
  o.stream = true;
  o.streams = 3;
  o.batch = 2;
  o.channels = 2;
  o.files = {"random-4m"};
  o.verify = true;
  o.verify_file = copy_;
  o.runtime_s = 2;
  auto result = RunLoad(o);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectCountsAddUp(*result);
  EXPECT_EQ(result->settings.streams, 3);
  EXPECT_EQ(result->settings.channels, 2);
  EXPECT_EQ(result->settings.threads, 1);
  // The per-second series covers the measured run and adds up to its reads.
  ASSERT_FALSE(result->per_second.empty());
  uint64_t reads = 0;
  for (const LoadSecond& s : result->per_second) {
    reads += s.reads;
    EXPECT_GT(s.seconds, 0);
    EXPECT_LE(s.seconds, 1.0001);
    EXPECT_GE(s.p99_ns, s.p50_ns);
  }
  EXPECT_EQ(reads, result->reads);
  EXPECT_NEAR(result->per_second.back().end_s, result->seconds, 0.01);
  const nlohmann::json json = nlohmann::json::parse(LoadResultJson(o, *result));
  EXPECT_EQ(json["settings"]["streams"], 3);
  EXPECT_EQ(json["settings"]["channels"], 2);
  EXPECT_EQ(json["settings"]["threads"], 1);
  EXPECT_EQ(json["settings"]["batch"], 2);
  EXPECT_EQ(json["per_second"].size(), result->per_second.size());
  EXPECT_TRUE(json["per_second"][0].contains("p99_us"));
  EXPECT_FALSE(json["server_version"].get<std::string>().empty());
  const std::string text = LoadResultText(o, *result);
  EXPECT_NE(text.find("settings: threads=1 channels=2 streams=3 batch=2\n"), std::string::npos)
      << text;
}

TEST_F(LoadRunTest, DerivedSettingsAreReported) {
  LoadOptions o = Options();
  o.stream = true;
  o.queue_depth = 32;
  o.runtime_s = 1;
  auto result = RunLoad(o);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectCountsAddUp(*result);
  auto derived = DeriveLoadSettings(o);
  ASSERT_TRUE(derived.ok());
  EXPECT_EQ(result->settings.streams, derived->streams);
  EXPECT_EQ(result->settings.batch, derived->batch);
  EXPECT_EQ(result->settings.channels, derived->channels);
  EXPECT_NE(LoadResultText(o, *result).find("(derived: channels, streams, batch)"),
            std::string::npos);
}

// The page loads nothing from anywhere and has every chart; tests/client/load_report_test.py
// renders it in a real browser.
TEST_F(LoadRunTest, HtmlReportIsSelfContained) {
  LoadOptions o = Options();
  o.stream = true;
  o.files = {"sparse", "fragmented"};  // reads in holes fall back: the fallback chart has bars
  o.runtime_s = 2;
  auto result = RunLoad(o);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::string html = LoadReportHtml(o, *result, "blockread load --x='<a&b>'");
  for (const char* id : {"iops-chart", "latency-chart", "histogram-chart", "split-chart",
                         "paths-chart", "fallbacks-chart"}) {
    EXPECT_NE(html.find(absl::StrCat("<svg id=\"", id, "\"")), std::string::npos) << id;
  }
  for (const char* banned : {"<script", "<link", "<img", "<iframe", "src=", "href=", "@import",
                             "url(", "http:", "https:"}) {
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
  }
  EXPECT_NE(html.find("blockread load --x=&#39;&lt;a&amp;b&gt;&#39;"), std::string::npos)
      << "the command line, escaped";
  EXPECT_NE(html.find(result->server_version), std::string::npos);
  EXPECT_NE(html.find(LoadSettingsText(o, result->settings)), std::string::npos);
  EXPECT_NE(html.find("server queue"), std::string::npos);
  ASSERT_GT(result->server_fallbacks.at("not_mapped"), 0u);
  EXPECT_NE(html.find("not_mapped"), std::string::npos);
}

TEST_F(LoadRunTest, NumberOfReads) {
  LoadOptions o = Options();
  o.number = 500;
  o.sequential = true;
  auto result = RunLoad(o);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectCountsAddUp(*result);
  EXPECT_GE(result->reads, 500u);
}

TEST_F(LoadRunTest, MismatchStopsTheRunAndNamesTheByte) {
  // Corrupt one byte of the local copy: the first read that covers it must stop the run.
  std::vector<char> byte = {'\x5a'};
  auto original = testing::ReadFileRange(copy_, 12345, 1);
  ASSERT_TRUE(original.ok());
  if ((*original)[0] == '\x5a') byte[0] = '\x5b';
  ASSERT_TRUE(testing::WriteAt(copy_, 12345, byte, true).ok());
  LoadOptions o = Options();
  o.files = {"random-4m"};
  o.verify = true;
  o.verify_file = copy_;
  o.sequential = true;  // reaches offset 12345 at once
  o.threads = 1;
  o.runtime_s = 30;
  auto result = RunLoad(o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_NE(result->verify_failure.find("random-4m at offset 12288: first differing byte at "
                                        "offset 12345"),
            std::string::npos)
      << result->verify_failure;
  EXPECT_LT(result->seconds, 30) << "the run went on after the mismatch";
}

TEST_F(LoadRunTest, UnknownFileIsASetupError) {
  LoadOptions o = Options();
  o.files = {"nope"};
  EXPECT_EQ(RunLoad(o).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace blockread::client
