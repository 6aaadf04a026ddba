// Issue 13's server-wide bounds, as misbehaving clients meet them on a real server (the demo
// device): thousands of idle connections, a thousand streams on one connection, a request
// message just under the receive limit full of one-byte reads, unary calls past a worker's
// bound, and a stream flooding 1 MiB reads that never reads its responses (server RSS stays
// flat while another client's 4 KiB reads on the same worker go on).
#include <arpa/inet.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "blockread/v1/blockread.grpc.pb.h"
#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "tests/support/loop_device.h"
#include "tests/support/server_process.h"
#include "tests/support/test_ca.h"

namespace blockread::testing {
namespace {

using client::BlockReadClient;
using client::ClientOptions;
using Clock = std::chrono::steady_clock;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerBuild = true;
#else
constexpr bool kSanitizerBuild = false;
#endif

class OverloadTest : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> args, const ClientOptions& connection = {}) {
    args.push_back("--data_dir=" + dir_.path() + "/data");
    auto server = ServerProcess::Start(args, dir_.path() + "/server.log", 60, {}, connection);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    }
  }
  // Whether a fresh client reads hello.txt.
  void ExpectANewClientReads() {
    auto read = BlockReadClient::Connect(server_->target())->Read("hello.txt", 0, 4096);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->data().rfind("Hello from blockread!", 0), 0u);
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(OverloadTest, TwoThousandIdleConnectionsAreAdmittedAndANewClientReads) {
  // Defaults only: the server must admit them without tuning (it raises its own RLIMIT_NOFILE).
  StartServer({});
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < 4096) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 8192);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  }
  ASSERT_GE(limit.rlim_cur, 2100u) << "this test process cannot open 2,000 sockets";
  const uint64_t rss_before = server_->RssMiB();
  // Real HTTP/2 connections: the client preface and an empty SETTINGS frame, then nothing.
  static constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
  std::vector<int> sockets;
  for (int i = 0; i < 2000; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server_->port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
        << "connection " << i << ": " << strerror(errno);
    ASSERT_EQ(send(fd, kPreface, sizeof(kPreface) - 1, MSG_NOSIGNAL),
              static_cast<ssize_t>(sizeof(kPreface) - 1));
    sockets.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ExpectANewClientReads();
  // The idle connections are still open (not shed to make room): each still reads as connected.
  int open = 0;
  for (int fd : sockets) {
    char byte;
    const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && errno == EAGAIN)) ++open;
  }
  EXPECT_EQ(open, 2000);
  const uint64_t rss_with = server_->RssMiB();
  for (int fd : sockets) close(fd);
  ExpectANewClientReads();
  std::printf(
      "overload: 2000 idle connections: %d kept open, none shed; server RSS %lu MiB before, %lu "
      "MiB with them, %lu MiB after they closed\n",
      open, rss_before, rss_with, server_->RssMiB());
}

TEST_F(OverloadTest, AThousandStreamsOnOneConnectionAreAllServedBeyondTheLimitInTurn) {
  StartServer({"--max_concurrent_streams=64"});
  auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
  auto stub = v1::BlockRead::NewStub(channel);
  constexpr int kStreams = 1000;
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::ReadBlocksRequest, v1::ReadBlocksResponse>>
        rw;
    v1::ReadBlocksResponse response;
    grpc::Status status;
    int step = 0;
    int results = 0;
  };
  grpc::CompletionQueue queue;
  const uint64_t rss_before = server_->RssMiB();
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    auto stream = std::make_unique<Stream>();
    stream->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    stream->rw = stub->PrepareAsyncReadBlocks(&stream->context, &queue);
    stream->rw->StartCall(stream.get());
    streams.push_back(std::move(stream));
  }
  // Each stream: started -> write one read -> half-close -> read its result -> read the end ->
  // finish. The tag is the stream; `step` says which operation completed.
  int finished = 0;
  void* tag;
  bool ok;
  while (finished < kStreams && queue.Next(&tag, &ok)) {
    auto* s = static_cast<Stream*>(tag);
    if (!ok && s->step != 3 && s->step != 5) {
      s->step = 5;
      s->rw->Finish(&s->status, s);
      continue;
    }
    switch (s->step++) {
      case 0: {
        v1::ReadBlocksRequest request;
        v1::ReadItem* item = request.add_reads();
        item->set_tag(7);
        item->set_file("random-4m");
        item->set_length(4096);
        s->rw->Write(request, s);
        break;
      }
      case 1:
        s->rw->WritesDone(s);
        break;
      case 2:
        s->rw->Read(&s->response, s);
        break;
      case 3:
        if (ok) {
          s->results += s->response.results_size();
          s->step = 3;  // read again until the end of the stream
          s->rw->Read(&s->response, s);
        } else {
          s->step = 5;
          s->rw->Finish(&s->status, s);
        }
        break;
      default:
        ++finished;
        break;
    }
  }
  int served = 0, refused_clearly = 0;
  for (const auto& s : streams) {
    if (s->status.ok() && s->results == 1) {
      ++served;
    } else if (s->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused_clearly;
    } else {
      ADD_FAILURE() << "stream ended " << s->status.error_code() << " " << s->status.error_message()
                    << " with " << s->results << " results";
    }
  }
  std::printf(
      "overload: %d streams on one connection, limit 64: %d served, %d refused "
      "RESOURCE_EXHAUSTED; server RSS %lu MiB before, %lu MiB after\n",
      kStreams, served, refused_clearly, rss_before, server_->RssMiB());
  EXPECT_EQ(finished, kStreams);
  EXPECT_EQ(served + refused_clearly, kStreams);
  EXPECT_GT(served, 0);
  ExpectANewClientReads();
}

