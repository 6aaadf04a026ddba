// Zero-copy responses seen from outside: a stock generated client (plain channel, generated
// stubs, nothing of the client library) reads exactly the right bytes through both RPCs, with and
// without CRC32C, on the lent, copied and failed paths; and a stream whose client stops reading
// its responses holds no more than its share of the worker's slots while other clients go on
// reading from the same worker.
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "blockread/v1/blockread.grpc.pb.h"
#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "proto/wire/crc32c.h"
#include "storage/manifest.h"
#include "tests/support/loop_device.h"
#include "tests/support/map_reader.h"
#include "tests/support/server_process.h"

namespace blockread {
namespace {

using testing::ServerProcess;
using testing::TempDir;

struct Range {
  std::string file;
  uint64_t offset;
  uint64_t length;
};

// Lent (4 KiB simple, 128 KiB and unaligned generic, holes zero-filled, extents spanned), copied
// (under 1 KiB), short at EOF, empty at EOF.
const std::vector<Range> kRanges = {
    {"large", 0, 4096},           {"large", 1 << 20, 4096}, {"random-4m", 131072, 131072},
    {"random-4m", 12345, 100000}, {"sparse", 0, 1 << 20},   {"fragmented", 1000, 500000},
    {"hello.txt", 0, 4096},       {"large", 77, 700},       {"random-4m", (4 << 20) - 1000, 4096},
    {"random-4m", 4 << 20, 10},
};

class ZeroCopyTest : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> args) {
    args.push_back("--data_dir=" + dir_.path() + "/data");
    auto server = ServerProcess::Start(args, dir_.path() + "/server.log");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    // The reference: the demo manifest, read straight from the demo device file.
    ASSERT_TRUE(storage::LoadManifest(dir_.path() + "/data/demo.manifest", reference_).ok());
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    }
  }
  std::string Expected(const Range& r) {
    auto bytes =
        testing::ReadThroughMap(reference_, **reference_.Resolve(r.file), r.offset, r.length);
    return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : "<unreadable>";
  }
  // A stub as any generated client would make it: a plain channel, the receive limit raised.
  std::unique_ptr<v1::BlockRead::Stub> StockStub() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    return v1::BlockRead::NewStub(
        grpc::CreateCustomChannel(server_->target(), grpc::InsecureChannelCredentials(), args));
  }
  v1::WorkerStats Worker0() {
    auto stats = client::BlockReadClient::Connect(server_->target())->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() && stats->workers_size() > 0 ? stats->workers(0) : v1::WorkerStats();
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  storage::Catalog reference_;
};

// A parsed message has nothing the generated code did not recognize.
template <typename Message>
bool NoUnknownFields(const Message& message) {
  return message.GetReflection()->GetUnknownFields(message).empty();
}

