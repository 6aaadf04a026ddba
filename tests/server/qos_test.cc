// Per-identity rate limits (max_iops, max_bytes_per_second in the --auth file), as clients see
// them on a real server (the demo device): a limited identity's reads, unary and streamed, stay
// within its limit over a few seconds while another identity reads unhindered beside it; a read
// that the limit would start after its deadline is refused at once with RESOURCE_EXHAUSTED; the
// counts show in GetStats (each identity sees its own) and /metrics. The rates are upper bounds
// that the server must keep, not speed assertions.

#include <grpcpp/completion_queue.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "tests/support/loop_device.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/server_process.h"
#include "tests/support/test_ca.h"

namespace blockread::testing {
namespace {

using client::BlockReadClient;
using client::ClientOptions;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSlowIops = 200;
constexpr uint64_t kMeteredBytesPerSecond = 2 << 20;  // 2 MiB/s
constexpr auto kRun = std::chrono::seconds(3);

class QosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string auth = dir_.path() + "/access.textproto";
    std::ofstream(auth) << absl::StrCat(
        "identity { name: \"slow\" token_sha256: \"", TokenSha256Hex("slow-token"),
        "\" allow: \"**\" max_iops: ", kSlowIops, " }\n",
        "identity { name: \"metered\" token_sha256: \"", TokenSha256Hex("metered-token"),
        "\" allow: \"**\" max_bytes_per_second: ", kMeteredBytesPerSecond, " }\n",
        "identity { name: \"free\" token_sha256: \"", TokenSha256Hex("free-token"),
        "\" allow: \"**\" }\n", "identity { name: \"ops\" token_sha256: \"",
        TokenSha256Hex("ops-token"), "\" allow: \"**\" admin: true }\n");
    ClientOptions ops;
    ops.token = "ops-token";
    auto server = ServerProcess::Start({"--data_dir=" + dir_.path() + "/data", "--auth=" + auth},
                                       dir_.path() + "/server.log", 60, {}, ops);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    }
  }

  std::unique_ptr<BlockReadClient> Client(const std::string& token) {
    ClientOptions options;
    options.token = token;
    return BlockReadClient::Connect(server_->target(), options);
  }

  // Unary 4 KiB reads from `threads` threads until `until`, each with `deadline` (none: zero).
  // Counts OK answers in `ok` and RESOURCE_EXHAUSTED ones in `refused`; anything else in `other`.
  void UnaryReads(const std::string& token, int threads, Clock::time_point until,
                  std::chrono::milliseconds deadline, std::atomic<uint64_t>& ok,
                  std::atomic<uint64_t>& refused, std::atomic<uint64_t>& other) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        ClientOptions options;
        options.token = token;
        auto client = BlockReadClient::Connect(server_->target(), options);
        for (uint64_t i = 0; Clock::now() < until; ++i) {
          grpc::ClientContext context;
          client::AddToken(options, context);
          if (deadline.count() > 0) {
            context.set_deadline(std::chrono::system_clock::now() + deadline);
          }
          v1::ReadBlockRequest request;
          request.set_file("random-4m");
          request.set_offset(((i * 7 + t) % 1024) * 4096);
          request.set_length(4096);
          v1::ReadBlockResponse response;
          const grpc::Status status = client->stub().ReadBlock(&context, request, &response);
          if (status.ok()) {
            ++ok;
          } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
            ++refused;
            if (refused == 1) first_refusal_ = status.error_message();
          } else {
            ++other;
          }
        }
      });
    }
    for (auto& w : workers) w.join();
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::string first_refusal_;
};

