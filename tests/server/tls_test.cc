// Transport security, as clients see it: a real server with TLS and mutual TLS from a CA made in
// the test, byte-exact reads over TLS, refusals for every wrong credential, certificate rotation
// without a restart, the plaintext-only-on-loopback rule, and the plaintext health endpoint.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
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
using client::TransportSecurity;

// A client that trusts `ca` and, when `client` is given, presents that certificate.
TransportSecurity Trusting(const std::string& ca, const IssuedCert* client = nullptr) {
  TransportSecurity security;
  security.ca = ca;
  if (client != nullptr) {
    security.cert = client->cert;
    security.key = client->key;
  }
  return security;
}

ClientOptions Options(const TransportSecurity& security) {
  ClientOptions options;
  options.timeout = std::chrono::seconds(5);
  auto credentials = client::ChannelCredentialsFor(security);
  EXPECT_TRUE(credentials.ok()) << credentials.status();
  if (credentials.ok()) options.credentials = *credentials;
  return options;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = TestCa::Create(dir_.path(), "ca");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = std::make_unique<TestCa>(*std::move(ca));
    auto other = TestCa::Create(dir_.path(), "other-ca");
    ASSERT_TRUE(other.ok()) << other.status();
    other_ca_ = std::make_unique<TestCa>(*std::move(other));
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    }
  }

  // Starts a demo-device server with `extra` flags; `ready` is how to reach it.
  void StartServer(std::vector<std::string> extra, const TransportSecurity& ready) {
    extra.push_back("--data_dir=" + dir_.path() + "/data");
    auto server =
        ServerProcess::Start(std::move(extra), dir_.path() + "/server.log", 60, {}, Options(ready));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_TRUE(storage::LoadManifest(dir_.path() + "/data/demo.manifest", reference_).ok());
    file_ = reference_.FileNames().front();
  }

  std::vector<std::string> ServerTls(const IssuedCert& cert) {
    return {"--tls_cert=" + cert.cert, "--tls_key=" + cert.key};
  }

  // A read of the first 4 KiB of the first demo file over `security`: its status, and whether the
  // bytes are what the device holds at the manifest's offsets.
  absl::Status ReadChecked(const TransportSecurity& security) {
    auto client = BlockReadClient::Connect(server_->target(), Options(security));
    auto response = client->Read(file_, 0, 4096);
    if (!response.ok()) return response.status();
    auto map = reference_.Resolve(file_);
    if (!map.ok()) return map.status();
    auto expected = ReadThroughMap(reference_, **map, 0, 4096);
    if (!expected.ok()) return expected.status();
    if (response->data() != std::string(expected->begin(), expected->end())) {
      return absl::DataLossError("bytes differ from the device's");
    }
    return absl::OkStatus();
  }

  TempDir dir_;
  std::unique_ptr<TestCa> ca_, other_ca_;
  std::unique_ptr<ServerProcess> server_;
  storage::Catalog reference_;
  std::string file_;
};

TEST_F(TlsTest, ReadsOverTlsAreByteExactAndPlaintextClientsAreRefused) {
  auto cert = ca_->IssueServer("blockread-test", dir_.path() + "/server");
  ASSERT_TRUE(cert.ok()) << cert.status();
  StartServer(ServerTls(*cert), Trusting(ca_->ca_pem()));
  EXPECT_TRUE(ReadChecked(Trusting(ca_->ca_pem())).ok());
  // A client that does not trust the server's CA, and a plaintext one.
  EXPECT_EQ(ReadChecked(Trusting(other_ca_->ca_pem())).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReadChecked(TransportSecurity()).code(), absl::StatusCode::kUnavailable);
  // The server says how it serves.
  EXPECT_NE(server_->Log().find("TLS ("), std::string::npos) << server_->Log();
}

TEST_F(TlsTest, MutualTlsAdmitsOnlyCurrentCertificatesFromTheClientCa) {
  auto cert = ca_->IssueServer("blockread-test", dir_.path() + "/server");
  ASSERT_TRUE(cert.ok()) << cert.status();
  auto good = ca_->IssueClient("trainer", dir_.path() + "/clients");
  auto expired = ca_->IssueClient("old", dir_.path() + "/clients", /*expired=*/true);
  auto foreign = other_ca_->IssueClient("stranger", dir_.path() + "/clients");
  ASSERT_TRUE(good.ok() && expired.ok() && foreign.ok());
  std::vector<std::string> flags = ServerTls(*cert);
  flags.push_back("--tls_client_ca=" + ca_->ca_pem());
  StartServer(flags, Trusting(ca_->ca_pem(), &*good));

  EXPECT_TRUE(ReadChecked(Trusting(ca_->ca_pem(), &*good)).ok());
  // No certificate: a CA alone must not be enough (gRPC's default would not even ask for one).
  EXPECT_FALSE(ReadChecked(Trusting(ca_->ca_pem())).ok());
  EXPECT_FALSE(ReadChecked(Trusting(ca_->ca_pem(), &*expired)).ok());
  EXPECT_FALSE(ReadChecked(Trusting(ca_->ca_pem(), &*foreign)).ok());
}

