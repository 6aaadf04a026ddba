// The embedded default (no source: the demo device under --data-dir) and a storm of cancelled
// and expiring reads. The CLI's messages and exit codes are in tests/client/cli_test.cc.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "tests/support/demo_server.h"
#include "tests/support/server_process.h"

namespace blockread {
namespace {

using client::BlockReadClient;
using testing::DemoServerTest;
using testing::ServerProcess;

TEST_F(DemoServerTest, ServesTheDemoFilesWholeAndInPieces) {
  auto files = client_->List();
  ASSERT_TRUE(files.ok()) << files.status();
  std::vector<std::string> names;
  for (const v1::FileInfo& f : *files) names.push_back(f.name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"fragmented", "hello.txt", "large", "random-4m", "sparse"}));
  for (const v1::FileInfo& f : *files) {
    // Whole file, 1 MiB at a time (large is bigger than max_read_bytes).
    for (uint64_t offset = 0; offset < f.size(); offset += 1 << 20) {
      auto read = client_->Read(f.name(), offset, 1 << 20);
      ASSERT_TRUE(read.ok()) << f.name() << ": " << read.status();
      ASSERT_EQ(read->data(), Expected(f.name(), offset, 1 << 20)) << f.name() << "@" << offset;
    }
  }
  auto hello = client_->Read("hello.txt", 0, 4096);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->data().rfind("Hello from blockread!", 0), 0u);
  EXPECT_EQ(client_->Read("large", 0, (1 << 20) + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto fragmented = client_->Stat("fragmented");
  ASSERT_TRUE(fragmented.ok());
  EXPECT_EQ(fragmented->extent_count(), 64u);
  auto sparse = client_->Explain("sparse", 300 * 1024, 4096);
  ASSERT_TRUE(sparse.ok());
  EXPECT_EQ(sparse->fallback(), v1::FALLBACK_NOT_MAPPED);
}

TEST_F(DemoServerTest, RestartReusesTheDemoDevice) {
  auto before = client_->Read("random-4m", 12345, 1000);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(server_->Stop(), 0);
  auto again =
      ServerProcess::Start({"--data_dir=" + dir_.path() + "/data"}, dir_.path() + "/server2.log");
  ASSERT_TRUE(again.ok()) << again.status();
  server_ = *std::move(again);
  EXPECT_EQ(server_->Log().find("creating the demo device"), std::string::npos);
  auto after = BlockReadClient::Connect(server_->target())->Read("random-4m", 12345, 1000);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->data(), before->data());
}

// Names are looked up among the served files, never joined to a path or opened: a name that
// climbs, is absolute, or hides a NUL is just unknown, even when it would resolve to a served
// file or to a file of the server's machine.
TEST_F(DemoServerTest, NamesThatLookLikePathsAreUnknown) {
  const std::string data = dir_.path() + "/data";
  for (const std::string& name :
       {std::string("../data/demo-device.img"), std::string("/etc/passwd"), data + "/demo.manifest",
        std::string("./large"), std::string("large/../large"), std::string("large/"),
        std::string("large\0", 6), std::string("lar\0ge", 6)}) {
    auto read = client_->Read(name, 0, 4096);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound)
        << "'" << name << "': " << read.status();
    EXPECT_EQ(client_->Stat(name).status().code(), absl::StatusCode::kNotFound) << name;
  }
  ASSERT_TRUE(client_->Read("large", 0, 4096).ok());
}

