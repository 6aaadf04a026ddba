// blockread-server: serves reads of files straight from the devices that hold them.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "proto/wire/process_tuning.h"
#include "server/config.h"
#include "server/server.h"
#include "storage/catalog.h"
#include "storage/log.h"

int main(int raw_argc, char** raw_argv) {
  // Before any thread starts: the catalog's lease-break signals must reach no other thread.
  blockread::storage::BlockLeaseSignals();
  blockread::server::ConfigureFlagsUsage();
  std::vector<std::string> normalized = blockread::server::NormalizeFlagArgs(raw_argc, raw_argv);
  std::vector<char*> args;
  for (std::string& arg : normalized) args.push_back(arg.data());
  args.push_back(nullptr);
  int argc = raw_argc;
  char** argv = args.data();
  blockread::wire::TuneProcess();

  // Block the stop signals in every thread (gRPC's threads inherit this mask) so the main thread
  // alone takes them, with sigwait, and shuts down in order.
  // SIGHUP (re-read --auth) likewise.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::SetProgramUsageMessage(absl::StrCat(
      "Serves reads of files straight from the block devices that hold them, over gRPC "
      "(blockread.v1.BlockRead).\n\n"
      "Sources (any mix): --device=NAME=PATH, --manifest=FILE, --serve-files=PATH[,PATH...].\n"
      "With none, a demo device is created under --data-dir and served.\n"
      "Settings also come from --config=FILE (textproto, blockread.v1.ServerConfig); flags win.\n"
      "--check-config=FILE validates such a file and exits (0: OK).\n"
      "Flag names may be written with dashes or underscores (--data-dir, --data_dir).\n"
      "Prometheus metrics: http://",
      blockread::server::kDefaultMetricsListen,
      "/metrics unless --metrics-listen says otherwise.\n"
      "SIGTERM/SIGINT: graceful shutdown (in-flight reads finish), exit status 0. SIGHUP: re-read "
      "the --auth file.\n\n"
      "Usage: blockread-server [flags]"));
  absl::ParseCommandLine(argc, argv);
  auto config = blockread::server::LoadServerConfig();
  if (!config.ok()) {
    fprintf(stderr, "blockread-server: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (const auto checked = blockread::server::CheckConfigFile()) {
    printf("blockread-server: %s: OK\n", checked->c_str());
    return 0;
  }
  auto server = blockread::server::BlockReadServer::Start(*config);
  if (!server.ok()) {
    fprintf(stderr, "blockread-server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  const std::string& listen = config->listen();
  if (listen.starts_with("unix:") || listen.starts_with("unix-abstract:")) {
    printf("blockread-server: listening on %s\n", listen.c_str());  // no port
  } else {
    const std::string host = listen.substr(0, listen.rfind(':'));
    printf("blockread-server: listening on %s:%d\n", host.c_str(), (*server)->port());
  }
  if ((*server)->metrics_port() != 0) {
    const std::string& metrics = config->metrics_listen();
    printf("blockread-server: metrics on http://%s:%d/metrics\n",
           metrics.substr(0, metrics.rfind(':')).c_str(), (*server)->metrics_port());
  } else {
    printf("blockread-server: metrics off\n");
  }
  if ((*server)->health_port() != 0) {
    const std::string& health = config->health_listen();
    printf("blockread-server: health (plaintext) on %s:%d\n",
           health.substr(0, health.rfind(':')).c_str(), (*server)->health_port());
  }
  fflush(stdout);

  int signal_number = 0;
  for (;;) {
    sigwait(&stop_signals, &signal_number);
    if (signal_number != SIGHUP) break;
    (*server)->ReloadAccess().IgnoreError();  // logged; the rules in force stay
  }
  blockread::storage::LogInfo(absl::StrCat("received ", strsignal(signal_number),
                                           ": shutting down gracefully (grace ",
                                           config->shutdown_grace_ms(), " ms)"));
  (*server)->Shutdown();
  blockread::storage::LogInfo("stopped");
  return 0;
}