TEST_F(QosTest, ALimitedIdentityStaysWithinItsIopsWhileAnotherReadsUnhindered) {
  std::atomic<uint64_t> slow_ok{0}, slow_refused{0}, slow_other{0};
  std::atomic<uint64_t> free_ok{0}, free_refused{0}, free_other{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point until = start + kRun;
  std::thread slow([&] {
    UnaryReads("slow-token", 8, until, std::chrono::milliseconds(0), slow_ok, slow_refused,
               slow_other);
  });
  UnaryReads("free-token", 2, until, std::chrono::milliseconds(0), free_ok, free_refused,
             free_other);
  slow.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double slow_rate = static_cast<double>(slow_ok) / seconds;
  const double free_rate = static_cast<double>(free_ok) / seconds;
  RecordProperty("slow_reads_per_second", std::to_string(slow_rate));
  RecordProperty("free_reads_per_second", std::to_string(free_rate));
  std::printf("qos: slow %.0f reads/s (limit %lu), free %.0f reads/s\n", slow_rate, kSlowIops,
              free_rate);
  EXPECT_LE(slow_rate, 1.1 * kSlowIops);
  EXPECT_GT(slow_ok.load(), 0u);
  EXPECT_EQ(slow_refused.load() + slow_other.load(), 0u) << "no deadline: reads wait, not fail";
  EXPECT_EQ(free_refused.load() + free_other.load(), 0u);
  // Unhindered: the unlimited identity is not held to the other's limit.
  EXPECT_GT(free_rate, 2.0 * kSlowIops);

  auto stats = Client("ops-token")->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  bool found = false;
  for (const v1::IdentityStats& identity : stats->identities()) {
    if (identity.name() != "slow") continue;
    found = true;
    EXPECT_EQ(identity.reads(), slow_ok.load());
    EXPECT_EQ(identity.bytes(), slow_ok.load() * 4096);
    EXPECT_GT(identity.paced(), 0u);
    EXPECT_GT(identity.pace_wait_ns(), 0u);
    EXPECT_EQ(identity.max_iops(), kSlowIops);
  }
  EXPECT_TRUE(found);
}

TEST_F(QosTest, AStreamStaysWithinItsBytesPerSecond) {
  auto client = Client("metered-token");
  auto stream = client->OpenStream();
  constexpr uint64_t kLength = 64 << 10;
  constexpr int kDepth = 16;
  uint64_t sent = 0, received_bytes = 0;
  int outstanding = 0;
  const Clock::time_point start = Clock::now();
  const auto send = [&] {
    v1::ReadBlocksRequest request;
    v1::ReadItem* item = request.add_reads();
    item->set_tag(sent);
    item->set_file("large");
    item->set_offset((sent % 256) * kLength);
    item->set_length(kLength);
    ++sent;
    ++outstanding;
    return stream->Send(request);
  };
  for (int i = 0; i < kDepth; ++i) ASSERT_TRUE(send());
  while (Clock::now() - start < kRun) {
    v1::ReadBlocksResponse response;
    ASSERT_TRUE(stream->Receive(&response)) << stream->Finish();
    for (const v1::ReadResult& result : response.results()) {
      ASSERT_EQ(result.code(), 0) << result.error_message();
      received_bytes += result.data().size();
      --outstanding;
      ASSERT_TRUE(send());
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double rate = static_cast<double>(received_bytes) / seconds;
  std::printf("qos: metered stream %.2f MiB/s (limit %.2f MiB/s)\n", rate / (1 << 20),
              static_cast<double>(kMeteredBytesPerSecond) / (1 << 20));
  RecordProperty("metered_bytes_per_second", std::to_string(rate));
  EXPECT_LE(rate, 1.1 * kMeteredBytesPerSecond);
  EXPECT_GT(received_bytes, 0u);
  stream->Cancel();
}

TEST_F(QosTest, AReadTheLimitWouldStartAfterItsDeadlineIsRefusedAtOnce) {
  // 100 calls sent at once, each with a 250 ms deadline: at 200 reads/s the limit would start the
  // last of them ~500 ms later, so those past ~250 ms are refused as they arrive, long before
  // their deadline. Sent asynchronously from one thread, so how fast the client runs (ASan,
  // a busy machine) does not change the backlog the server sees.
  constexpr int kCalls = 100;
  struct AsyncRead {
    grpc::ClientContext context;
    v1::ReadBlockResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReadBlockResponse>> reader;
  };
  ClientOptions options;
  options.token = "slow-token";
  auto client = BlockReadClient::Connect(server_->target(), options);
  ASSERT_TRUE(client->Stat("random-4m").ok());  // connected and authenticated before the burst
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<AsyncRead>> reads;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(250);
  for (int i = 0; i < kCalls; ++i) {
    auto read = std::make_unique<AsyncRead>();
    client::AddToken(options, read->context);
    read->context.set_deadline(deadline);
    v1::ReadBlockRequest request;
    request.set_file("random-4m");
    request.set_offset(static_cast<uint64_t>(i) * 4096);
    request.set_length(4096);
    read->reader = client->stub().AsyncReadBlock(&read->context, request, &queue);
    read->reader->Finish(&read->response, &read->status, read.get());
    reads.push_back(std::move(read));
  }
  std::atomic<uint64_t> ok{0}, refused{0}, other{0};
  for (int i = 0; i < kCalls; ++i) {
    void* tag;
    bool done;
    ASSERT_TRUE(queue.Next(&tag, &done));
    const grpc::Status& status = static_cast<AsyncRead*>(tag)->status;
    if (status.ok()) {
      ++ok;
    } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      if (++refused == 1) first_refusal_ = status.error_message();
    } else {
      ++other;
    }
  }
  queue.Shutdown();
  std::printf("qos: burst of %d calls: %lu served, %lu refused at once, %lu other\n", kCalls,
              static_cast<unsigned long>(ok.load()), static_cast<unsigned long>(refused.load()),
              static_cast<unsigned long>(other.load()));
  EXPECT_GT(refused.load(), 0u);
  EXPECT_NE(first_refusal_.find("identity 'slow' is over its rate limit (max_iops = 200"),
            std::string::npos)
      << first_refusal_;
  EXPECT_NE(first_refusal_.find("deadline"), std::string::npos) << first_refusal_;

  // Its own counts for the identity itself; everyone's for the admin; /metrics labels them.
  auto own = Client("slow-token")->Stats();
  ASSERT_TRUE(own.ok()) << own.status();
  ASSERT_EQ(own->identities_size(), 1);
  EXPECT_EQ(own->identities(0).name(), "slow");
  // The server may refuse more than the client saw: a call whose deadline had passed on the
  // client by the time the refusal came back counts as DEADLINE_EXCEEDED there.
  EXPECT_GE(own->identities(0).refused(), refused.load());
  auto all = Client("ops-token")->Stats();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->identities_size(), 4);
  auto metrics = Scrape(server_->metrics_port());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->Value("blockread_identity_refused_reads_total", {{"identity", "slow"}}),
            static_cast<double>(own->identities(0).refused()));
  EXPECT_TRUE(metrics->Has("blockread_identity_reads_total", {{"identity", "free"}}));
}

