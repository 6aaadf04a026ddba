#include "tests/support/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/blockread_client.h"

namespace blockread::testing {

std::string ServerBinary() { return BLOCKREAD_SERVER_BINARY; }
std::string CliBinary() { return BLOCKREAD_CLI_BINARY; }
std::string DenyIoUringBinary() { return BLOCKREAD_DENY_IO_URING_BINARY; }

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    std::vector<std::string> args, const std::string& log_path, int timeout_s,
    const std::vector<std::string>& runner, const client::ClientOptions& connection) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe");
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->log_path_ = log_path;
  args.insert(args.begin(), ServerBinary());
  if (std::none_of(args.begin(), args.end(),
                   [](const std::string& a) { return a.starts_with("--listen="); })) {
    args.push_back("--listen=127.0.0.1:0");
  }
  if (std::none_of(args.begin(), args.end(), [](const std::string& a) {
        return a.starts_with("--metrics_listen") || a.starts_with("--metrics-listen");
      })) {
    args.push_back("--metrics_listen=127.0.0.1:0");
  }
  const bool health_endpoint = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a.starts_with("--health_listen=") || a.starts_with("--health-listen=");
  });
  args.insert(args.begin(), runner.begin(), runner.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) dup2(log, STDERR_FILENO);
    // Die with the test, whatever happens to it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  server->pid_ = pid;
  // The first stdout lines: "blockread-server: listening on 127.0.0.1:PORT", then
  // "blockread-server: metrics on http://127.0.0.1:PORT/metrics" or "... metrics off".
  auto read_line = [fd = out[0]] {
    std::string line;
    char c;
    while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
    return line;
  };
  const std::string line = read_line();
  const std::string metrics_line = read_line();
  // "blockread-server: health (plaintext) on 127.0.0.1:PORT" with --health-listen.
  const std::string health_line = health_endpoint ? read_line() : "";
  close(out[0]);
  const size_t colon = line.rfind(':');
  if (line.find("listening on") == std::string::npos || colon == std::string::npos) {
    return absl::InternalError(
        absl::StrCat("server did not start: '", line, "'; log:\n", server->Log()));
  }
  const std::string address = line.substr(line.find("listening on ") + 13);
  if (address.starts_with("unix")) {
    server->target_ = address;
  } else {
    server->port_ = std::stoi(line.substr(colon + 1));
    server->target_ = "127.0.0.1:" + std::to_string(server->port_);
  }
  if (metrics_line.find("metrics on http://") != std::string::npos) {
    const size_t port_at = metrics_line.rfind(':') + 1;
    server->metrics_port_ = std::stoi(metrics_line.substr(port_at));
  }
  if (health_line.find("health (plaintext) on") != std::string::npos) {
    server->health_port_ = std::stoi(health_line.substr(health_line.rfind(':') + 1));
  }
  auto client = client::BlockReadClient::Connect(server->target(), connection);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    auto health = client->Health();
    if (health.ok() && *health == grpc::health::v1::HealthCheckResponse::SERVING) return server;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("server not SERVING; log:\n", server->Log()));
}

ProcessExit RunToExit(std::vector<std::string> argv, const std::string& output_path,
                      int timeout_s) {
  ProcessExit result;
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

std::string ServerProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

uint64_t ServerProcess::RssMiB() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) >> 10;  // kB
  }
  return 0;
}

int ServerProcess::Stop(int timeout_s) {
  if (pid_ < 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

}  // namespace blockread::testing
