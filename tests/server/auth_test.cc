// Identities and access rules (--auth), as clients see them: a real server on the demo device,
// tokens and client certificates, what each identity may read, list, stat and ask, and a reload
// on SIGHUP.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "storage/manifest.h"
#include "tests/support/loop_device.h"
#include "tests/support/map_reader.h"
#include "tests/support/server_process.h"
#include "tests/support/test_ca.h"

namespace blockread::testing {
namespace {

using client::BlockReadClient;
using client::ClientOptions;

std::string AccessFile(const std::string& reader_allow) {
  return "identity { name: \"reader\" token_sha256: \"" + TokenSha256Hex("reader-token") +
         "\" allow: \"" + reader_allow + "\" }\n" + "identity { name: \"ops\" token_sha256: \"" +
         TokenSha256Hex("ops-token") + "\" allow: \"**\" admin: true }\n";
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auth_path_ = dir_.path() + "/access.textproto";
    std::ofstream(auth_path_) << AccessFile("hello.*");
    auto server =
        ServerProcess::Start({"--data_dir=" + dir_.path() + "/data", "--auth=" + auth_path_},
                             dir_.path() + "/server.log", 60, {}, As("ops-token"));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_TRUE(storage::LoadManifest(dir_.path() + "/data/demo.manifest", reference_).ok());
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    }
  }

  static ClientOptions As(const std::string& token) {
    ClientOptions options;
    options.token = token;
    return options;
  }
  std::unique_ptr<BlockReadClient> Client(const std::string& token) {
    return BlockReadClient::Connect(server_->target(), As(token));
  }
  std::string Expected(const std::string& file, uint64_t offset, uint64_t length) {
    auto map = reference_.Resolve(file);
    if (!map.ok()) return "<unreadable>";
    auto bytes = ReadThroughMap(reference_, **map, offset, length);
    return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : "<unreadable>";
  }

  TempDir dir_;
  std::string auth_path_;
  std::unique_ptr<ServerProcess> server_;
  storage::Catalog reference_;
};

TEST_F(AuthTest, MissingOrUnknownCredentialsAreUnauthenticated) {
  for (const std::string& token : {std::string(), std::string("wrong-token")}) {
    auto client = Client(token);
    EXPECT_EQ(client->Read("hello.txt", 0, 4096).status().code(),
              absl::StatusCode::kUnauthenticated)
        << "token '" << token << "'";
    EXPECT_EQ(client->List().status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client->Stat("hello.txt").status().code(), absl::StatusCode::kUnauthenticated);
  }
  // The token is never repeated back, nor logged.
  auto refused = Client("wrong-token")->Stat("hello.txt");
  EXPECT_EQ(refused.status().message().find("wrong-token"), std::string::npos);
  EXPECT_EQ(server_->Log().find("wrong-token"), std::string::npos);
  // Health stays open.
  auto health = Client("")->Health();
  ASSERT_TRUE(health.ok()) << health.status();
}

TEST_F(AuthTest, AnIdentitySeesOnlyWhatItMayRead) {
  auto reader = Client("reader-token");
  auto read = reader->Read("hello.txt", 0, 4096);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->data(), Expected("hello.txt", 0, 4096));
  EXPECT_EQ(reader->Read("random-4m", 0, 4096).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Stat of a file it may not read: as if it did not exist.
  auto hidden = reader->Stat("random-4m");
  EXPECT_EQ(hidden.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(hidden.status().message(), "unknown file 'random-4m'");
  auto listed = reader->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name(), "hello.txt");
  EXPECT_EQ((*listed)[0].devices_size(), 0) << "device names are for admins";
  EXPECT_GT(Client("ops-token")->List()->size(), 1u);

  // Explain shows physical layout: admins only. GetStats: counts for all, devices for admins.
  EXPECT_EQ(reader->Explain("hello.txt", 0, 4096).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Client("ops-token")->Explain("hello.txt", 0, 4096).ok());
  auto stats = reader->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->devices_size(), 0);
  EXPECT_GT(stats->paths_size(), 0);
  EXPECT_FALSE(stats->version().empty());
  EXPECT_GT(Client("ops-token")->Stats()->devices_size(), 0);
}

TEST_F(AuthTest, EachReadOfAStreamIsChecked) {
  auto stream = Client("reader-token")->OpenStream();
  v1::ReadBlocksRequest request;
  for (const char* file : {"hello.txt", "random-4m", "hello.txt", "large"}) {
    v1::ReadItem* item = request.add_reads();
    item->set_tag(request.reads_size() - 1);
    item->set_file(file);
    item->set_length(4096);
  }
  ASSERT_TRUE(stream->Send(request));
  stream->CloseSend();
  std::map<uint64_t, v1::ReadResult> results;
  v1::ReadBlocksResponse response;
  while (stream->Receive(&response)) {
    for (const v1::ReadResult& result : response.results()) results[result.tag()] = result;
  }
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].data(), Expected("hello.txt", 0, 4096));
  EXPECT_EQ(results[2].data(), Expected("hello.txt", 0, 4096));
  for (uint64_t denied : {1, 3}) {
    EXPECT_EQ(results[denied].code(), grpc::StatusCode::PERMISSION_DENIED)
        << results[denied].ShortDebugString();
  }
}