// A read the engine would refuse is refused before the limit charges it: length 2^64-1 used to
// move the identity's schedule centuries ahead (and converted a huge double to an integer).
TEST_F(QosTest, AnInvalidReadIsNotChargedToTheLimit) {
  auto client = Client("metered-token");
  for (const uint64_t length : {~uint64_t{0}, uint64_t{1} << 40}) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer metered-token");
    v1::ReadBlockRequest request;
    request.set_file("random-4m");
    request.set_length(length);
    v1::ReadBlockResponse response;
    const grpc::Status status = client->stub().ReadBlock(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  }
  {  // the same on a stream
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer metered-token");
    auto stream = client->stub().ReadBlocks(&context);
    v1::ReadBlocksRequest request;
    v1::ReadItem* item = request.add_reads();
    item->set_file("random-4m");
    item->set_length(~uint64_t{0});
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->WritesDone());
    v1::ReadBlocksResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_EQ(response.results_size(), 1);
    EXPECT_EQ(response.results(0).code(), grpc::StatusCode::INVALID_ARGUMENT);
    while (stream->Read(&response)) {
    }
    EXPECT_TRUE(stream->Finish().ok());
  }
  // The next valid read is not delayed: within its burst, it starts at once.
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer metered-token");
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ReadBlockRequest request;
  request.set_file("random-4m");
  request.set_length(4096);
  v1::ReadBlockResponse response;
  const grpc::Status status = client->stub().ReadBlock(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.data().size(), 4096u);
  auto own = client->Stats();
  ASSERT_TRUE(own.ok()) << own.status();
  ASSERT_EQ(own->identities_size(), 1);
  EXPECT_EQ(own->identities(0).paced(), 0u);
  EXPECT_EQ(own->identities(0).refused(), 0u);
}

}  // namespace
}  // namespace blockread::testing
