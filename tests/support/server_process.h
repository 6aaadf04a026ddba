// A real blockread-server process for tests: started on 127.0.0.1 with a free port, stopped with
// SIGTERM (exit status checked), killed if the test ends first.
#ifndef BLOCKREAD_TESTS_SUPPORT_SERVER_PROCESS_H_
#define BLOCKREAD_TESTS_SUPPORT_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/blockread_client.h"

namespace blockread::testing {

class ServerProcess {
 public:
  // Starts the server binary with `args` plus --listen=127.0.0.1:0 (unless `args` set it: to a
  // loopback address or a unix: socket) (and
  // --metrics_listen=127.0.0.1:0 unless `args` set it) and waits until it prints its ports and
  // answers health SERVING (at most `timeout_s`), asked over `connection` (its credentials, for a
  // TLS server). stderr goes to `log_path`. `runner`, if given, is a program and its arguments
  // that run the server (e.g. DenyIoUringBinary()).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      std::vector<std::string> args, const std::string& log_path, int timeout_s = 60,
      const std::vector<std::string>& runner = {},
      const client::ClientOptions& connection = client::ClientOptions());
  ~ServerProcess();

  // Where clients connect: 127.0.0.1:PORT, or the unix: address the server was given.
  std::string target() const { return target_; }
  int port() const { return port_; }
  // The --health-listen port; 0 when there is none.
  int health_port() const { return health_port_; }
  // The /metrics port; 0 when metrics are off.
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  // The server's stderr so far.
  std::string Log() const;
  // Its resident memory now (VmRSS), in MiB; 0 once it has exited.
  uint64_t RssMiB() const;

  // SIGTERM, then waits (at most `timeout_s`); returns the exit status (-1: killed by a signal or
  // timed out).
  int Stop(int timeout_s = 60);

 private:
  ServerProcess() = default;
  pid_t pid_ = -1;
  std::string target_;
  int port_ = 0;
  int metrics_port_ = 0;
  int health_port_ = 0;
  std::string log_path_;
};

// Where the built binaries are (set by CMake).
std::string ServerBinary();
std::string CliBinary();
// tests/support/deny_io_uring.cc: runs a program with io_uring_setup blocked by seccomp.
std::string DenyIoUringBinary();

// How a program run to its end went.
struct ProcessExit {
  int status = -1;  // raw waitpid status
  double seconds = 0;
  std::string output;  // stdout and stderr
};

// Runs `argv` (argv[0] a path) with stdout and stderr to `output_path`; kills it after
// `timeout_s`.
ProcessExit RunToExit(std::vector<std::string> argv, const std::string& output_path, int timeout_s);

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_SERVER_PROCESS_H_