TEST_F(AuthTest, SighupReloadsTheRulesAndABrokenFileKeepsThem) {
  auto reader = Client("reader-token");
  ASSERT_EQ(reader->Read("random-4m", 0, 4096).status().code(),
            absl::StatusCode::kPermissionDenied);
  std::ofstream(auth_path_) << AccessFile("**");
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  auto wait_for = [&](absl::StatusCode code) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    absl::StatusCode seen;
    do {
      seen = reader->Read("random-4m", 0, 4096).status().code();
      if (seen == code) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  };
  EXPECT_TRUE(wait_for(absl::StatusCode::kOk)) << server_->Log();

  std::ofstream(auth_path_) << "identity { name: \"broken\" token_sha256: \"nothex\" }\n";
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_->Log().find("keeping the access rules in force") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(server_->Log().find("keeping the access rules in force"), std::string::npos)
      << server_->Log();
  EXPECT_TRUE(reader->Read("random-4m", 0, 4096).ok());  // the rules in force stay
}

// An open stream does not keep the rules it started with: after SIGHUP its next item is judged
// by the new ones, whether the token was revoked (the stream ends UNAUTHENTICATED) or the
// identity may no longer read the file (the item is PERMISSION_DENIED).
TEST_F(AuthTest, SighupAppliesToOpenStreamsAtTheirNextItem) {
  const auto send_one = [](client::ReadStream& stream, uint64_t tag) {
    v1::ReadBlocksRequest request;
    v1::ReadItem* item = request.add_reads();
    item->set_tag(tag);
    item->set_file("hello.txt");
    item->set_length(4096);
    return stream.Send(request);
  };
  auto reader = Client("reader-token");
  auto narrowed = reader->OpenStream();
  auto revoked = reader->OpenStream();
  for (auto* stream : {narrowed.get(), revoked.get()}) {
    ASSERT_TRUE(send_one(*stream, 0));
    v1::ReadBlocksResponse response;
    ASSERT_TRUE(stream->Receive(&response));
    ASSERT_EQ(response.results_size(), 1);
    ASSERT_EQ(response.results(0).code(), 0) << response.results(0).error_message();
  }
  const auto reload = [&](const std::string& rules, int nth) {
    std::ofstream(auth_path_) << rules;
    ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto reloads = [&] {
      const std::string log = server_->Log();
      int n = 0;
      for (size_t at = 0; (at = log.find("--auth: reloaded", at)) != std::string::npos; ++at) ++n;
      return n;
    };
    while (reloads() < nth && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_GE(reloads(), nth) << server_->Log();
  };

  reload(AccessFile("nothing.*"), 1);  // the reader stays, without hello.txt
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(send_one(*narrowed, 1));
  v1::ReadBlocksResponse response;
  ASSERT_TRUE(narrowed->Receive(&response));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).code(), grpc::StatusCode::PERMISSION_DENIED)
      << response.results(0).ShortDebugString();

  reload("identity { name: \"ops\" token_sha256: \"" + TokenSha256Hex("ops-token") +
             "\" allow: \"**\" admin: true }\n",
         2);  // the reader's token is gone
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(send_one(*revoked, 1));
  EXPECT_FALSE(revoked->Receive(&response)) << response.ShortDebugString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(revoked->Finish().code(), absl::StatusCode::kUnauthenticated);
  narrowed->CloseSend();
  while (narrowed->Receive(&response)) {
  }
  EXPECT_TRUE(narrowed->Finish().ok());  // no item after the second reload: nothing to judge
}

// A client certificate's common name names the identity (mutual TLS).
TEST(AuthCertificateTest, TheClientCertificateNamesTheIdentity) {
  TempDir dir;
  auto ca = TestCa::Create(dir.path(), "ca");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto server_cert = ca->IssueServer("server", dir.path() + "/server");
  auto trainer = ca->IssueClient("trainer", dir.path() + "/clients");
  auto stranger = ca->IssueClient("stranger", dir.path() + "/clients");
  ASSERT_TRUE(server_cert.ok() && trainer.ok() && stranger.ok());
  const std::string auth = dir.path() + "/access.textproto";
  std::ofstream(auth) << "identity { name: \"trainer\" tls_common_name: \"trainer\" allow: "
                         "\"random-*\" }\n";
  auto options = [&](const IssuedCert& cert) {
    client::TransportSecurity security;
    security.ca = ca->ca_pem();
    security.cert = cert.cert;
    security.key = cert.key;
    ClientOptions result;
    result.credentials = *client::ChannelCredentialsFor(security);
    return result;
  };
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.path() + "/data", "--auth=" + auth, "--tls_cert=" + server_cert->cert,
       "--tls_key=" + server_cert->key, "--tls_client_ca=" + ca->ca_pem()},
      dir.path() + "/server.log", 60, {}, options(*trainer));
  ASSERT_TRUE(server.ok()) << server.status();
  auto as_trainer = BlockReadClient::Connect((*server)->target(), options(*trainer));
  EXPECT_TRUE(as_trainer->Read("random-4m", 0, 4096).ok());
  EXPECT_EQ(as_trainer->Read("hello.txt", 0, 4096).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A certificate the CA signed, whose name is no identity: unauthenticated.
  auto as_stranger = BlockReadClient::Connect((*server)->target(), options(*stranger));
  EXPECT_EQ(as_stranger->Read("random-4m", 0, 4096).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Log();
}

}  // namespace
}  // namespace blockread::testing
