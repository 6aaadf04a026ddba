// --user, as an operator runs it: a real blockread-server started as root on files of a real
// ext4 filesystem switches to an unprivileged user once its devices, files and ports are open.
// What the kernel says about every one of its threads (/proc/PID/task/*/status) is checked, and
// the jobs that need privilege after the drop still work: reads, a served file rewritten by root
// (its lease is retaken: CAP_LEASE, which the watcher thread alone keeps), a file renamed over a
// served name.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "tests/support/loop_device.h"
#include "tests/support/server_process.h"

namespace blockread {
namespace {

using client::BlockReadClient;
using testing::ServerProcess;
using testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kCapLease = uint64_t{1} << 28;  // CAP_LEASE

struct ThreadStatus {
  std::string name;
  std::vector<std::string> uids, gids, groups;
  uint64_t permitted = ~uint64_t{0}, effective = ~uint64_t{0}, ambient = ~uint64_t{0};
};

// Every thread of `pid`, as /proc/PID/task/TID/status describes it.
std::vector<ThreadStatus> ThreadsOf(pid_t pid) {
  std::vector<ThreadStatus> threads;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    std::ifstream in(task.path() / "status");
    ThreadStatus thread;
    for (std::string line; std::getline(in, line);) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = line.substr(0, colon);
      const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      const std::vector<std::string> fields = absl::StrSplit(value, '\t', absl::SkipEmpty());
      if (key == "Name") thread.name = value;
      if (key == "Uid") thread.uids = fields;
      if (key == "Gid") thread.gids = fields;
      if (key == "Groups") thread.groups = absl::StrSplit(value, ' ', absl::SkipEmpty());
      if (key == "CapPrm") absl::SimpleHexAtoi(value, &thread.permitted);
      if (key == "CapEff") absl::SimpleHexAtoi(value, &thread.effective);
      if (key == "CapAmb") absl::SimpleHexAtoi(value, &thread.ambient);
    }
    threads.push_back(thread);
  }
  return threads;
}

std::string Bytes(const std::vector<char>& data) { return std::string(data.begin(), data.end()); }

class LeastPrivilegeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the server must start privileged to drop";
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    const passwd* nobody = getpwnam("nobody");
    if (nobody == nullptr) GTEST_SKIP() << "no user 'nobody' to run as";
    uid_ = nobody->pw_uid;
    gid_ = nobody->pw_gid;
    auto fs = testing::MakeLoopFilesystem(testing::FsType::kExt4, dir_.path(), 64 * kMiB);
    ASSERT_TRUE(fs.ok()) << fs.status();
    fs_ = *std::move(fs);
    served_ = fs_->root() + "/served";
    ASSERT_EQ(mkdir(served_.c_str(), 0755), 0);
  }

  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(20), 0) << server_->Log();
    }
  }

  // Every thread runs as nobody with nobody's groups, and holds no capability, except the file
  // watcher's CAP_LEASE when `watcher` (files are imported).
  void ExpectEveryThreadDropped(bool watcher) {
    const std::vector<ThreadStatus> threads = ThreadsOf(server_->pid());
    ASSERT_GT(threads.size(), 2u);
    const std::vector<std::string> uid(4, std::to_string(uid_)), gid(4, std::to_string(gid_));
    int watchers = 0;
    for (const ThreadStatus& thread : threads) {
      const bool is_watcher = thread.name == "blockread-watch";
      watchers += is_watcher;
      const uint64_t allowed = is_watcher ? kCapLease : 0;
      EXPECT_EQ(thread.uids, uid) << thread.name;
      EXPECT_EQ(thread.gids, gid) << thread.name;
      for (const std::string& group : thread.groups) {
        EXPECT_NE(group, "0") << thread.name;
      }
      EXPECT_EQ(thread.permitted, allowed) << thread.name;
      EXPECT_EQ(thread.effective, allowed) << thread.name;
      EXPECT_EQ(thread.ambient, 0u) << thread.name;
    }
    EXPECT_EQ(watchers, watcher ? 1 : 0);
  }

  void ExpectServes(const std::string& name) {
    auto expected = testing::ReadFileRange(served_ + "/" + name, 0, kMiB);
    ASSERT_TRUE(expected.ok());
    auto read = client_->Read(name, 0, expected->size());
    ASSERT_TRUE(read.ok()) << name << ": " << read.status();
    EXPECT_TRUE(read->data() == Bytes(*expected)) << name << ": bytes differ from the file's";
  }

  // Waits (bounded) until `name` is served from the raw device again: leased and mapped.
  bool WaitUntilFiemap(const std::string& name) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      auto info = client_->Stat(name);
      if (info.ok() && info->source() == v1::FIEMAP) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  TempDir dir_;
  std::unique_ptr<testing::LoopFilesystem> fs_;
  std::string served_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<BlockReadClient> client_;
};