TEST_F(ZeroCopyTest, StockGeneratedClientReadsExactBytesThroughBothRpcs) {
  StartServer({});
  auto stub = StockStub();
  for (const bool crc : {false, true}) {
    for (const Range& r : kRanges) {
      SCOPED_TRACE(r.file + "@" + std::to_string(r.offset) + "+" + std::to_string(r.length) +
                   (crc ? " crc" : ""));
      const std::string expected = Expected(r);
      v1::ReadBlockRequest request;
      request.set_file(r.file);
      request.set_offset(r.offset);
      request.set_length(r.length);
      request.set_want_crc32c(crc);
      v1::ReadBlockResponse response;
      grpc::ClientContext context;
      const grpc::Status status = stub->ReadBlock(&context, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_TRUE(response.data() == expected)
          << "size " << response.data().size() << " vs " << expected.size();
      EXPECT_TRUE(NoUnknownFields(response));
      EXPECT_NE(response.path(), v1::READ_PATH_UNSPECIFIED);
      EXPECT_GT(response.timing().total_ns(), 0u);
      ASSERT_EQ(response.has_crc32c(), crc);
      if (crc) {
        EXPECT_EQ(response.crc32c(), wire::Crc32c(expected.data(), expected.size()));
      }
    }
    // A read the server refuses is a status, as before.
    v1::ReadBlockRequest beyond;
    beyond.set_file("large");
    beyond.set_offset(1ull << 40);
    beyond.set_length(4096);
    v1::ReadBlockResponse ignored;
    grpc::ClientContext context;
    EXPECT_EQ(stub->ReadBlock(&context, beyond, &ignored).error_code(),
              grpc::StatusCode::OUT_OF_RANGE);
  }

  // The stream: every range (and a failing read) in one message, then each in its own message,
  // with and without CRC; results matched by tag.
  grpc::ClientContext context;
  auto stream = stub->ReadBlocks(&context);
  std::map<uint64_t, std::pair<Range, bool>> sent;
  v1::ReadBlocksRequest all;
  uint64_t tag = 0;
  for (const bool crc : {false, true}) {
    for (const Range& r : kRanges) {
      v1::ReadItem* item = all.add_reads();
      item->set_tag(++tag);
      item->set_file(r.file);
      item->set_offset(r.offset);
      item->set_length(r.length);
      item->set_want_crc32c(crc);
      sent[tag] = {r, crc};
      v1::ReadBlocksRequest one;
      *one.add_reads() = *item;
      one.mutable_reads(0)->set_tag(tag + 1000);
      sent[tag + 1000] = {r, crc};
      ASSERT_TRUE(stream->Write(one));
    }
  }
  v1::ReadItem* bad = all.add_reads();
  bad->set_tag(9999);
  bad->set_file("no-such-file");
  bad->set_length(4096);
  ASSERT_TRUE(stream->Write(all));
  ASSERT_TRUE(stream->WritesDone());
  v1::ReadBlocksResponse response;
  size_t results = 0;
  bool saw_error = false;
  while (stream->Read(&response)) {
    EXPECT_TRUE(NoUnknownFields(response));
    for (const v1::ReadResult& result : response.results()) {
      ++results;
      EXPECT_TRUE(NoUnknownFields(result));
      if (result.tag() == 9999) {
        EXPECT_EQ(result.code(), grpc::StatusCode::NOT_FOUND);
        EXPECT_TRUE(result.data().empty());
        saw_error = true;
        continue;
      }
      ASSERT_TRUE(sent.contains(result.tag())) << result.tag();
      const auto& [r, crc] = sent.at(result.tag());
      SCOPED_TRACE(r.file + "@" + std::to_string(r.offset) + "+" + std::to_string(r.length) +
                   (crc ? " crc" : ""));
      ASSERT_EQ(result.code(), 0) << result.error_message();
      const std::string expected = Expected(r);
      EXPECT_TRUE(result.data() == expected)
          << "size " << result.data().size() << " vs " << expected.size();
      ASSERT_EQ(result.has_crc32c(), crc);
      if (crc) {
        EXPECT_EQ(result.crc32c(), wire::Crc32c(expected.data(), expected.size()));
      }
      sent.erase(result.tag());
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(sent.empty()) << sent.size() << " reads never answered";
  EXPECT_TRUE(saw_error);
  EXPECT_EQ(results, 4 * kRanges.size() + 1);
}

TEST_F(ZeroCopyTest, RequestsThatDoNotParseAreInvalidArgument) {
  // The raw methods parse requests themselves: bytes that are no ReadBlockRequest (a
  // length-delimited field 1 longer than the message) get INVALID_ARGUMENT, on both RPCs.
  StartServer({});
  grpc::GenericStub stub(
      grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue queue;
  const auto next = [&queue](void* expected_tag) {
    void* tag;
    bool ok;
    EXPECT_TRUE(queue.Next(&tag, &ok));
    EXPECT_EQ(tag, expected_tag);
    return ok;
  };
  const std::string garbage = "\x0a\x7f\x01";
  const grpc::Slice slice(garbage);
  const grpc::ByteBuffer request(&slice, 1);
  {
    grpc::ClientContext context;
    auto call =
        stub.PrepareUnaryCall(&context, "/blockread.v1.BlockRead/ReadBlock", request, &queue);
    call->StartCall();
    grpc::ByteBuffer response;
    grpc::Status status;
    call->Finish(&response, &status, &response);
    next(&response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  }
  {
    grpc::ClientContext context;
    auto call = stub.PrepareCall(&context, "/blockread.v1.BlockRead/ReadBlocks", &queue);
    int start, write, done, read, finish;
    call->StartCall(&start);
    next(&start);
    call->Write(request, &write);
    next(&write);
    call->WritesDone(&done);
    next(&done);
    grpc::ByteBuffer response;
    call->Read(&response, &read);
    EXPECT_FALSE(next(&read)) << "no results";
    grpc::Status status;
    call->Finish(&status, &finish);
    next(&finish);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  }
  queue.Shutdown();
  void* tag;
  bool ok;
  while (queue.Next(&tag, &ok)) {
  }
}

TEST_F(ZeroCopyTest, AStreamThatStopsReadingHoldsOnlyItsShareOfTheWorkersSlots) {
  // One worker with few slots, so the bounds are small: a call holds a quarter of each path's
  // slots at most (simple 16 -> 4, generic 8 -> 2).
  StartServer({"--cpus=0", "--simple_slots=16", "--generic_slots=8"});
  constexpr uint64_t kShare = 4 + 2;

  // The slow client: sends 4 KiB and 128 KiB reads and never reads a response. Its transport
  // still takes what the HTTP/2 windows allow; after that the server's writes stall.
  auto slow_stub = StockStub();
  grpc::ClientContext slow_context;
  auto slow = slow_stub->ReadBlocks(&slow_context);
  std::atomic<uint64_t> sent{0};
  std::thread sender([&] {
    uint64_t tag = 0;
    for (int message = 0; message < 4000; ++message) {
      v1::ReadBlocksRequest request;
      for (int i = 0; i < 8; ++i) {
        v1::ReadItem* item = request.add_reads();
        item->set_tag(++tag);
        const bool big = i % 2 == 1;
        item->set_file(big ? "random-4m" : "large");
        item->set_offset((tag * 7919 % 30) * (big ? 131072 : 4096));
        item->set_length(big ? 131072 : 4096);
      }
      if (!slow->Write(request)) return;  // cancelled at the end of the test
      sent += 8;
    }
  });

  // The server stops at the stream's share: the rest of its results are copied.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t held = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    held = Worker0().slots_held();
    ASSERT_LE(held, kShare);
    if (held == kShare) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(held, kShare) << "the slow stream never held its share (sent " << sent << " reads)";

  // Other clients read from the same worker meanwhile, both paths, both RPCs, exact bytes.
  auto stub = StockStub();
  for (int i = 0; i < 40; ++i) {
    const Range r = i % 2 == 0 ? Range{"large", 4096 * static_cast<uint64_t>(i), 4096}
                               : Range{"random-4m", 131072 * static_cast<uint64_t>(i % 32), 131072};
    v1::ReadBlockRequest request;
    request.set_file(r.file);
    request.set_offset(r.offset);
    request.set_length(r.length);
    v1::ReadBlockResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status status = stub->ReadBlock(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(response.data() == Expected(r)) << r.file << "@" << r.offset;
  }
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->ReadBlocks(&context);
    v1::ReadBlocksRequest request;
    for (uint64_t i = 0; i < 16; ++i) {
      v1::ReadItem* item = request.add_reads();
      item->set_tag(i);
      item->set_file(i % 2 == 0 ? "large" : "random-4m");
      item->set_offset(i % 2 == 0 ? 8192 * i : 131072 * i);
      item->set_length(i % 2 == 0 ? 4096 : 131072);
    }
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->WritesDone());
    v1::ReadBlocksResponse response;
    int results = 0;
    while (stream->Read(&response)) {
      for (const v1::ReadResult& result : response.results()) {
        const v1::ReadItem& item = request.reads(static_cast<int>(result.tag()));
        ASSERT_EQ(result.code(), 0) << result.error_message();
        EXPECT_TRUE(result.data() == Expected({item.file(), item.offset(), item.length()}));
        ++results;
      }
    }
    EXPECT_TRUE(stream->Finish().ok());
    EXPECT_EQ(results, 16);
  }
  // Their slots came back; the slow stream still holds its share, no more.
  for (int i = 0; i < 20; ++i) {
    EXPECT_LE(Worker0().slots_held(), kShare);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // The slow client goes away: every slot it held comes back.
  slow_context.TryCancel();
  sender.join();
  while (std::chrono::steady_clock::now() < deadline + std::chrono::seconds(30)) {
    held = Worker0().slots_held();
    if (held == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(held, 0u);
  v1::ReadBlocksResponse ignored;
  while (slow->Read(&ignored)) {
  }
  slow->Finish();
}

}  // namespace
}  // namespace blockread
