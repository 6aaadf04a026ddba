// A server that cannot start its engine says why and exits non-zero within seconds, as a new user
// sees it: under a seccomp filter that blocks io_uring_setup (what container runtimes' default
// profiles do), the message names io_uring, the cause and the fix, and the process exits 1, not on
// a signal.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/support/loop_device.h"
#include "tests/support/server_process.h"

namespace blockread::testing {
namespace {

struct Exit {
  int status = -1;  // raw waitpid status
  double seconds = 0;
  std::string output;
};

// Runs `argv` with stdout and stderr to a file; kills it after `timeout_s`.
Exit RunToExit(std::vector<std::string> argv, const std::string& output_path, int timeout_s) {
  Exit result;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* out = freopen(output_path.c_str(), "w", stdout);
    if (out == nullptr || dup2(fileno(stdout), STDERR_FILENO) < 0) _exit(126);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  for (;;) {
    if (waitpid(pid, &result.status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout_s)) {
      kill(pid, SIGKILL);
      waitpid(pid, &result.status, 0);
      break;
    }
    usleep(20'000);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream in(output_path);
  std::stringstream text;
  text << in.rdbuf();
  result.output = text.str();
  return result;
}

TEST(StartupFailureTest, IoUringBlockedBySeccompIsNamedWithItsFixAndExitsOne) {
  TempDir dir;
  const Exit exit = RunToExit({DenyIoUringBinary(), ServerBinary(), "--listen=127.0.0.1:0",
                               "--metrics-listen=", "--data-dir=" + dir.path() + "/data"},
                              dir.path() + "/out", 30);
  ASSERT_TRUE(WIFEXITED(exit.status)) << "ended by a signal, status " << exit.status << ":\n"
                                      << exit.output;
  EXPECT_EQ(WEXITSTATUS(exit.status), 1) << exit.output;
  EXPECT_LT(exit.seconds, 10) << exit.output;
  EXPECT_NE(exit.output.find("io_uring is not available"), std::string::npos) << exit.output;
  EXPECT_NE(exit.output.find("Operation not permitted"), std::string::npos) << exit.output;
  EXPECT_NE(exit.output.find("seccomp profile"), std::string::npos) << exit.output;
  EXPECT_EQ(exit.output.find("alarm.cc"), std::string::npos) << exit.output;
}

TEST(StartupFailureTest, AWorkerThatCannotBePinnedIsNamedAndExitsOne) {
  // The server checks --cpus against the affinity mask before starting; a worker pinned to a CPU
  // the mask lacks is refused up front, naming the CPU.
  TempDir dir;
  const Exit exit =
      RunToExit({"/usr/bin/taskset", "-c", "0", ServerBinary(), "--listen=127.0.0.1:0",
                 "--metrics-listen=", "--cpus=1", "--data-dir=" + dir.path() + "/data"},
                dir.path() + "/out", 30);
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs two CPUs";
  ASSERT_TRUE(WIFEXITED(exit.status)) << exit.output;
  EXPECT_NE(WEXITSTATUS(exit.status), 0) << exit.output;
  EXPECT_LT(exit.seconds, 10) << exit.output;
  EXPECT_NE(exit.output.find("CPU 1"), std::string::npos) << exit.output;
}

}  // namespace
}  // namespace blockread::testing