TEST_F(TlsTest, ARotatedServerCertificateIsServedWithoutARestart) {
  // The server reads .../current/server.{pem,key}; rotation swaps the directory, so certificate
  // and key change together.
  const std::string certs = dir_.path() + "/certs";
  auto first = ca_->IssueServer("first", certs + "/current");
  auto second = other_ca_->IssueServer("second", certs + "/next");
  ASSERT_TRUE(first.ok() && second.ok());
  std::vector<std::string> flags = ServerTls(*first);
  flags.push_back("--tls_refresh_interval_s=1");
  StartServer(flags, Trusting(ca_->ca_pem()));
  ASSERT_TRUE(ReadChecked(Trusting(ca_->ca_pem())).ok());
  ASSERT_FALSE(ReadChecked(Trusting(other_ca_->ca_pem())).ok());

  std::filesystem::rename(certs + "/current", certs + "/previous");
  std::filesystem::rename(certs + "/next", certs + "/current");
  absl::Status second_read = absl::UnknownError("not tried");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!second_read.ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    second_read = ReadChecked(Trusting(other_ca_->ca_pem()));
  }
  EXPECT_TRUE(second_read.ok()) << "new certificate not served 20 s after rotation: "
                                << second_read;
  EXPECT_FALSE(ReadChecked(Trusting(ca_->ca_pem())).ok()) << "old certificate still served";
}

TEST_F(TlsTest, TheHealthEndpointIsPlaintextAndServesHealthOnly) {
  auto cert = ca_->IssueServer("blockread-test", dir_.path() + "/server");
  ASSERT_TRUE(cert.ok()) << cert.status();
  std::vector<std::string> flags = ServerTls(*cert);
  flags.push_back("--health_listen=127.0.0.1:0");
  StartServer(flags, Trusting(ca_->ca_pem()));
  ASSERT_NE(server_->health_port(), 0);
  auto probe = BlockReadClient::Connect("127.0.0.1:" + std::to_string(server_->health_port()),
                                        Options(TransportSecurity()));
  auto health = probe->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(probe->Stat(file_).status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(TlsTest, TheCliReadsOverMutualTls) {
  auto cert = ca_->IssueServer("blockread-test", dir_.path() + "/server");
  auto good = ca_->IssueClient("cli", dir_.path() + "/clients");
  ASSERT_TRUE(cert.ok() && good.ok());
  std::vector<std::string> flags = ServerTls(*cert);
  flags.push_back("--tls_client_ca=" + ca_->ca_pem());
  StartServer(flags, Trusting(ca_->ca_pem(), &*good));
  const std::string out = dir_.path() + "/read.bin";
  const ProcessExit exit = RunToExit(
      {CliBinary(), "--target=" + server_->target(), "--ca=" + ca_->ca_pem(),
       "--cert=" + good->cert, "--key=" + good->key, "read", file_, "0", "4096", "-o", out},
      dir_.path() + "/cli.log", 60);
  ASSERT_TRUE(WIFEXITED(exit.status) && WEXITSTATUS(exit.status) == 0) << exit.output;
  std::ifstream in(out, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto map = reference_.Resolve(file_);
  ASSERT_TRUE(map.ok());
  auto expected = ReadThroughMap(reference_, **map, 0, 4096);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(bytes.str(), std::string(expected->begin(), expected->end()));
  // Without a certificate the CLI says it cannot reach the server (exit 3), as for any refusal
  // at the handshake.
  const ProcessExit refused = RunToExit(
      {CliBinary(), "--target=" + server_->target(), "--ca=" + ca_->ca_pem(), "stat", file_},
      dir_.path() + "/cli-refused.log", 60);
  EXPECT_TRUE(WIFEXITED(refused.status) && WEXITSTATUS(refused.status) == 3) << refused.output;
}

// Startup refusals: nothing is bound, the process exits 2 with the reason and the way out.
TEST(TransportRulesTest, PlaintextOffLoopbackIsRefusedAtStartup) {
  TempDir dir;
  const std::string data = "--data_dir=" + dir.path() + "/data";
  struct Case {
    std::vector<std::string> flags;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--listen=0.0.0.0:0", "--metrics_listen="}, "--allow-insecure"},
      {{"--listen=127.0.0.1:0", "--metrics_listen=0.0.0.0:0"}, "/metrics is plaintext"},
      {{"--listen=127.0.0.1:0", "--tls_cert=" + dir.path() + "/c.pem"},
       "--tls-cert and --tls-key go together"},
      {{"--listen=127.0.0.1:0", "--tls_client_ca=" + dir.path() + "/ca.pem"},
       "--tls-client-ca needs --tls-cert"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {ServerBinary(), data};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    const ProcessExit exit = RunToExit(argv, dir.path() + "/out.log", 30);
    EXPECT_TRUE(WIFEXITED(exit.status) && WEXITSTATUS(exit.status) == 2) << exit.output;
    EXPECT_NE(exit.output.find(c.expected), std::string::npos) << exit.output;
  }
  // A TLS file that cannot be read is named at startup (exit 1), not left to fail handshakes.
  const ProcessExit missing =
      RunToExit({ServerBinary(), data, "--listen=127.0.0.1:0",
                 "--metrics_listen=", "--tls_cert=" + dir.path() + "/missing.pem",
                 "--tls_key=" + dir.path() + "/missing.key"},
                dir.path() + "/out.log", 60);
  EXPECT_TRUE(WIFEXITED(missing.status) && WEXITSTATUS(missing.status) == 1) << missing.output;
  EXPECT_NE(missing.output.find("cannot read " + dir.path() + "/missing.pem"), std::string::npos)
      << missing.output;
}

}  // namespace
}  // namespace blockread::testing
