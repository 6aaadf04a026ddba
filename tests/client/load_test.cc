// `blockread load`: option parsing, and short real runs against a real server (counts add up,
// both modes, verification by CRC32C and by a local copy, a mismatch stops the run).
#include "client/load.h"

#include "absl/strings/str_cat.h"
#include "client/load_cli.h"
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
  expect_error({"--mode=stream", "--qd=2", "--batch=4"}, "--batch cannot exceed --qd");
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
