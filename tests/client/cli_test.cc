// The blockread CLI against a real server on the demo data: what it prints and its exit codes.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/demo_server.h"
#include "tests/support/loop_device.h"
#include "tests/support/server_process.h"

namespace blockread {
namespace {

class CliTest : public testing::DemoServerTest {};

struct CliResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

CliResult RunCli(const std::string& args) {
  const std::string command = absl::StrCat(testing::CliBinary(), " ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST_F(CliTest, MessagesAndExitCodes) {
  const std::string target = "--target=" + server_->target();
  CliResult ok = RunCli("read " + target + " hello.txt 0 4k --crc32c");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("Hello from blockread!"), std::string::npos);

  CliResult to_file = RunCli("read " + target + " random-4m 1m 64k -o " + dir_.path() + "/out");
  EXPECT_EQ(to_file.exit_code, 0) << to_file.output;
  auto written = testing::ReadFileRange(dir_.path() + "/out", 0, 1 << 20);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(std::string(written->begin(), written->end()), Expected("random-4m", 1 << 20, 65536));

  CliResult missing = RunCli("read " + target + " nope 0 1");
  EXPECT_EQ(missing.exit_code, 4);
  EXPECT_EQ(missing.output, "blockread: not found: unknown file 'nope'\n");

  CliResult range = RunCli("read " + target + " hello.txt 1m 1");
  EXPECT_EQ(range.exit_code, 5);
  EXPECT_NE(range.output.find("beyond the end of file hello.txt"), std::string::npos);

  CliResult too_big = RunCli("read " + target + " large 0 2m");
  EXPECT_EQ(too_big.exit_code, 5);
  EXPECT_NE(too_big.output.find("max_read_bytes"), std::string::npos);

  CliResult explain = RunCli("explain " + target + " fragmented 0 20000");
  EXPECT_EQ(explain.exit_code, 0) << explain.output;
  EXPECT_NE(explain.output.find("generic"), std::string::npos);

  for (const char* sub : {"stat ", "ls", "stats", "stats --json", "health"}) {
    std::string args = absl::StrCat(sub, " ", target);
    if (std::string(sub) == "stat ") args += " large";
    CliResult result = RunCli(args);
    EXPECT_EQ(result.exit_code, 0) << args << ": " << result.output;
  }

  CliResult usage = RunCli("read");
  EXPECT_EQ(usage.exit_code, 2) << usage.output;
  CliResult help = RunCli("read --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("OFFSET"), std::string::npos) << help.output;

  // A port nobody listens on (the test's own server, stopped).
  ASSERT_EQ(server_->Stop(), 0);
  CliResult down = RunCli("health " + target + " --timeout-ms=2000");
  EXPECT_EQ(down.exit_code, 3) << down.output;
  EXPECT_EQ(down.output.rfind("blockread: cannot reach the server at " + server_->target(), 0), 0u)
      << down.output;
  EXPECT_EQ(std::count(down.output.begin(), down.output.end(), '\n'), 1) << "one line";
  server_.reset();
}

}  // namespace
}  // namespace blockread