TEST_F(LeastPrivilegeTest, ServesAsNobodyWithOnlyTheWatchersLease) {
  // Root's files, readable by all: nobody could read them, but not lease them without CAP_LEASE.
  ASSERT_TRUE(testing::WriteAt(served_ + "/big.bin", 0, testing::RandomBytes(kMiB, 1), true).ok());
  ASSERT_TRUE(
      testing::WriteAt(served_ + "/small.bin", 0, testing::RandomBytes(20000, 2), true).ok());
  auto server =
      ServerProcess::Start({"--serve_files=" + served_, "--user=nobody", "--metrics_listen="},
                           dir_.path() + "/server.log");
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  client_ = BlockReadClient::Connect(server_->target());
  EXPECT_NE(server_->Log().find("running as nobody"), std::string::npos) << server_->Log();
  ExpectEveryThreadDropped(/*watcher=*/true);

  ASSERT_TRUE(WaitUntilFiemap("big.bin"));
  ExpectServes("big.bin");
  ExpectServes("small.bin");

  // Root rewrites a served file: the lease breaks, and once the writer has closed it the watcher
  // (running as nobody) must lease it again to serve it from the raw device.
  ASSERT_TRUE(
      testing::WriteAt(served_ + "/big.bin", 4096, testing::RandomBytes(8192, 3), true).ok());
  EXPECT_TRUE(WaitUntilFiemap("big.bin")) << "the lease was not retaken after the drop\n"
                                          << server_->Log();
  ExpectServes("big.bin");

  // A new file renamed over a served name is opened by the watcher, as nobody.
  ASSERT_TRUE(
      testing::WriteAt(served_ + "/.small.tmp", 0, testing::RandomBytes(30000, 4), true).ok());
  ASSERT_EQ(rename((served_ + "/.small.tmp").c_str(), (served_ + "/small.bin").c_str()), 0);
  ExpectServes("small.bin");
  ExpectEveryThreadDropped(/*watcher=*/true);  // and still so after the work above
}

TEST_F(LeastPrivilegeTest, WithoutImportedFilesNoThreadKeepsAnyCapability) {
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir_.path() + "/data", "--user=nobody", "--metrics_listen="},
      dir_.path() + "/server.log");
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  client_ = BlockReadClient::Connect(server_->target());
  ExpectEveryThreadDropped(/*watcher=*/false);
  auto hello = client_->Read("hello.txt", 0, 4096);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->data().rfind("Hello from blockread!", 0), 0u);
}

TEST_F(LeastPrivilegeTest, AnUnknownUserIsAStartupErrorNamingIt) {
  const testing::ProcessExit exit = testing::RunToExit(
      {testing::ServerBinary(), "--listen=127.0.0.1:0",
       "--metrics-listen=", "--data-dir=" + dir_.path() + "/data", "--user=no-such-user-here"},
      dir_.path() + "/out", 30);
  EXPECT_NE(exit.output.find("no user named no-such-user-here"), std::string::npos) << exit.output;
  EXPECT_TRUE(WIFEXITED(exit.status) && WEXITSTATUS(exit.status) == 1) << exit.output;
}

}  // namespace
}  // namespace blockread