TEST_F(DemoServerTest, TheDataDirectoryIsPrivate) {
  struct stat st {};
  ASSERT_EQ(stat((dir_.path() + "/data").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

// A unix:PATH socket: created with the configured mode and group (its access control, as the
// socket file's permissions are), served byte for byte through both RPCs like TCP. Settings that
// would have no file to act on are refused at startup, naming the reason.
TEST_F(DemoServerTest, AUnixSocketTakesItsModeAndGroupFromTheConfig) {
  ASSERT_EQ(server_->Stop(), 0);
  const std::string socket = dir_.path() + "/blockread.sock";
  const gid_t group = getgid() == 0 ? 1 : 0;  // some group other than ours (1: daemon)
  auto unix_server = ServerProcess::Start(
      {"--data_dir=" + dir_.path() + "/data", "--listen=unix:" + socket,
       "--listen_socket_mode=0640", "--listen_socket_group=" + std::to_string(group)},
      dir_.path() + "/unix.log");
  ASSERT_TRUE(unix_server.ok()) << unix_server.status();
  server_ = *std::move(unix_server);
  EXPECT_EQ(server_->target(), "unix:" + socket);
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_gid, group);
  auto unix_client = BlockReadClient::Connect(server_->target());
  auto unary = unix_client->Read("random-4m", 8192, 65536);
  ASSERT_TRUE(unary.ok()) << unary.status();
  EXPECT_EQ(unary->data(), Expected("random-4m", 8192, 65536));
  auto stream = unix_client->OpenStream();
  v1::ReadBlocksRequest request;
  v1::ReadItem* item = request.add_reads();
  item->set_tag(7);
  item->set_file("large");
  item->set_offset(1 << 20);
  item->set_length(4096);
  ASSERT_TRUE(stream->Send(request));
  stream->CloseSend();
  v1::ReadBlocksResponse response;
  ASSERT_TRUE(stream->Receive(&response));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).tag(), 7u);
  EXPECT_EQ(response.results(0).data(), Expected("large", 1 << 20, 4096));
  while (stream->Receive(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());

  for (const auto& [listen, why] : std::vector<std::pair<std::string, std::string>>{
           {"127.0.0.1:0", "is not a Unix socket"},
           {"unix-abstract:blockread-test", "has no file and no permissions"}}) {
    const testing::ProcessExit refused =
        testing::RunToExit({testing::ServerBinary(), "--data_dir=" + dir_.path() + "/data",
                            "--listen=" + listen, "--listen_socket_mode=0600"},
                           dir_.path() + "/refused.log", 60);
    EXPECT_TRUE(WIFEXITED(refused.status) && WEXITSTATUS(refused.status) == 2) << refused.output;
    EXPECT_NE(refused.output.find(why), std::string::npos) << refused.output;
  }
}

// A demo directory someone else could write to must not become a way to serve their choice of
// device: a manifest that is not the demo layout on the demo image, and an image that is a
// symlink, are both replaced. The planted "device" holds a secret; no read returns it, and the
// symlink's target is left untouched.
TEST_F(DemoServerTest, APlantedManifestOrImageIsReplacedNotServed) {
  ASSERT_EQ(server_->Stop(), 0);
  const std::string data = dir_.path() + "/data";
  const std::string secret_path = dir_.path() + "/secret.img";
  const std::string secret(1 << 20, 'S');
  std::ofstream(secret_path) << secret;
  std::ofstream(data + "/demo.manifest")
      << "device { name: \"demo\" path: \"" << secret_path << "\" }\n"
      << "file { name: \"hello.txt\" size: 4096 "
      << "extent { logical_offset: 0 length: 4096 device: \"demo\" physical_offset: 0 } }\n";
  auto restarted = ServerProcess::Start({"--data_dir=" + data}, dir_.path() + "/planted.log");
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  server_ = *std::move(restarted);
  EXPECT_NE(server_->Log().find("is not the demo layout"), std::string::npos) << server_->Log();
  client_ = BlockReadClient::Connect(server_->target());
  auto hello = client_->Read("hello.txt", 0, 4096);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->data().rfind("Hello from blockread!", 0), 0u);
  ASSERT_TRUE(client_->List().ok());
  EXPECT_EQ(client_->List()->size(), 5u);

  ASSERT_EQ(server_->Stop(), 0);
  ASSERT_EQ(unlink((data + "/demo-device.img").c_str()), 0);
  ASSERT_EQ(symlink(secret_path.c_str(), (data + "/demo-device.img").c_str()), 0);
  restarted = ServerProcess::Start({"--data_dir=" + data}, dir_.path() + "/symlinked.log");
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  server_ = *std::move(restarted);
  client_ = BlockReadClient::Connect(server_->target());
  hello = client_->Read("hello.txt", 0, 4096);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->data().rfind("Hello from blockread!", 0), 0u);
  struct stat st {};
  ASSERT_EQ(lstat((data + "/demo-device.img").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the symlink was replaced by a fresh image";
  std::ifstream in(secret_path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), secret)
      << "the symlink's target was not written";
}

// Thousands of reads cancelled or expiring at random points, on unary calls and on streams:
// the server stays healthy, frees nothing under the kernel (ASan/TSan builds check that), and
// answers normal reads correctly afterwards.
TEST_F(DemoServerTest, CancellationStorm) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      auto client = BlockReadClient::Connect(server_->target());
      const char* files[] = {"random-4m", "large", "fragmented", "sparse"};
      for (int i = 0; i < 600; ++i) {
        const std::string file = files[rng() % 4];
        const uint64_t offset = (rng() % 1024) * 1024;
        const uint64_t length = rng() % 2 ? 4096 : 1 + rng() % (512 * 1024);
        v1::ReadBlockRequest request;
        request.set_file(file);
        request.set_offset(offset);
        request.set_length(length);
        grpc::ClientContext context;
        // Deadlines from already past to a few hundred microseconds: some expire before the
        // read starts, some while it is on the device, some after.
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::microseconds(rng() % 400));
        v1::ReadBlockResponse response;
        grpc::Status status = client->stub().ReadBlock(&context, request, &response);
        if (status.ok() && response.data() != Expected(file, offset, length)) ++wrong;
      }
      // Streams cancelled mid-flight.
      for (int s = 0; s < 30; ++s) {
        auto stream = client->OpenStream();
        v1::ReadBlocksRequest request;
        for (int j = 0; j < 64; ++j) {
          v1::ReadItem* item = request.add_reads();
          item->set_tag(j);
          item->set_file(files[rng() % 4]);
          item->set_offset((rng() % 512) * 4096);
          item->set_length(rng() % 2 ? 4096 : 200000);
        }
        stream->Send(request);
        v1::ReadBlocksResponse response;
        if (rng() % 2) stream->Receive(&response);
        stream->Cancel();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0) << "a read that succeeded returned wrong bytes";
  auto health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
  auto read = client_->Read("random-4m", 8192, 4096);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->data(), Expected("random-4m", 8192, 4096));
  // Every read the storm started has finished on the device.
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto stats = client_->Stats();
    ASSERT_TRUE(stats.ok());
    if (stats->devices(0).inflight() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(client_->Stats()->devices(0).inflight(), 0u);
}

}  // namespace
}  // namespace blockread