TEST_F(OverloadTest, ARequestJustUnderTheReceiveLimitOfOneByteReadsIsAnsweredReadByRead) {
  StartServer({});
  v1::ReadBlocksRequest request;
  // Items of ~20 bytes each up to just under the server's 4 MiB receive limit (sizes summed as
  // they are added: ByteSizeLong of the whole request each time would be quadratic).
  size_t size = 0;
  for (uint64_t tag = 1;; ++tag) {
    v1::ReadItem item;
    item.set_tag(tag);
    item.set_file("hello.txt");
    item.set_offset(tag % 100);
    item.set_length(1);
    const size_t item_size = 1 + 1 + item.ByteSizeLong();  // field key, length, item
    if (size + item_size > (4u << 20) - 64) break;
    size += item_size;
    *request.add_reads() = std::move(item);
  }
  ASSERT_LT(request.ByteSizeLong(), 4u << 20);
  const int reads = request.reads_size();
  const uint64_t rss_before = server_->RssMiB();
  auto client = BlockReadClient::Connect(server_->target());
  auto stream = client->OpenStream();
  ASSERT_TRUE(stream->Send(request));
  stream->CloseSend();
  std::vector<uint8_t> answered(static_cast<size_t>(reads) + 1, 0);
  int ok = 0, errors = 0, twice = 0;
  std::set<int> codes;
  v1::ReadBlocksResponse response;
  while (stream->Receive(&response)) {
    for (const v1::ReadResult& result : response.results()) {
      ASSERT_LE(result.tag(), static_cast<uint64_t>(reads));
      if (answered[result.tag()]++ != 0) ++twice;
      if (result.code() == 0) {
        ++ok;
        EXPECT_EQ(result.data().size(), 1u);
      } else {
        ++errors;
        codes.insert(result.code());
      }
    }
  }
  const absl::Status end = stream->Finish();
  std::printf("overload: %d one-byte reads in one message: %d OK, %d errors (codes", reads, ok,
              errors);
  for (int code : codes) std::printf(" %d", code);
  std::printf("), stream end: %s; server RSS %lu MiB before, %lu MiB after\n",
              end.ToString().c_str(), rss_before, server_->RssMiB());
  EXPECT_EQ(twice, 0);
  if (end.ok()) {
    EXPECT_EQ(ok + errors, reads) << "every read answered once";
    // Refused ones are RESOURCE_EXHAUSTED (the worker's queue was full), nothing else.
    for (int code : codes) EXPECT_EQ(code, static_cast<int>(absl::StatusCode::kResourceExhausted));
  } else {
    EXPECT_EQ(end.code(), absl::StatusCode::kResourceExhausted) << end;
  }
  EXPECT_GT(ok, 0);
  ExpectANewClientReads();
}

