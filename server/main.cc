// blockread-server: serves reads of files straight from the devices that hold them.
#include <pthread.h>
#include <signal.h>

#include <cstdio>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "server/config.h"
#include "server/server.h"
#include "storage/log.h"

int main(int argc, char** argv) {
  // Block the stop signals in every thread (gRPC's threads inherit this mask) so the main thread
  // alone takes them, with sigwait, and shuts down in order.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::SetProgramUsageMessage(
      "Serves reads of files straight from the block devices that hold them, over gRPC "
      "(blockread.v1.BlockRead).\n\n"
      "Sources (any mix): --device=NAME=PATH, --manifest=FILE, --serve-files=PATH[,PATH...].\n"
      "With none, a demo device is created under --data-dir and served.\n"
      "Settings also come from --config=FILE (textproto, blockread.v1.ServerConfig); flags win.\n"
      "SIGTERM/SIGINT: graceful shutdown (in-flight reads finish), exit status 0.\n\n"
      "Usage: blockread-server [flags]");
  absl::ParseCommandLine(argc, argv);
  auto config = blockread::server::LoadServerConfig();
  if (!config.ok()) {
    fprintf(stderr, "blockread-server: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  auto server = blockread::server::BlockReadServer::Start(*config);
  if (!server.ok()) {
    fprintf(stderr, "blockread-server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  const std::string host = config->listen().substr(0, config->listen().rfind(':'));
  printf("blockread-server: listening on %s:%d\n", host.c_str(), (*server)->port());
  fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  blockread::storage::LogInfo(absl::StrCat("received ", strsignal(signal_number),
                                           ": shutting down gracefully (grace ",
                                           config->shutdown_grace_ms(), " ms)"));
  (*server)->Shutdown();
  blockread::storage::LogInfo("stopped");
  return 0;
}