TEST_F(OverloadTest, UnaryCallsBeyondAWorkersBoundAreRefusedAtOnce) {
  // A rate-limited identity keeps its calls open (waiting for the limit): the worker's bound on
  // open unary calls is then what answers the rest.
  const std::string auth = dir_.path() + "/access.textproto";
  std::ofstream(auth) << "identity { name: \"slow\" token_sha256: \""
                      << TokenSha256Hex("slow-token")
                      << "\" allow: \"**\" max_iops: 2 admin: true }\n";
  ClientOptions slow;
  slow.token = "slow-token";
  StartServer({"--cpus=0", "--max_unary_in_flight=4", "--auth=" + auth}, slow);
  std::atomic<int> ok{0}, refused{0}, other{0};
  const uint64_t rss_before = server_->RssMiB();
  std::string message;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&] {
      auto client = BlockReadClient::Connect(server_->target(), slow);
      grpc::ClientContext context;
      client::AddToken(slow, context);
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      v1::ReadBlockRequest request;
      request.set_file("hello.txt");
      request.set_length(4096);
      v1::ReadBlockResponse response;
      const grpc::Status status = client->stub().ReadBlock(&context, request, &response);
      if (status.ok()) {
        ++ok;
      } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        ++refused;
        std::lock_guard lock(mu);
        message = status.error_message();
      } else {
        ++other;
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf(
      "overload: 12 unary calls held open by a 2 IOPS limit, bound 4 a worker: %d served, %d "
      "refused RESOURCE_EXHAUSTED at once; server RSS %lu MiB before, %lu MiB after\n",
      ok.load(), refused.load(), rss_before, server_->RssMiB());
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(refused.load(), 0);
  EXPECT_GE(ok.load(), 4);
  EXPECT_NE(message.find("max_unary_in_flight = 4"), std::string::npos) << message;
}

TEST_F(OverloadTest, AFloodOfUnreadOneMebibyteReadsKeepsMemoryFlatAndOthersServed) {
  if (kSanitizerBuild) GTEST_SKIP() << "sanitizer build: its allocator distorts RSS and timing";
  StartServer({"--cpus=0"});  // one worker: the flood and the good client share it

  // The good client: 4 KiB unary reads for `how_long`; their latencies, sorted.
  auto good_client = BlockReadClient::Connect(server_->target());
  const auto time_good_reads = [&](std::chrono::seconds how_long) {
    std::vector<double> micros;
    const auto end = Clock::now() + how_long;
    for (uint64_t i = 0; Clock::now() < end; ++i) {
      const auto start = Clock::now();
      auto read = good_client->Read("random-4m", (i % 1000) * 4096, 4096);
      if (!read.ok()) continue;
      micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    std::sort(micros.begin(), micros.end());
    return micros;
  };
  const auto percentile = [](const std::vector<double>& sorted, double p) {
    return sorted.empty() ? 0.0 : sorted[static_cast<size_t>(p * (sorted.size() - 1))];
  };
  // Side by side: the same client on the same worker first without the flood.
  const std::vector<double> alone = time_good_reads(std::chrono::seconds(3));

  auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
  auto stub = v1::BlockRead::NewStub(channel);
  grpc::ClientContext flood_context;
  auto flood = stub->ReadBlocks(&flood_context);
  std::atomic<uint64_t> flooded{0};
  std::thread flooder([&] {
    for (uint64_t tag = 0;; ++tag) {
      v1::ReadBlocksRequest request;
      v1::ReadItem* item = request.add_reads();
      item->set_tag(tag);
      item->set_file("large");
      item->set_offset((tag % 15) << 20);
      item->set_length(1 << 20);
      if (!flood->Write(request)) return;  // cancelled at the end
      ++flooded;
    }
  });
  std::vector<double> flooded_us;
  std::thread good([&] { flooded_us = time_good_reads(std::chrono::seconds(20)); });
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const uint64_t baseline_mib = server_->RssMiB();
  uint64_t peak_mib = baseline_mib;
  std::vector<uint64_t> samples;
  for (int s = 0; s < 17; ++s) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    samples.push_back(server_->RssMiB());
    peak_mib = std::max(peak_mib, samples.back());
  }
  good.join();
  flood_context.TryCancel();
  flooder.join();
  std::printf(
      "overload: flood sent %lu 1 MiB reads; server RSS baseline %lu MiB, peak %lu MiB;"
      " per second:",
      flooded.load(), baseline_mib, peak_mib);
  for (uint64_t mib : samples) std::printf(" %lu", mib);
  std::printf(
      "\noverload: good client 4K reads, p50/p99 us: %.0f/%.0f without the flood (%zu reads in "
      "3 s), %.0f/%.0f with it (%zu reads in 20 s)\n",
      percentile(alone, 0.5), percentile(alone, 0.99), alone.size(), percentile(flooded_us, 0.5),
      percentile(flooded_us, 0.99), flooded_us.size());
  RecordProperty("good_p99_us", std::to_string(percentile(flooded_us, 0.99)));
  RecordProperty("good_p99_us_without_flood", std::to_string(percentile(alone, 0.99)));
  EXPECT_LE(peak_mib, baseline_mib + 64) << "server memory grew under the flood";
  EXPECT_GT(flooded_us.size(), 100u) << "the good client was starved";
}

}  // namespace
}  // namespace blockread::testing
